//! Logical decoding (PostgreSQL's replication/logical), for what walshm's
//! WAL holds: logical messages and the transactions around them. A
//! [`Decoder`] reads the flushed WAL from a logical slot's restart_lsn,
//! passes each record through the reorder buffer
//! ([`backend::reorder`]) and each completed change through the slot's
//! output plugin ([`plugin`]: `test_decoding`, `pgoutput`). The walsender
//! streams its output (START_REPLICATION ... LOGICAL) and the SQL
//! functions return it as rows (`pg_logical_slot_get_changes`, ...:
//! [`sql`]).
//!
//! Invariants: only WAL below the flush position is decoded (a record
//! that ends past it waits), so nothing a crash can take back is ever
//! delivered; a transaction is delivered at its COMMIT, in commit order,
//! never if it aborted or never ended; what a client receives again after
//! reconnecting starts at its slot's confirmed_flush (at least once).

pub mod pgoutput;
pub mod plugin;
pub mod publication;
pub mod sql;
pub mod test_decoding;

use backend::reorder::Reorder;
use backend::walread::{ReadError, WalRead};
use plugin::{Output, Plugin};
use protocol::sqlstate;
use protocol::SqlError;
use shmem::Shmem;
use std::path::Path;
use walformat::Lsn;

/// Decodes a slot's WAL (see the module header).
pub struct Decoder<'a> {
    /// The WAL from the slot's restart_lsn (`backend::walread`: the
    /// shared WAL buffers while they hold a page, else one pread per page).
    wal: WalRead<'a>,
    reorder: Reorder,
    plugin: Box<dyn Plugin>,
}

impl<'a> Decoder<'a> {
    /// Reads from `restart_lsn`, delivers what commits at or after
    /// `start`.
    pub fn new(
        shm: &'a Shmem,
        datadir: &Path,
        restart_lsn: Lsn,
        start: Lsn,
        plugin: Box<dyn Plugin>,
    ) -> Result<Decoder<'a>, SqlError> {
        Ok(Decoder {
            wal: WalRead::new(Some(shm), datadir, restart_lsn).map_err(read_error)?,
            reorder: Reorder::new(start, restart_lsn),
            plugin,
        })
    }

    pub fn binary(&self) -> bool {
        self.plugin.binary()
    }

    /// Decodes WAL below `upto` until at least `min_outputs` outputs were
    /// appended to `out` (whole transactions: more may come) or no more
    /// WAL is there; true when it stopped for want of WAL.
    pub fn decode(
        &mut self,
        upto: Lsn,
        out: &mut Vec<Output>,
        min_outputs: usize,
    ) -> Result<bool, SqlError> {
        let goal = out.len() + min_outputs.max(1);
        while out.len() < goal {
            if !self.step(upto, out)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Decodes one record below `upto`; false if there is none yet.
    pub fn step(&mut self, upto: Lsn, out: &mut Vec<Output>) -> Result<bool, SqlError> {
        let Some(rec) = self.wal.next_record(upto).map_err(read_error)? else {
            return Ok(false);
        };
        if let Some(change) = self.reorder.add(&rec) {
            self.plugin.render(&change, out);
        }
        Ok(true)
    }

    /// Where the next record starts (everything before it was decoded).
    pub fn position(&self) -> Lsn {
        self.reorder.position()
    }

    /// The oldest WAL needed to go on from here (see `backend::reorder`).
    pub fn restart_point(&self) -> Lsn {
        self.reorder.restart_point()
    }

    /// The restart_lsn a slot may keep once `confirmed` is confirmed.
    pub fn restart_for(&mut self, confirmed: Lsn) -> Option<Lsn> {
        self.reorder.restart_for(confirmed)
    }
}

/// A read error as the client sees it: a removed segment is 58P01 (as
/// PostgreSQL's walsender says it), anything else XX000.
fn read_error(e: ReadError) -> SqlError {
    match e {
        ReadError::Removed { .. } => SqlError::error(sqlstate::UNDEFINED_FILE, e.to_string()),
        other => SqlError::error(
            sqlstate::INTERNAL_ERROR,
            format!("could not decode WAL: {other}"),
        ),
    }
}

/// Output as CopyData 'w' messages (XLogData: dataStart and walEnd the
/// output's write location, as PostgreSQL's logical walsender sends them).
pub fn append_xlog_data(buf: &mut Vec<u8>, o: &Output, now: i64) -> Option<()> {
    protocol::replication::xlog_data_header(buf, o.lsn, o.lsn, now, o.data.len())?;
    buf.extend_from_slice(&o.data);
    Some(())
}
