//! Each seed's mechanism, counted: for every seed experiment, one short
//! `walbench reproduce` point per variant against real postmasters, then
//! the experiment's mechanism counter (its `per_tx` or ratio value over the
//! measured window) must differ between the new and the old algorithm in
//! the direction the seed describes. The throughput effects need many
//! cores; these counters show on a 2-core machine.
//!
//! Also checked: every run carries the DESIGN.md contract keys of
//! `per_tx`, and its wait-event shares lie in 0..1 and sum to at most 1.
//!
//! Without the postmaster binary the tests print a loud SKIPPED message and
//! pass (as the `reproduce` module beside it).

use shmem::stats::FlatTotals;
use std::collections::HashMap;
use walbench::observe::PER_TX_CONTRACT;
use walbench::reproduce::{self, Summary};

fn have_postmaster() -> bool {
    match walbench::postmaster_path() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("\n*** SKIPPED: {e}; build it with `cargo build --bins` ***\n");
            false
        }
    }
}

/// Runs `reproduce ARGS` (one repeat, a short window); returns each
/// variant's mechanism value (None: the counter had no divisor) and the
/// summaries.
fn mechanism(args: &str) -> ByVariant {
    let a: Vec<String> = format!("{args} --repeat 1 --seconds 0.6")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let o = reproduce::parse(&a).unwrap().unwrap();
    let counter = o.experiment.mechanism.counter;
    let summaries = reproduce::run(&o).unwrap_or_else(|e| panic!("{args}: {e}"));
    let mut by_variant = HashMap::new();
    for s in &summaries {
        let m = s.median();
        check_contract(s);
        let v = m.observed.value(counter, s.transactions_of(m));
        eprintln!("{args}: {} {counter} = {v:?}", s.variant);
        by_variant.insert(s.variant.clone(), v);
    }
    (by_variant, summaries)
}

/// One counter's value per variant (None: not observed), and the summaries.
type ByVariant = (HashMap<String, Option<f64>>, Vec<Summary>);

/// `mechanism(args)`, or None (the test skipped) without a postmaster.
fn mechanism_or_skip(args: &str) -> Option<ByVariant> {
    have_postmaster().then(|| mechanism(args))
}

/// The flat mechanism counters of `variant`'s median run.
fn flat(summaries: &[Summary], variant: &str) -> FlatTotals {
    let x = summaries.iter().find(|x| x.variant == variant).unwrap();
    x.median().observed.mechanism.flat
}

/// The per-run contract: `per_tx` keys, wait-event shares in 0..1.
fn check_contract(s: &Summary) {
    let m = s.median();
    assert!(m.transactions > 0, "{}: no transactions", s.variant);
    let per_tx = m.observed.per_tx(s.transactions_of(m));
    for k in PER_TX_CONTRACT {
        assert!(per_tx.iter().any(|(x, _)| x == k), "{}: no {k}", s.variant);
    }
    assert!(m.observed.wait_samples > 0, "{}: not sampled", s.variant);
    let total: f64 = m.observed.wait_events.iter().map(|(_, x)| x).sum();
    assert!(
        m.observed
            .wait_events
            .iter()
            .all(|(k, x)| (0.0..=1.0).contains(x) && k.contains(':')),
        "{:?}",
        m.observed.wait_events
    );
    assert!(total <= 1.0 + 1e-9, "shares sum to {total}");
}

fn value(v: &HashMap<String, Option<f64>>, variant: &str) -> f64 {
    v.get(variant)
        .unwrap_or_else(|| panic!("variant {variant} did not run"))
        .unwrap_or_else(|| panic!("{variant}: the mechanism counter had nothing to count"))
}

/// Seed 000: the locked insertingAt takes the insertion lock's wait-list
/// lock on every release (and every read by a flusher); the atomic one
/// only when a waiter must be woken at a page crossing.
#[test]
fn seed_000_waitlist_lock_acquisitions_drop_with_the_atomic_insertingat() {
    let Some((v, _)) = mechanism_or_skip("atomic-insertingat --clients 4 --sizes 16") else {
        return;
    };
    let (atomic, waitlist) = (value(&v, "atomic"), value(&v, "waitlist"));
    assert!(waitlist >= 0.9, "waitlist: {waitlist} per transaction");
    assert!(
        waitlist > 2.0 * atomic,
        "waitlist {waitlist} vs atomic {atomic}"
    );
}

/// Seed 002: with the legacy queue a waiter that got the lock on its
/// re-check walks the queue to find itself; the modern one walks nothing.
#[test]
fn seed_002_legacy_queue_scans_to_dequeue() {
    if !have_postmaster() {
        return;
    }
    // A dequeue-by-scan happens only when a queued waiter finds the lock
    // free again; a short point on a loaded machine may see none, so a
    // point with nothing to count is run again (at most three times).
    let mut v = mechanism("lwlock-queue --clients 16").0;
    for _ in 0..2 {
        if v.get("legacy").is_some_and(|x| x.is_some()) {
            break;
        }
        v = mechanism("lwlock-queue --clients 16").0;
    }
    let legacy = value(&v, "legacy");
    let modern = v["modern"].unwrap_or(0.0);
    assert_eq!(modern, 0.0, "the modern queue never scans");
    assert!(
        legacy > modern,
        "legacy scanned {legacy} entries per dequeue"
    );
}

/// Seed 003: with the walwriter's pre-initialization the backends
/// initialize (far) fewer WAL pages than without it.
#[test]
fn seed_003_preinit_moves_page_initialization_to_the_walwriter() {
    let args = "parallel-insert --clients 2 --sizes 16 --variant parallel,parallel-no-preinit";
    let Some((v, s)) = mechanism_or_skip(args) else {
        return;
    };
    let (on, off) = (value(&v, "parallel"), value(&v, "parallel-no-preinit"));
    assert!(off > 0.0, "without pre-init the backends initialize pages");
    assert!(on < off, "pre-init on: {on} pages per tx, off: {off}");
    assert!(flat(&s, "parallel").pages_init_walwriter > 0);
    assert_eq!(flat(&s, "parallel-no-preinit").pages_init_walwriter, 0);
}

/// Seed 004: every commit takes ProcArrayLock once when each backend
/// clears its own XID; with the group clear, a follower's XID is cleared
/// by a leader under the leader's one acquisition, so commits that were
/// followers took none. (On 2 cores few commits overlap: the ratio moves
/// in the fourth decimal, so the test counts the followers themselves.)
#[test]
fn seed_004_group_clear_takes_procarray_lock_less_than_once_per_commit() {
    let Some((v, s)) = mechanism_or_skip("group-xid-clear --clients 16") else {
        return;
    };
    let (group, exclusive) = (value(&v, "group"), value(&v, "exclusive"));
    assert!(
        (0.999..=1.001).contains(&exclusive),
        "exclusive: {exclusive} acquisitions per commit"
    );
    let (g, e) = (flat(&s, "group"), flat(&s, "exclusive"));
    assert_eq!((e.group_clear_groups, e.group_clear_members), (0, 0));
    let followers = g.group_clear_members - g.group_clear_groups;
    assert!(followers > 0, "no commit was cleared by a group leader");
    // Exact over the window but for the commits in flight at its edges.
    let edge = 2 * 16;
    assert!(
        g.procarray_lock_acquisitions + followers <= g.xid_clears + edge,
        "{g:?}"
    );
    assert!(group < 1.0, "group: {group} acquisitions per commit");
}
