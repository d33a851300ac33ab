//! The process bodies, one file per process, found by its name
//! (PostgreSQL keeps them together in src/backend/postmaster/):
//!
//! | process | file | entry point |
//! | --- | --- | --- |
//! | startup | `startup/` | [`startup::run`] (recovery, then exit) |
//! | checkpointer | `checkpointer.rs` | [`checkpointer::run`] |
//! | worker backend | `worker.rs` | [`worker::run`] (the `--workload` loops) |
//! | archiver | `archiver.rs` | [`archiver::run`] (`archive_command`) |
//! | startup, as a standby | `standby.rs` | [`standby::follow`] (called by the startup process) |
//!
//! The walwriter's body is the top-level `walwriter` crate; the bodies
//! that speak the wire protocol are above this crate: the connection
//! backend in `connection/`, the walsender in `replication/`. Each body
//! builds its [`crate::context::ProcContext`] and lends it to the library
//! parts beside this folder (`xlog`, `xact`, `procarray`, `control`,
//! `walfile`); the postmaster forks and calls these entry points.

pub mod archiver;
pub mod checkpointer;
pub mod standby;
pub mod startup;
pub mod worker;
