#!/usr/bin/env bash
# The project's test command (README and .ci/run run exactly this).
# 1. every crate's unit and integration tests (real forked processes, real
#    files; conformance tests call PostgreSQL 15's pg_waldump);
# 2. the loom model tests of the lock algorithms (shmem/tests/loom/, one
#    binary), which need --cfg loom and so a build of their own (kept in
#    target/loom so the main build stays).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --locked
if [ -f shmem/tests/loom/main.rs ]; then
  RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}" \
    cargo test -p shmem --release --locked --test loom --target-dir target/loom
fi
