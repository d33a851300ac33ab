//! Shared harness for the integration tests, one module per concern:
//! temporary directories, commands run with a timeout, data directories,
//! a `postmaster start` child that is always cleaned up (its whole process
//! group is SIGKILLed on drop), `/proc` and shared-memory inspection, the
//! shutdown summary, WAL verification with the project's own reader,
//! `postmaster waldump` and PostgreSQL 15's `pg_waldump`, acknowledged
//! commits, `walbench torture`, and attaching a library worker. Everything but `wire` and `receiver` is
//! re-exported here, so a test says `use common::*;`.
//!
//! Dead code: every file in tests/ is a crate of its own that compiles
//! this whole module and uses only part of it, so an item another test
//! uses is dead in this one. `dead_code` is therefore allowed on the module
//! declarations below, and only there (with `unused_imports` on the
//! re-exports). A helper that no test uses at all is deleted instead: it
//! is reported dead in every test crate (counted once per file in tests/)
//! when the allows are overridden:
//!
//! ```text
//! for t in tests/*.rs; do
//!     cargo rustc -q --profile check --test "$(basename "$t" .rs)" \
//!         --message-format short -- --force-warn dead_code
//! done 2>&1 | grep '^tests/common/' | sort | uniq -c | sort -rn
//! ```

/// Declares each concern's module, with `dead_code` allowed (see above),
/// and re-exports its items.
macro_rules! helper_modules {
    ($($module:ident),* $(,)?) => {
        $(
            #[allow(dead_code)]
            mod $module;
            #[allow(unused_imports)]
            pub use $module::*;
        )*
    };
}

helper_modules!(
    acks, attach, datadir, procfs, redo, rng, run, server, serveruser, shm, summary, tempdir,
    torture, walcheck, waldump,
);

#[allow(dead_code)]
pub mod receiver;
#[allow(dead_code)]
pub mod script;
#[allow(dead_code)]
pub mod wire;
