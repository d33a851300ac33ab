//! The named experiments of `walbench reproduce`: one per seed (and one
//! beyond the seeds), each with the seed's own grid of sizes and client
//! counts, its old and new algorithm, and the settings it runs under.
//!
//! Invariant: `variants[0]` is the new algorithm and `variants[1]` the old
//! one (the ratio row is new / old); further variants are shown beside them.
//! Insertion experiments run with fsync=off on a RAM disk, as the seeds'
//! /dev/shm runs did; the txid experiments keep the default fsync=on (txid
//! commits do not wait for their flush).

/// A setting of the algorithm under test.
pub struct Variant {
    pub name: &'static str,
    pub sets: &'static [&'static str],
    pub what: &'static str,
}

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
    pub base_sets: &'static [&'static str],
    /// Put the data directory on a RAM disk when there is one.
    pub ram_disk: bool,
    /// How to read the table.
    pub note: &'static str,
}

const FSYNC_OFF: &[&str] = &["fsync=off"];

pub const EXPERIMENTS: &[Experiment] = &[
    Experiment {
        name: "atomic-insertingat",
        seed: "seed 000",
        title: "insertingAt as a 64-bit atomic vs under the wait-list lock",
        kind: Kind::Emit { sizes: &[16, 64, 256, 1024], per_tx: PerTx::One },
        grid: &[4, 16, 64, 256, 512, 1024, 2048, 4096],
        variants: &[
            Variant { name: "atomic", sets: &["inserting_at=atomic"], what: "patch: pg_atomic_uint64 insertingAt" },
            Variant { name: "waitlist", sets: &["inserting_at=waitlist"], what: "head: insertingAt under LWLockWaitListLock" },
        ],
        base_sets: FSYNC_OFF,
        ram_disk: true,
        note: "pg_logical_emit_message(false, ...) per transaction; columns are message sizes in bytes",
    },
    Experiment {
        name: "insert-locks",
        seed: "seed 001",
        title: "WAL insertion locks: padded vs packed, 1 / 8 / 128 locks",
        kind: Kind::Emit { sizes: &[20, 100, 8000], per_tx: PerTx::Bytes(100_000) },
        grid: &[1, 2, 4, 8, 16, 32, 64],
        variants: &[
            Variant { name: "padded-8", sets: &["insert_lock_layout=padded", "wal_insert_locks=8"], what: "8 locks, one cache line each" },
            Variant { name: "packed-8", sets: &["insert_lock_layout=packed", "wal_insert_locks=8"], what: "8 locks sharing cache lines" },
            Variant { name: "padded-1", sets: &["insert_lock_layout=padded", "wal_insert_locks=1"], what: "one insertion lock (9.3-like)" },
            Variant { name: "padded-128", sets: &["insert_lock_layout=padded", "wal_insert_locks=128"], what: "128 insertion locks" },
        ],
        base_sets: FSYNC_OFF,
        ram_disk: true,
        note: "each transaction is about 100 kB of WAL: emit-batch:SIZE:ceil(100000 / SIZE)",
    },
    Experiment {
        name: "lwlock-queue",
        seed: "seed 002",
        title: "LWLock wait queue: modern vs legacy (SELECT txid_current())",
        kind: Kind::Txid,
        grid: &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 768, 1024, 2048, 4096],
        variants: &[
            Variant { name: "modern", sets: &["lwlock_queue=modern"], what: "patched: waiters dequeued by the waker" },
            Variant { name: "legacy", sets: &["lwlock_queue=legacy"], what: "head: waiters scan the queue to dequeue" },
        ],
        base_sets: &[],
        ram_disk: false,
        note: "txid: snapshot, XID, commit record (no flush wait), XID clear",
    },
    Experiment {
        name: "parallel-insert",
        seed: "seed 003",
        title: "parallel WAL insertion vs one insertion lock, walwriter pre-init",
        kind: Kind::Emit { sizes: &[16], per_tx: PerTx::Records(10_000) },
        grid: &[1, 2, 4, 8, 16],
        variants: &[
            Variant { name: "parallel", sets: &["wal_insertion=parallel", "wal_preinit=on"], what: "reserve under a spinlock, copy in parallel, pre-init on" },
            Variant { name: "single", sets: &["wal_insertion=single", "wal_preinit=on"], what: "one lock for reservation and copy" },
            Variant { name: "parallel-no-preinit", sets: &["wal_insertion=parallel", "wal_preinit=off"], what: "parallel, backends initialize pages" },
        ],
        base_sets: FSYNC_OFF,
        ram_disk: true,
        note: "a transaction is 10,000 small records (INSERT ... generate_series(1, 10000)): emit-batch:16:10000",
    },
    Experiment {
        name: "group-xid-clear",
        seed: "seed 004",
        title: "ProcArray XID clear: group vs exclusive (SELECT txid_current())",
        kind: Kind::Txid,
        grid: &[1, 2, 4, 8, 16, 32, 64, 128, 256],
        variants: &[
            Variant { name: "group", sets: &["xid_clear=group"], what: "one leader clears a group's XIDs" },
            Variant { name: "exclusive", sets: &["xid_clear=exclusive"], what: "each backend takes ProcArrayLock exclusively" },
        ],
        base_sets: &[],
        ram_disk: false,
        note: "txid: snapshot, XID, commit record (no flush wait), XID clear",
    },
    Experiment {
        name: "lockfree-reserve",
        seed: "beyond the seeds",
        title: "WAL space reservation: lock-free atomic vs spinlock",
        kind: Kind::Emit { sizes: &[16, 256], per_tx: PerTx::One },
        grid: &[1, 2, 4, 8, 16, 32, 64, 128, 256],
        variants: &[
            Variant { name: "atomic", sets: &["wal_reservation=atomic"], what: "CAS on the insert position" },
            Variant { name: "spinlock", sets: &["wal_reservation=spinlock"], what: "insertpos_lck as in PostgreSQL" },
        ],
        base_sets: FSYNC_OFF,
        ram_disk: true,
        note: "pg_logical_emit_message(false, ...) per transaction; columns are message sizes in bytes",
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
            for a in e
                .base_sets
                .iter()
                .chain(e.variants.iter().flat_map(|v| v.sets.iter()))
            {
                s.set_assignment(a).unwrap();
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
