//! The loom models of the lock algorithms, one module per algorithm, in
//! one binary that only a `--cfg loom` build fills (`scripts/test.sh`):
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p shmem --release --test loom [MODULE::]
//! ```
//!
//! Each model runs over the very `#[repr(C)]` structs the shared segment
//! holds, whose atomics the `shmem::sync` facade hands over to loom.
//! The helpers below are the harness every module shares: a model run
//! with a preemption bound, and a thread working on its own handle to the
//! model's shared world.
#![cfg(loom)]

use loom::sync::Arc;

mod admission;
/// `test_cases!`, the root integration tests' table of cases.
#[path = "../../../tests/common/cases.rs"]
mod cases;
mod flushwaiters;
mod groupclear;
mod lwlock;
mod prevlink;
mod reply;

/// Runs `f` under loom, every execution with at most `preemptions`
/// preemptions (a smaller bound keeps a model with many threads tractable).
fn model(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(f);
}

/// A loom thread running `f` on its own clone of `shared`.
fn spawn_on<T, R>(
    shared: &Arc<T>,
    f: impl FnOnce(&T) -> R + Send + 'static,
) -> loom::thread::JoinHandle<R>
where
    T: Send + Sync + 'static,
    R: Send + 'static,
{
    let shared = shared.clone();
    loom::thread::spawn(move || f(&shared))
}
