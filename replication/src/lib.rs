//! walshm's replication processes and views: the walsender (PostgreSQL's
//! walsender.c: `IDENTIFY_SYSTEM`, `TIMELINE_HISTORY`, slots,
//! `START_REPLICATION` streaming, standby status updates) with its lag
//! tracker and per-round timings, and the rows of `pg_stat_replication`
//! and `pg_replication_slots` for the SQL layer; on a standby, the
//! walreceiver (walreceiver.c with the client side of libpq it needs),
//! which streams WAL from the primary into pg_wal.
//!
//! Dependencies point down: this crate uses the WAL engine (`backend`:
//! WAL files, timelines, the slot table, synchronous replication's
//! release) and the wire protocol (`protocol`: the replication command
//! parser and message framing). The engine keeps the replication state
//! that its commit path and checkpointer need (`backend::syncrep`,
//! `backend::slots`, `backend::throttle`) and never depends on this
//! crate; the worker library never links it.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod lagtracker;
pub mod logical;
pub mod roundstats;
pub mod views;
mod wakeup;
pub mod walreceiver;
pub mod walsender;
