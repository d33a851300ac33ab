//! Durable consumer positions: named slots in the server's replication
//! slot table (the same table as pg_recvlogical's logical slots, shown in
//! `pg_replication_slots` with plugin `walshm`).
//!
//! A slot holds `confirmed_flush` (the consumer has every transaction
//! whose COMMIT starts before it) and `restart_lsn` (the oldest WAL still
//! needed, which the checkpointer keeps, up to `max_slot_wal_keep_size`).
//! [`Worker::reader_slot`] takes the slot for this process (another
//! process reading it gets 55006), reads from its restart_lsn and delivers
//! the committed transactional messages of transactions that commit at or
//! after confirmed_flush; [`SlotReader::confirm`] moves confirmed_flush
//! (to a message's `commit_end`) and restart_lsn with it. Positions reach
//! disk at the next checkpoint: after a crash the consumer gets again what
//! it confirmed since then (at least once). Dropping the reader releases
//! the slot.

use crate::error::{Error, Result};
use crate::reader::{Committed, Message, ReadMode, Reader};
use crate::Worker;
use backend::slots::{self, NewLogical};
use std::time::Duration;
use walformat::Lsn;

/// The plugin name library slots carry in the slot table.
pub const LIBRARY_PLUGIN: &str = "walshm";

fn slot_error(e: backend::slots::SqlError) -> Error {
    Error::Slot(format!("{} (SQLSTATE {})", e.message, e.code))
}

impl Worker {
    /// Creates slot `name` (PostgreSQL's slot name rules) at the current
    /// end of the WAL: its reader gets what commits from then on. Returns
    /// that position.
    pub fn slot_create(&self, name: &str) -> Result<Lsn> {
        self.check_writable()?;
        let new = NewLogical {
            name,
            temporary: false,
            plugin: LIBRARY_PLUGIN,
            database: "",
            two_phase: false,
        };
        let shm = self.link.shm();
        slots::create_logical(shm, &self.data_dir, &new, shm.settings().fsync).map_err(slot_error)
    }

    /// Drops slot `name` (its WAL is no longer held).
    pub fn slot_drop(&self, name: &str) -> Result<()> {
        self.check_writable()?;
        slots::drop_slot(self.link.shm(), &self.data_dir, name, false).map_err(slot_error)
    }

    /// Reads slot `name` (see the module header): flushed WAL only.
    pub fn reader_slot(&self, name: &str) -> Result<SlotReader<'_>> {
        self.link.check_owner()?;
        let shm = self.link.shm();
        slots::validate_name(name).map_err(slot_error)?;
        let (idx, state) = slots::acquire_logical(shm, &self.data_dir, name).map_err(slot_error)?;
        let restart = slots::restart_lsn(shm, idx);
        let reader = Reader::attached(
            &self.data_dir,
            restart,
            shm,
            &**self.link,
            ReadMode::Flushed,
        );
        match reader {
            Ok(r) => Ok(SlotReader {
                committed: Committed::new(r, state.confirmed_flush),
                worker: self,
                idx,
            }),
            Err(e) => {
                slots::release(shm, idx);
                Err(e)
            }
        }
    }
}

/// A reader of a slot (see the module header); releases the slot when
/// dropped.
pub struct SlotReader<'w> {
    committed: Committed<'w>,
    worker: &'w Worker,
    idx: usize,
}

impl SlotReader<'_> {
    /// The next committed message, waiting up to `timeout` for one.
    pub fn next_wait(&mut self, timeout: Duration) -> Result<Option<Message>> {
        self.committed.next_wait(timeout)
    }

    /// The consumer has everything that committed before `lsn` (a
    /// message's `commit_end`): the slot moves there (never backwards)
    /// and its WAL before what is still needed may be removed.
    pub fn confirm(&mut self, lsn: Lsn) -> Result<()> {
        self.worker.link.check_owner()?;
        let restart = self.committed.restart_for(lsn);
        slots::confirm(self.worker.link.shm(), self.idx, lsn, restart);
        Ok(())
    }

    /// Where the reader stands.
    pub fn position(&self) -> Lsn {
        self.committed.position()
    }
}

impl Drop for SlotReader<'_> {
    fn drop(&mut self) {
        if self.worker.link.owned_here() {
            slots::release(self.worker.link.shm(), self.idx);
        }
    }
}
