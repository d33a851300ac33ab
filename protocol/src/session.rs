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

use crate::error::SqlError;

/// A system view's columns and rows (text values, None = NULL).
pub type SystemView = (&'static [&'static str], Vec<Vec<Option<String>>>);

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
    /// pg_logical_emit_message(transactional, prefix, payload) -> LSN of the record.
    fn emit_message(
        &mut self,
        transactional: bool,
        prefix: &str,
        payload: &[u8],
    ) -> Result<u64, SqlError>;
    /// txid_current(): assigns an XID if none; the full 64-bit xid.
    fn txid_current(&mut self) -> Result<u64, SqlError>;
    /// pg_current_wal_lsn(): the write position.
    fn current_wal_lsn(&mut self) -> u64;
    fn current_wal_insert_lsn(&mut self) -> u64;
    fn current_wal_flush_lsn(&mut self) -> u64;
    /// pg_switch_wal() -> LSN.
    fn switch_wal(&mut self) -> Result<u64, SqlError>;
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
    /// WAL was reserved (issue 13). The default refuses (0A000).
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
    /// Column names and text rows (None: NULL) of a system view the
    /// database serves itself (`pg_replication_slots`,
    /// `pg_stat_replication`; issue 13), or None if it has no such view.
    fn system_view(&mut self, _name: &str) -> Option<SystemView> {
        None
    }
    /// pg_drop_replication_slot (issue 13). The default refuses (0A000).
    fn drop_replication_slot(&mut self, _name: &str) -> Result<(), SqlError> {
        Err(SqlError::not_supported(
            "replication slots are not supported here",
        ))
    }
    /// Checked between statements and while waiting for the client.
    fn termination(&self) -> Option<Termination>;
    /// A cancel request for this backend arrived. Checked before each statement.
    fn take_cancel(&mut self) -> bool;
    /// session_memory_limit: the largest value, reply message or client
    /// message (in bytes) this session may build; beyond it ERROR 53200.
    fn memory_limit(&self) -> usize;
    /// SHOW of one of the server's own settings (fixed at start-up, so
    /// SET of it is refused): its value, or None if `name` is not one or
    /// is never shown (the password). The default knows none.
    fn server_setting(&self, _name: &str) -> Option<String> {
        None
    }
}
