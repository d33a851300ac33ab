//! Integration tests, group `replication`: WAL leaving the server, and
//! the operations built on it. Each module was one test binary of its
//! own; run one with `cargo test --test replication MODULE::`.
//!
//! - `replication`, `replication_throttle`: streaming to PostgreSQL 15's
//!   `pg_receivewal`, slots, synchronous replication, `max_replication_lag`;
//! - `basebackup`, `standby`: `pg_basebackup`, a standby and its promotion;
//! - `archive`, `restore`, `pitr`: the archiver, `init --from-wal`,
//!   `restore_command`, point-in-time recovery;
//! - `logical`: logical decoding with pg_recvlogical and psycopg2.
//!
//! Tests run two at a time (one thread per core), each on its own
//! temporary directory, free ports and process groups, as they did in
//! their own binaries.

/// The shared harness, public so that a helper this group does not use is
/// not reported (tests/common/mod.rs tells how to find those no group uses).
#[path = "../common/mod.rs"]
pub mod common;

mod archive;
mod basebackup;
mod logical;
mod pitr;
mod replication;
mod replication_throttle;
mod restore;
mod standby;
