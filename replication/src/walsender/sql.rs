//! The SQL a walsender of a `replication=database` connection answers
//! between replication commands (PostgreSQL's walsender hands anything
//! that is not a replication command to its executor). A walsender has no
//! backend proc slot and assigns no XIDs, so its session reads the server
//! (positions, settings, slots) but refuses what would write WAL:
//! `pg_logical_emit_message`, `txid_current()`, `pg_switch_wal()` and
//! CHECKPOINT are 25006 here, as in a read-only transaction. What clients
//! send on such connections (pg_recvlogical's `SELECT
//! pg_catalog.set_config('search_path', '', false)`, SHOW, version
//! queries) works.

use protocol::{Session, SqlError, Termination};
use shmem::sync::Ordering;
use shmem::Shmem;

/// The session of a walsender's SQL.
pub(super) struct WalSenderSql<'a> {
    pub shm: &'a Shmem,
    pub synchronous_commit: bool,
}

/// PostgreSQL's read_only_sql_transaction.
const READ_ONLY: &str = "25006";

fn read_only(what: &str) -> SqlError {
    SqlError::error(
        READ_ONLY,
        format!("cannot execute {what} in a replication connection's SQL"),
    )
}

impl Session for WalSenderSql<'_> {
    fn emit_message(&mut self, _: bool, _: &str, _: &[u8], _: bool) -> Result<u64, SqlError> {
        Err(read_only("pg_logical_emit_message()"))
    }

    fn txid_current(&mut self) -> Result<u64, SqlError> {
        Err(read_only("txid_current()"))
    }

    fn current_wal_lsn(&mut self) -> u64 {
        // Relaxed: a position to show.
        self.shm.xlog().write.write_result.load(Ordering::Relaxed)
    }

    fn current_wal_insert_lsn(&mut self) -> u64 {
        self.current_wal_lsn()
    }

    fn current_wal_flush_lsn(&mut self) -> u64 {
        // Relaxed: a position to show.
        self.shm.xlog().write.flush_result.load(Ordering::Relaxed)
    }

    fn switch_wal(&mut self) -> Result<u64, SqlError> {
        Err(read_only("pg_switch_wal()"))
    }

    fn checkpoint(&mut self) -> Result<(), SqlError> {
        Err(read_only("CHECKPOINT"))
    }

    fn begin(&mut self) -> Result<(), SqlError> {
        Ok(())
    }

    fn commit(&mut self) -> Result<(), SqlError> {
        Ok(())
    }

    fn rollback(&mut self) -> Result<(), SqlError> {
        Ok(())
    }

    fn set_synchronous_commit(&mut self, on: bool) {
        self.synchronous_commit = on;
    }

    fn synchronous_commit(&self) -> bool {
        self.synchronous_commit
    }

    fn termination(&self) -> Option<Termination> {
        backend::process::shutdown_requested().then_some(Termination::FastShutdown)
    }

    fn memory_limit(&self) -> usize {
        usize::try_from(self.shm.settings().session_memory_limit).unwrap_or(usize::MAX)
    }

    fn server_setting(&self, name: &str) -> Option<String> {
        self.shm.settings().show(name)
    }

    fn backend_pid(&self) -> i32 {
        std::process::id() as i32
    }

    fn wal_segment_size(&self) -> u64 {
        self.shm.xlog().facts.seg_size
    }

    fn timeline(&self) -> u32 {
        self.shm.xlog().facts.timeline()
    }
}
