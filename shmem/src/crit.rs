//! What a process holds in shared memory, published in its own proc slot
//! so that, once it is dead, the postmaster can tell whether its death
//! left shared state half changed (then only a crash restart is safe) or
//! whether another process can finish what it left, as detach would.
//!
//! A process keeps in its [`CritSlot`]:
//! - `sections`: how deep it is inside shared critical sections it cannot
//!   leave half done — spinlocks (`SPIN`), LWLocks held, queued or being
//!   operated on (`LWLOCK`; a WAL insertion lock only while it is taken or
//!   given back), and the protocols whose other side would wait for it
//!   forever ([`IN_GROUP_CLEAR`], [`IN_RESERVATION`], [`IN_WAL_SWITCH`]).
//!   Any of it nonzero after death means a crash restart. (Queues that
//!   a helper can leave on the dead process's behalf under their own lock
//!   — the admission and synchronous replication queues — are not
//!   sections: their entries are removed in the clean-up);
//! - `insert_lock`: the WAL insertion lock it holds (index + 1), with the
//!   range it reserved (`range_*`, valid while `range_set` is 1): the one
//!   lock another process may finish for it, by filling the range with a
//!   record of the same size and releasing the lock;
//! - `wal_write_lock`: whether it holds WALWriteLock (writing or syncing
//!   WAL files): the other lock a helper may release for it, since the
//!   shared write and flush results only grow once a write or sync is
//!   done, and the next writer redoes what it left from there;
//! - `xact_phase`: where its transaction's end stands, so that a helper
//!   knows whether the COMMIT (or ABORT) record went in before it died.
//!
//! Ordering: every field is written by its owner only, with plain
//! load/store of atomics, and read by others only after the owner died
//! (the reaping `waitpid`, or the closed registration channel, orders
//! the reads after the owner's last stores). A death is a signal taken
//! between two instructions of the owner, so what matters is program
//! order, not ordering between cores: each change is followed by a
//! compiler fence (`compiler_fence(SeqCst)`, no instruction), so that the
//! compiler cannot move the lock operation it announces across it. The
//! rule that makes a death anywhere safe: a section is entered *before*
//! its first shared write and left *after* its last, so a death in
//! between always shows as inside.

use crate::sync::{AtomicU32, AtomicU64, Ordering};
use std::cell::Cell;
use std::sync::atomic::compiler_fence;

/// One spinlock held (a count in bits 0..=7 of `sections`).
pub const SPIN: u32 = 1;
/// One LWLock operation or hold (a count in bits 8..=15).
pub const LWLOCK: u32 = 1 << 8;
/// On the group XID clear list (ProcArrayGroupClearXid), until its leader
/// has woken us.
pub const IN_GROUP_CLEAR: u32 = 1 << 16;
/// Reserving WAL with `wal_reservation = atomic`, until the `xl_prev`
/// hand-off to the next reservation is done (`prevlink`).
pub const IN_RESERVATION: u32 = 1 << 17;
/// Making a WAL switch (its reservation runs to the segment's end).
pub const IN_WAL_SWITCH: u32 = 1 << 18;

const SPIN_MASK: u32 = 0xFF;
const LWLOCK_MASK: u32 = 0xFF << 8;

/// `xact_phase` values.
pub const XACT_NONE: u32 = 0;
/// About to insert the COMMIT record of the XID in `Proc::xid`.
pub const XACT_COMMITTING: u32 = 1;
/// The COMMIT record is in the WAL (its insertion lock released).
pub const XACT_COMMIT_INSERTED: u32 = 2;
/// About to insert the ABORT record.
pub const XACT_ABORTING: u32 = 3;
/// The ABORT record is in the WAL.
pub const XACT_ABORT_INSERTED: u32 = 4;
// `give_back_insert_lock` relies on this numbering: an "about to insert"
// phase is odd and its "inserted" phase the next number.
const _: () = assert!(
    XACT_COMMITTING & 1 == 1
        && XACT_ABORTING & 1 == 1
        && XACT_COMMIT_INSERTED == XACT_COMMITTING + 1
        && XACT_ABORT_INSERTED == XACT_ABORTING + 1
        && XACT_NONE & 1 == 0
);

/// A process's critical-section state (see the module header), on a line
/// of its own after the proc slot's hot fields.
#[repr(C, align(128))]
pub struct CritSlot {
    pub sections: AtomicU32,
    /// WAL insertion lock index + 1 held outside `sections`, 0 = none.
    pub insert_lock: AtomicU32,
    /// 1 while `range_*` hold the current reservation.
    pub range_set: AtomicU32,
    pub xact_phase: AtomicU32,
    /// 1 while it holds WALWriteLock outside `sections` (writing or
    /// syncing WAL files: what it leaves half done, the next writer
    /// redoes from the shared write and flush results).
    pub wal_write_lock: AtomicU32,
    /// The reservation, in usable-byte positions (PostgreSQL's bytepos).
    pub range_start: AtomicU64,
    pub range_end: AtomicU64,
    pub range_prev: AtomicU64,
}

impl Default for CritSlot {
    fn default() -> Self {
        Self::new()
    }
}

/// What a dead process's slot says about its death.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub sections: u32,
    pub insert_lock: Option<usize>,
    /// (start, end, prev) in usable-byte positions.
    pub range: Option<(u64, u64, u64)>,
    pub xact_phase: u32,
    pub wal_write_lock: bool,
}

impl Held {
    /// Whether the death left nothing but what a helper may finish.
    pub fn recoverable(&self) -> bool {
        self.sections == 0
    }

    /// Names the sections, for the log line ("a spinlock", ...).
    pub fn describe_sections(&self) -> String {
        let s = self.sections;
        let mut parts = Vec::new();
        if s & SPIN_MASK != 0 {
            parts.push("a spinlock".to_string());
        }
        if s & LWLOCK_MASK != 0 {
            parts.push("an LWLock (held, queued for or being changed)".to_string());
        }
        for (bit, what) in [
            (IN_GROUP_CLEAR, "the group XID clear list"),
            (
                IN_RESERVATION,
                "a lock-free WAL reservation's xl_prev hand-off",
            ),
            (IN_WAL_SWITCH, "a WAL switch"),
        ] {
            if s & bit != 0 {
                parts.push(what.to_string());
            }
        }
        if parts.is_empty() {
            "nothing".to_string()
        } else {
            parts.join(", ")
        }
    }
}

impl CritSlot {
    pub fn new() -> Self {
        CritSlot {
            sections: AtomicU32::new(0),
            insert_lock: AtomicU32::new(0),
            range_set: AtomicU32::new(0),
            xact_phase: AtomicU32::new(XACT_NONE),
            wal_write_lock: AtomicU32::new(0),
            range_start: AtomicU64::new(0),
            range_end: AtomicU64::new(0),
            range_prev: AtomicU64::new(0),
        }
    }

    /// Enters a section (`SPIN`, `LWLOCK` or a flag bit): before the
    /// first shared write it protects.
    #[inline]
    pub fn enter(&self, what: u32) {
        self.sections.store(
            self.sections.load(Ordering::Relaxed).wrapping_add(what),
            Ordering::Relaxed,
        );
        compiler_fence(std::sync::atomic::Ordering::SeqCst);
    }

    /// Leaves a section: after its last shared write.
    #[inline]
    pub fn exit(&self, what: u32) {
        compiler_fence(std::sync::atomic::Ordering::SeqCst);
        self.sections.store(
            self.sections.load(Ordering::Relaxed).wrapping_sub(what),
            Ordering::Relaxed,
        );
    }

    /// The LWLock just taken is WAL insertion lock `i`: it moves from
    /// `sections` to `insert_lock` (set first, so a death in between
    /// still shows as inside).
    #[inline]
    pub fn hold_insert_lock(&self, i: usize) {
        self.insert_lock.store(i as u32 + 1, Ordering::Relaxed);
        self.exit(LWLOCK);
    }

    /// Records the reservation (called inside the reservation's own
    /// section, so the range is known whenever it exists).
    #[inline]
    pub fn set_range(&self, start: u64, end: u64, prev: u64) {
        self.range_start.store(start, Ordering::Relaxed);
        self.range_end.store(end, Ordering::Relaxed);
        self.range_prev.store(prev, Ordering::Relaxed);
        compiler_fence(std::sync::atomic::Ordering::SeqCst);
        self.range_set.store(1, Ordering::Relaxed);
    }

    /// About to release the insertion lock: it moves back into
    /// `sections` (entered first), and the transaction phase notes that
    /// the record it was ending went in.
    #[inline]
    pub fn give_back_insert_lock(&self) {
        self.enter(LWLOCK);
        self.range_set.store(0, Ordering::Relaxed);
        self.insert_lock.store(0, Ordering::Relaxed);
        // The two "about to insert" phases are the odd ones, each followed
        // by its "inserted" phase (one test on the insert path).
        let phase = self.xact_phase.load(Ordering::Relaxed);
        if phase & 1 == 1 {
            self.set_phase(phase + 1);
        }
    }

    /// The LWLock just taken is WALWriteLock: it moves from `sections`
    /// to `wal_write_lock` (set first).
    #[inline]
    pub fn hold_wal_write_lock(&self) {
        self.wal_write_lock.store(1, Ordering::Relaxed);
        self.exit(LWLOCK);
    }

    /// About to release WALWriteLock: back into `sections` first.
    #[inline]
    pub fn give_back_wal_write_lock(&self) {
        self.enter(LWLOCK);
        self.wal_write_lock.store(0, Ordering::Relaxed);
    }

    #[inline]
    pub fn set_phase(&self, phase: u32) {
        self.xact_phase.store(phase, Ordering::Relaxed);
        compiler_fence(std::sync::atomic::Ordering::SeqCst);
    }

    /// Read by another process once the owner is dead.
    pub fn held(&self) -> Held {
        let lock = self.insert_lock.load(Ordering::Relaxed);
        let range = (self.range_set.load(Ordering::Relaxed) == 1).then(|| {
            (
                self.range_start.load(Ordering::Relaxed),
                self.range_end.load(Ordering::Relaxed),
                self.range_prev.load(Ordering::Relaxed),
            )
        });
        Held {
            sections: self.sections.load(Ordering::Relaxed),
            insert_lock: (lock != 0).then(|| lock as usize - 1),
            range,
            xact_phase: self.xact_phase.load(Ordering::Relaxed),
            wal_write_lock: self.wal_write_lock.load(Ordering::Relaxed) == 1,
        }
    }

    /// Back to nothing held (a slot made ready for a new process).
    pub fn reset(&self) {
        for w in [
            &self.sections,
            &self.insert_lock,
            &self.range_set,
            &self.xact_phase,
            &self.wal_write_lock,
        ] {
            w.store(0, Ordering::Relaxed);
        }
    }
}

thread_local! {
    /// This thread's process's slot (null: none installed), for the
    /// spinlocks, which are not given a proc.
    static MINE: Cell<*const CritSlot> = const { Cell::new(std::ptr::null()) };
}

/// Makes `slot` the one this thread's spinlocks count in, until the
/// guard drops.
pub fn install(slot: &CritSlot) -> crate::waitevent::Installed<'_, CritSlot> {
    crate::waitevent::Installed::in_key(&MINE, slot)
}

/// Runs `f` on this thread's installed slot, if any.
#[inline]
pub(crate) fn with_mine(f: impl FnOnce(&CritSlot)) {
    MINE.with(|c| {
        let p = c.get();
        if !p.is_null() {
            // SAFETY: installed by an `Installed` guard that borrows the
            // slot and clears the pointer when it drops: the slot is alive.
            f(unsafe { &*p })
        }
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn sections_count_and_name_what_is_held() {
        let c = CritSlot::new();
        assert!(c.held().recoverable());
        c.enter(LWLOCK);
        c.enter(SPIN);
        assert_eq!(
            c.held().describe_sections(),
            "a spinlock, an LWLock (held, queued for or being changed)"
        );
        c.exit(SPIN);
        c.hold_insert_lock(3);
        let h = c.held();
        assert!(h.recoverable());
        assert_eq!(h.insert_lock, Some(3));
        assert_eq!(h.range, None);
        c.set_range(100, 164, 40);
        assert_eq!(c.held().range, Some((100, 164, 40)));
        c.set_phase(XACT_COMMITTING);
        c.give_back_insert_lock();
        let h = c.held();
        assert!(
            !h.recoverable(),
            "giving the lock back is an LWLock section"
        );
        assert_eq!((h.insert_lock, h.range), (None, None));
        assert_eq!(h.xact_phase, XACT_COMMIT_INSERTED);
        c.exit(LWLOCK);
        assert!(c.held().recoverable());
        c.enter(IN_WAL_SWITCH);
        assert_eq!(c.held().describe_sections(), "a WAL switch");
    }
}
