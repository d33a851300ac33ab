//! Integration tests, group `clients`: what clients see of a server, the
//! friendly and the hostile ones. Each module was one test binary of its
//! own; run one with `cargo test --test clients MODULE::`.
//!
//! - `protocol`: the wire protocol with psql, pgbench and a raw client;
//! - `monitoring`, `observe`: the queries a DBA pastes, `postmaster
//!   status` and wait events;
//! - `hardening`, `hostile_client`, `fuzz_protocol`: what a hostile local
//!   user or client must not be able to do, regressions, bounded fuzzing;
//! - `pg_tools`: PostgreSQL 15's `pg_ctl` and `pg_controldata`;
//! - `pg_vs_walshm`: `scripts/pg-vs-walshm.sh` end to end.
//!
//! Tests run two at a time (one thread per core), each on its own
//! temporary directory, free port and process groups, as they did in
//! their own binaries. One test sets process-wide state:
//! `hardening::files_are_private_whatever_the_umask` sets the umask to
//! 022 (the usual one), which no other test depends on.

/// The shared harness, public so that a helper this group does not use is
/// not reported (tests/common/mod.rs tells how to find those no group uses).
#[path = "../common/mod.rs"]
pub mod common;

mod fuzz_protocol;
mod hardening;
mod hostile_client;
mod monitoring;
mod observe;
mod pg_tools;
mod pg_vs_walshm;
mod protocol;
