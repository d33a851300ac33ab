//! The loom models of the lock algorithms, one module per algorithm, in
//! one binary that only a `--cfg loom` build fills (`scripts/test.sh`):
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p shmem --release --test loom [MODULE::]
//! ```
//!
//! Each model runs over the very `#[repr(C)]` structs the shared segment
//! holds, whose atomics the `shmem::sync` facade hands over to loom.
#![cfg(loom)]

mod admission;
mod flushwaiters;
mod groupclear;
mod lwlock;
mod prevlink;
mod reply;
