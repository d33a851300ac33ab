//! The algorithm variants the seeds argue about, chosen at start-up.
//!
//! Each enum is `#[repr(u32)]` plain data so that the chosen set can live in
//! the shared-memory header, where every process reads the same choice.

macro_rules! variant_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name { $($(#[$vm])* $v),+ }

        impl $name {
            /// Every accepted spelling, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($s),+];

            pub fn parse(s: &str) -> Option<Self> {
                match s.to_ascii_lowercase().as_str() {
                    $($s => Some($name::$v),)+
                    _ => None,
                }
            }

            pub fn name(self) -> &'static str {
                match self { $($name::$v => $s),+ }
            }
        }
    };
}

variant_enum!(
    /// LWLock wait queue (seed 002).
    WaitQueue {
        /// Waiters carry a state; a waiter dequeues itself in O(1).
        Modern = "modern",
        /// A waiter scans the list to find and remove itself.
        Legacy = "legacy",
    }
);

variant_enum!(
    /// How `insertingAt` is read and written (seed 000).
    VarAccess {
        /// 64-bit atomic, no wait-list lock.
        Atomic = "atomic",
        /// Under the LWLock's wait-list lock.
        WaitListLock = "waitlist",
    }
);

variant_enum!(
    /// WAL insertion lock layout (seed 001).
    LockLayout {
        /// Each insertion lock alone on a 128-byte line.
        Padded = "padded",
        /// Insertion locks packed, several per cache line.
        Packed = "packed",
    }
);

variant_enum!(
    /// Insertion scheme (seed 003).
    Insertion {
        /// Reserve under the spinlock, copy in parallel under N locks.
        Parallel = "parallel",
        /// One lock held for reservation and copy (before 9.4).
        Single = "single",
    }
);

variant_enum!(
    /// How insert space is reserved (beyond the seeds).
    Reservation {
        /// CurrBytePos/PrevBytePos under the insert-position spinlock.
        Spinlock = "spinlock",
        /// Lock-free fetch-add with a per-slot xl_prev hand-off.
        Atomic = "atomic",
    }
);

variant_enum!(
    /// XID clear at transaction end (seed 004).
    XidClear {
        /// Backends queue on an atomic list; one leader clears them all.
        Group = "group",
        /// Each backend takes ProcArrayLock exclusively.
        Exclusive = "exclusive",
    }
);

// ---- the direct insert path ----
variant_enum!(
    /// How many WAL insertion locks backends spread over.
    InsertLockSpread {
        /// Every one of `wal_insert_locks` (PostgreSQL's behaviour).
        All = "all",
        /// `all` while the walwriter keeps up; one lock fewer than CPUs
        /// (but one) while it falls behind: backends initialize most
        /// buffer pages themselves and the walwriter hardly sleeps (judged
        /// by the walwriter every 50 ms; see `backend::xlog::PaceWatch`).
        /// The walwriter, which writes what the inserters copied, then
        /// keeps a CPU (docs/benchmarks.md, insertion locks under
        /// oversubscription). The default.
        Adaptive = "adaptive",
    }
);

variant_enum!(
    /// What a backend does when its WAL insertion lock is busy.
    InsertLockWait {
        /// Sleep on that lock, and prefer the next one next time
        /// (PostgreSQL's WALInsertLockAcquire).
        Queue = "queue",
        /// `queue` while this backend rarely waits; while a recent share
        /// of its acquisitions waited (oversubscription: a busy lock's
        /// holder is then mostly preempted, while another is free), it
        /// first takes any other free insertion lock, and when every one
        /// is busy gives the CPU away (`sched_yield`, so a preempted
        /// holder can run) and scans again, a few times, before sleeping.
        /// The default.
        Adaptive = "adaptive",
    }
);

// ---- durable commits ----
variant_enum!(
    /// Who writes and syncs the WAL a durable commit waits for.
    GroupCommit {
        /// PostgreSQL's XLogFlush: every committer waits for insertions,
        /// then `acquire_or_wait(WALWriteLock)`; the winner flushes for all,
        /// the others wake and re-check.
        Leader = "leader",
        /// Committers publish the LSN they need and sleep once on their
        /// semaphore; the walwriter writes, syncs and wakes exactly the
        /// covered waiters (MySQL 8's dedicated flusher and notifier).
        Flusher = "flusher",
        /// A committer that finds WALWriteLock free flushes itself (no
        /// hand-off when idle: one client); otherwise it publishes its LSN
        /// and sleeps once, until whoever releases WALWriteLock covers it
        /// or hands it the next flush (one post either way).
        Hybrid = "hybrid",
    }
);

/// A boolean setting spelled as PostgreSQL does.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Some(true),
        "off" | "false" | "no" | "0" => Some(false),
        _ => None,
    }
}

variant_enum!(
    /// How WAL is made durable (PostgreSQL's `wal_sync_method`,
    /// Linux's values: `fsync_writethrough` does not exist there). The
    /// `open_*` methods open segments with a sync flag, so each write is
    /// durable when it returns and no separate sync is issued.
    WalSyncMethod {
        /// fsync(2) after writing (data and all metadata).
        Fsync = "fsync",
        /// fdatasync(2) after writing (PostgreSQL's default on Linux).
        Fdatasync = "fdatasync",
        /// Segments opened with O_SYNC.
        OpenSync = "open_sync",
        /// Segments opened with O_DSYNC.
        OpenDatasync = "open_datasync",
    }
);

// ---- commit replies ----
variant_enum!(
    /// Who sends a durable commit's reply.
    CommitReply {
        /// The committing backend waits for its flush, then replies
        /// (PostgreSQL's way).
        Backend = "backend",
        /// The backend hands its reply to the walwriter and reads on; the
        /// walwriter sends it after the fdatasync that covers the commit.
        Flusher = "flusher",
    }
);

variant_enum!(
    /// What archive recovery does once it reached its recovery target
    /// (PostgreSQL's recovery_target_action; not an algorithm variant).
    RecoveryTargetAction {
        /// PostgreSQL's default. walshm has no hot standby, so it acts as
        /// `shutdown`, as PostgreSQL's does with hot_standby = off.
        Pause = "pause",
        /// End recovery there and continue as a primary on a new timeline.
        Promote = "promote",
        /// Stop the server, leaving recovery.signal for the next start.
        Shutdown = "shutdown",
    }
);
