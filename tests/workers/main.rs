//! Integration tests, group `workers`: processes attached to a server
//! through the worker library, and the readers of its WAL. Each module
//! was one test binary of its own; run one with `cargo test --test
//! workers MODULE::`.
//!
//! - `workers`: the library from Rust and C against real servers;
//! - `workers_supervised`: the registration socket and supervised workers;
//! - `dead_generation`: a worker waiting on a lock of an ended generation;
//! - `reader_crash`, `reader_slot`, `reader_wake`: library readers across
//!   a crash restart, with slots, and woken by the flush;
//! - `tail`: `walbench tail` end to end.
//!
//! Tests run two at a time (one thread per core), each on its own
//! temporary directory and process groups, as they did in their own
//! binaries; the worker processes they start are `walshm-child`.

/// The shared harness, public so that a helper this group does not use is
/// not reported (tests/common/mod.rs tells how to find those no group uses).
#[path = "../common/mod.rs"]
pub mod common;

mod dead_generation;
mod reader_crash;
mod reader_slot;
mod reader_wake;
mod tail;
mod workers;
mod workers_supervised;
