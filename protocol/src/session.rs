//! The interface between a client connection and the database: what a
//! connection can ask walshm to do. The walshm backend implements it with
//! real WAL; tests implement it with a fake.
//!
//! Transaction contract (what `serve` guarantees to an implementation):
//! * every statement other than BEGIN/COMMIT/ROLLBACK runs between a
//!   `begin()` and exactly one matching `commit()` or `rollback()`;
//! * outside an explicit block, the implicit transaction spans one simple
//!   Query message (all of its `;`-separated statements, as in PostgreSQL)
//!   or, in the extended protocol, everything up to the next Sync;
//! * an explicit block (BEGIN ... COMMIT/ROLLBACK) is one `begin()` and
//!   one `commit()` or `rollback()`;
//! * when a statement fails, `rollback()` is called at once (PostgreSQL
//!   aborts the transaction at the error; an explicit block then stays
//!   failed, without further Session calls, until ROLLBACK or COMMIT);
//! * if `begin()` fails, no transaction is open; if `commit()` fails, the
//!   transaction is over all the same (the implementation cleaned up);
//! * at end of connection (Terminate, EOF, fast shutdown) an open
//!   transaction is rolled back; after `Termination::Crash` no Session
//!   method is called any more (PostgreSQL's quickdie does no cleanup).
//!
//! Inspection: the views and functions of `sql::catalog` ask the Session
//! for plain row data (the structs below: strings, integers, microseconds
//! since the Unix epoch); the defaults answer as a server with nothing to
//! show would, so a test Session implements only what it needs.

use crate::error::SqlError;

/// One process, as `pg_stat_activity` shows it. Times: microseconds since
/// the Unix epoch; None where PostgreSQL shows NULL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActivityRow {
    pub pid: i32,
    /// "client backend", "walwriter", "checkpointer", "background worker", ...
    pub backend_type: String,
    /// "active", "idle", "idle in transaction", ...; None for auxiliary processes.
    pub state: Option<String>,
    pub wait_event_type: Option<String>,
    pub wait_event: Option<String>,
    pub query: Option<String>,
    pub backend_start: Option<i64>,
    pub xact_start: Option<i64>,
    pub query_start: Option<i64>,
    pub state_change: Option<i64>,
    /// The 32-bit xid, None if none is assigned.
    pub backend_xid: Option<u32>,
    pub application_name: Option<String>,
    /// The client's address (an IP address), None for a Unix socket.
    pub client_addr: Option<String>,
    /// -1 for a Unix socket, None for a process without a client.
    pub client_port: Option<i32>,
    pub usename: Option<String>,
    pub datname: Option<String>,
}

/// `pg_stat_wal`'s one row (times in milliseconds, as PostgreSQL's).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WalStatsRow {
    pub wal_records: i64,
    pub wal_fpi: i64,
    pub wal_bytes: u64,
    pub wal_buffers_full: i64,
    pub wal_write: i64,
    pub wal_sync: i64,
    pub wal_write_time: f64,
    pub wal_sync_time: f64,
    /// Microseconds since the Unix epoch.
    pub stats_reset: Option<i64>,
}

/// One file of `pg_wal/`, as `pg_ls_waldir()` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalFileRow {
    pub name: String,
    pub size: i64,
    /// Microseconds since the Unix epoch.
    pub modification: i64,
}

/// What `pg_control_checkpoint()` and `pg_control_system()` show, from the
/// control file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlRow {
    pub checkpoint_lsn: u64,
    pub redo_lsn: u64,
    pub redo_wal_file: String,
    pub timeline_id: i32,
    pub prev_timeline_id: i32,
    pub full_page_writes: bool,
    /// "epoch:xid", as PostgreSQL shows next_xid.
    pub next_xid: String,
    pub next_oid: i64,
    pub next_multixact_id: i64,
    pub next_multi_offset: i64,
    pub oldest_xid: i64,
    pub oldest_xid_dbid: i64,
    pub oldest_active_xid: i64,
    pub oldest_multi_xid: i64,
    pub oldest_multi_dbid: i64,
    pub oldest_commit_ts_xid: i64,
    pub newest_commit_ts_xid: i64,
    /// Microseconds since the Unix epoch.
    pub checkpoint_time: i64,
    pub pg_control_version: i32,
    pub catalog_version_no: i32,
    pub system_identifier: i64,
    /// Microseconds since the Unix epoch.
    pub pg_control_last_modified: i64,
}

/// One of the server's settings, as `pg_settings` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SettingRow {
    pub name: String,
    /// The value in `unit`s, without the unit.
    pub setting: String,
    pub unit: Option<String>,
    pub category: String,
    pub short_desc: String,
    /// "postmaster", "user", "internal".
    pub context: String,
    /// "bool", "integer", "enum", "string".
    pub vartype: String,
    pub source: String,
    pub min_val: Option<String>,
    pub max_val: Option<String>,
    /// For an enum: its values.
    pub enumvals: Option<Vec<String>>,
    pub boot_val: String,
    pub reset_val: String,
    /// The value as SHOW prints it (with its unit).
    pub shown: String,
}

/// One replication slot, as `pg_replication_slots` shows it (the xmins
/// are NULL: walshm has no snapshots to hold back).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicationSlotRow {
    pub slot_name: String,
    /// A logical slot's output plugin, database and confirmed_flush_lsn
    /// (None for a physical slot).
    pub logical: Option<LogicalSlotColumns>,
    pub temporary: bool,
    /// The walsender using it, None if inactive.
    pub active_pid: Option<i32>,
    /// None until WAL is reserved.
    pub restart_lsn: Option<u64>,
    /// "reserved", "extended", "lost"; None when no WAL is reserved.
    pub wal_status: Option<String>,
    /// Bytes it may still fall behind before max_slot_wal_keep_size
    /// invalidates it; None without a limit.
    pub safe_wal_size: Option<i64>,
}

/// The columns only a logical slot fills in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogicalSlotColumns {
    pub plugin: String,
    pub database: String,
    pub confirmed_flush_lsn: u64,
    pub two_phase: bool,
}

/// What `pg_logical_slot_{get,peek}[_binary]_changes` asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangesArgs {
    pub slot: String,
    pub upto_lsn: Option<u64>,
    pub upto_nchanges: Option<i64>,
    /// The plugin options (name, value) from the variadic text pairs.
    pub options: Vec<(String, Option<String>)>,
    pub peek: bool,
    pub binary: bool,
}

/// One row of those functions: (lsn, xid, data).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeRow {
    pub lsn: u64,
    pub xid: u32,
    pub data: Vec<u8>,
}

/// One walsender, as `pg_stat_replication` shows it. Times:
/// microseconds since the Unix epoch; None where PostgreSQL shows NULL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicationRow {
    pub pid: i32,
    pub usename: Option<String>,
    pub application_name: String,
    /// The client's address (an IP address), None for a Unix socket.
    pub client_addr: Option<String>,
    /// -1 for a Unix socket.
    pub client_port: Option<i32>,
    pub backend_start: Option<i64>,
    /// "startup", "catchup", "streaming", ...
    pub state: String,
    pub sent_lsn: Option<u64>,
    pub write_lsn: Option<u64>,
    pub flush_lsn: Option<u64>,
    pub replay_lsn: Option<u64>,
    pub sync_priority: i32,
    /// "async", "potential", "sync", "quorum".
    pub sync_state: String,
    pub reply_time: Option<i64>,
    /// write_lag, flush_lag, replay_lag in microseconds (None: NULL).
    pub write_lag: Option<i64>,
    pub flush_lag: Option<i64>,
    pub replay_lag: Option<i64>,
}

/// A standby's walreceiver, as `pg_stat_wal_receiver` shows it. Times:
/// microseconds since the Unix epoch; None where PostgreSQL shows NULL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WalReceiverRow {
    pub pid: i32,
    /// "starting", "streaming", "waiting", "stopping", ...
    pub status: String,
    pub receive_start_lsn: Option<u64>,
    pub receive_start_tli: Option<i32>,
    pub written_lsn: Option<u64>,
    pub flushed_lsn: Option<u64>,
    pub received_tli: Option<i32>,
    pub last_msg_send_time: Option<i64>,
    pub last_msg_receipt_time: Option<i64>,
    pub latest_end_lsn: Option<u64>,
    pub latest_end_time: Option<i64>,
    pub slot_name: Option<String>,
    pub sender_host: Option<String>,
    pub sender_port: Option<i32>,
    /// The connection string without its password.
    pub conninfo: Option<String>,
}

/// Why the server wants this connection to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    /// Fast shutdown (SIGTERM): FATAL 57P01 "terminating connection due to administrator command".
    FastShutdown,
    /// Another process crashed (SIGQUIT): WARNING 57P02 "terminating connection
    /// because of crash of another server process", as PostgreSQL's quickdie sends it.
    Crash,
}

/// What a connection can ask the database to do.
pub trait Session {
    /// pg_logical_emit_message(transactional, prefix, payload [, flush])
    /// -> LSN of the record's end. With `flush` (PostgreSQL 17's fourth
    /// argument) a non-transactional message is durable before it returns
    /// (a transactional one is with its transaction's commit anyway).
    fn emit_message(
        &mut self,
        transactional: bool,
        prefix: &str,
        payload: &[u8],
        flush: bool,
    ) -> Result<u64, SqlError>;
    /// txid_current(): assigns an XID if none; the full 64-bit xid.
    fn txid_current(&mut self) -> Result<u64, SqlError>;
    /// pg_current_wal_lsn(): the write position.
    fn current_wal_lsn(&mut self) -> u64;
    fn current_wal_insert_lsn(&mut self) -> u64;
    fn current_wal_flush_lsn(&mut self) -> u64;
    /// pg_switch_wal() -> LSN.
    fn switch_wal(&mut self) -> Result<u64, SqlError>;
    /// pg_create_restore_point(name) -> the LSN just past its
    /// RESTORE_POINT record. The default refuses (0A000).
    fn create_restore_point(&mut self, _name: &str) -> Result<u64, SqlError> {
        Err(SqlError::not_supported(
            "restore points are not supported here",
        ))
    }
    fn checkpoint(&mut self) -> Result<(), SqlError>;
    /// Starts a transaction (explicit block or implicit per-statement one).
    fn begin(&mut self) -> Result<(), SqlError>;
    /// Commits: writes the commit record (if an xid was assigned) and flushes per synchronous_commit.
    fn commit(&mut self) -> Result<(), SqlError>;
    fn rollback(&mut self) -> Result<(), SqlError>;
    fn set_synchronous_commit(&mut self, on: bool);
    fn synchronous_commit(&self) -> bool;
    /// The canonical `synchronous_commit` name in force (after
    /// `set_synchronous_commit`): `remote_write` / `on` also decide what a
    /// commit waits for from synchronous standbys. The default ignores it.
    fn set_synchronous_commit_level(&mut self, _name: &str) {}
    /// pg_create_physical_replication_slot: the slot's restart_lsn when
    /// WAL was reserved. The default refuses (0A000).
    fn create_physical_replication_slot(
        &mut self,
        _name: &str,
        _immediately_reserve: bool,
        _temporary: bool,
    ) -> Result<Option<u64>, SqlError> {
        Err(SqlError::not_supported(
            "replication slots are not supported here",
        ))
    }
    /// pg_replication_slots' rows.
    fn replication_slots(&mut self) -> Vec<ReplicationSlotRow> {
        Vec::new()
    }
    /// pg_stat_replication's rows, one per walsender.
    fn stat_replication(&mut self) -> Vec<ReplicationRow> {
        Vec::new()
    }
    /// pg_create_logical_replication_slot -> the consistent point.
    fn create_logical_replication_slot(
        &mut self,
        _name: &str,
        _plugin: &str,
        _temporary: bool,
        _two_phase: bool,
    ) -> Result<u64, SqlError> {
        Err(SqlError::not_supported(
            "logical decoding is not supported here",
        ))
    }
    /// pg_logical_slot_{get,peek}[_binary]_changes.
    fn logical_slot_changes(&mut self, _args: &ChangesArgs) -> Result<Vec<ChangeRow>, SqlError> {
        Err(SqlError::not_supported(
            "logical decoding is not supported here",
        ))
    }
    /// pg_replication_slot_advance -> (slot_name, end_lsn).
    fn replication_slot_advance(&mut self, _name: &str, _upto: u64) -> Result<u64, SqlError> {
        Err(SqlError::not_supported(
            "replication slots are not supported here",
        ))
    }
    /// CREATE PUBLICATION name (42710 if it exists).
    fn create_publication(&mut self, _name: &str) -> Result<(), SqlError> {
        Err(SqlError::not_supported(
            "publications are not supported here",
        ))
    }
    /// DROP PUBLICATION name (42704 if it does not exist, unless `if_exists`).
    fn drop_publication(&mut self, _name: &str, _if_exists: bool) -> Result<(), SqlError> {
        Err(SqlError::not_supported(
            "publications are not supported here",
        ))
    }
    /// pg_drop_replication_slot. The default refuses (0A000).
    fn drop_replication_slot(&mut self, _name: &str) -> Result<(), SqlError> {
        Err(SqlError::not_supported(
            "replication slots are not supported here",
        ))
    }
    /// Checked between statements and while waiting for the client. The
    /// default: never told to stop.
    fn termination(&self) -> Option<Termination> {
        None
    }
    /// A cancel request for this backend arrived. Checked before each
    /// statement. The default: no cancel request ever reaches it.
    fn take_cancel(&mut self) -> bool {
        false
    }
    /// session_memory_limit: the largest value, reply message or client
    /// message (in bytes) this session may build; beyond it ERROR 53200.
    fn memory_limit(&self) -> usize;
    /// SHOW of one of the server's own settings (fixed at start-up, so
    /// SET of it is refused): its value, or None if `name` is not one or
    /// is never shown (the password). The default knows none.
    fn server_setting(&self, _name: &str) -> Option<String> {
        None
    }
    /// Every server setting SHOW may print (never the password), in any order.
    fn server_settings(&self) -> Vec<SettingRow> {
        Vec::new()
    }
    /// pg_backend_pid().
    fn backend_pid(&self) -> i32 {
        std::process::id() as i32
    }
    /// pg_postmaster_start_time(), microseconds since the Unix epoch.
    fn postmaster_start_time(&self) -> Option<i64> {
        None
    }
    /// pg_is_in_recovery(): true on a standby until it is promoted.
    fn in_recovery(&self) -> bool {
        false
    }
    /// Before pg_current_wal_lsn() and the other WAL control functions:
    /// PostgreSQL refuses them during recovery (55000).
    fn check_wal_control(&mut self) -> Result<(), SqlError> {
        Ok(())
    }
    /// pg_last_wal_receive_lsn(): what a standby's walreceiver flushed
    /// (None: NULL, as on a primary).
    fn last_wal_receive_lsn(&mut self) -> Option<u64> {
        None
    }
    /// pg_last_wal_replay_lsn(): the end of the last record a standby
    /// replayed (None: NULL).
    fn last_wal_replay_lsn(&mut self) -> Option<u64> {
        None
    }
    /// pg_promote(wait, wait_seconds): whether the promotion finished in
    /// time (false when not waited for long enough). The default: not a
    /// standby (55000).
    fn promote(&mut self, _wait: bool, _wait_seconds: i64) -> Result<bool, SqlError> {
        Err(SqlError::error(
            crate::sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
            "recovery is not in progress",
        )
        .with_hint("Recovery control functions can only be executed during recovery."))
    }
    /// pg_stat_wal_receiver's row (none unless a walreceiver runs).
    fn stat_wal_receiver(&mut self) -> Vec<WalReceiverRow> {
        Vec::new()
    }
    /// WAL segment size in bytes (pg_walfile_name and pg_control_*).
    fn wal_segment_size(&self) -> u64 {
        16 << 20
    }
    /// The server's timeline (pg_walfile_name).
    fn timeline(&self) -> u32 {
        1
    }
    /// pg_stat_activity's rows.
    fn activity(&mut self) -> Vec<ActivityRow> {
        Vec::new()
    }
    /// pg_stat_wal's row.
    fn wal_stats(&mut self) -> WalStatsRow {
        WalStatsRow::default()
    }
    /// pg_stat_reset_shared('wal').
    fn reset_wal_stats(&mut self) {}
    /// pg_ls_waldir()'s rows.
    fn wal_files(&mut self) -> Result<Vec<WalFileRow>, SqlError> {
        Ok(Vec::new())
    }
    /// The control file, for pg_control_checkpoint() / pg_control_system().
    fn control(&mut self) -> Result<ControlRow, SqlError> {
        Ok(ControlRow::default())
    }
    /// The statement the session is about to run (pg_stat_activity.query,
    /// state "active"); `None` when it went back to waiting for the client
    /// (state "idle" or "idle in transaction").
    fn report_activity(&mut self, _query: Option<&str>, _in_transaction: bool) {}
}
