//! Statistics in shared memory and the API that reads them: per-process
//! activity (what `pg_stat_activity` shows), per-process mechanism
//! counters (what each seed's algorithm does, counted), the WAL counters of
//! `pg_stat_wal`, and wait-event sampling for walbench.
//!
//! Layout: one [`ProcStats`] per proc slot, in its own region (`ProcStats`
//! in `layout`), so that the Proc slots' hot fields keep their line. Only
//! a slot's wait-event word lives in the `Proc` itself (see `waitevent`).
//!
//! Writers and readers:
//! - every counter of a `ProcStats` is written only by the process that owns
//!   the slot, with a plain load + store (no read-modify-write, nothing
//!   shared on the hot path); readers sum over slots with Relaxed loads.
//!   Counters are never reset when a slot changes owner, so every sum is
//!   monotonic for the life of the segment (a new segment after a crash
//!   starts from zero);
//! - `pg_stat_reset_shared('wal')` does not touch the counters: it stores
//!   the current sums as a baseline (`XLogCtl::wal_stats`, under its
//!   spinlock) and [`wal_stats`] reports sums minus baseline;
//! - the activity texts (query, application_name, client_addr) are written
//!   by the owner under a sequence counter (odd while writing, PostgreSQL's
//!   `st_changecount`); a reader retries until it reads the same even value
//!   before and after copying, so it never shows a half-written text;
//! - identity (backend type, start time) is written by the owner when it
//!   enters its slot ([`enter_proc`]), before it does anything else.
//!
//! Race defended against: a reader sampling a slot whose process just
//! exited sees pid 0 (the postmaster or the free list clears it) and skips
//! it; one that reads the slot of a process being replaced may show the old
//! process's identity for one sample, never a mix of two texts.

use crate::sync::{fence, AtomicU32, AtomicU64, Ordering};
use crate::waitevent;
use std::cell::Cell;

/// Tranches counted separately: the named locks (their index) and the WAL
/// insertion locks (the last slot).
pub const NUM_TRANCHES: usize = 8;

/// The counter slot of LWLock tranche `tranche`.
#[inline]
pub fn tranche_slot(tranche: u32) -> usize {
    (tranche as usize).min(NUM_TRANCHES - 1)
}

/// The tranche id a counter slot stands for.
#[cfg(not(loom))]
pub fn slot_tranche(slot: usize) -> u32 {
    if slot == NUM_TRANCHES - 1 {
        crate::segment::TRANCHE_WAL_INSERT
    } else {
        slot as u32
    }
}

/// Adds `n` to a counter only this process writes.
#[inline]
pub fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

macro_rules! counter_structs {
    ($atomic:ident, $plain:ident, $doc:literal { $( $(#[$fdoc:meta])* $field:ident, )* }) => {
        #[doc = $doc]
        #[repr(C)]
        pub struct $atomic { $( $(#[$fdoc])* pub $field: AtomicU64, )* }

        #[doc = $doc]
        #[doc = "(summed, plain numbers)"]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $plain { $( $(#[$fdoc])* pub $field: u64, )* }

        impl $atomic {
            pub fn new() -> Self {
                $atomic { $( $field: AtomicU64::new(0), )* }
            }

            /// Adds this slot's values to `t`.
            pub fn add_to(&self, t: &mut $plain) {
                $( t.$field += self.$field.load(Ordering::Relaxed); )*
            }
        }

        impl Default for $atomic {
            fn default() -> Self {
                Self::new()
            }
        }

        impl $plain {
            /// Every counter with its name, in declaration order.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![ $( (stringify!($field), self.$field), )* ]
            }

            /// `self - earlier`, counter by counter (0 where it went down).
            pub fn minus(&self, earlier: &$plain) -> $plain {
                $plain { $( $field: self.$field.saturating_sub(earlier.$field), )* }
            }
        }
    };
}

counter_structs!(TrancheCounters, TrancheTotals, "LWLock counters of one tranche." {
    /// Acquisitions (acquire, conditional, acquire-or-wait that got it).
    acquisitions,
    /// Sleeps on the semaphore waiting for a lock of this tranche.
    sleeps,
    /// Acquisitions of a lock's wait-list lock (seed 000's cost).
    waitlist_lock_acquisitions,
    /// Spin delays (sleeps) taking a wait-list lock.
    waitlist_spin_delays,
});

counter_structs!(FlatCounters, FlatTotals, "Mechanism and WAL counters of one process." {
    /// Spin delays of every spinlock and wait-list lock.
    spin_delays,
    /// Times a waiter removed itself from a wait list (LWLock re-check).
    waitlist_dequeues,
    /// Wait-list entries a waiter walked to remove itself (seed 002: the
    /// legacy queue scans; the modern one walks none).
    waitlist_entries_scanned,
    /// Exclusive ProcArrayLock acquisitions to clear XIDs at transaction
    /// end (seed 004: one per commit without the group clear).
    procarray_lock_acquisitions,
    /// Transactions that ended with an XID to clear.
    xid_clears,
    /// Group clears this process led, and the XIDs they cleared.
    group_clear_groups,
    group_clear_members,
    /// Insertions that waited for a WAL buffer page to be written out or
    /// initialized by someone else (seed 003).
    insert_buffer_waits,
    /// Insertions that slept for WALBufMappingLock (seed 003).
    insert_bufmapping_waits,
    /// WAL buffer pages this process initialized as a backend / as the
    /// walwriter's pre-initialization (seed 003).
    pages_init_backend,
    pages_init_walwriter,
    /// fdatasync (with `wal_sync_method = fsync`: fsync) calls on WAL; 0
    /// with `open_*`, whose writes are durable without one.
    fdatasyncs,
    /// XLogFlush calls: one per synchronous commit (checkpoints and WAL
    /// switches add a few), the numerator of "commits per fdatasync".
    flush_requests,
    /// pg_stat_wal: records, full-page images (always 0), bytes (record
    /// lengths), writes forced by full buffers, write calls, sync calls,
    /// and their times in microseconds (with track_wal_io_timing).
    wal_records,
    wal_fpi,
    wal_bytes,
    wal_buffers_full,
    wal_write,
    wal_sync,
    wal_write_time_us,
    wal_sync_time_us,
    /// Insertion under oversubscription: sleeps on an LWLock
    /// that ended with the lock taken again by someone else, so the woken
    /// waiter slept again (a futile wake-up); insertion-lock acquisitions
    /// that scanned the locks first (`wal_insert_lock_wait = adaptive`
    /// once engaged) and the yields they made.
    lwlock_futile_wakeups,
    insert_lock_scans,
    insert_lock_yields,
});

/// Every mechanism counter of one process (written by the owner only).
#[repr(C)]
#[derive(Default)]
pub struct MechanismCounters {
    pub lwlock: [TrancheCounters; NUM_TRANCHES],
    pub flat: FlatCounters,
}

impl MechanismCounters {
    pub fn new() -> Self {
        MechanismCounters {
            lwlock: std::array::from_fn(|_| TrancheCounters::new()),
            flat: FlatCounters::new(),
        }
    }

    /// The counters of tranche `tranche`.
    #[inline]
    pub fn tranche(&self, tranche: u32) -> &TrancheCounters {
        &self.lwlock[tranche_slot(tranche)]
    }

    pub fn add_to(&self, t: &mut MechanismTotals) {
        for (c, tt) in self.lwlock.iter().zip(t.lwlock.iter_mut()) {
            c.add_to(tt);
        }
        self.flat.add_to(&mut t.flat);
    }
}

/// Mechanism counters summed over processes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MechanismTotals {
    pub lwlock: [TrancheTotals; NUM_TRANCHES],
    pub flat: FlatTotals,
}

impl MechanismTotals {
    pub fn minus(&self, earlier: &MechanismTotals) -> MechanismTotals {
        MechanismTotals {
            lwlock: std::array::from_fn(|i| self.lwlock[i].minus(&earlier.lwlock[i])),
            flat: self.flat.minus(&earlier.flat),
        }
    }

    /// All tranches together.
    pub fn all_tranches(&self) -> TrancheTotals {
        let mut t = TrancheTotals::default();
        for x in &self.lwlock {
            t.acquisitions += x.acquisitions;
            t.sleeps += x.sleeps;
            t.waitlist_lock_acquisitions += x.waitlist_lock_acquisitions;
            t.waitlist_spin_delays += x.waitlist_spin_delays;
        }
        t
    }

    /// The counters walbench reports per transaction, by name: the
    /// summed LWLock ones (`lwlock_acquisitions`, `lwlock_sleeps`,
    /// `waitlist_lock_acquisitions`, `waitlist_spin_delays`), then every
    /// flat counter.
    pub fn named(&self) -> Vec<(&'static str, u64)> {
        let t = self.all_tranches();
        let mut v = vec![
            ("lwlock_acquisitions", t.acquisitions),
            ("lwlock_sleeps", t.sleeps),
            ("waitlist_lock_acquisitions", t.waitlist_lock_acquisitions),
            ("waitlist_spin_delays", t.waitlist_spin_delays),
        ];
        v.extend(self.flat.fields());
        v
    }

    /// Ratios that state a mechanism directly, None where the divisor is 0:
    /// entries scanned per dequeue (002), ProcArrayLock acquisitions per
    /// XID clear and members per group (004), commits per fdatasync.
    pub fn ratios(&self) -> Vec<(&'static str, Option<f64>)> {
        let f = &self.flat;
        let div = |a: u64, b: u64| (b > 0).then(|| a as f64 / b as f64);
        vec![
            (
                "waitlist_entries_scanned_per_dequeue",
                div(f.waitlist_entries_scanned, f.waitlist_dequeues),
            ),
            (
                "procarray_lock_acquisitions_per_commit",
                div(f.procarray_lock_acquisitions, f.xid_clears),
            ),
            (
                "group_clear_size",
                div(f.group_clear_members, f.group_clear_groups),
            ),
            ("commits_per_fdatasync", div(f.flush_requests, f.fdatasyncs)),
        ]
    }
}

/// A `#[repr(u32)]` enum stored in shared memory (`code_enum!`), with its
/// text.
macro_rules! coded_enum {
    ($(#[$m:meta])* $name:ident { $( $(#[$vm:meta])* $v:ident = $code:literal => $text:expr, )+ }) => {
        $crate::code_enum! {
            $(#[$m])*
            pub enum $name: u32 { $( $(#[$vm])* $v = $code, )+ }
        }

        impl $name {
            /// The variant coded `v` (the first one for an unknown code).
            pub fn from_u32(v: u32) -> $name {
                Self::from_code(v).unwrap_or(Self::ALL[0])
            }

            /// PostgreSQL's text for it (None: NULL).
            pub fn text(self) -> Option<&'static str> {
                match self { $( $name::$v => $text, )+ }
            }
        }
    };
}

coded_enum!(
    /// Kinds of process (PostgreSQL's `backend_type` values where they exist).
    BackendType {
        None = 0 => None,
        ClientBackend = 1 => Some("client backend"),
        /// A workload worker forked by the postmaster (`--workers`).
        Worker = 2 => Some("walshm worker"),
        Startup = 3 => Some("startup"),
        Walwriter = 4 => Some("walwriter"),
        Checkpointer = 5 => Some("checkpointer"),
        Walsender = 6 => Some("walsender"),
        Archiver = 7 => Some("archiver"),
        /// A program attached through the worker library.
        BackgroundWorker = 8 => Some("background worker"),
        /// Finishes what a dead attached process or session left.
        Cleaner = 9 => Some("walshm cleaner"),
    }
);

impl BackendType {
    /// PostgreSQL's `backend_type` text ("" for none).
    pub fn name(self) -> &'static str {
        self.text().unwrap_or("")
    }

    /// Backends: what walbench samples (clients and workload workers).
    pub fn is_backend(self) -> bool {
        matches!(
            self,
            BackendType::ClientBackend | BackendType::Worker | BackendType::BackgroundWorker
        )
    }
}

coded_enum!(
    /// `pg_stat_activity.state`.
    ActivityState {
        Unknown = 0 => None,
        Idle = 1 => Some("idle"),
        Active = 2 => Some("active"),
        IdleInTransaction = 3 => Some("idle in transaction"),
        IdleInTransactionAborted = 4 => Some("idle in transaction (aborted)"),
    }
);

/// Bytes kept of a query's text (PostgreSQL's track_activity_query_size
/// default), of application_name (NAMEDATALEN) and of client_addr.
pub const QUERY_BYTES: usize = 1024;
pub const APPNAME_BYTES: usize = 64;
pub const ADDR_BYTES: usize = 64;

/// Which activity text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextField {
    Query = 0,
    ApplicationName = 1,
    ClientAddr = 2,
}

impl TextField {
    /// (first word, capacity in bytes) of the field.
    fn span(self) -> (usize, usize) {
        match self {
            TextField::Query => (0, QUERY_BYTES),
            TextField::ApplicationName => (QUERY_BYTES / 8, APPNAME_BYTES),
            TextField::ClientAddr => ((QUERY_BYTES + APPNAME_BYTES) / 8, ADDR_BYTES),
        }
    }
}

const TEXT_WORDS: usize = (QUERY_BYTES + APPNAME_BYTES + ADDR_BYTES) / 8;

/// The activity texts of one process, under a sequence counter.
#[repr(C)]
pub struct ActivityText {
    /// Odd while the owner writes (pairs with the reader's re-check).
    changecount: AtomicU32,
    lens: [AtomicU32; 3],
    /// The texts' bytes, little-endian in 64-bit words (atomics, so that a
    /// concurrent read is not a data race; the counter makes it coherent).
    words: [AtomicU64; TEXT_WORDS],
}

impl ActivityText {
    pub fn new() -> Self {
        ActivityText {
            changecount: AtomicU32::new(0),
            lens: std::array::from_fn(|_| AtomicU32::new(0)),
            words: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Owner only: stores `text` in `field`, cut at a character boundary
    /// below the field's capacity.
    pub fn set(&self, field: TextField, text: &str) {
        let (first, cap) = field.span();
        let text = clip_utf8(text, cap - 1).as_bytes();
        let c = self.changecount.load(Ordering::Relaxed);
        self.changecount.store(c.wrapping_add(1), Ordering::Relaxed);
        // Release fence: the odd count is visible before any byte we write
        // (pairs with the Acquire fence in `get`).
        fence(Ordering::Release);
        for (i, chunk) in text.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.words[first + i].store(u64::from_le_bytes(w), Ordering::Relaxed);
        }
        self.lens[field as usize].store(text.len() as u32, Ordering::Relaxed);
        // Release pairs with the Acquire load of the count in `get`.
        self.changecount.store(c.wrapping_add(2), Ordering::Release);
    }

    /// Any process: a coherent copy of `field` (empty if the owner keeps
    /// rewriting it for longer than a few retries).
    pub fn get(&self, field: TextField) -> String {
        let (first, cap) = field.span();
        for _ in 0..1000 {
            // Acquire pairs with the Release store ending `set`.
            let before = self.changecount.load(Ordering::Acquire);
            if before % 2 == 1 {
                crate::sync::spin_hint();
                continue;
            }
            let len = (self.lens[field as usize].load(Ordering::Relaxed) as usize).min(cap);
            let mut bytes = Vec::with_capacity(len);
            for w in &self.words[first..first + len.div_ceil(8)] {
                bytes.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
            }
            bytes.truncate(len);
            // Acquire fence: the bytes were read before the re-check
            // (pairs with the Release fence in `set`).
            fence(Ordering::Acquire);
            if self.changecount.load(Ordering::Relaxed) == before {
                return String::from_utf8_lossy(&bytes).into_owned();
            }
        }
        String::new()
    }
}

impl Default for ActivityText {
    fn default() -> Self {
        Self::new()
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a
/// character boundary.
fn clip_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The `ProcStats::backend_type` word of the `entries`-th entry into a
/// slot, by a process of type `ty`. The count tells a leaving process
/// whether the slot is still its own (a connection's slot may already
/// serve the next connection when the old one's context drops).
pub const fn entry_word(entries: u32, ty: BackendType) -> u32 {
    (entries << 8) | ty as u32
}

/// The type in a `backend_type` word.
pub fn entry_type(word: u32) -> BackendType {
    BackendType::from_u32(word & 0xFF)
}

/// Statistics of one proc slot (its own region; see the module header).
#[repr(C, align(128))]
pub struct ProcStats {
    /// Who uses the slot: the entry count in the high 24 bits, the
    /// BackendType in the low 8 (type 0: nobody; see [`entry_word`]).
    pub backend_type: AtomicU32,
    /// ActivityState as u32.
    pub state: AtomicU32,
    /// Unix time in microseconds; 0 = none.
    pub backend_start_us: AtomicU64,
    pub xact_start_us: AtomicU64,
    pub query_start_us: AtomicU64,
    pub state_change_us: AtomicU64,
    pub text: ActivityText,
    pub counters: MechanismCounters,
}

impl ProcStats {
    pub fn new() -> Self {
        ProcStats {
            backend_type: AtomicU32::new(0),
            state: AtomicU32::new(0),
            backend_start_us: AtomicU64::new(0),
            xact_start_us: AtomicU64::new(0),
            query_start_us: AtomicU64::new(0),
            state_change_us: AtomicU64::new(0),
            text: ActivityText::new(),
            counters: MechanismCounters::new(),
        }
    }
}

impl Default for ProcStats {
    fn default() -> Self {
        Self::new()
    }
}

thread_local! {
    /// This process's counters (null: none installed), for code that has
    /// no context to find them (spin delays).
    static MINE: Cell<*const MechanismCounters> = const { Cell::new(std::ptr::null()) };
}

/// While alive, [`with_mine`] finds these counters; dropping it uninstalls.
pub type InstalledCounters<'a> = waitevent::Installed<'a, MechanismCounters>;

/// Makes `counters` this thread's until the guard drops.
pub fn install_counters(counters: &MechanismCounters) -> InstalledCounters<'_> {
    waitevent::Installed::in_key(&MINE, counters)
}

/// Runs `f` on this process's counters, if installed.
#[inline]
pub fn with_mine(f: impl FnOnce(&MechanismCounters)) {
    MINE.with(|c| {
        let p = c.get();
        if !p.is_null() {
            // SAFETY: installed by an `InstalledCounters` guard that
            // borrows the counters and clears the pointer when it drops.
            f(unsafe { &*p })
        }
    })
}

/// Now as Unix microseconds.
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

#[cfg(not(loom))]
pub use reader::*;

/// What needs the segment: entering a slot, the setters, and the readers.
#[cfg(not(loom))]
mod reader {
    use super::*;
    use crate::proc::Proc;
    use crate::segment::Shmem;
    use crate::waitevent::WaitEvent;
    use std::collections::BTreeMap;

    /// Held by a process for as long as it uses its slot: installs the
    /// slot's wait-event word and counters for this thread.
    pub struct ProcEntry<'a> {
        _events: waitevent::Installed<'a, AtomicU32>,
        _counters: InstalledCounters<'a>,
        st: &'a ProcStats,
        /// Our `backend_type` word's entry count.
        entries: u32,
    }

    /// Leaving: the slot shows nobody, unless another process has entered
    /// it since (then the compare-exchange fails and changes nothing).
    impl Drop for ProcEntry<'_> {
        fn drop(&mut self) {
            let word = self.st.backend_type.load(Ordering::Relaxed);
            if word >> 8 == self.entries {
                let _ = self.st.backend_type.compare_exchange(
                    word,
                    entry_word(self.entries, BackendType::None),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
        }
    }

    /// What a dead process's [`ProcEntry`] would have done on leaving:
    /// the slot shows nobody (pg_stat_activity drops its row). For the
    /// helper that cleans up after it (`backend::abandoned`), before the
    /// slot is freed.
    pub fn leave_on_behalf(shm: &Shmem, procno: u32) {
        let st = shm.proc_stats(procno);
        let word = st.backend_type.load(Ordering::Relaxed);
        st.backend_type
            .store(entry_word(word >> 8, BackendType::None), Ordering::Relaxed);
        shm.procs()[procno as usize]
            .wait_event_info
            .store(0, Ordering::Relaxed);
    }

    /// Marks proc `procno` as used by this process, of type `ty`, started
    /// now; clears the previous owner's activity (not its counters). Call
    /// first thing in a process body; keep the result alive.
    pub fn enter_proc(shm: &Shmem, procno: u32, ty: BackendType) -> ProcEntry<'_> {
        let st = shm.proc_stats(procno);
        let now = now_us();
        st.backend_start_us.store(now, Ordering::Relaxed);
        st.xact_start_us.store(0, Ordering::Relaxed);
        st.query_start_us.store(0, Ordering::Relaxed);
        st.state_change_us.store(now, Ordering::Relaxed);
        let state = match ty {
            BackendType::ClientBackend => ActivityState::Idle,
            BackendType::Worker => ActivityState::Active,
            _ => ActivityState::Unknown,
        };
        st.state.store(state as u32, Ordering::Relaxed);
        for f in [
            TextField::Query,
            TextField::ApplicationName,
            TextField::ClientAddr,
        ] {
            st.text.set(f, "");
        }
        let entries = ((st.backend_type.load(Ordering::Relaxed) >> 8) + 1) & 0x00FF_FFFF;
        st.backend_type
            .store(entry_word(entries, ty), Ordering::Relaxed);
        let p = &shm.procs()[procno as usize];
        p.wait_event_info.store(0, Ordering::Relaxed);
        // The first process of a segment dates pg_stat_wal's stats_reset.
        let _ = shm.xlog().wal_stats.stats_reset_us.compare_exchange(
            0,
            now,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        ProcEntry {
            _events: waitevent::install(&p.wait_event_info),
            _counters: install_counters(&st.counters),
            st,
            entries,
        }
    }

    /// The type a slot's process has unless it says otherwise: the
    /// auxiliary process of an auxiliary slot, a client backend in a
    /// backend slot (workload workers then call [`set_backend_type`]).
    pub fn slot_backend_type(shm: &Shmem, procno: u32) -> BackendType {
        use crate::segment::AuxProc;
        match procno.checked_sub(shm.layout().max_backends) {
            None => BackendType::ClientBackend,
            Some(a) if a == AuxProc::Startup as u32 => BackendType::Startup,
            Some(a) if a == AuxProc::Walwriter as u32 => BackendType::Walwriter,
            Some(a) if a == AuxProc::Cleaner as u32 => BackendType::Cleaner,
            Some(_) => BackendType::Checkpointer,
        }
    }

    /// The owner's correction of its type (a workload worker).
    pub fn set_backend_type(shm: &Shmem, procno: u32, ty: BackendType) {
        let word = &shm.proc_stats(procno).backend_type;
        let entries = word.load(Ordering::Relaxed) >> 8;
        word.store(entry_word(entries, ty), Ordering::Relaxed);
        if ty == BackendType::Worker {
            activity_writer(shm, procno).set_state(ActivityState::Active);
        }
    }

    /// The owner's setters for its activity (the connection backend calls
    /// them; text is cut at the field's capacity).
    pub struct ActivityWriter<'a> {
        st: &'a ProcStats,
    }

    /// The activity setters of proc `procno` (the caller owns it).
    pub fn activity_writer(shm: &Shmem, procno: u32) -> ActivityWriter<'_> {
        ActivityWriter {
            st: shm.proc_stats(procno),
        }
    }

    impl ActivityWriter<'_> {
        pub fn set_state(&self, state: ActivityState) {
            if self.st.state.load(Ordering::Relaxed) != state as u32 {
                self.st.state.store(state as u32, Ordering::Relaxed);
                self.st.state_change_us.store(now_us(), Ordering::Relaxed);
            }
        }
        /// The statement now running (also sets query_start).
        pub fn set_query(&self, query: &str) {
            self.st.text.set(TextField::Query, query);
            self.st.query_start_us.store(now_us(), Ordering::Relaxed);
        }
        pub fn set_application_name(&self, name: &str) {
            self.st.text.set(TextField::ApplicationName, name);
        }
        pub fn set_client_addr(&self, addr: &str) {
            self.st.text.set(TextField::ClientAddr, addr);
        }
        /// Start of the current transaction (None: not in one).
        pub fn set_xact_start(&self, at_us: Option<u64>) {
            self.st
                .xact_start_us
                .store(at_us.unwrap_or(0), Ordering::Relaxed);
        }
    }

    /// One row of `pg_stat_activity`.
    #[derive(Clone, Debug, PartialEq)]
    pub struct ProcActivity {
        pub procno: u32,
        pub pid: i32,
        pub backend_type: BackendType,
        /// `backend_type` text.
        pub backend_type_name: &'static str,
        pub state: Option<&'static str>,
        pub wait_event_type: Option<&'static str>,
        pub wait_event: Option<&'static str>,
        /// Unix microseconds.
        pub backend_start_us: Option<u64>,
        pub xact_start_us: Option<u64>,
        pub query_start_us: Option<u64>,
        pub state_change_us: Option<u64>,
        pub backend_xid: Option<u32>,
        pub query: String,
        pub application_name: String,
        pub client_addr: String,
    }

    fn nonzero(v: &AtomicU64) -> Option<u64> {
        Some(v.load(Ordering::Relaxed)).filter(|&x| x != 0)
    }

    /// The slot's type if a live process uses it.
    fn live_type(p: &Proc, st: &ProcStats) -> Option<BackendType> {
        if p.pid.load(Ordering::Relaxed) == 0 {
            return None;
        }
        match entry_type(st.backend_type.load(Ordering::Relaxed)) {
            BackendType::None => None,
            t => Some(t),
        }
    }

    /// Every slot a live process uses, in proc-number order.
    pub fn activity(shm: &Shmem) -> Vec<ProcActivity> {
        let mut out = Vec::new();
        for (i, p) in shm.procs().iter().enumerate() {
            let st = shm.proc_stats(i as u32);
            let Some(ty) = live_type(p, st) else {
                continue;
            };
            let ev = waitevent::read(&p.wait_event_info);
            let xid = p.xid.load(Ordering::Relaxed);
            out.push(ProcActivity {
                procno: i as u32,
                pid: p.pid.load(Ordering::Relaxed),
                backend_type: ty,
                backend_type_name: ty.name(),
                state: ActivityState::from_u32(st.state.load(Ordering::Relaxed)).text(),
                wait_event_type: ev.type_name(),
                wait_event: ev.name(),
                backend_start_us: nonzero(&st.backend_start_us),
                xact_start_us: nonzero(&st.xact_start_us),
                query_start_us: nonzero(&st.query_start_us),
                state_change_us: nonzero(&st.state_change_us),
                backend_xid: (xid != 0).then_some(xid),
                query: st.text.get(TextField::Query),
                application_name: st.text.get(TextField::ApplicationName),
                client_addr: st.text.get(TextField::ClientAddr),
            });
        }
        out
    }

    /// Every slot's counters summed (slots of exited processes included:
    /// the sums never go down).
    pub fn mechanism_totals(shm: &Shmem) -> MechanismTotals {
        let mut t = MechanismTotals::default();
        for i in 0..shm.procs().len() {
            shm.proc_stats(i as u32).counters.add_to(&mut t);
        }
        t
    }

    /// `pg_stat_wal`'s row.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct WalStats {
        pub wal_records: u64,
        pub wal_fpi: u64,
        pub wal_bytes: u64,
        pub wal_buffers_full: u64,
        pub wal_write: u64,
        pub wal_sync: u64,
        /// Microseconds (0 unless track_wal_io_timing is on).
        pub wal_write_time_us: u64,
        pub wal_sync_time_us: u64,
        /// Unix microseconds of the last reset (or of the first process).
        pub stats_reset_us: u64,
    }

    fn wal_sums(shm: &Shmem) -> [u64; 8] {
        let f = mechanism_totals(shm).flat;
        [
            f.wal_records,
            f.wal_fpi,
            f.wal_bytes,
            f.wal_buffers_full,
            f.wal_write,
            f.wal_sync,
            f.wal_write_time_us,
            f.wal_sync_time_us,
        ]
    }

    /// The WAL counters since the last reset.
    pub fn wal_stats(shm: &Shmem) -> WalStats {
        let shared = &shm.xlog().wal_stats;
        let (base, reset) = shared.lock.with(|| {
            let base: [u64; 8] =
                std::array::from_fn(|i| shared.baseline[i].load(Ordering::Relaxed));
            (base, shared.stats_reset_us.load(Ordering::Relaxed))
        });
        let now = wal_sums(shm);
        let d: [u64; 8] = std::array::from_fn(|i| now[i].saturating_sub(base[i]));
        WalStats {
            wal_records: d[0],
            wal_fpi: d[1],
            wal_bytes: d[2],
            wal_buffers_full: d[3],
            wal_write: d[4],
            wal_sync: d[5],
            wal_write_time_us: d[6],
            wal_sync_time_us: d[7],
            stats_reset_us: reset,
        }
    }

    /// `pg_stat_reset_shared('wal')`: the counters restart from zero now.
    pub fn reset_wal_stats(shm: &Shmem) {
        let shared = &shm.xlog().wal_stats;
        let now = wal_sums(shm);
        shared.lock.with(|| {
            for (b, v) in shared.baseline.iter().zip(now) {
                b.store(v, Ordering::Relaxed);
            }
            shared.stats_reset_us.store(now_us(), Ordering::Relaxed);
        });
    }

    /// Wait events seen by repeated sampling of the backends' slots.
    #[derive(Clone, Debug, Default)]
    pub struct WaitSamples {
        /// Backend slot observations (waiting or not).
        pub samples: u64,
        /// Observations per wait event (not waiting: not counted).
        pub counts: BTreeMap<WaitEvent, u64>,
    }

    impl WaitSamples {
        /// "Type:Name" -> share of all backend observations (0..1).
        pub fn shares(&self) -> Vec<(String, f64)> {
            let mut v: Vec<(String, f64)> = self
                .counts
                .iter()
                .filter_map(|(ev, n)| Some((ev.label()?, *n as f64 / self.samples.max(1) as f64)))
                .collect();
            v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            v
        }
    }

    /// One sample: every live backend's wait event into `into`.
    pub fn sample_wait_events(shm: &Shmem, into: &mut WaitSamples) {
        for (i, p) in shm.procs().iter().enumerate() {
            let st = shm.proc_stats(i as u32);
            if !live_type(p, st).is_some_and(BackendType::is_backend) {
                continue;
            }
            into.samples += 1;
            let ev = waitevent::read(&p.wait_event_info);
            if !ev.is_none() {
                *into.counts.entry(ev).or_insert(0) += 1;
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
