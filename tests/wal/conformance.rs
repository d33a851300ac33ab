//! WAL conformance: short `emit:SIZE` runs (1 to 64 backends, payloads of 0
//! to 20000 bytes, 1 MB segments, fsync=off) and one run per start-up
//! variant must leave WAL that walshm's reader, `postmaster waldump` and
//! PostgreSQL 15's `pg_waldump` all read to a clean end, with exactly as many
//! logical messages as the backends reported inserting (the shutdown
//! summary), identical record lines in sampled windows, and every payload
//! intact. A sequence of runs with different sizes on one data directory
//! also checks that a restart continues the WAL exactly where it ended.

use crate::common::*;
use std::time::Duration;

const RUN: Duration = Duration::from_millis(600);

/// init (1 MB segments), one run of `workers` x emit:`size` with `sets`,
/// stop, verify.
fn conformance_run(tag: &str, workers: u32, size: usize, sets: &[&str]) {
    let tmp = TempDir::new(tag);
    let d = init_keep(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let w = workers.to_string();
    let wl = format!("emit:{size}");
    let mut args = unsynced_args(&w, &wl);
    for s in sets {
        args.push("--set");
        args.push(s);
    }
    let o = run_for(&d.path, tmp.path(), &args, RUN);
    let sum = parse_summary(&o.stdout);
    assert_eq!(sum.backends.len(), workers as usize);
    assert!(
        sum.total.records > 0,
        "no records inserted\n{}",
        o.describe()
    );
    assert!(
        sum.backends.iter().all(|b| b.records > 0),
        "a backend inserted nothing: {:?}",
        sum.backends
    );
    assert_cleaned_up(&d.path);
    let facts = verify_wal(&d, Some(sum.total.records), &[size]);
    assert!(
        facts.end_lsn > d.first_lsn + 3 * d.seg_size || facts.records < 20_000,
        "expected the run to cross several segments"
    );
    eprintln!(
        "{tag}: {workers} x emit:{size} {sets:?}: {} messages, end of WAL {}, pg_waldump {}",
        facts.logical_messages,
        walformat::format_lsn(facts.end_lsn),
        if facts.pg_checked {
            "agrees"
        } else {
            "SKIPPED"
        }
    );
}

crate::test_cases! { conformance_run:
    emit_0_bytes_4_backends => ("c0", 4, 0, &[]),
    emit_16_bytes_16_backends => ("c16", 16, 16, &[]),
    emit_100_bytes_64_backends => ("c100", 64, 100, &[]),
    emit_1024_bytes_1_backend => ("c1024", 1, 1024, &[]),
    emit_8000_bytes_4_backends => ("c8000", 4, 8000, &[]),
    emit_20000_bytes_16_backends => ("c20000", 16, 20000, &[]),
    /// Tiny buffers and big records: one record is larger than all buffers.
    variant_wal_buffers_4_big_records => ("v-buf4-big", 4, 20000, &["wal_buffers=4"]),
}

/// Several runs with different sizes on the same data directory: each
/// start must continue exactly at the end of the previous run's WAL.
#[test]
fn mixed_sizes_restart_continuation() {
    let tmp = TempDir::new("mixed");
    let d = init_keep(&tmp.join("data"), &["--wal-segment-size", "1"]);
    let runs: &[(u32, usize)] = &[(2, 16), (4, 8000), (3, 0), (2, 20000), (4, 100)];
    let mut expected = 0u64;
    let mut sizes = Vec::new();
    let mut last_end = d.first_lsn;
    for (i, (workers, size)) in runs.iter().enumerate() {
        let w = workers.to_string();
        let wl = format!("emit:{size}");
        let o = run_for(
            &d.path,
            tmp.path(),
            &["--workers", &w, "--workload", &wl, "--set", "fsync=off"],
            Duration::from_millis(300),
        );
        let sum = parse_summary(&o.stdout);
        assert!(
            sum.total.records > 0,
            "run {i}: no records\n{}",
            o.describe()
        );
        // The startup process must find the previous run's end of WAL.
        if i > 0 {
            let want = format!("end of WAL at {}", walformat::format_lsn(last_end));
            assert!(
                o.stderr.contains(&want),
                "run {i}: startup did not continue at the previous end ({want})\n{}",
                o.stderr
            );
        }
        assert_cleaned_up(&d.path);
        expected += sum.total.records;
        sizes.push(*size);
        last_end = own_waldump(&d.path).end_lsn;
    }
    let facts = verify_wal(&d, Some(expected), &sizes);
    assert_eq!(facts.end_lsn, last_end);
}

fn variant(tag: &str, set: &str) {
    conformance_run(tag, 8, 100, &[set]);
}

crate::test_cases! { variant:
    variant_inserting_at_waitlist => ("v-ia", "inserting_at=waitlist"),
    variant_insert_lock_layout_packed => ("v-packed", "insert_lock_layout=packed"),
    variant_lwlock_queue_legacy => ("v-legacy", "lwlock_queue=legacy"),
    variant_wal_insertion_single => ("v-single", "wal_insertion=single"),
    variant_wal_preinit_off => ("v-nopreinit", "wal_preinit=off"),
    variant_wal_reservation_atomic => ("v-atomic", "wal_reservation=atomic"),
    variant_wal_insert_locks_1 => ("v-locks1", "wal_insert_locks=1"),
    variant_wal_insert_locks_128 => ("v-locks128", "wal_insert_locks=128"),
    /// PostgreSQL's form, not the default: always sleep on a
    /// busy insertion lock.
    variant_insert_lock_wait_queue => ("v-queue", "wal_insert_lock_wait=queue"),
    /// Four 8 kB WAL buffers: backends must write pages out themselves.
    variant_wal_buffers_4 => ("v-buf4", "wal_buffers=4"),
}

/// The default `adaptive` with sixteen backends over two
/// insertion locks, where waits are frequent enough to engage scanning.
#[test]
fn variant_insert_lock_wait_adaptive_engaged() {
    conformance_run(
        "v-adaptive",
        16,
        100,
        &["wal_insert_lock_wait=adaptive", "wal_insert_locks=2"],
    );
}

/// Every alternative at once.
#[test]
fn variant_all_alternatives() {
    conformance_run(
        "v-all",
        8,
        1024,
        &[
            "inserting_at=waitlist",
            "insert_lock_layout=packed",
            "lwlock_queue=legacy",
            "wal_preinit=off",
            "wal_reservation=atomic",
            "wal_insert_locks=2",
        ],
    );
}
