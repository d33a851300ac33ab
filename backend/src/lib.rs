//! walshm's WAL engine: the code every WAL-touching process shares (the
//! worker library included) and the bodies of the auxiliary processes the
//! postmaster forks. It depends only on `shmem`, `walformat` and
//! `pgerror`: never on the wire protocol, SQL or SCRAM (`protocol`), which
//! sit above it with the processes that speak them (`connection/`,
//! `replication/`).
//!
//! Layout:
//! - `procs/`: one file per process body (startup, checkpointer, archiver,
//!   worker); the walwriter is the top-level `walwriter` crate;
//! - library parts borrowed by those bodies through their per-process
//!   [`context::ProcContext`]: `xlog` (WAL insertion, buffers, write and
//!   flush), `xact` (transactions), `procarray` (XIDs and snapshots),
//!   `api` (the one insertion API: [`api::Session`], used by the built-in
//!   workloads and the `worker/` library), `control` (the control file),
//!   `walfile` (the I/O seam, fail points) and `powerloss` (its power-loss
//!   journal), `walread` (reading WAL records incrementally from the WAL
//!   buffers and the files), `restore`, `timeline` and `recovery_target`
//!   (archive recovery, timelines, point-in-time recovery's stop rules);
//! - `process` (fork plumbing: signals, names, logging) and `client_poll`
//!   (a client socket's polling reads, which the engine's waits use);
//! - replication state the commit path and the checkpointer need:
//!   `syncrep` (synchronous replication waits and release), `slots`
//!   (replication slots), `throttle` (`max_replication_lag`), and
//!   `reorder` (logical decoding's reorder buffer, which the library's
//!   readers and the logical walsender share).
//!
//! `backend::{startup, checkpointer, workload}` are re-exports of the
//! `procs` modules.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod abandoned;
pub mod admission;
pub mod api;
pub mod archive;
pub mod client_poll;
pub mod context;
pub mod control;
pub mod powerloss;
pub mod procarray;
pub mod process;
pub mod procs;
pub mod recovery_target;
pub mod reorder;
pub mod reply;
pub mod restore;
pub mod slots;
pub mod stoppoint;
pub mod syncrep;
pub mod throttle;
pub mod timeline;
pub mod walfile;
pub mod walread;
pub mod xact;
pub mod xlog;

pub use procs::worker as workload;
pub use procs::{archiver, checkpointer, standby, startup};
