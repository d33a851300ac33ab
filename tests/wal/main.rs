//! Integration tests, group `wal`: the WAL a server writes and how its
//! commits become durable. Each module was one test binary of its own;
//! run one with `cargo test --test wal MODULE::`.
//!
//! - `conformance`: short runs whose WAL walshm's reader, `postmaster
//!   waldump` and PostgreSQL 15's `pg_waldump` read to the same clean end;
//! - `damage`: WAL damaged before its end is never taken for a torn tail;
//! - `transactions`: XIDs, snapshots and durable commit under load;
//! - `group_commit`, `commit_reply`, `sync_method`: each variant of the
//!   commit path keeps the crash invariants.
//!
//! Tests run two at a time (one thread per core), each on its own
//! temporary directory, free port and process groups, as they did in
//! their own binaries.

/// The shared harness, public so that a helper this group does not use is
/// not reported (tests/common/mod.rs tells how to find those no group uses).
#[path = "../common/mod.rs"]
pub mod common;

mod commit_reply;
mod conformance;
mod damage;
mod group_commit;
mod sync_method;
mod transactions;
