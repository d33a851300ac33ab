//! `connection`: a client connection's backend process (PostgreSQL's
//! tcop/postgres.c): the `protocol::Session` that turns statements into
//! WAL through the engine (`backend`), and the connection's life
//! (start-up, cancel requests, serving, exit). A replication connection
//! becomes a walsender (`replication::walsender`) after start-up. Nothing
//! depends on this crate but the postmaster, which forks it.
//!
//! Transactions follow the protocol crate's contract: `begin` at the start
//! of every transaction (implicit per query message, or an explicit
//! block), `commit` writes the commit record when an XID was assigned and,
//! with `synchronous_commit = on` and WAL written before it, returns only
//! after the flush — so a client that saw COMMIT succeed has a durable
//! commit. `rollback` writes an ABORT record when an XID was assigned.
//! `pg_logical_emit_message(true, ...)` assigns an XID (transactional);
//! `(false, ...)` writes a message with no XID and, as in PostgreSQL 15,
//! does not wait for its flush.
//!
//! Cancel requests arrive on a fresh, unauthenticated connection, so
//! [`forward_cancel`] trusts nothing in them: it signals only a live
//! connection backend (a backend proc slot with a pid > 0 whose nonzero
//! cancel key, compared in constant time, matches). Worker and auxiliary
//! slots never carry a key, free slots have pid 0 and key 0, and key 0 is
//! never handed out, so neither `kill(0, ...)` (the whole process group)
//! nor a signal to a worker can be provoked. A wrong cancel is ignored
//! without a word, as in PostgreSQL.
//!
//! Replication slots from SQL (`pg_create_physical_replication_slot`,
//! `pg_drop_replication_slot`) need the permission to replicate, as
//! PostgreSQL's CheckSlotPermissions: a client on the Unix socket (the
//! server's own OS user) has it, a TCP login with the login password does
//! not (42501; protocol::startup's header).
//!
//! Inspection: the views and functions of `protocol::sql::catalog` get
//! their rows here, from shared memory (`shmem::stats`: activity and WAL
//! counters; the settings table), the control file and `pg_wal/`; the
//! session publishes its own query, state and transaction start through
//! its activity writer.

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use backend::checkpointer::request_checkpoint;
use backend::client_poll::PollingStream;
use backend::context::ProcContext;
use backend::process::{self, log, shutdown_requested, CANCEL_REQUESTED};
use backend::xact::Xact;
use protocol::{
    sqlstate, ActivityRow, ControlRow, Session, SettingRow, SqlError, Termination, WalFileRow,
    WalStatsRow,
};
use replication::walsender;
use shmem::settings::{Context, Kind, Setting, Settings, Unit, SETTINGS};
use shmem::stats::{self, ActivityState, ActivityWriter};
use shmem::sync::Ordering;
use shmem::sys::sock::Timeout;
use shmem::Shmem;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub struct WalSession<'a> {
    shm: &'a Shmem,
    xact: Xact<'a>,
    datadir: PathBuf,
    activity: ActivityWriter<'a>,
    /// (segment size, timeline) from the control file, read once when
    /// first asked for (most sessions never do: not reading it at start
    /// saves a connection an open, stat, read and close).
    geometry: std::cell::OnceCell<(u64, u32)>,
    /// `synchronous_commit` from the startup packet: this session's default.
    startup_sync_level: Option<&'static str>,
    /// The client may use replication slots (PostgreSQL's superuser or
    /// REPLICATION role; `protocol::StartupInfo::may_replicate`).
    may_replicate: bool,
    /// The database the client connected to (what its logical slots are
    /// for).
    database: String,
    /// Connected while the server was a standby: its WAL handle names the
    /// old timeline until the first write after the promotion rebuilds it
    /// (`leave_standby`).
    standby_born: bool,
}

impl<'a> WalSession<'a> {
    /// Joins the ProcArray as the context's proc.
    pub fn new(ctx: &'a ProcContext<'a>) -> Self {
        WalSession {
            shm: ctx.shm,
            xact: Xact::new(ctx),
            datadir: ctx.datadir.clone(),
            activity: stats::activity_writer(ctx.shm, ctx.procno),
            geometry: std::cell::OnceCell::new(),
            startup_sync_level: None,
            may_replicate: false,
            database: String::new(),
            standby_born: ctx.shm.repl().walrcv.in_recovery(),
        }
    }

    /// Whether the server is a standby still in recovery.
    fn recovery(&self) -> bool {
        self.shm.repl().walrcv.in_recovery()
    }

    /// Before anything that writes WAL: refused on a standby (25006, as
    /// PostgreSQL's read-only transactions during recovery), and after a
    /// promotion the session's WAL handle is made anew, for the new
    /// timeline (the promotion's Acquire in `recovery` made it visible).
    fn writable(&mut self, what: &str) -> Result<(), SqlError> {
        self.writable_as(what, "in a read-only transaction")
    }

    /// [`Self::writable`] with PostgreSQL's wording for `what` ("during
    /// recovery" for the functions that check recovery themselves).
    fn writable_as(&mut self, what: &str, why: &str) -> Result<(), SqlError> {
        if self.recovery() {
            return Err(SqlError::error(
                sqlstate::READ_ONLY_SQL_TRANSACTION,
                format!("cannot execute {what} {why}"),
            ));
        }
        if std::mem::take(&mut self.standby_born) {
            self.xact.xlog = backend::xlog::Xlog::new(self.xact.xlog.context());
        }
        Ok(())
    }

    /// Lets this session use replication slots (the client authenticated
    /// as one that may replicate).
    pub fn permit_replication(&mut self, may: bool) {
        self.may_replicate = may;
    }

    /// PostgreSQL's CheckSlotPermissions.
    fn check_slot_permission(&self) -> Result<(), SqlError> {
        if self.recovery() {
            return Err(SqlError::error(
                sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
                "replication slots cannot be used on a walshm standby during recovery",
            ));
        }
        if self.may_replicate {
            return Ok(());
        }
        Err(SqlError::error(
            sqlstate::INSUFFICIENT_PRIVILEGE,
            "must be superuser or replication role to use replication slots",
        ))
    }

    /// (segment size, timeline), from the control file on first use.
    fn geometry(&self) -> (u64, u32) {
        *self.geometry.get_or_init(|| {
            backend::control::ControlFile::read(&self.datadir)
                .map(|c| (c.seg_size, c.timeline))
                .unwrap_or((16 << 20, 1))
        })
    }

    /// Applies a startup packet's `synchronous_commit` as SET does, and
    /// makes it the default SHOW and RESET see for this session.
    pub fn start_with_synchronous_commit(&mut self, on: bool, level: &'static str) {
        self.set_synchronous_commit(on);
        self.set_synchronous_commit_level(level);
        self.startup_sync_level = Some(level);
    }

    /// Leaves the ProcArray; ends an open transaction first.
    pub fn close(mut self) {
        self.xact.abort();
        self.xact.shutdown();
    }
}

impl Session for WalSession<'_> {
    fn emit_message(
        &mut self,
        transactional: bool,
        prefix: &str,
        payload: &[u8],
        flush: bool,
    ) -> Result<u64, SqlError> {
        self.writable("pg_logical_emit_message()")?;
        let xid = if transactional { self.xact.xid() } else { 0 };
        let msg = walformat::LogicalMessage::try_new(xid, transactional, prefix, payload).map_err(
            |e| {
                SqlError::error(
                    sqlstate::PROGRAM_LIMIT_EXCEEDED,
                    format!("message too large: {e}"),
                )
            },
        )?;
        // Used only when the message continues onto another page.
        let mut spill = walformat::RecordBuf::default();
        let at = if transactional {
            self.xact.insert_message(&msg, &mut spill)
        } else {
            self.xact.xlog.insert_message(&msg, &mut spill)
        };
        if flush && !transactional {
            self.xact.xlog.flush(at.end);
        }
        Ok(at.end)
    }

    fn create_logical_replication_slot(
        &mut self,
        name: &str,
        plugin: &str,
        temporary: bool,
        two_phase: bool,
    ) -> Result<u64, SqlError> {
        self.check_slot_permission()?;
        if temporary {
            return Err(SqlError::error(
                sqlstate::FEATURE_NOT_SUPPORTED,
                "temporary replication slots can only be created by a replication connection here",
            ));
        }
        let new = backend::slots::NewLogical {
            name,
            temporary,
            plugin,
            database: &self.database,
            two_phase,
        };
        let dir = &self.xact.xlog.context().datadir;
        replication::logical::sql::create_slot(self.shm, dir, &new).map(|(_, lsn)| lsn)
    }

    fn logical_slot_changes(
        &mut self,
        args: &protocol::ChangesArgs,
    ) -> Result<Vec<protocol::ChangeRow>, SqlError> {
        self.check_slot_permission()?;
        let req = replication::logical::sql::ChangesRequest {
            slot: &args.slot,
            upto_lsn: args.upto_lsn,
            upto_nchanges: args.upto_nchanges,
            options: &args.options,
            peek: args.peek,
            binary: args.binary,
        };
        let dir = &self.xact.xlog.context().datadir;
        let outputs = replication::logical::sql::changes(self.shm, dir, &req)?;
        Ok(outputs
            .into_iter()
            .map(|o| protocol::ChangeRow {
                lsn: o.lsn,
                xid: o.xid,
                data: o.data,
            })
            .collect())
    }

    fn replication_slot_advance(&mut self, name: &str, upto: u64) -> Result<u64, SqlError> {
        self.check_slot_permission()?;
        let dir = &self.xact.xlog.context().datadir;
        replication::logical::sql::advance(self.shm, dir, name, upto).map(|(_, end)| end)
    }

    fn create_publication(&mut self, name: &str) -> Result<(), SqlError> {
        self.writable("CREATE PUBLICATION")?;
        let ctx = self.xact.xlog.context();
        replication::logical::publication::create(&ctx.datadir, name, ctx.settings.fsync)
    }

    fn drop_publication(&mut self, name: &str, if_exists: bool) -> Result<(), SqlError> {
        self.writable("DROP PUBLICATION")?;
        let ctx = self.xact.xlog.context();
        replication::logical::publication::drop(&ctx.datadir, name, if_exists, ctx.settings.fsync)
    }

    fn txid_current(&mut self) -> Result<u64, SqlError> {
        self.writable_as("txid_current()", "during recovery")?;
        Ok(self.xact.full_xid())
    }

    fn current_wal_lsn(&mut self) -> u64 {
        self.xact.xlog.write_lsn()
    }

    fn current_wal_insert_lsn(&mut self) -> u64 {
        self.xact.xlog.insert_rec_ptr()
    }

    fn current_wal_flush_lsn(&mut self) -> u64 {
        self.xact.xlog.flush_lsn()
    }

    fn switch_wal(&mut self) -> Result<u64, SqlError> {
        let at = self.xact.xlog.insert(&mut walformat::switch_record());
        Ok(at.end)
    }

    /// PostgreSQL's pg_create_restore_point: superuser only (walshm's
    /// superuser is the client that may replicate, see the module header).
    fn create_restore_point(&mut self, name: &str) -> Result<u64, SqlError> {
        if !self.may_replicate {
            return Err(SqlError::error(
                sqlstate::INSUFFICIENT_PRIVILEGE,
                "permission denied for function pg_create_restore_point",
            ));
        }
        let at = backend::api::create_restore_point(&mut self.xact.xlog, name)
            .map_err(|e| SqlError::error(sqlstate::INVALID_PARAMETER_VALUE, e))?;
        log(
            "LOG",
            &format!(
                "restore point \"{name}\" created at {}",
                walformat::format_lsn(at.start)
            ),
        );
        Ok(at.end)
    }

    fn checkpoint(&mut self) -> Result<(), SqlError> {
        // A standby has no checkpointer: its startup process makes a
        // restartpoint at each checkpoint record it replays.
        if !self.recovery() {
            request_checkpoint(self.shm);
        }
        Ok(())
    }

    fn begin(&mut self) -> Result<(), SqlError> {
        self.xact.begin();
        self.activity.set_xact_start(Some(stats::now_us()));
        Ok(())
    }

    fn commit(&mut self) -> Result<(), SqlError> {
        self.xact.commit();
        self.activity.set_xact_start(None);
        Ok(())
    }

    fn rollback(&mut self) -> Result<(), SqlError> {
        self.xact.abort();
        self.activity.set_xact_start(None);
        Ok(())
    }

    fn set_synchronous_commit(&mut self, on: bool) {
        self.xact.set_synchronous(on);
    }

    fn synchronous_commit(&self) -> bool {
        self.xact.synchronous()
    }

    fn set_synchronous_commit_level(&mut self, name: &str) {
        backend::syncrep::set_session_level(name);
    }

    fn create_physical_replication_slot(
        &mut self,
        name: &str,
        immediately_reserve: bool,
        temporary: bool,
    ) -> Result<Option<u64>, SqlError> {
        self.check_slot_permission()?;
        if temporary {
            return Err(SqlError::error(
                sqlstate::FEATURE_NOT_SUPPORTED,
                "temporary replication slots can only be created by a replication connection here",
            ));
        }
        let ctx = self.xact.xlog.context();
        let (shm, dir, fsync) = (self.shm, &ctx.datadir, ctx.settings.fsync);
        let lsn = backend::slots::create(shm, dir, name, false, immediately_reserve, fsync)?;
        Ok(immediately_reserve.then_some(lsn))
    }

    fn replication_slots(&mut self) -> Vec<protocol::ReplicationSlotRow> {
        replication::views::pg_replication_slots(self.shm, &self.xact.xlog.context().datadir)
    }

    fn stat_replication(&mut self) -> Vec<protocol::ReplicationRow> {
        replication::views::pg_stat_replication(self.shm)
    }

    fn drop_replication_slot(&mut self, name: &str) -> Result<(), SqlError> {
        self.check_slot_permission()?;
        let dir = &self.xact.xlog.context().datadir;
        backend::slots::drop_slot(self.shm, dir, name, false)
    }

    fn termination(&self) -> Option<Termination> {
        shutdown_requested().then_some(Termination::FastShutdown)
    }

    fn take_cancel(&mut self) -> bool {
        CANCEL_REQUESTED.swap(false, Ordering::Relaxed)
    }

    fn memory_limit(&self) -> usize {
        usize::try_from(self.shm.settings().session_memory_limit).unwrap_or(usize::MAX)
    }

    fn server_setting(&self, name: &str) -> Option<String> {
        if let Some(level) = self
            .startup_sync_level
            .filter(|_| name == "synchronous_commit")
        {
            return Some(level.to_string());
        }
        self.shm.settings().show(name)
    }

    fn server_settings(&self) -> Vec<SettingRow> {
        let current = self.shm.settings();
        let boot = Settings::default();
        SETTINGS
            .iter()
            .filter(|row| !row.secret)
            .map(|row| setting_row(row, current, &boot))
            .collect()
    }

    fn postmaster_start_time(&self) -> Option<i64> {
        modified_us(&self.datadir.join("postmaster.pid"))
    }

    fn wal_segment_size(&self) -> u64 {
        self.geometry().0
    }

    fn timeline(&self) -> u32 {
        // The server's, not the control file's at the first use: a
        // promotion moves it.
        self.shm.xlog().facts.timeline()
    }

    fn in_recovery(&self) -> bool {
        self.recovery()
    }

    fn check_wal_control(&mut self) -> Result<(), SqlError> {
        if self.recovery() {
            return Err(SqlError::error(
                sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
                "recovery is in progress",
            )
            .with_hint("WAL control functions cannot be executed during recovery."));
        }
        self.writable("WAL control functions")
    }

    fn last_wal_receive_lsn(&mut self) -> Option<u64> {
        let w = &self.shm.repl().walrcv;
        Some(w.flushed_upto.load(Ordering::Relaxed)).filter(|&l| l > 0)
    }

    fn last_wal_replay_lsn(&mut self) -> Option<u64> {
        let w = &self.shm.repl().walrcv;
        Some(w.replayed_upto.load(Ordering::Relaxed)).filter(|&l| l > 0)
    }

    fn promote(&mut self, wait: bool, wait_seconds: i64) -> Result<bool, SqlError> {
        if !self.recovery() {
            return Err(SqlError::error(
                sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
                "recovery is not in progress",
            )
            .with_hint("Recovery control functions can only be executed during recovery."));
        }
        request_promotion(&self.datadir)?;
        if !wait {
            return Ok(true);
        }
        let deadline =
            std::time::Instant::now() + std::time::Duration::from_secs(wait_seconds as u64);
        while std::time::Instant::now() < deadline {
            if !self.recovery() {
                return Ok(true);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Ok(!self.recovery())
    }

    fn stat_wal_receiver(&mut self) -> Vec<protocol::WalReceiverRow> {
        replication::views::wal_receiver(self.shm)
            .into_iter()
            .collect()
    }

    fn activity(&mut self) -> Vec<ActivityRow> {
        stats::activity(self.shm)
            .into_iter()
            .map(activity_row)
            .collect()
    }

    fn wal_stats(&mut self) -> WalStatsRow {
        let w = stats::wal_stats(self.shm);
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        WalStatsRow {
            wal_records: count(w.wal_records),
            wal_fpi: count(w.wal_fpi),
            wal_bytes: w.wal_bytes,
            wal_buffers_full: count(w.wal_buffers_full),
            wal_write: count(w.wal_write),
            wal_sync: count(w.wal_sync),
            wal_write_time: w.wal_write_time_us as f64 / 1000.0,
            wal_sync_time: w.wal_sync_time_us as f64 / 1000.0,
            stats_reset: (w.stats_reset_us != 0).then_some(w.stats_reset_us as i64),
        }
    }

    fn reset_wal_stats(&mut self) {
        stats::reset_wal_stats(self.shm);
    }

    fn wal_files(&mut self) -> Result<Vec<WalFileRow>, SqlError> {
        let dir = self.datadir.join("pg_wal");
        let entries = std::fs::read_dir(&dir).map_err(|e| io_error(&dir, &e))?;
        let mut rows = Vec::new();
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            rows.push(WalFileRow {
                name: entry.file_name().to_string_lossy().into_owned(),
                size: i64::try_from(meta.len()).unwrap_or(i64::MAX),
                modification: modified_us(&entry.path()).unwrap_or(0),
            });
        }
        Ok(rows)
    }

    fn control(&mut self) -> Result<ControlRow, SqlError> {
        let path = backend::control::path(&self.datadir);
        let c = backend::control::ControlFile::read(&self.datadir)
            .map_err(|e| SqlError::error(sqlstate::PROGRAM_LIMIT_EXCEEDED, e.to_string()))?;
        let seg = c.seg_size.max(1);
        let redo_segno = c.redo / seg;
        let per_id = (0x1_0000_0000 / seg).max(1);
        let timeline = i32::try_from(c.timeline).unwrap_or(i32::MAX);
        // The checkpoint copy the file holds, as pg_controldata shows it.
        let cp = c.checkpoint_copy();
        Ok(ControlRow {
            checkpoint_lsn: c.checkpoint,
            redo_lsn: c.redo,
            redo_wal_file: format!(
                "{:08X}{:08X}{:08X}",
                c.timeline,
                redo_segno / per_id,
                redo_segno % per_id
            ),
            timeline_id: timeline,
            prev_timeline_id: i32::try_from(cp.prev_tli).unwrap_or(i32::MAX),
            full_page_writes: cp.full_page_writes,
            next_xid: format!("{}:{}", cp.next_xid >> 32, cp.next_xid & 0xffff_ffff),
            next_oid: cp.next_oid.into(),
            next_multixact_id: cp.next_multi.into(),
            next_multi_offset: cp.next_multi_offset.into(),
            oldest_xid: cp.oldest_xid.into(),
            oldest_xid_dbid: cp.oldest_xid_db.into(),
            oldest_active_xid: cp.oldest_active_xid.into(),
            oldest_multi_xid: cp.oldest_multi.into(),
            oldest_multi_dbid: cp.oldest_multi_db.into(),
            oldest_commit_ts_xid: cp.oldest_commit_ts_xid.into(),
            newest_commit_ts_xid: cp.newest_commit_ts_xid.into(),
            checkpoint_time: cp.time.saturating_mul(1_000_000),
            pg_control_version: backend::control::PG_CONTROL_VERSION as i32,
            catalog_version_no: backend::control::CATALOG_VERSION_NO as i32,
            system_identifier: c.system_identifier as i64,
            pg_control_last_modified: modified_us(&path)
                .unwrap_or(c.time.saturating_mul(1_000_000)),
        })
    }

    fn report_activity(&mut self, query: Option<&str>, in_transaction: bool) {
        match query {
            Some(q) => {
                self.activity.set_query(q);
                self.activity.set_state(ActivityState::Active);
            }
            None if in_transaction => self.activity.set_state(ActivityState::IdleInTransaction),
            None => self.activity.set_state(ActivityState::Idle),
        }
    }
}

/// pg_promote()'s request, as `pg_ctl promote` makes it: `DIR/promote`,
/// then SIGUSR1 to the postmaster (this backend's parent).
fn request_promotion(datadir: &Path) -> Result<(), SqlError> {
    let file = datadir.join(backend::standby::PROMOTE_FILE);
    std::fs::write(&file, b"").map_err(|e| io_error(&file, &e))?;
    // A connection backend's parent is the postmaster.
    if let Err(e) = shmem::sys::signal_parent(shmem::sys::Signal::SIGUSR1) {
        return Err(SqlError::error(
            sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("failed to send signal to postmaster: {e}"),
        ));
    }
    Ok(())
}

fn io_error(path: &Path, e: &std::io::Error) -> SqlError {
    SqlError::error(
        sqlstate::PROGRAM_LIMIT_EXCEEDED,
        format!("could not read directory \"{}\": {e}", path.display()),
    )
}

/// A file's modification time in microseconds since the Unix epoch.
fn modified_us(path: &Path) -> Option<i64> {
    let t = std::fs::metadata(path).ok()?.modified().ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(d.as_micros()).ok()
}

fn activity_row(a: stats::ProcActivity) -> ActivityRow {
    let client = a.backend_type == stats::BackendType::ClientBackend;
    let text = |s: String| (!s.is_empty()).then_some(s);
    let micros = |t: Option<u64>| t.map(|v| v as i64);
    let client_addr = text(a.client_addr);
    ActivityRow {
        pid: a.pid,
        backend_type: a.backend_type_name.to_string(),
        state: a.state.map(str::to_string),
        wait_event_type: a.wait_event_type.map(str::to_string),
        wait_event: a.wait_event.map(str::to_string),
        query: Some(a.query),
        backend_start: micros(a.backend_start_us),
        xact_start: micros(a.xact_start_us),
        query_start: micros(a.query_start_us),
        state_change: micros(a.state_change_us),
        backend_xid: a.backend_xid,
        application_name: Some(a.application_name),
        client_port: client.then_some(if client_addr.is_some() { 0 } else { -1 }),
        client_addr,
        usename: client.then(|| "postgres".to_string()),
        datname: client.then(|| "postgres".to_string()),
    }
}

/// PostgreSQL's vartype of a setting's kind.
fn vartype(kind: &Kind) -> &'static str {
    match kind {
        Kind::Bool => "bool",
        Kind::Int { .. } => "integer",
        Kind::Enum(_) => "enum",
        Kind::Text { .. } => "string",
    }
}

/// pg_settings' unit for values shown in `shown` (None for plain counts).
fn unit_name(shown: Unit) -> Option<String> {
    if shown == Unit::PAGES {
        return Some("8kB".into());
    }
    (!shown.suffix.is_empty()).then(|| shown.suffix.to_string())
}

/// One `pg_settings` row of the server's table.
fn setting_row(row: &Setting, current: &Settings, boot: &Settings) -> SettingRow {
    let (unit, bare) = match row.kind {
        Kind::Int { shown, .. } => (unit_name(shown), shown.suffix),
        _ => (None, ""),
    };
    let plain = |s: &Settings| {
        let shown = row.display(s);
        shown.strip_suffix(bare).unwrap_or(&shown).to_string()
    };
    let (min_val, max_val) = match row.kind {
        Kind::Int {
            stored,
            shown,
            min,
            max,
        } => (
            Some((min * stored.scale / shown.scale).to_string()),
            Some((max * stored.scale / shown.scale).to_string()),
        ),
        _ => (None, None),
    };
    let setting = plain(current);
    let boot_val = plain(boot);
    SettingRow {
        name: row.name.to_string(),
        source: if setting == boot_val {
            "default"
        } else {
            "configuration file"
        }
        .to_string(),
        reset_val: setting.clone(),
        setting,
        unit,
        category: if row.seed.is_some() {
            "walshm / Seed Variants"
        } else {
            "walshm"
        }
        .to_string(),
        short_desc: row.what(),
        context: match row.context {
            Context::Postmaster => "postmaster",
            Context::Session => "user",
        }
        .to_string(),
        vartype: vartype(&row.kind).to_string(),
        min_val,
        max_val,
        enumvals: match row.kind {
            Kind::Enum(names) => Some(names.iter().map(|n| n.to_string()).collect()),
            _ => None,
        },
        boot_val,
        shown: row.display(current),
    }
}

/// How the client reached us.
pub enum Peer {
    Unix,
    Tcp,
}

/// A nonzero random cancel key; None when the kernel cannot give random
/// bytes (the connection is then refused rather than given a guessable key).
fn random_key() -> Option<u32> {
    for _ in 0..16 {
        match u32::from_le_bytes(protocol::random_bytes().ok()?) {
            0 => continue,
            key => return Some(key),
        }
    }
    None
}

/// Does proc slot `p` belong to a live connection backend whose key is
/// `key`? Key 0 (free, worker and auxiliary slots) never matches.
fn cancel_matches(p: &shmem::proc::Proc, pid: i32, key: u32) -> bool {
    let slot_key = p.cancel_key.load(Ordering::Relaxed);
    let key_ok = protocol::constant_time_eq(&slot_key.to_ne_bytes(), &key.to_ne_bytes());
    pid > 0 && key != 0 && slot_key != 0 && p.pid.load(Ordering::Relaxed) == pid && key_ok
}

/// Sends a CancelRequest on to the backend it names, if the key matches;
/// anything else is ignored.
fn forward_cancel(shm: &Shmem, pid: i32, key: i32) {
    let backends = &shm.procs()[..shm.layout().max_backends as usize];
    if backends.iter().any(|p| cancel_matches(p, pid, key as u32)) {
        // pid > 0 names one process.
        shmem::sys::kill(pid, shmem::sys::Signal::SIGINT);
    }
}

/// How the client on socket `fd` reached us, for authentication.
fn transport_of(peer: Peer, fd: i32) -> protocol::Transport {
    match peer {
        Peer::Unix => protocol::Transport::Unix {
            peer_uid: shmem::sys::sock::peer_uid(fd),
            server_uid: shmem::sys::euid(),
        },
        Peer::Tcp => protocol::Transport::Tcp,
    }
}

/// A connection backend's whole life; returns the exit code.
pub fn run_connection<S: Read + Write + AsRawFd>(
    shm: &Shmem,
    datadir: &Path,
    mut stream: S,
    peer: Peer,
    password: Option<String>,
    replication_password: Option<String>,
) -> i32 {
    process::enable_cancel_signal();
    let fd = stream.as_raw_fd();
    // Reads and writes return every 200 ms so that a blocked one notices
    // a fast shutdown (protocol::serve polls termination on each timeout).
    for which in [Timeout::Receive, Timeout::Send] {
        shmem::sys::sock::set_timeout(fd, which, Duration::from_millis(200));
    }
    process::set_quit_message(fd, protocol::crash_notice_bytes());
    let pid = std::process::id() as i32;
    let Some(key) = random_key() else {
        log("FATAL", "could not generate a cancel key: no random bytes");
        return process::EXIT_FATAL;
    };
    let transport = transport_of(peer, fd);
    let params = protocol::ServerParams::new(pid, key as i32, password)
        .with_replication_password(replication_password);
    let (info, walsender) = match start_up(shm, &mut stream, &transport, &params) {
        Greeted::Client(info, walsender) => (info, walsender),
        Greeted::Done => return 0,
    };
    // Authenticated: from here on the session counts against
    // max_connections (its proc slot), not against the start-up deadline.
    process::disarm_startup_timeout();
    if let Some(me) = walsender {
        return walsender::run(shm, datadir, stream, &info, me);
    }
    let Some(procno) = shm.alloc_backend_proc(pid) else {
        let e = SqlError::fatal(
            sqlstate::TOO_MANY_CONNECTIONS,
            "sorry, too many clients already",
        );
        let _ = protocol::send_error_after_startup(&mut stream, &e);
        return 0;
    };
    let me = &shm.procs()[procno as usize];
    me.counters.reset();
    me.cancel_key.store(key, Ordering::Relaxed);
    // The slot's pid was stored when it was taken. Relaxed: `cancel_matches`
    // reads pid and key with no order between them, and a slot seen with
    // its pid but not yet its key has the key it had when freed, 0, which
    // never matches.
    serve_session(shm, datadir, stream, &info, procno, fd);
    me.cancel_key.store(0, Ordering::Relaxed);
    shm.free_backend_proc(procno);
    0
}

/// How the start-up phase ended.
enum Greeted {
    /// Authenticated; with the walsender entry a replication connection
    /// took before the greeting.
    Client(protocol::StartupInfo, Option<usize>),
    /// A cancel request (forwarded), a rejected or failed start-up: the
    /// process exits 0.
    Done,
}

/// The start-up phase: authentication and parameters. A replication
/// connection takes its walsender entry before the greeting (FATAL 53300
/// beyond max_wal_senders, as PostgreSQL), and gives it back if the
/// start-up then fails.
fn start_up<S: Read + Write>(
    shm: &Shmem,
    stream: &mut S,
    transport: &protocol::Transport,
    params: &protocol::ServerParams,
) -> Greeted {
    let mut walsender = None;
    let mut admit = |info: &protocol::StartupInfo| {
        if info.replication.is_some() && shm.repl().walrcv.in_recovery() {
            return Err(SqlError::fatal(
                sqlstate::FEATURE_NOT_SUPPORTED,
                "this server is a standby: walshm does not stream WAL from a standby (no cascading replication); connect to the primary",
            ));
        }
        if info.replication.is_some() {
            walsender = Some(walsender::claim(shm, &info.application_name)?);
        }
        Ok(())
    };
    match protocol::startup_with(stream, transport, params, &mut admit) {
        Ok(protocol::Startup::Ready(info)) => Greeted::Client(info, walsender),
        Ok(protocol::Startup::Cancel { pid, key }) => {
            forward_cancel(shm, pid, key);
            Greeted::Done
        }
        Ok(protocol::Startup::Rejected) | Err(_) => {
            if let Some(me) = walsender {
                walsender::release(shm, me);
            }
            Greeted::Done
        }
    }
}

/// Serves an authenticated session in proc slot `procno` until the client
/// leaves or the server shuts down; its transaction is closed on the way
/// out.
fn serve_session<S: Read + Write + AsRawFd>(
    shm: &Shmem,
    datadir: &Path,
    stream: S,
    info: &protocol::StartupInfo,
    procno: u32,
    fd: i32,
) {
    let me = &shm.procs()[procno as usize];
    let ctx = ProcContext::new(shm, procno, datadir);
    let writer = stats::activity_writer(shm, procno);
    writer.set_application_name(&info.application_name);
    if let Some(addr) = shmem::sys::sock::peer_ip(fd).map(|ip| ip.to_string()) {
        writer.set_client_addr(&addr);
    }
    let mut session = WalSession::new(&ctx);
    session.permit_replication(info.may_replicate);
    session.database = info.database.clone();
    if let (Some(on), Some(level)) = (info.synchronous_commit, info.synchronous_commit_level) {
        session.start_with_synchronous_commit(on, level);
    }
    let stream = PollingStream::new(stream, shm);
    let served = if backend::reply::enabled(&ctx) {
        // Durable commits' replies go out through the walwriter
        // (`commit_reply = flusher`).
        backend::reply::register_connection(me, fd);
        session.xact.defer_replies(true);
        let mut stream = backend::reply::ReplyStream::new(stream, shm, me);
        let served = protocol::serve(&mut stream, &mut session);
        let settled = stream.settle();
        session.close();
        backend::reply::end_connection(me, fd);
        served.and(settled)
    } else {
        let mut stream = stream;
        let served = protocol::serve(&mut stream, &mut session);
        session.close();
        served
    };
    if let Err(e) = served {
        if e.kind() != std::io::ErrorKind::BrokenPipe
            && e.kind() != std::io::ErrorKind::ConnectionReset
        {
            log("LOG", &format!("connection ended: {e}"));
        }
    }
}
