//! walbench: drives real postmasters and reports throughput per variant,
//! workload and client count.
//!
//! For each point (variant x client count) it initializes a fresh data
//! directory (or reuses `-D DIR`), starts `postmaster start --workers N
//! --workload KIND` with the variant's settings, waits until it is ready,
//! attaches the shared memory segment read-only in spirit (it only loads
//! counters) and samples the backends' transaction, record and byte counters
//! at the start and end of a measured window, then stops the server with a
//! fast shutdown and checks it exited cleanly. Throughput is the counter
//! delta over the window, so start-up and shutdown never count.
//!
//! Variants are compared as ratios to `modern` measured in the same run, one
//! client count at a time, because the machines this runs on are small and
//! noisy.
//!
//! `walbench worker-vs-builtin --worker-cmd CMD` (module `workercmp`)
//! compares a worker program using the library with the built-in
//! workloads.
//!
//! `walbench torture -D DIR` (module `torture`) kills server processes or
//! simulates power losses in a loop and checks that no acknowledged commit
//! was lost.
//!
//! `walbench reproduce NAME` (module `reproduce`) reruns one seed's table
//! with its own grid, old and new algorithm side by side, and writes JSON,
//! CSV and an SVG chart. The plain mode's JSON keys are a contract.
//!
//! Where things live: the plain mode in `sweep`, `walbench reproduce` in
//! `reproduce` (its experiments in `experiments`), the variants both compare
//! as typed settings in `variants`; both modes parse their command line
//! through `cli` and write every table, JSON, CSV and chart through
//! `report`; `point` measures one point against a real server (and
//! `observe` what its backends waited on and did), `chart`
//! draws, `machine` and `procstat` read the machine and its processes.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod chart;
pub mod cli;
pub mod command;
pub mod experiments;
pub mod machine;
pub mod observe;
pub mod point;
pub mod procstat;
pub mod report;
pub mod reproduce;
pub mod sweep;
pub mod tail;
pub mod torture;
pub mod variants;
pub mod workercmp;

use std::path::{Path, PathBuf};
pub use sweep::{json, run_all, table, Options, Run};
pub use variants::VARIANTS;

pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    main_with(&args)
}

/// `main` with explicit arguments (without the program name): 0 ok, 1 a
/// failed run, 2 a usage error.
pub fn main_with(args: &[String]) -> i32 {
    cli::main_with(args)
}

/// The `postmaster` binary next to this executable (or, for a test
/// executable in `target/<profile>/deps`, in `target/<profile>`).
pub fn postmaster_path() -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let p = me.with_file_name("postmaster");
    if p.exists() {
        return Ok(p);
    }
    let dir = me.parent();
    if let Some(up) = dir
        .filter(|d| d.file_name().is_some_and(|n| n == "deps"))
        .and_then(Path::parent)
        .map(|d| d.join("postmaster"))
        .filter(|q| q.exists())
    {
        return Ok(up);
    }
    Err(format!(
        "postmaster binary not found next to walbench ({})",
        p.display()
    ))
}
