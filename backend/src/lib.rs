//! walshm backends: the processes that insert WAL, and the code every
//! WAL-touching process shares (insertion, buffer management, write and
//! flush), plus the child-process plumbing (`process`).
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod checkpointer;
pub mod client_poll;
pub mod control;
pub mod procarray;
pub mod process;
pub mod session;
pub mod startup;
pub mod walfile;
pub mod workload;
pub mod xact;
pub mod xlog;
