//! The worker-library victim (`--worker-cmd CMD`): one supervised worker
//! (`postmaster start --worker 'torture=CMD'`) that commits acknowledged
//! transactions through the library, so that a torture run also checks
//! the library's commit path across crashes.
//!
//! CMD is the user's program, e.g. the library's example producer
//! (`cargo build --release -p walshm-worker --example producer`, then
//! `--worker-cmd 'target/release/examples/producer --tx --ack'`). It must
//! print `ack LSN` (the start of each durable COMMIT record) on the stdout
//! it inherits from the postmaster, one write per line: those acks are
//! read and checked exactly as the backends' acks. The victim row
//! "worker" finds it by its `comm` (the program's file name, cut to the
//! kernel's 15 bytes) and SIGKILLs it: the server cleans up after it (or
//! crash-restarts if it died holding shared state, `backend::abandoned`),
//! and the postmaster starts it again. walbench does not link the
//! library itself (two builds of it in one target directory would collide
//! on its unhashed cdylib file name).

use std::path::Path;

/// The supervised worker's name (`--worker NAME=...`).
const NAME: &str = "torture";

/// The kernel's limit on `comm` (TASK_COMM_LEN - 1).
const COMM_LEN: usize = 15;

/// The `--worker` value that runs `cmd`.
pub fn worker_arg(cmd: &str) -> String {
    format!("{NAME}={cmd}")
}

/// The `comm` the worker's process will have: its program's file name,
/// cut to 15 bytes. None if `cmd` names no program.
pub fn comm_of(cmd: &str) -> Option<String> {
    let program = cmd.split_whitespace().next()?;
    let name = Path::new(program).file_name()?.to_str()?;
    let mut end = name.len().min(COMM_LEN);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    Some(name[..end].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comm_is_the_program_name_cut_to_15_bytes() {
        assert_eq!(
            comm_of("/a/b/producer --tx --ack").as_deref(),
            Some("producer")
        );
        assert_eq!(
            comm_of("target/debug/deps/torture-0123456789abcdef child").as_deref(),
            Some("torture-0123456")
        );
        assert_eq!(comm_of("   "), None);
        assert_eq!(worker_arg("p --tx"), "torture=p --tx");
    }
}
