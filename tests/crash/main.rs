//! Integration tests, group `crash`: processes that die or are killed,
//! and the server's lifecycle around them. Each module was one test
//! binary of its own; run one with `cargo test --test crash MODULE::`.
//!
//! - `crash`: kill -9 of any server process, damaged WAL and every I/O
//!   fail point lose nothing acknowledged;
//! - `process_death`: a worker or connection backend killed (idle in a
//!   transaction, mid-copy, holding an LWLock) is cleaned up after or
//!   makes the server crash-restart;
//! - `torture`: `walbench torture` end to end, and the bugs it must catch;
//! - `stress`: the `lwlock` workload with 64 and 256 backends;
//! - `lifecycle`: start, fast shutdown, pid file, a second start refused;
//! - `bad_input`: bad command lines exit non-zero with a clear message.
//!
//! Tests run two at a time (one thread per core), each on its own
//! temporary directory and process groups, as they did in their own
//! binaries; the library workers they kill are `walshm-child` processes.

/// The shared harness, public so that a helper this group does not use is
/// not reported (tests/common/mod.rs tells how to find those no group uses).
#[path = "../common/mod.rs"]
pub mod common;

mod bad_input;
mod crash;
mod lifecycle;
mod process_death;
mod stress;
mod torture;
