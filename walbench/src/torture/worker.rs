//! The worker-library victim: one supervised worker (`postmaster start
//! --worker 'torture=WALBENCH torture-worker ARGS'`) that commits
//! acknowledged transactions through the library (`walshm`), so that a
//! torture run also checks the library's commit path across crashes.
//!
//! The worker program is walbench itself in its `torture-worker` mode,
//! which runs the library's example producer (worker/examples/producer.rs,
//! compiled in here) with `--tx --ack`: it needs no other binary to be
//! built or found. Its acks are `ack LSN` lines on the stdout it inherits
//! from the postmaster, one write each, read and checked exactly as the
//! backends' acks. Its `comm` is walbench's own program name, which the
//! victim row names; as every victim it is killed with SIGKILL (a crash
//! restart, after which the postmaster starts it again).

/// The example producer, run by [`main`].
#[allow(dead_code)]
#[path = "../../../worker/examples/producer.rs"]
mod producer_example;

use std::path::Path;

/// walbench's mode that runs the producer.
pub const MODE: &str = "torture-worker";

/// The supervised worker's name (`--worker NAME=...`).
const NAME: &str = "torture";

/// The `comm` of the worker process: walbench's program name.
pub const COMM: &str = "walbench";

/// `walbench torture-worker ARGS`: the producer's exit code.
pub fn main(args: &[String]) -> i32 {
    producer_example::run_with(args.to_vec())
}

/// The `--worker` value that runs `walbench` as the library worker,
/// committing one `size`-byte message per acknowledged transaction.
pub fn worker_arg(walbench: &Path, size: usize) -> String {
    format!(
        "{NAME}={} {MODE} --tx --ack --size {size} --prefix torture",
        walbench.display()
    )
}
