//! The SQL interface of logical decoding (PostgreSQL's logicalfuncs.c and
//! slotfuncs.c): `pg_logical_slot_get_changes` / `_peek_changes` and their
//! `_binary_` forms, `pg_create_logical_replication_slot` and
//! `pg_replication_slot_advance`, over the same slots, decoder and
//! plugins as the walsender.
//!
//! As in PostgreSQL: decoding starts at the slot's restart_lsn and
//! returns what commits at or after its confirmed_flush, up to the flush
//! position; `upto_lsn` stops after the record that reaches it,
//! `upto_nchanges` after the record whose changes reach the count (whole
//! transactions, so more rows may come); `get` (not `peek`) then confirms
//! everything decoded, saved by the next checkpoint. A text function on a
//! binary plugin (pgoutput) is 0A000.

use super::plugin::{self, Output};
use super::{publication, Decoder};
use backend::slots::{self, NewLogical};
use backend::walread::flushed_upto;
use protocol::replication::PluginOption;
use protocol::{sqlstate, SqlError};
use shmem::Shmem;
use std::path::Path;
use walformat::Lsn;

/// What `pg_logical_slot_*_changes` asks for.
pub struct ChangesRequest<'r> {
    pub slot: &'r str,
    pub upto_lsn: Option<Lsn>,
    pub upto_nchanges: Option<i64>,
    pub options: &'r [PluginOption],
    /// `peek`: the slot does not move.
    pub peek: bool,
    /// The `_binary_` forms (bytea data).
    pub binary: bool,
}

fn function_name(req: &ChangesRequest) -> String {
    format!(
        "pg_logical_slot_{}_{}changes(name,pg_lsn,integer,text[])",
        if req.peek { "peek" } else { "get" },
        if req.binary { "binary_" } else { "" }
    )
}

/// The rows of `pg_logical_slot_*_changes`.
pub fn changes(shm: &Shmem, datadir: &Path, req: &ChangesRequest) -> Result<Vec<Output>, SqlError> {
    if req.upto_nchanges.is_some_and(|n| n < 0) {
        return Err(SqlError::error(
            sqlstate::INVALID_PARAMETER_VALUE,
            "upto_nchanges must not be negative",
        ));
    }
    slots::validate_name(req.slot)?;
    let (idx, state) = slots::acquire_logical(shm, datadir, req.slot)?;
    let result = decode_changes(shm, datadir, idx, &state, req);
    slots::release(shm, idx);
    result
}

fn decode_changes(
    shm: &Shmem,
    datadir: &Path,
    idx: usize,
    state: &slots::LogicalState,
    req: &ChangesRequest,
) -> Result<Vec<Output>, SqlError> {
    let plugin = plugin::start(&state.plugin, req.options, &|p| {
        publication::exists(datadir, p)
    })?;
    if plugin.binary() && !req.binary {
        return Err(SqlError::error(
            sqlstate::FEATURE_NOT_SUPPORTED,
            format!(
                "logical decoding output plugin \"{}\" produces binary output, but function \"{}\" expects textual data",
                state.plugin,
                function_name(req)
            ),
        ));
    }
    let restart = slots::restart_lsn(shm, idx);
    let mut decoder = Decoder::new(shm, datadir, restart, state.confirmed_flush, plugin)?;
    let end = flushed_upto(shm);
    let mut out = Vec::new();
    while decoder.step(end, &mut out)? {
        if req.upto_lsn.is_some_and(|u| u <= decoder.position()) {
            break;
        }
        if req
            .upto_nchanges
            .is_some_and(|n| n != 0 && n as usize <= out.len())
        {
            break;
        }
    }
    if !req.peek {
        slots::confirm(shm, idx, decoder.position(), Some(decoder.restart_point()));
    }
    Ok(out)
}

/// `pg_create_logical_replication_slot`: (slot_name, lsn).
pub fn create_slot(
    shm: &Shmem,
    datadir: &Path,
    new: &NewLogical,
) -> Result<(String, Lsn), SqlError> {
    plugin::check_name(new.plugin)?;
    let lsn = slots::create_logical(shm, datadir, new, shm.settings().fsync)?;
    Ok((new.name.to_string(), lsn))
}

/// `pg_replication_slot_advance`: moves a slot to `upto` (at most the
/// flush position; never backwards); (slot_name, end_lsn).
pub fn advance(
    shm: &Shmem,
    datadir: &Path,
    name: &str,
    upto: Lsn,
) -> Result<(String, Lsn), SqlError> {
    slots::validate_name(name)?;
    if upto == 0 {
        return Err(SqlError::error(
            sqlstate::INVALID_PARAMETER_VALUE,
            "invalid target WAL LSN",
        ));
    }
    let target = upto.min(flushed_upto(shm));
    let Some(row) = slots::row(shm, datadir, name) else {
        return Err(SqlError::error(
            sqlstate::UNDEFINED_OBJECT,
            format!("replication slot \"{name}\" does not exist"),
        ));
    };
    if row.logical.is_none() {
        let idx = slots::acquire(shm, datadir, name)?;
        if row.restart_lsn == 0 {
            slots::release(shm, idx);
            return Err(SqlError::error(
                sqlstate::FEATURE_NOT_SUPPORTED,
                format!("replication slot \"{name}\" cannot be advanced"),
            )
            .with_detail(
                "This slot has never previously reserved WAL, or it has been invalidated.",
            ));
        }
        slots::advance(shm, idx, target);
        let end = slots::restart_lsn(shm, idx);
        slots::release(shm, idx);
        return Ok((name.to_string(), end));
    }
    let (idx, state) = slots::acquire_logical(shm, datadir, name)?;
    let result = advance_logical(shm, datadir, idx, &state, target);
    slots::release(shm, idx);
    result.map(|end| (name.to_string(), end))
}

fn advance_logical(
    shm: &Shmem,
    datadir: &Path,
    idx: usize,
    state: &slots::LogicalState,
    target: Lsn,
) -> Result<Lsn, SqlError> {
    if target <= state.confirmed_flush {
        return Ok(state.confirmed_flush);
    }
    let restart = slots::restart_lsn(shm, idx);
    let quiet = plugin::start("test_decoding", &[], &|_| true)?;
    let mut decoder = Decoder::new(shm, datadir, restart, state.confirmed_flush, quiet)?;
    let mut out = Vec::new();
    while decoder.position() < target && decoder.step(target, &mut out)? {
        out.clear();
    }
    let end = decoder.position().max(state.confirmed_flush);
    slots::confirm(shm, idx, end, Some(decoder.restart_point()));
    Ok(end)
}
