//! Multi-process lock stress through the postmaster on a small machine:
//! the `lwlock` workload with 64 and 256 backends under both LWLock queue
//! variants must keep mutual exclusion (the postmaster's check says OK, no
//! torn reads, exit 0), and `emit:16` with 64 backends under both
//! `inserting_at` variants must exit 0 with every inserted record on disk.
//! With `insert_concurrency_per_cpu = 1` (one token per CPU) and many
//! more `emit` backends than tokens, every backend gets its turns (the
//! admission queue is FIFO), SIGTERM ends the run promptly although most
//! backends sleep in the queue, and every record is on disk.

use crate::common::*;
use std::time::Duration;

const RUN: Duration = Duration::from_secs(2);

fn lwlock_stress(tag: &str, workers: u32, queue: &str) {
    let tmp = TempDir::new(tag);
    let d = init(&tmp.join("data"), &[]);
    let w = workers.to_string();
    let q = format!("lwlock_queue={queue}");
    let o = run_for(
        &d.path,
        tmp.path(),
        &["--workers", &w, "--workload", "lwlock", "--set", &q],
        RUN,
    );
    let sum = parse_summary(&o.stdout);
    assert_eq!(sum.backends.len(), workers as usize);
    assert_eq!(sum.lwlock_details.len(), 1, "{}", o.stdout);
    let c = &sum.lwlock_details[0];
    assert!(
        c.ok && c.torn == 0 && c.counter == c.exclusive,
        "{c:?}\n{}",
        o.describe()
    );
    assert!(c.exclusive > 0, "no exclusive acquisitions: {c:?}");
    let idle = sum.backends.iter().filter(|b| b.transactions == 0).count();
    assert!(
        idle < workers as usize,
        "no backend made progress\n{}",
        o.stdout
    );
    assert_cleaned_up(&d.path);
    eprintln!(
        "{tag}: {workers} backends, lwlock_queue={queue}: {} iterations, {} exclusive, {idle} backends without progress",
        sum.total.transactions, c.exclusive
    );
}

crate::test_cases! { lwlock_stress:
    lwlock_64_backends_modern_queue => ("lw64m", 64, "modern"),
    lwlock_64_backends_legacy_queue => ("lw64l", 64, "legacy"),
    lwlock_256_backends_modern_queue => ("lw256m", 256, "modern"),
    lwlock_256_backends_legacy_queue => ("lw256l", 256, "legacy"),
}

fn emit_stress(tag: &str, inserting_at: &str) {
    let tmp = TempDir::new(tag);
    let d = init_keep(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let ia = format!("inserting_at={inserting_at}");
    let o = run_for(
        &d.path,
        tmp.path(),
        &[
            "--workers",
            "64",
            "--workload",
            "emit:16",
            "--set",
            "fsync=off",
            "--set",
            &ia,
        ],
        RUN,
    );
    let sum = parse_summary(&o.stdout);
    assert!(sum.total.records > 0);
    assert_cleaned_up(&d.path);
    let facts = verify_wal(&d, Some(sum.total.records), &[16]);
    eprintln!(
        "{tag}: 64 x emit:16, inserting_at={inserting_at}: {} records",
        facts.logical_messages
    );
}

crate::test_cases! { emit_stress:
    emit_64_backends_inserting_at_atomic => ("ia-atomic", "atomic"),
    emit_64_backends_inserting_at_waitlist => ("ia-waitlist", "waitlist"),
}

#[test]
fn emit_with_more_backends_than_admission_tokens_gives_everyone_turns() {
    let tmp = TempDir::new("admission");
    let d = init_keep(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let workers = 24;
    let w = workers.to_string();
    let o = run_for(
        &d.path,
        tmp.path(),
        &[
            "--workers",
            &w,
            "--workload",
            "emit:64",
            "--set",
            "fsync=off",
            "--set",
            "insert_concurrency_per_cpu=1",
            "--set",
            "insert_concurrency_turn=5ms",
        ],
        RUN,
    );
    let sum = parse_summary(&o.stdout);
    assert_eq!(sum.backends.len(), workers);
    let starved = sum.backends.iter().filter(|b| b.records == 0).count();
    assert_eq!(
        starved, 0,
        "backends that never got a turn in {RUN:?}\n{}",
        o.stdout
    );
    assert_cleaned_up(&d.path);
    let facts = verify_wal(&d, Some(sum.total.records), &[64]);
    eprintln!(
        "admission: {workers} x emit:64, one token per CPU: {} records, fewest per backend {}",
        facts.logical_messages,
        sum.backends.iter().map(|b| b.records).min().unwrap_or(0)
    );
}
