//! Shared harness of the integration tests, one module per concern:
//! temporary directories, commands run with a timeout, data directories,
//! a `postmaster start` child that is always cleaned up (its whole process
//! group is SIGKILLed on drop), `/proc` and shared-memory inspection, the
//! shutdown summary, WAL verification with the project's own reader,
//! `postmaster waldump` and PostgreSQL 15's `pg_waldump`, acknowledged
//! commits, `walbench torture`, attaching a library worker, and tests
//! written as a table of cases (`crate::test_cases!`). Everything
//! but `wire`, `receiver` and `script` is re-exported here, so a test says
//! `use crate::common::*;`.
//!
//! Each group of tests (`tests/GROUP/main.rs`) compiles this module once,
//! as a public module: each group uses only part of it, and public items
//! are not reported as dead code. A helper that no group uses is deleted;
//! it is the one reported in all five groups when the module is private:
//!
//! ```text
//! sed -i 's/^pub mod common;/mod common;/' tests/*/main.rs
//! for g in wal crash clients replication workers; do
//!     cargo rustc -q --profile test --test $g --message-format short
//! done 2>&1 | grep -o 'common/.*never.*' | sort | uniq -c | grep '^ *5 '
//! git checkout tests/*/main.rs
//! ```

mod acks;
mod attach;
mod cases;
mod datadir;
mod procfs;
mod redo;
mod rng;
mod run;
mod server;
mod serveruser;
mod shm;
mod summary;
mod tempdir;
mod torture;
mod walcheck;
mod waldump;

pub use acks::*;
pub use attach::*;
pub use datadir::*;
pub use procfs::*;
pub use redo::*;
pub use rng::*;
pub use run::*;
pub use server::*;
pub use serveruser::*;
pub use shm::*;
pub use summary::*;
pub use tempdir::*;
pub use torture::*;
pub use walcheck::*;
pub use waldump::*;

pub mod receiver;
pub mod script;
pub mod wire;
