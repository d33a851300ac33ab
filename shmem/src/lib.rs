//! walshm's shared memory: one unnamed segment (a memfd), how another
//! process attaches to it (`register`), and the primitives that live in it — spinlocks, per-process semaphores and latches, LWLocks with the
//! variable-wait API, proc slots — plus the settings every process shares.
//!
//! Invariants that hold for everything in this crate:
//! - shared structures are `#[repr(C)]`, made of atomics and plain data,
//!   never pointers: processes name each other by proc number;
//! - atomics come from the `sync` facade so that lock algorithms run under
//!   loom (`RUSTFLAGS="--cfg loom"`) over the very same structs;
//! - no function here blocks while holding a spinlock or a wait-list lock.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod admission;
pub mod clock;
pub mod code_enum;
pub mod crit;
#[cfg(not(loom))]
pub mod futex;
pub mod groupclear;
pub mod histogram;
#[cfg(not(loom))]
pub mod layout;
#[cfg(not(loom))]
pub mod locktest;
pub mod lwlock;
pub mod prevlink;
pub mod proc;
pub mod procarray;
pub mod readwake;
pub mod sema;
pub mod settings;
pub mod spin;
pub mod stats;
pub mod sync;
#[cfg(not(loom))]
pub mod sys;
pub mod variants;
pub mod waitevent;
#[cfg(not(loom))]
pub mod walpage;
pub mod walrcv;
pub mod walsnd;
pub mod xlogctl;

#[cfg(not(loom))]
pub mod register;
#[cfg(not(loom))]
pub mod segment;

pub use lwlock::{LWLock, LWLockMode, LockEnv, VarWait};
pub use proc::Proc;
#[cfg(not(loom))]
pub use segment::{AuxProc, NamedLock, Shmem, ShmemError};
pub use settings::Settings;
