//! walformat's integration tests, one module per former test binary (run
//! one with `cargo test -p walformat --test format MODULE::`): round trips
//! of every record kind, typed errors for every corruption, property tests
//! of the writer and reader, timeline switches, a real PostgreSQL 15
//! segment, and PostgreSQL 15's `pg_waldump` reading what walformat writes.

#[path = "../common/mod.rs"]
mod common;

mod corruption;
mod fixture;
mod pg_waldump_conformance;
mod proptest_rw;
mod roundtrip;
mod timelines;
