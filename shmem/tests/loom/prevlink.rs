//! Loom models of the lock-free reservation's `xl_prev` hand-off
//! (`shmem::prevlink`), over the same `PrevLink` table type the segment
//! holds. Each model thread is one backend holding its own insertion lock:
//! it reserves `[start, end)` with a fetch-add on a shared position (as
//! `CurrBytePos`) and hands off through the table. Loom explores every
//! interleaving of the fetch-adds, the claims, the publications and the
//! takes (including a reserver descheduled between its fetch-add and its
//! publish), and checks:
//! - every record's `xl_prev` is the start of the record that ends where
//!   it starts (the first one gets the seeded record from recovery);
//! - the table never holds more than `max_in_flight` entries: the tables are
//!   exactly that small (rounded to a power of two), and a publisher that
//!   finds them full panics, which loom reports;
//! - afterwards exactly one entry is left, the newest record's, with no
//!   slot left busy;
//! - nobody waits forever (loom reports a deadlock otherwise).
//!
//! Record sizes are multiples of 8 x the table size, so every entry has the
//! same home slot and the probing (an entry found past slots freed since it
//! was published) is exercised on every run.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p shmem --release --test loom prevlink::`.
#![cfg(loom)]

use crate::{model, spawn_on};
use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use shmem::prevlink::{self, PrevLink, LINK_BUSY};
use shmem::sync::Ordering;

/// Start and end of the record recovery found last (seeded).
const SEED_START: u64 = 8;

struct World {
    /// The insert position (`CurrBytePos`), usable bytes.
    pos: AtomicU64,
    links: Vec<PrevLink>,
}

/// A table sized for `reservers` concurrent reservations (tight: the bound
/// rounded up to a power of two), seeded as recovery leaves it.
fn world(reservers: u32) -> (Arc<World>, u64) {
    let slots = prevlink::max_in_flight(reservers).next_power_of_two() as usize;
    let seed_end = 8 * slots as u64;
    let w = World {
        pos: AtomicU64::new(seed_end),
        links: (0..slots).map(|_| PrevLink::new()).collect(),
    };
    prevlink::seed(&w.links, SEED_START, seed_end);
    (Arc::new(w), seed_end)
}

/// One reservation of `size` bytes: (start, end, xl_prev).
fn reserve(w: &World, size: u64) -> (u64, u64, u64) {
    // AcqRel as in backend::xlog's reserve.
    let start = w.pos.fetch_add(size, Ordering::AcqRel);
    let end = start + size;
    (start, end, prevlink::hand_off(&w.links, start, end))
}

/// Checks the chain of records and what is left in the table.
fn check(w: &World, seed_end: u64, mut records: Vec<(u64, u64, u64)>) {
    records.sort();
    let (mut expect_start, mut expect_prev) = (seed_end, SEED_START);
    for (start, end, prev) in &records {
        assert_eq!(*start, expect_start, "reservations tile the position space");
        assert_eq!(*prev, expect_prev, "xl_prev of the record at {start}");
        (expect_start, expect_prev) = (*end, *start);
    }
    let ends: Vec<u64> = w
        .links
        .iter()
        .map(|s| s.end.load(Ordering::Relaxed))
        .filter(|&e| e != 0)
        .collect();
    assert_eq!(
        ends,
        vec![expect_start],
        "only the newest record's entry is left"
    );
    assert!(!ends.contains(&LINK_BUSY));
    assert_eq!(prevlink::take(&w.links, expect_start), expect_prev);
}

/// `sizes[i]`: the records thread `i` reserves in turn (thread 0 is the
/// model's main thread).
fn run(sizes: &'static [&'static [u64]]) {
    model(2, move || {
        let (w, seed_end) = world(sizes.len() as u32);
        let unit = seed_end; // 8 x slots: every end has home slot 0
        let handles: Vec<_> = sizes[1..]
            .iter()
            .map(|mine| {
                spawn_on(&w, move |w| {
                    mine.iter()
                        .map(|s| reserve(w, s * unit))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut records: Vec<_> = sizes[0].iter().map(|s| reserve(&w, s * unit)).collect();
        for h in handles {
            records.extend(h.join().unwrap());
        }
        check(&w, seed_end, records);
    });
}

#[test]
fn two_reservers_hand_off_through_a_colliding_table() {
    run(&[&[1], &[2]]);
}

#[test]
fn three_reservers_fill_a_table_sized_exactly_for_them() {
    run(&[&[1], &[1], &[3]]);
}

#[test]
fn a_reserver_reuses_slots_while_another_is_in_flight() {
    run(&[&[1, 2], &[1]]);
}
