//! The variants walbench compares, as typed settings: a `Knob` is one
//! setting of the runtime set to one value of its `shmem::variants` enum (or
//! its number or switch), and a `Variant` is a named list of knobs. The
//! plain mode's variants (`VARIANTS`) and the experiments of `walbench
//! reproduce` (module `experiments`) are both lists of `Variant`.
//!
//! Invariants: `Knob::assignment` is the `NAME=VALUE` that `postmaster
//! --set` accepts for the `Settings` field `Knob::apply` writes (a test
//! checks the two agree for every knob walbench uses); the plain mode's
//! `modern` variant has no knobs (the defaults).

use shmem::variants::{
    GroupCommit, InsertLockSpread, InsertLockWait, Insertion, LockLayout, Reservation, VarAccess,
    WaitQueue, WalSyncMethod, XidClear,
};
use shmem::Settings;

/// One setting with the value a variant gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Knob {
    LwlockQueue(WaitQueue),
    InsertingAt(VarAccess),
    InsertLockLayout(LockLayout),
    WalInsertion(Insertion),
    WalReservation(Reservation),
    XidClear(XidClear),
    WalPreinit(bool),
    WalInsertLocks(u32),
    Fsync(bool),
    InsertLockSpread(InsertLockSpread),
    GroupCommit(GroupCommit),
    InsertLockWait(InsertLockWait),
    WalSyncMethod(WalSyncMethod),
}

/// A boolean as PostgreSQL spells it.
fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

impl Knob {
    /// The setting's name, as `postmaster --set` spells it.
    pub fn setting(self) -> &'static str {
        match self {
            Knob::LwlockQueue(_) => "lwlock_queue",
            Knob::InsertingAt(_) => "inserting_at",
            Knob::InsertLockLayout(_) => "insert_lock_layout",
            Knob::WalInsertion(_) => "wal_insertion",
            Knob::WalReservation(_) => "wal_reservation",
            Knob::XidClear(_) => "xid_clear",
            Knob::WalPreinit(_) => "wal_preinit",
            Knob::WalInsertLocks(_) => "wal_insert_locks",
            Knob::Fsync(_) => "fsync",
            Knob::InsertLockSpread(_) => "wal_insert_lock_spread",
            Knob::GroupCommit(_) => "group_commit",
            Knob::InsertLockWait(_) => "wal_insert_lock_wait",
            Knob::WalSyncMethod(_) => "wal_sync_method",
        }
    }

    /// The value, as `postmaster --set` spells it.
    pub fn value(self) -> String {
        match self {
            Knob::LwlockQueue(v) => v.name().into(),
            Knob::InsertingAt(v) => v.name().into(),
            Knob::InsertLockLayout(v) => v.name().into(),
            Knob::WalInsertion(v) => v.name().into(),
            Knob::WalReservation(v) => v.name().into(),
            Knob::XidClear(v) => v.name().into(),
            Knob::GroupCommit(v) => v.name().into(),
            Knob::WalPreinit(b) | Knob::Fsync(b) => on_off(b).into(),
            Knob::WalInsertLocks(n) => n.to_string(),
            Knob::InsertLockSpread(v) => v.name().into(),
            Knob::InsertLockWait(v) => v.name().into(),
            Knob::WalSyncMethod(v) => v.name().into(),
        }
    }

    /// `NAME=VALUE` for `postmaster start --set`.
    pub fn assignment(self) -> String {
        format!("{}={}", self.setting(), self.value())
    }

    /// Sets the `Settings` field this knob names.
    pub fn apply(self, s: &mut Settings) {
        match self {
            Knob::LwlockQueue(v) => s.lwlock_queue = v,
            Knob::InsertingAt(v) => s.inserting_at = v,
            Knob::InsertLockLayout(v) => s.insert_lock_layout = v,
            Knob::WalInsertion(v) => s.wal_insertion = v,
            Knob::WalReservation(v) => s.wal_reservation = v,
            Knob::XidClear(v) => s.xid_clear = v,
            Knob::WalPreinit(b) => s.wal_preinit = b,
            Knob::WalInsertLocks(n) => s.wal_insert_locks = n,
            Knob::Fsync(b) => s.fsync = b,
            Knob::InsertLockSpread(v) => s.wal_insert_lock_spread = v,
            Knob::GroupCommit(v) => s.group_commit = v,
            Knob::InsertLockWait(v) => s.wal_insert_lock_wait = v,
            Knob::WalSyncMethod(v) => s.wal_sync_method = v,
        }
    }
}

/// The `--set` assignments of a list of knobs, in order.
pub fn assignments(knobs: &[Knob]) -> impl Iterator<Item = String> + '_ {
    knobs.iter().map(|k| k.assignment())
}

/// A named setting of the algorithms under test.
#[derive(Debug, PartialEq, Eq)]
pub struct Variant {
    pub name: &'static str,
    /// What differs from the runtime's defaults.
    pub knobs: &'static [Knob],
    pub what: &'static str,
}

/// The entry of `variants` called `name`.
pub fn find<'a>(variants: &'a [Variant], name: &str) -> Option<&'a Variant> {
    variants.iter().find(|v| v.name == name)
}

/// The names of `variants`, comma-separated.
pub fn names(variants: &[Variant]) -> String {
    variants
        .iter()
        .map(|v| v.name)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Variant {
    pub const fn new(name: &'static str, knobs: &'static [Knob], what: &'static str) -> Variant {
        Variant { name, knobs, what }
    }
}

/// The plain mode's variants: the modern defaults and each old algorithm
/// alone.
#[rustfmt::skip]
pub const VARIANTS: &[Variant] = &[
    Variant::new("modern", &[], "every modern algorithm (the defaults)"),
    Variant::new("insertingat-waitlist", &[Knob::InsertingAt(VarAccess::WaitListLock)],
        "seed 000: insertingAt under the wait-list lock"),
    Variant::new("packed-locks", &[Knob::InsertLockLayout(LockLayout::Packed)],
        "seed 001: insertion locks packed, sharing cache lines"),
    Variant::new("legacy-queue", &[Knob::LwlockQueue(WaitQueue::Legacy)],
        "seed 002: waiters scan the wait list to dequeue"),
    Variant::new("single-insert-lock", &[Knob::WalInsertion(Insertion::Single)],
        "seed 003: one lock for reservation and copy"),
    Variant::new("no-preinit", &[Knob::WalPreinit(false)],
        "seed 003: walwriter does not pre-initialize pages"),
    Variant::new("exclusive-clear", &[Knob::XidClear(XidClear::Exclusive)],
        "seed 004: each backend clears its XID under ProcArrayLock"),
    Variant::new("atomic-reserve", &[Knob::WalReservation(Reservation::Atomic)],
        "beyond the seeds: lock-free reservation"),
    // ---- the direct insert path ----
    Variant::new("all-insert-locks", &[Knob::InsertLockSpread(InsertLockSpread::All)],
        "PostgreSQL's: backends spread over every insertion lock even when the walwriter falls behind"),
    Variant::new("queue-insert-locks", &[Knob::InsertLockWait(InsertLockWait::Queue)],
        "PostgreSQL's: always sleep on a busy insertion lock (the default is adaptive)"),
    // ---- durable commits: who flushes ----
    Variant::new("flusher-commit", &[Knob::GroupCommit(GroupCommit::Flusher)],
        "MySQL 8's dedicated flusher: the walwriter flushes for committers and wakes each once"),
    Variant::new("leader-commit", &[Knob::GroupCommit(GroupCommit::Leader)],
        "PostgreSQL's XLogFlush: whoever gets WALWriteLock flushes, the others wake and re-check"),
    // ---- wal_sync_method (meaningful with fsync on) ----
    Variant::new("open-datasync", &[Knob::WalSyncMethod(WalSyncMethod::OpenDatasync)],
        "PostgreSQL's open_datasync: WAL segments opened with O_DSYNC, each write durable, no fdatasync"),
    Variant::new("fsync-method", &[Knob::WalSyncMethod(WalSyncMethod::Fsync)],
        "PostgreSQL's fsync method: fsync instead of fdatasync"),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every knob walbench uses, in the plain variants and the experiments.
    fn all_knobs() -> impl Iterator<Item = Knob> {
        let experiments = crate::experiments::EXPERIMENTS
            .iter()
            .flat_map(|e| e.base.iter().chain(e.variants.iter().flat_map(|v| v.knobs)));
        VARIANTS
            .iter()
            .flat_map(|v| v.knobs)
            .chain(experiments)
            .copied()
    }

    #[test]
    fn assignments_set_the_field_each_knob_names() {
        for k in all_knobs() {
            let mut by_name = Settings::default();
            by_name.set_assignment(&k.assignment()).unwrap();
            let mut by_field = Settings::default();
            k.apply(&mut by_field);
            assert_eq!(by_name, by_field, "{}", k.assignment());
        }
        assert_eq!(Knob::Fsync(false).assignment(), "fsync=off");
        assert_eq!(Knob::WalInsertLocks(8).assignment(), "wal_insert_locks=8");
    }

    #[test]
    fn every_plain_variant_but_modern_changes_a_default() {
        assert!(VARIANTS[0].knobs.is_empty());
        for v in &VARIANTS[1..] {
            let mut s = Settings::default();
            for k in v.knobs {
                k.apply(&mut s);
            }
            assert_ne!(s, Settings::default(), "{}", v.name);
        }
        assert_eq!(
            find(VARIANTS, "legacy-queue").unwrap().what,
            VARIANTS[3].what
        );
        assert!(names(VARIANTS).starts_with("modern, insertingat-waitlist"));
    }
}
