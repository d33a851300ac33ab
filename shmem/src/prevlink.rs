//! The `xl_prev` hand-off of the lock-free reservation
//! (`wal_reservation = atomic`).
//!
//! With the spinlock reservation, `PrevBytePos` is read and replaced under
//! the same spinlock that advances `CurrBytePos`, so every record learns the
//! start of its predecessor for free. The lock-free reservation advances
//! `CurrBytePos` with one fetch-add and has no such place: two reservers
//! learn their own `[start, end)` at once, in either order, and neither knows
//! the other. So the table here hands the predecessor's start over:
//!
//! 1. after its fetch-add returned `[start, end)`, a reserver *publishes*
//!    "the record ending at `end` started at `start`" in a free slot
//!    (open addressing, home slot `end / 8`, linear probing);
//! 2. it then *takes* the entry whose `end` equals its own `start`, spinning
//!    until its predecessor has published it; that entry's `start` is its
//!    `xl_prev`. Taking frees the slot.
//!
//! After recovery the startup process *seeds* the table with the last valid
//! record, which the first reserver takes.
//!
//! Slot states (`PrevLink::end`): `0` free; [`LINK_BUSY`] claimed by a
//! publisher that has not yet stored `start`; anything else: published,
//! waiting for the reserver whose record starts there. Usable-byte positions
//! of record ends are never 0 (the first record of a cluster is written by
//! `init`) and never `u64::MAX`.
//!
//! Invariant (what sizes the table): at most `n_insert_locks + 1` entries
//! are in the table at once. An entry published by reservation `k` stays
//! until reservation `k + 1` (the one starting at its end; reservations tile
//! the position space, so there is exactly one) takes it. That consumer
//! either has not reserved yet, which holds only for the newest reservation
//! (its end is `CurrBytePos`): one entry; or it is between its fetch-add and
//! its take, which it does holding a WAL insertion lock (`Xlog::insert`
//! reserves inside the lock; a process does one reservation at a time), and
//! insertion locks are exclusive: at most `n_insert_locks` entries. The table
//! has [`slots_for`] = 4x that bound (rounded up to a power of two), so
//! probes stay short and a free slot is always found in one pass.
//!
//! A table that is too small (the invariant broken, say by a reservation
//! made outside an insertion lock) is detected, never silently wrong: a
//! publisher that finds no free slot in a whole pass retries (a pass can see
//! every slot taken only if it was descheduled while entries turned over),
//! and after [`FULL_PASS_LIMIT`] failed passes in a row it panics naming the
//! bound, which makes the postmaster restart everything.
//!
//! Races it defends against:
//! - a consumer that reads a slot while its publisher is half-way: the
//!   publisher claims the slot with a CAS to `LINK_BUSY`, stores `start`,
//!   then stores `end` with Release; the consumer matches on `end` with
//!   Acquire, so it sees the `start` that belongs to it;
//! - a publisher that reuses a slot the previous consumer is still reading:
//!   the consumer frees it (store 0) with Release after reading `start`, and
//!   the publisher's claiming CAS is Acquire, so the old read happens first;
//! - an entry found by probing from its home after the slots before it were
//!   freed: the consumer probes the whole table, not up to the first free
//!   slot;
//! - a predecessor descheduled between its fetch-add and its publish: the
//!   consumer spins, yielding its CPU every 64 rounds (a sleep would idle
//!   the CPU the predecessor needs), and panics after about a minute
//!   ([`TAKE_WAIT_LIMIT`]), when the predecessor cannot be merely slow.
//!
//! Model-checked by `tests/loom/prevlink.rs`.

use crate::sync::{spin_hint, yield_now, AtomicU64, Ordering};

/// One slot: the record that ends at `end` started at `start`
/// (usable-byte positions).
#[repr(C)]
pub struct PrevLink {
    pub end: AtomicU64,
    pub start: AtomicU64,
}

impl PrevLink {
    /// A free slot (all-zero, as in a fresh segment).
    pub fn new() -> PrevLink {
        PrevLink {
            end: AtomicU64::new(0),
            start: AtomicU64::new(0),
        }
    }
}

impl Default for PrevLink {
    fn default() -> Self {
        PrevLink::new()
    }
}

/// `PrevLink::end` of a slot whose publisher is filling it in.
pub const LINK_BUSY: u64 = u64::MAX;
/// `PrevLink::end` of a free slot.
const LINK_FREE: u64 = 0;

/// Consecutive full passes without a free slot before a publisher reports
/// the table too small (a fraction of a second of yielding). Under loom a
/// few passes: its models run one reservation per thread, where a pass
/// cannot miss a free slot, so any failed pass there is a real overflow.
#[cfg(not(loom))]
pub const FULL_PASS_LIMIT: u64 = 1 << 20;
#[cfg(loom)]
pub const FULL_PASS_LIMIT: u64 = 3;
/// Rounds a consumer waits for its predecessor's entry (about a minute of
/// yielding: the predecessor cannot take that long to run two instructions
/// unless something is broken).
pub const TAKE_WAIT_LIMIT: u64 = 1 << 32;

/// Entries that can be in the table at once with `n_insert_locks` WAL
/// insertion locks (the invariant above).
pub fn max_in_flight(n_insert_locks: u32) -> u32 {
    n_insert_locks + 1
}

/// Slots to allocate for `n_insert_locks` insertion locks: 4x the bound,
/// a power of two (so the home slot is a mask).
pub fn slots_for(n_insert_locks: u32) -> u32 {
    (4 * max_in_flight(n_insert_locks)).next_power_of_two()
}

/// Every slot once, from the home slot of an entry keyed by `pos`
/// (positions are MAXALIGNed; the table's length is a power of two, or 0).
fn probe(links: &[PrevLink], pos: u64) -> impl Iterator<Item = &PrevLink> {
    let mask = links.len().wrapping_sub(1);
    let home = (pos / 8) as usize & mask;
    (0..links.len()).map(move |k| &links[(home + k) & mask])
}

/// One round of waiting: spin, and every 64th round give the CPU away.
fn back_off(round: u64) {
    if round.is_multiple_of(64) {
        yield_now();
    } else {
        spin_hint();
    }
}

/// Records "the record ending at `end` started at `start`" for the
/// reserver whose record starts at `end`. Panics if the table stays full
/// (more entries in flight than it was sized for).
pub fn publish(links: &[PrevLink], start: u64, end: u64) {
    debug_assert!(end != LINK_FREE && end != LINK_BUSY && start < end);
    let mut failed_passes: u64 = 0;
    loop {
        if let Some(slot) = claim_free_slot(links, end) {
            slot.start.store(start, Ordering::Relaxed);
            // Release pairs with the Acquire load in `take`: whoever
            // matches this `end` sees the `start` stored above.
            slot.end.store(end, Ordering::Release);
            return;
        }
        failed_passes += 1;
        if failed_passes > FULL_PASS_LIMIT {
            panic!(
                "WAL prev-link table full: all {} slots taken while publishing the record ending at usable byte {end}; it is sized for 4x the entries that can be in flight (one per WAL insertion lock, plus one)",
                links.len()
            );
        }
        back_off(failed_passes);
    }
}

/// One pass over the table from `end`'s home slot: claims (marks busy) and
/// returns the first free slot, None if every slot was taken.
fn claim_free_slot(links: &[PrevLink], end: u64) -> Option<&PrevLink> {
    probe(links, end).find(|slot| {
        // Acquire pairs with the Release store that freed the slot in
        // `take`: the previous consumer's read of `start` is done.
        slot.end
            .compare_exchange(LINK_FREE, LINK_BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    })
}

/// Finds and removes the entry published by our predecessor (whose record
/// ends where ours starts) and returns its start; spins until it is there.
pub fn take(links: &[PrevLink], start: u64) -> u64 {
    let mut round: u64 = 0;
    loop {
        if let Some(prev) = take_once(links, start) {
            return prev;
        }
        // The predecessor publishes right after its fetch-add, so this only
        // waits when it was descheduled in between.
        round += 1;
        if round > TAKE_WAIT_LIMIT {
            panic!("stuck WAL prev-link hand-off: no record ends at usable byte {start}");
        }
        back_off(round);
    }
}

/// One pass over the whole table (an entry sits at the first slot that was
/// free from its home when it was published; slots before it may have been
/// freed since): takes the entry ending at `start`, if there.
fn take_once(links: &[PrevLink], start: u64) -> Option<u64> {
    probe(links, start)
        // Acquire pairs with the Release store of `end` in `publish`.
        .find(|slot| slot.end.load(Ordering::Acquire) == start)
        .map(|slot| {
            let prev = slot.start.load(Ordering::Relaxed);
            // Release: our read of `start` happens before the slot is
            // reused (pairs with the Acquire CAS in `claim_free_slot`).
            slot.end.store(LINK_FREE, Ordering::Release);
            prev
        })
}

/// The whole hand-off of one reservation `[start, end)`: publishes it for
/// the successor, then takes the predecessor's start (its `xl_prev`).
pub fn hand_off(links: &[PrevLink], start: u64, end: u64) -> u64 {
    publish(links, start, end);
    take(links, start)
}

/// After recovery: the last valid record `[last_start, end)` is the
/// predecessor of the first record to be inserted. Does nothing when the
/// table is not allocated (`wal_reservation = spinlock`).
pub fn seed(links: &[PrevLink], last_start: u64, end: u64) {
    if !links.is_empty() {
        publish(links, last_start, end);
    }
}

/// Entries in the table now (tests and diagnostics; racy while reservers
/// run).
pub fn occupied(links: &[PrevLink]) -> usize {
    links
        .iter()
        .filter(|s| s.end.load(Ordering::Relaxed) != LINK_FREE)
        .count()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64 as StdAtomicU64;
    use std::sync::Arc;

    fn table(n: usize) -> Vec<PrevLink> {
        (0..n).map(|_| PrevLink::new()).collect()
    }

    #[test]
    fn sizing_follows_the_in_flight_bound() {
        assert_eq!(max_in_flight(8), 9);
        assert_eq!(slots_for(8), 64);
        assert_eq!(slots_for(1), 8);
        for locks in 1..=128 {
            let slots = slots_for(locks);
            assert!(slots.is_power_of_two());
            assert!(slots >= 4 * max_in_flight(locks), "{locks}: {slots}");
            assert!(slots < 8 * max_in_flight(locks), "{locks}: {slots}");
        }
    }

    #[test]
    fn entries_colliding_on_one_home_are_found_after_earlier_ones_left() {
        let t = table(8);
        // Ends 8, 72 and 136 all have home slot 1.
        publish(&t, 0, 8);
        publish(&t, 8, 72);
        publish(&t, 72, 136);
        assert_eq!(occupied(&t), 3);
        assert_eq!(take(&t, 8), 0);
        // 136's entry sits two slots past its (now free) home.
        assert_eq!(take(&t, 72), 8);
        assert_eq!(take(&t, 136), 72);
        assert_eq!(occupied(&t), 0);
    }

    #[test]
    fn seed_is_a_no_op_without_a_table_and_taken_first_with_one() {
        seed(&[], 8, 16);
        let t = table(8);
        seed(&t, 8, 16);
        assert_eq!(hand_off(&t, 16, 40), 8);
        assert_eq!(occupied(&t), 1, "only the newest record's entry remains");
    }

    #[test]
    fn a_table_too_small_for_its_entries_is_reported() {
        let t = table(2);
        publish(&t, 0, 8);
        publish(&t, 8, 16);
        let full = std::panic::catch_unwind(|| publish(&t, 16, 24));
        assert!(full.is_err(), "publishing into a full table must fail");
        // The failed publish left no slot half-claimed.
        assert_eq!(take(&t, 8), 0);
        assert_eq!(take(&t, 16), 8);
        assert_eq!(occupied(&t), 0);
    }

    /// Threads reserve by fetch-add and hand off over a table sized for
    /// them: every record's prev is the start of the record that ends
    /// where it starts.
    #[test]
    fn concurrent_reservers_each_get_their_predecessor() {
        const THREADS: u32 = 4;
        const PER_THREAD: usize = 20_000;
        let links: Arc<Vec<PrevLink>> = Arc::new(table(slots_for(THREADS) as usize));
        let pos = Arc::new(StdAtomicU64::new(64));
        seed(&links, 24, 64);
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (links, pos) = (links.clone(), pos.clone());
                std::thread::spawn(move || {
                    let size = 8 * (t as u64 + 1);
                    (0..PER_THREAD)
                        .map(|_| {
                            let start = pos.fetch_add(size, std::sync::atomic::Ordering::AcqRel);
                            (start, start + size, hand_off(&links, start, start + size))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut records: Vec<(u64, u64, u64)> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        records.sort();
        let mut expected_prev = 24;
        let mut expected_start = 64;
        for (start, end, prev) in &records {
            assert_eq!(*start, expected_start, "reservations tile the space");
            assert_eq!(*prev, expected_prev, "record at {start}");
            expected_prev = *start;
            expected_start = *end;
        }
        assert_eq!(occupied(&links), 1);
    }
}
