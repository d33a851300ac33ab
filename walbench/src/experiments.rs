//! The named experiments of `walbench reproduce`: one per seed (and one
//! beyond the seeds), each with the seed's own grid of sizes and client
//! counts, its old and new algorithm, and the settings it runs under.
//!
//! Invariant: `variants[0]` is the new algorithm and `variants[1]` the old
//! one (the ratio row is new / old); further variants are shown beside them.
//! Insertion experiments run with fsync=off on a RAM disk, as the seeds'
//! /dev/shm runs did, and over every insertion lock as PostgreSQL does
//! (`wal_insert_lock_spread = all`: the default `adaptive` would use one
//! lock fewer than CPUs whenever the walwriter falls behind, which is not
//! the algorithm the seeds measured); the txid experiments keep the default
//! fsync=on (txid commits do not wait for their flush).

use crate::variants::{self, Knob, Variant};
use shmem::variants::{
    InsertLockSpread, Insertion, LockLayout, Reservation, VarAccess, WaitQueue, XidClear,
};

/// How many records make one of the seed's transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerTx {
    /// One workload iteration is one transaction.
    One,
    /// About this many bytes of payload per transaction (seed 001).
    Bytes(u64),
    /// This many records per transaction (seed 003).
    Records(u64),
}

impl PerTx {
    /// Records per transaction for a payload of `size` bytes.
    pub fn records(self, size: usize) -> u64 {
        match self {
            PerTx::One => 1,
            PerTx::Bytes(b) => b.div_ceil(size.max(1) as u64).max(1),
            PerTx::Records(n) => n,
        }
    }
}

/// What the backends run.
pub enum Kind {
    /// `emit:SIZE` for each size.
    Emit {
        sizes: &'static [usize],
        per_tx: PerTx,
    },
    /// `txid` (no size).
    Txid,
}

pub struct Experiment {
    pub name: &'static str,
    pub seed: &'static str,
    pub title: &'static str,
    pub kind: Kind,
    /// The seed's client counts.
    pub grid: &'static [u32],
    pub variants: &'static [Variant],
    /// Settings every variant runs with.
    pub base: &'static [Knob],
    /// Put the data directory on a RAM disk when there is one.
    pub ram_disk: bool,
    /// How to read the table.
    pub note: &'static str,
    /// The counter that carries the seed's mechanism (`observe`).
    pub mechanism: Mechanism,
}

/// The counter in which an experiment's mechanism shows on any machine,
/// even where its throughput effect needs more cores than there are.
pub struct Mechanism {
    /// A `per_tx` key or a `mechanism_ratios` key (`observe::Observed::value`).
    pub counter: &'static str,
    /// What the seed predicts for it, variant against variant.
    pub expect: &'static str,
}

/// The seeds' RAM-disk runs.
pub const FSYNC_OFF: Knob = Knob::Fsync(false);

/// The seeds' insertion runs: fsync=off, every insertion lock in use.
const INSERTION_BASE: &[Knob] = &[FSYNC_OFF, Knob::InsertLockSpread(InsertLockSpread::All)];

/// A variant of an experiment.
const fn v(name: &'static str, knobs: &'static [Knob], what: &'static str) -> Variant {
    Variant::new(name, knobs, what)
}

pub const EXPERIMENTS: &[Experiment] = &[
    Experiment {
        name: "atomic-insertingat",
        seed: "seed 000",
        title: "insertingAt as a 64-bit atomic vs under the wait-list lock",
        kind: Kind::Emit { sizes: &[16, 64, 256, 1024], per_tx: PerTx::One },
        grid: &[4, 16, 64, 256, 512, 1024, 2048, 4096],
        variants: &[
            v("atomic", &[Knob::InsertingAt(VarAccess::Atomic)], "patch: pg_atomic_uint64 insertingAt"),
            v("waitlist", &[Knob::InsertingAt(VarAccess::WaitListLock)], "head: insertingAt under LWLockWaitListLock"),
        ],
        base: INSERTION_BASE,
        ram_disk: true,
        note: "pg_logical_emit_message(false, ...) per transaction; columns are message sizes in bytes",
        mechanism: Mechanism {
            counter: "waitlist_lock_acquisitions",
            expect: "higher for waitlist: every read and clear of insertingAt takes the insertion lock's wait-list lock",
        },
    },
    Experiment {
        name: "insert-locks",
        seed: "seed 001",
        title: "WAL insertion locks: padded vs packed, 1 / 8 / 128 locks",
        kind: Kind::Emit { sizes: &[20, 100, 8000], per_tx: PerTx::Bytes(100_000) },
        grid: &[1, 2, 4, 8, 16, 32, 64],
        variants: &[
            v("padded-8", &[Knob::InsertLockLayout(LockLayout::Padded), Knob::WalInsertLocks(8)], "8 locks, one cache line each"),
            v("packed-8", &[Knob::InsertLockLayout(LockLayout::Packed), Knob::WalInsertLocks(8)], "8 locks sharing cache lines"),
            v("padded-1", &[Knob::InsertLockLayout(LockLayout::Padded), Knob::WalInsertLocks(1)], "one insertion lock (9.3-like)"),
            v("padded-128", &[Knob::InsertLockLayout(LockLayout::Padded), Knob::WalInsertLocks(128)], "128 insertion locks"),
        ],
        base: INSERTION_BASE,
        ram_disk: true,
        note: "each transaction is about 100 kB of WAL: emit-batch:SIZE:ceil(100000 / SIZE)",
        mechanism: Mechanism {
            counter: "lwlock_sleeps.WALInsert",
            expect: "sleeps on the insertion locks: one lock queues every inserter; padded vs packed differ only in cache-line traffic, which no counter here sees",
        },
    },
    Experiment {
        name: "lwlock-queue",
        seed: "seed 002",
        title: "LWLock wait queue: modern vs legacy (SELECT txid_current())",
        kind: Kind::Txid,
        grid: &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 768, 1024, 2048, 4096],
        variants: &[
            v("modern", &[Knob::LwlockQueue(WaitQueue::Modern)], "patched: waiters dequeued by the waker"),
            v("legacy", &[Knob::LwlockQueue(WaitQueue::Legacy)], "head: waiters scan the queue to dequeue"),
        ],
        base: &[],
        ram_disk: false,
        note: "txid: snapshot, XID, commit record (no flush wait), XID clear",
        mechanism: Mechanism {
            counter: "waitlist_entries_scanned_per_dequeue",
            expect: "0 for modern (no scan); for legacy it grows with the queue length",
        },
    },
    Experiment {
        name: "parallel-insert",
        seed: "seed 003",
        title: "parallel WAL insertion vs one insertion lock, walwriter pre-init",
        kind: Kind::Emit { sizes: &[16], per_tx: PerTx::Records(10_000) },
        grid: &[1, 2, 4, 8, 16],
        variants: &[
            v("parallel", &[Knob::WalInsertion(Insertion::Parallel), Knob::WalPreinit(true)], "reserve under a spinlock, copy in parallel, pre-init on"),
            v("single", &[Knob::WalInsertion(Insertion::Single), Knob::WalPreinit(true)], "one lock for reservation and copy"),
            v("parallel-no-preinit", &[Knob::WalInsertion(Insertion::Parallel), Knob::WalPreinit(false)], "parallel, backends initialize pages"),
        ],
        base: INSERTION_BASE,
        ram_disk: true,
        note: "a transaction is 10,000 small records (INSERT ... generate_series(1, 10000)): emit-batch:16:10000",
        mechanism: Mechanism {
            counter: "pages_init_backend",
            expect: "near 0 with the walwriter's pre-init, about one page per 8 kB of WAL without it",
        },
    },
    Experiment {
        name: "group-xid-clear",
        seed: "seed 004",
        title: "ProcArray XID clear: group vs exclusive (SELECT txid_current())",
        kind: Kind::Txid,
        grid: &[1, 2, 4, 8, 16, 32, 64, 128, 256],
        variants: &[
            v("group", &[Knob::XidClear(XidClear::Group)], "one leader clears a group's XIDs"),
            v("exclusive", &[Knob::XidClear(XidClear::Exclusive)], "each backend takes ProcArrayLock exclusively"),
        ],
        base: &[],
        ram_disk: false,
        note: "txid: snapshot, XID, commit record (no flush wait), XID clear",
        mechanism: Mechanism {
            counter: "procarray_lock_acquisitions_per_commit",
            expect: "1 for exclusive; below 1 for group once commits overlap (one leader clears many)",
        },
    },
    Experiment {
        name: "lockfree-reserve",
        seed: "beyond the seeds",
        title: "WAL space reservation: lock-free atomic vs spinlock",
        kind: Kind::Emit { sizes: &[16, 256], per_tx: PerTx::One },
        grid: &[1, 2, 4, 8, 16, 32, 64, 128, 256],
        variants: &[
            v("atomic", &[Knob::WalReservation(Reservation::Atomic)], "fetch-add on the insert position"),
            v("spinlock", &[Knob::WalReservation(Reservation::Spinlock)], "insertpos_lck as in PostgreSQL"),
        ],
        base: INSERTION_BASE,
        ram_disk: true,
        note: "pg_logical_emit_message(false, ...) per transaction; columns are message sizes in bytes",
        mechanism: Mechanism {
            counter: "spin_delays",
            expect: "0 for atomic (no spinlock); spinlock delays appear when the holder is descheduled",
        },
    },
];

pub fn find(name: &str) -> Option<&'static Experiment> {
    EXPERIMENTS.iter().find(|e| e.name == name)
}

pub fn names() -> String {
    EXPERIMENTS
        .iter()
        .map(|e| e.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Largest client count a machine with `cores` cores runs by default.
pub fn client_cap(cores: usize) -> u32 {
    (cores as u32).saturating_mul(128).clamp(256, 4096)
}

impl Experiment {
    /// The variant of this experiment called `name`.
    pub fn variant(&self, name: &str) -> Option<&'static Variant> {
        variants::find(self.variants, name)
    }

    /// The new and the old algorithm (the ratio row is new / old).
    pub fn new_and_old(&self) -> (&'static Variant, &'static Variant) {
        (&self.variants[0], &self.variants[1])
    }

    /// The `--set` assignments every variant runs with.
    pub fn base_assignments(&self) -> Vec<String> {
        variants::assignments(self.base).collect()
    }

    /// The seed's grid capped for a machine with `cores` cores.
    pub fn default_clients(&self, cores: usize) -> Vec<u32> {
        let cap = client_cap(cores);
        let v: Vec<u32> = self.grid.iter().copied().filter(|&c| c <= cap).collect();
        if v.is_empty() {
            vec![self.grid[0]]
        } else {
            v
        }
    }

    pub fn default_sizes(&self) -> Vec<usize> {
        match &self.kind {
            Kind::Emit { sizes, .. } => sizes.to_vec(),
            Kind::Txid => vec![],
        }
    }

    /// Records per transaction for `size`.
    pub fn per_tx(&self, size: usize) -> u64 {
        match &self.kind {
            Kind::Emit { per_tx, .. } => per_tx.records(size),
            Kind::Txid => 1,
        }
    }

    /// Whether transactions are derived from records. Never: a seed's
    /// multi-record transaction runs as the `emit-batch:SIZE:N` workload,
    /// which counts whole batches.
    pub fn derived(&self) -> bool {
        false
    }

    /// The workload string for a size (None for txid).
    pub fn workload(&self, size: Option<usize>) -> String {
        match (&self.kind, size) {
            (
                Kind::Emit {
                    per_tx: PerTx::One, ..
                },
                Some(s),
            ) => format!("emit:{s}"),
            (Kind::Emit { per_tx, .. }, Some(s)) => format!("emit-batch:{s}:{}", per_tx.records(s)),
            _ => "txid".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn experiments_are_well_formed() {
        for e in EXPERIMENTS {
            assert!(e.variants.len() >= 2, "{}", e.name);
            assert!(!e.grid.is_empty());
            let mut s = shmem::Settings::default();
            for a in e.base_assignments().into_iter().chain(
                e.variants
                    .iter()
                    .flat_map(|v| variants::assignments(v.knobs)),
            ) {
                s.set_assignment(&a).unwrap();
            }
            assert!(e.default_clients(2).iter().all(|&c| c <= 256));
        }
        assert_eq!(names().split(", ").count(), 6);
        assert_eq!(PerTx::Bytes(100_000).records(20), 5000);
        assert_eq!(PerTx::Bytes(100_000).records(8000), 13);
        assert_eq!(find("insert-locks").unwrap().per_tx(100), 1000);
        let pi = find("parallel-insert").unwrap();
        assert!(!pi.derived());
        assert_eq!(pi.workload(Some(16)), "emit-batch:16:10000");
        assert_eq!(
            find("insert-locks").unwrap().workload(Some(8000)),
            "emit-batch:8000:13"
        );
        assert_eq!(
            find("atomic-insertingat").unwrap().workload(Some(64)),
            "emit:64"
        );
        assert_eq!(find("lwlock-queue").unwrap().workload(None), "txid");
        for w in ["emit-batch:16:10000", "emit-batch:8000:13"] {
            backend::workload::Workload::parse(w).unwrap();
        }
        assert_eq!(client_cap(2), 256);
        assert_eq!(client_cap(64), 4096);
    }
}
