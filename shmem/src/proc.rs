//! Proc slots (PostgreSQL's PGPROC): one per process that may take LWLocks.
//!
//! Processes refer to each other by proc number (the index of the slot),
//! never by address. A slot holds the process's semaphore, its LWLock wait
//! state and wait-list links, its transaction state, and counters the
//! benchmark reads. Each slot is padded to 128 bytes so that one process's
//! counter updates never invalidate another's line.
//!
//! Invariants:
//! - `lw_next`/`lw_prev` are read and written only by whoever holds the
//!   wait-list lock of the LWLock the proc is queued on, or by the waker that
//!   moved it to its private wake-up list (until it stores NOT_WAITING).
//! - `lw_waiting` goes NOT_WAITING -> WAITING (the proc itself, under the
//!   wait-list lock) -> PENDING_WAKEUP (a waker, under the wait-list lock; the
//!   modern queue only) -> NOT_WAITING (the waker, Release, after the links
//!   are reset, then posts the semaphore), or WAITING -> NOT_WAITING (the proc
//!   itself when it dequeues itself).
//! - Counters are written only by the owning process (plain load+store of an
//!   atomic, no read-modify-write) and read by anybody.

use crate::crit::CritSlot;
use crate::sema::Semaphore;
use crate::sync::{fence, AtomicI32, AtomicU32, AtomicU64, Ordering};

/// "No proc": end of a list, empty list head.
pub const INVALID_PROCNO: u32 = u32::MAX;

/// `lw_waiting` values.
pub const LW_WS_NOT_WAITING: u32 = 0;
pub const LW_WS_WAITING: u32 = 1;
pub const LW_WS_PENDING_WAKEUP: u32 = 2;

/// Per-process counters, written by the owner only.
#[repr(C)]
#[derive(Default)]
pub struct ProcCounters {
    /// Transactions (workload loop iterations) completed.
    pub transactions: AtomicU64,
    /// LWLock acquisitions (the `lwlock` workload).
    pub lock_acquires: AtomicU64,
    /// Times this proc slept on its semaphore for an LWLock.
    pub lock_sleeps: AtomicU64,
    /// fdatasync calls this process made on WAL.
    pub wal_syncs: AtomicU64,
    /// Commits this process waited for to be flushed.
    pub sync_commits: AtomicU64,
    /// Snapshots that showed one of our own committed XIDs as running
    /// (must stay 0).
    pub snapshot_violations: AtomicU64,
}

impl ProcCounters {
    /// Adds `n` to a counter owned by this process (no atomic RMW needed:
    /// only the owner writes).
    #[inline]
    pub fn bump(counter: &AtomicU64, n: u64) {
        counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    pub fn reset(&self) {
        for c in [
            &self.transactions,
            &self.lock_acquires,
            &self.lock_sleeps,
            &self.wal_syncs,
            &self.sync_commits,
            &self.snapshot_violations,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// One proc slot.
#[repr(C, align(128))]
pub struct Proc {
    /// PID of the process using the slot, 0 when free.
    pub pid: AtomicI32,
    /// The slot's own number (constant after initialization).
    pub procno: AtomicU32,
    /// Wakes this process out of LWLock and group-clear waits.
    pub sem: Semaphore,
    /// LW_WS_* state of an LWLock wait.
    pub lw_waiting: AtomicU32,
    /// The mode (LWLockMode as u32) this proc waits for.
    pub lw_wait_mode: AtomicU32,
    /// Wait-list links (proc numbers).
    pub lw_next: AtomicU32,
    pub lw_prev: AtomicU32,
    /// Free-list link while the slot is unused.
    pub free_next: AtomicU32,
    /// Top-level transaction id (32-bit), 0 when none.
    pub xid: AtomicU32,
    /// Group XID clear: is this proc on the group list / waiting for a leader.
    pub group_clear_member: AtomicU32,
    /// Group XID clear: next proc on the group list.
    pub group_clear_next: AtomicU32,
    /// Group XID clear: the XID the leader must clear for us.
    pub group_clear_xid: AtomicU32,
    /// Secret key a CancelRequest for this backend must present.
    pub cancel_key: AtomicU32,
    /// What this process waits on (`waitevent` encoding, 0 = nothing);
    /// written by the owner only, around its waits.
    pub wait_event_info: AtomicU32,
    pub counters: ProcCounters,
    /// Flush on behalf: the LSN a no-I/O process (a library
    /// worker) waits to see flushed, 0 when it waits for nothing. Set by the
    /// proc itself; the walwriter swaps it to 0 and posts `sem` once the
    /// flush result covers it (see walwriter's notifier).
    pub flush_wanted: AtomicU64,
    /// Deferred commit reply (`commit_reply = flusher`); on its
    /// own lines after the slot's first 128 bytes.
    pub reply: ReplySlot,
    /// What this process holds in shared memory (`crit`); on its own
    /// line.
    pub crit: CritSlot,
}

impl Proc {
    pub fn new(procno: u32) -> Self {
        Proc {
            pid: AtomicI32::new(0),
            procno: AtomicU32::new(procno),
            sem: Semaphore::new(),
            lw_waiting: AtomicU32::new(LW_WS_NOT_WAITING),
            lw_wait_mode: AtomicU32::new(0),
            lw_next: AtomicU32::new(INVALID_PROCNO),
            lw_prev: AtomicU32::new(INVALID_PROCNO),
            free_next: AtomicU32::new(INVALID_PROCNO),
            xid: AtomicU32::new(0),
            group_clear_member: AtomicU32::new(0),
            group_clear_next: AtomicU32::new(INVALID_PROCNO),
            group_clear_xid: AtomicU32::new(0),
            cancel_key: AtomicU32::new(0),
            wait_event_info: AtomicU32::new(0),
            counters: ProcCounters::default(),
            flush_wanted: AtomicU64::new(0),
            reply: ReplySlot::new(),
            crit: CritSlot::new(),
        }
    }

    pub fn procno(&self) -> u32 {
        self.procno.load(Ordering::Relaxed)
    }
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Proc>() == 128 + std::mem::size_of::<ReplySlot>() + 128);
#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<ReplySlot>().is_multiple_of(128));

/// Bytes of reply a [`ReplySlot`] carries (a commit's CommandComplete,
/// DataRow and ReadyForQuery are 20-60 bytes).
pub const REPLY_MAX: usize = 192;
const REPLY_WORDS: usize = REPLY_MAX / 8;

/// `ReplySlot::state` values. Truth table (who moves it, to what):
///
/// | state | meaning | next (by) |
/// | --- | --- | --- |
/// | EMPTY | nothing deferred | PREPARED (owner, at commit) |
/// | PREPARED | commit record inserted, not flushed, XID still set; only the owner looks at it | PENDING (owner, hand-off), EMPTY (owner finished it itself) |
/// | PENDING | handed to the flusher: `lsn`, `xid`, `len` bytes | SENDING (flusher, once `lsn` is flushed) |
/// | SENDING | the flusher clears `xid` and sends | DONE or RETURNED (flusher) |
/// | DONE | XID cleared, bytes sent (or the client is gone) | EMPTY (owner) |
/// | RETURNED | XID cleared, only `sent` of `len` bytes went out | EMPTY (owner, after sending the rest) |
pub const REPLY_EMPTY: u32 = 0;
pub const REPLY_PREPARED: u32 = 1;
pub const REPLY_PENDING: u32 = 2;
pub const REPLY_SENDING: u32 = 3;
pub const REPLY_DONE: u32 = 4;
pub const REPLY_RETURNED: u32 = 5;

/// A commit reply handed from a backend to the flusher
/// (`commit_reply = flusher`; used by `backend::reply`).
///
/// Protocol (the owner is the backend whose slot it is):
/// 1. the owner writes `lsn`, `xid`, `len` and the bytes, then stores
///    PENDING (Release; pairs with the flusher's Acquire `claim`);
/// 2. the flusher claims it (CAS PENDING -> SENDING) only once its flush
///    result covers `lsn`, clears the XID, sends, and stores DONE or
///    RETURNED (`finish`: the store, a SeqCst fence, then a look at
///    `waiting`);
/// 3. the owner, before it reads its next message or writes anything,
///    `settle`s: DONE/RETURNED (Acquire, pairs with `finish`) are taken
///    back to EMPTY; PENDING/SENDING make it set `waiting`, make a SeqCst
///    fence, look at the state again and sleep on its semaphore. Dekker's
///    pattern on (`state`, `waiting`) with a SeqCst fence on both sides
///    (fences, not SeqCst accesses: loom checks this): either the owner
///    sees the final state, or the flusher sees `waiting` and posts (once:
///    it swaps `waiting` to 0). Waits are bounded, so a lost wake-up would
///    cost latency, never progress; a post that arrives after a timed-out
///    wait is absorbed like any other (PGSemaphore semantics).
///
/// `conn` names the connection (0: none): the flusher keeps a duplicate of
/// the socket `fd` of proc `pid` for as long as `conn` stays the same.
#[repr(C, align(128))]
pub struct ReplySlot {
    pub state: AtomicU32,
    pub waiting: AtomicU32,
    pub conn: AtomicU32,
    pub fd: AtomicI32,
    pub xid: AtomicU32,
    pub len: AtomicU32,
    pub sent: AtomicU32,
    /// Connection counter of this slot (owner only): the next `conn`.
    pub conn_seq: AtomicU32,
    /// End of the commit record that must be flushed before the reply.
    pub lsn: AtomicU64,
    bytes: [AtomicU64; REPLY_WORDS],
}

impl Default for ReplySlot {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplySlot {
    pub fn new() -> Self {
        ReplySlot {
            state: AtomicU32::new(REPLY_EMPTY),
            waiting: AtomicU32::new(0),
            conn: AtomicU32::new(0),
            fd: AtomicI32::new(-1),
            xid: AtomicU32::new(0),
            len: AtomicU32::new(0),
            sent: AtomicU32::new(0),
            conn_seq: AtomicU32::new(0),
            lsn: AtomicU64::new(0),
            bytes: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// The state (Acquire: pairs with the Release/SeqCst store that set it).
    pub fn state(&self) -> u32 {
        self.state.load(Ordering::Acquire)
    }

    /// Owner, at commit: the commit ending at `lsn` of `xid` is not flushed
    /// yet and its reply may be handed off.
    pub fn prepare(&self, lsn: u64, xid: u32) {
        self.lsn.store(lsn, Ordering::Relaxed);
        self.xid.store(xid, Ordering::Relaxed);
        self.state.store(REPLY_PREPARED, Ordering::Relaxed);
    }

    /// Owner: drops a PREPARED commit it finished itself.
    pub fn unprepare(&self) {
        self.state.store(REPLY_EMPTY, Ordering::Relaxed);
    }

    /// Owner, step 1: hands `bytes` (at most REPLY_MAX; none: the flusher
    /// only flushes and clears the XID) over. The slot must be PREPARED.
    pub fn hand_off(&self, bytes: &[u8]) {
        debug_assert!(bytes.len() <= REPLY_MAX);
        for (i, chunk) in bytes.chunks(8).enumerate() {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.bytes[i].store(u64::from_le_bytes(word), Ordering::Relaxed);
        }
        self.len.store(bytes.len() as u32, Ordering::Relaxed);
        self.sent.store(0, Ordering::Relaxed);
        // Release: pairs with the Acquire of `claim`.
        self.state.store(REPLY_PENDING, Ordering::Release);
    }

    /// The flush position a PENDING slot waits for (None: not pending).
    pub fn pending_lsn(&self) -> Option<u64> {
        (self.state() == REPLY_PENDING).then(|| self.lsn.load(Ordering::Relaxed))
    }

    /// Flusher, step 2: takes a PENDING slot whose commit `flushed` covers;
    /// returns its XID.
    pub fn claim(&self, flushed: u64) -> Option<u32> {
        if self.state() != REPLY_PENDING || self.lsn.load(Ordering::Relaxed) > flushed {
            return None;
        }
        // Acquire: pairs with the Release in `hand_off` (the bytes and
        // fields written before it are visible).
        self.state
            .compare_exchange(
                REPLY_PENDING,
                REPLY_SENDING,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .ok()
            .map(|_| self.xid.load(Ordering::Relaxed))
    }

    /// The handed-off bytes from `from` on, copied into `into`.
    pub fn copy_bytes(&self, from: usize, into: &mut Vec<u8>) {
        into.clear();
        let len = self.len.load(Ordering::Relaxed) as usize;
        for w in &self.bytes[..len.div_ceil(8)] {
            into.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
        into.truncate(len);
        into.drain(..from.min(len));
    }

    /// Flusher, end of step 2: `sent` of the bytes went out (all of them:
    /// DONE; fewer: RETURNED, the owner sends the rest). Returns true if
    /// the owner waits and must be posted (exactly one caller sees true).
    pub fn finish(&self, sent: usize) -> bool {
        let all = sent >= self.len.load(Ordering::Relaxed) as usize;
        self.sent.store(sent as u32, Ordering::Relaxed);
        let state = if all { REPLY_DONE } else { REPLY_RETURNED };
        // Release: pairs with the owner's Acquire `state()` (it then sees
        // `sent`). The SeqCst fence pairs with the one in `settle_step`:
        // either the owner's second look sees this state, or our swap sees
        // its `waiting`.
        self.state.store(state, Ordering::Release);
        fence(Ordering::SeqCst);
        self.waiting.swap(0, Ordering::Relaxed) != 0
    }

    /// Owner, step 3, one look (see [`Settled`]). `Busy` leaves
    /// `waiting` set after a second look: the caller may sleep on its
    /// semaphore and look again.
    pub fn settle_step(&self) -> Settled {
        let finished = |s: u32| matches!(s, REPLY_DONE | REPLY_RETURNED);
        let mut s = self.state();
        if !finished(s) && !matches!(s, REPLY_PENDING | REPLY_SENDING) {
            return Settled::Nothing;
        }
        if !finished(s) {
            // The SeqCst fence pairs with the one in `finish` (Dekker).
            self.waiting.store(1, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            s = self.state();
            if !finished(s) {
                return Settled::Busy;
            }
        }
        self.waiting.store(0, Ordering::Relaxed);
        let sent = self.sent.load(Ordering::Relaxed) as usize;
        self.state.store(REPLY_EMPTY, Ordering::Relaxed);
        if s == REPLY_DONE {
            Settled::Done
        } else {
            Settled::Returned(sent)
        }
    }
}

/// What the owner's `settle_step` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Nothing handed off (EMPTY or PREPARED).
    Nothing,
    /// The flusher has it still (PENDING or SENDING).
    Busy,
    /// Sent in full (or the client is gone); the slot is EMPTY again.
    Done,
    /// Only this many bytes went out; the owner sends the rest (its copy
    /// is still in the slot, `copy_bytes`). The slot is EMPTY again.
    Returned(usize),
}

/// Capacity of [`FlushWaiters`] in proc numbers: above any `max_procs` the
/// settings allow with a reasonable `--workers` (4096 connections, 1024
/// worker slots, the auxiliary processes); procs beyond it flush as
/// `leader`.
pub const FLUSH_WAITER_CAPACITY: usize = 64 * FLUSH_WAITER_WORDS;
const FLUSH_WAITER_WORDS: usize = 96;

/// Which procs may have a `flush_wanted` set: one bit per proc
/// number, so that the notifier reads a few words instead of every proc
/// slot's line.
///
/// Protocol (the bit is a hint, `flush_wanted` the truth):
/// 1. a waiter stores its `flush_wanted`, then sets its bit (`mark`);
/// 2. the notifier takes a whole word (`take_word`: swap to 0), then looks
///    at `flush_wanted` of every proc whose bit it took, and puts back the
///    bits of those still waiting (`put_back`).
///
/// Invariant: while a proc's `flush_wanted` is nonzero, its bit is set or a
/// notifier that took it has not decided yet. A waiter's `mark` after its
/// store pairs with the notifier's `take_word` (Release/Acquire), so a
/// notifier that takes the bit sees the store it announces; a bit set
/// while the notifier holds the word is simply set again (bits are
/// idempotent). A bit left over after its wait ended (`flush_wanted` 0) is
/// dropped by the next notifier pass.
///
/// A pass ends every covered request (swap to 0) before it posts any
/// (`notify_with`), so that a `hybrid` notifier can first hand the next
/// flush to the oldest uncovered backend (`hand_off`: the same swap, then
/// one post) without the posts, each of which may preempt it, delaying
/// the next fdatasync. Either way each request is posted at most once.
///
/// The baton (`baton`): `hand_off` records the proc it posts (procno + 1;
/// 0 = none; only when no baton is out, so that one notifier never
/// overwrites another's and every baton has exactly one holder to clear it)
/// before ending its request. The holder clears it when it wakes or leads
/// (`take_baton`, `withdraw`). If the holder dies first, whoever cleans up
/// after it takes the baton and runs the notifier pass the handed-off flush
/// would have ended with (`backend::xlog::Xlog::finish_abandoned_flush`),
/// so the other waiters are not left to their timeouts.
#[repr(C, align(128))]
pub struct FlushWaiters {
    words: [AtomicU64; FLUSH_WAITER_WORDS],
    baton: AtomicU32,
}

impl FlushWaiters {
    pub fn new() -> Self {
        FlushWaiters {
            words: std::array::from_fn(|_| AtomicU64::new(0)),
            baton: AtomicU32::new(0),
        }
    }

    /// `me` ends its flush request itself, and clears the baton if it
    /// finds it was handed to `me` meanwhile.
    pub fn withdraw(&self, me: &Proc) {
        // Acquire: pairs with the Release of `end_if_covered`: a request
        // somebody else ended (0) makes a hand-off's baton visible.
        if me.flush_wanted.swap(0, Ordering::Acquire) == 0 {
            self.take_baton(me.procno());
        }
    }

    /// `me` woke (or leads): clears the baton if it was handed to `me`;
    /// true if so.
    pub fn take_baton(&self, me: u32) -> bool {
        // Relaxed: the baton is a record for the clean-up after a dead
        // holder, which takes it under no ordering either.
        self.baton
            .compare_exchange(me + 1, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    fn word_and_bit(procno: u32) -> (usize, u64) {
        let n = procno as usize;
        (n / 64, 1u64 << (n % 64))
    }

    /// Announces that proc `procno` has just stored a `flush_wanted`.
    /// A proc beyond the capacity is not marked: such a process does not
    /// use the hand-off (`backend::xlog` falls back to `leader` for it).
    fn mark(&self, procno: u32) {
        let (w, bit) = Self::word_and_bit(procno);
        if let Some(word) = self.words.get(w) {
            // SeqCst: Release pairs with the Acquire of `take_word` (our
            // `flush_wanted` store is visible to whoever takes the bit), and
            // the total order with the notifier's fence makes "the waiter
            // sees the flush or the notifier sees the bit" hold.
            word.fetch_or(bit, Ordering::SeqCst);
        }
    }

    /// Number of words that cover `max_procs` proc numbers.
    fn words_for(max_procs: u32) -> usize {
        (max_procs as usize).div_ceil(64).min(FLUSH_WAITER_WORDS)
    }

    /// Takes word `w` (clears it); returns the bits that were set.
    fn take_word(&self, w: usize) -> u64 {
        let word = &self.words[w];
        // Cheap test first: most words are empty.
        if word.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        // AcqRel: Acquire pairs with the Release of `mark`.
        word.swap(0, Ordering::AcqRel)
    }

    /// Sets `bits` of word `w` again (procs still waiting).
    fn put_back(&self, w: usize, bits: u64) {
        if bits != 0 {
            // SeqCst: pairs with the fences in a concurrent `notify` (see
            // there): either it takes these bits, or we see its flush.
            self.words[w].fetch_or(bits, Ordering::SeqCst);
        }
    }
}

/// What one notifier pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Notified {
    /// Procs posted.
    pub woken: usize,
    /// Procs still waiting for WAL past the flush result.
    pub waiting: usize,
    /// Of those, how many have a proc number below the pass's
    /// `leaders_below` (backends that can lead a flush themselves).
    pub leaders_waiting: usize,
    /// Of those, the one with the lowest request among proc numbers below
    /// the pass's `leaders_below` (a candidate to hand the flush to, see
    /// `FlushWaiters::hand_off`).
    pub oldest: Option<u32>,
}

/// What the notifier found in one marked proc's `flush_wanted`.
enum Wanted {
    /// Nothing (the wait ended): drop the bit.
    Nothing,
    /// WAL past the flush result (this LSN): keep the bit.
    Later(u64),
    /// Covered: swapped to 0, to be posted.
    Covered,
}

impl FlushWaiters {
    /// A waiter: publishes `lsn` as `me`'s `flush_wanted` and marks it
    /// (step 1 of the protocol). The caller then wakes the flusher and
    /// re-checks the flush result before each sleep.
    pub fn publish(&self, me: &Proc, lsn: u64) {
        // SeqCst: with `mark`'s SeqCst, pairs with the SeqCst fence in
        // `notify`: either the notifier sees our bit and request, or our
        // re-check after our own fence sees its flush result.
        me.flush_wanted.store(lsn, Ordering::SeqCst);
        self.mark(me.procno());
    }

    /// The notifier (after advancing the flush result): posts every marked
    /// proc whose `flush_wanted` is at or below `flushed()`, once each.
    /// Another notifier may hold some bits with an older flush result and
    /// put them back after our pass; so, while procs are left waiting, the
    /// pass repeats if the flush result moved meanwhile.
    pub fn notify(&self, procs: &[Proc], flushed: impl Fn() -> u64) -> Notified {
        self.notify_with(procs, 0, flushed, |_| {})
    }

    /// `notify`, also reporting in `Notified::oldest` the still-waiting
    /// proc below `leaders_below` with the lowest request, and calling
    /// `first` with the result before any post: a hybrid leader hands the
    /// next flush over there, before the posts (each of which may preempt
    /// it) delay the next fdatasync. The covered requests are ended (their
    /// `flush_wanted` swapped to 0) before `first` runs and posted after.
    pub fn notify_with(
        &self,
        procs: &[Proc],
        leaders_below: u32,
        flushed: impl Fn() -> u64,
        first: impl FnOnce(&Notified),
    ) -> Notified {
        let mut covered = [0u64; FLUSH_WAITER_WORDS];
        let n = loop {
            // SeqCst: pairs with the SeqCst store and mark in `publish`
            // (and with the SeqCst put-back of a concurrent notifier).
            fence(Ordering::SeqCst);
            let at = flushed();
            let n = self.pass(procs, at, leaders_below, &mut covered);
            if n.waiting == 0 {
                break n;
            }
            // SeqCst: orders our put-backs before the re-read, against a
            // concurrent notifier's flush-result update and fence.
            fence(Ordering::SeqCst);
            if flushed() == at {
                break n;
            }
        };
        first(&n);
        Self::post_covered(procs, &covered);
        n
    }

    /// Posts every proc whose bit is set in `covered` (requests a pass
    /// ended). The post's Release orders the flush result before the
    /// waiter's wake-up (pairs with the Acquire consume in
    /// `Semaphore::wait_inner`).
    fn post_covered(procs: &[Proc], covered: &[u64]) {
        for (w, &word) in covered.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if let Some(p) = procs.get(w * 64 + b) {
                    p.sem.post();
                }
            }
        }
    }

    /// One pass over the marked procs with flush result `flushed`; the
    /// covered ones are ended and added to `covered` (posted later).
    fn pass(
        &self,
        procs: &[Proc],
        flushed: u64,
        leaders_below: u32,
        covered: &mut [u64; FLUSH_WAITER_WORDS],
    ) -> Notified {
        let mut n = Notified::default();
        let mut oldest_lsn = u64::MAX;
        let words = Self::words_for(procs.len() as u32);
        for (w, covered_here) in covered.iter_mut().enumerate().take(words) {
            let mut bits = self.take_word(w);
            let mut keep = 0u64;
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                let Some(p) = procs.get(w * 64 + b as usize) else {
                    continue;
                };
                match Self::end_if_covered(p, flushed) {
                    Wanted::Nothing => {}
                    Wanted::Later(lsn) => {
                        keep |= 1 << b;
                        n.waiting += 1;
                        let procno = (w * 64) as u32 + b;
                        if procno < leaders_below {
                            n.leaders_waiting += 1;
                            if lsn < oldest_lsn {
                                oldest_lsn = lsn;
                                n.oldest = Some(procno);
                            }
                        }
                    }
                    Wanted::Covered => {
                        *covered_here |= 1 << b;
                        n.woken += 1;
                    }
                }
            }
            self.put_back(w, keep);
        }
        n
    }

    /// Swaps `p`'s `flush_wanted` to 0 if `flushed` covers it (the caller
    /// then posts it, once).
    fn end_if_covered(p: &Proc, flushed: u64) -> Wanted {
        let mut wanted = p.flush_wanted.load(Ordering::Relaxed);
        loop {
            if wanted == 0 {
                return Wanted::Nothing;
            }
            if wanted > flushed {
                return Wanted::Later(wanted);
            }
            // Release: pairs with the Acquire of `withdraw` (a hand-off's
            // baton store before it is visible to a waiter who finds its
            // request ended). The later post's Release publishes the flush
            // result (see `post_covered`); the swap makes the post happen
            // at most once per request.
            match p
                .flush_wanted
                .compare_exchange(wanted, 0, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return Wanted::Covered,
                // The waiter ended its wait or published again: look again.
                Err(now) => wanted = now,
            }
        }
    }
}

impl FlushWaiters {
    /// Hands the next flush to waiting proc `procno` (`group_commit =
    /// hybrid`, after a flush left it uncovered): ends its request (swaps
    /// `flush_wanted` to 0, as a notifier does) and posts it, so that it
    /// wakes, finds its WAL not flushed and tries to lead. False if its
    /// request already ended or changed: then it is awake anyway (it
    /// re-publishes only after waking, and tries to lead before sleeping
    /// again). At most one post per request, as with `notify`.
    pub fn hand_off(&self, procs: &[Proc], procno: u32) -> bool {
        let Some(p) = procs.get(procno as usize) else {
            return false;
        };
        // Every request counts as covered here; the post's Release orders
        // what we did before it (our flush) before the woken proc's look.
        // The baton goes out before the request ends: a waiter that ends
        // its own wait after our swap (`withdraw`) then sees it (the swap's
        // Release pairs with `withdraw`'s Acquire) and clears it.
        // Only into an empty slot: a concurrent notifier's baton is never
        // overwritten (its holder clears only its own).
        let baton = self
            .baton
            .compare_exchange(0, procno + 1, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok();
        if !matches!(Self::end_if_covered(p, u64::MAX), Wanted::Covered) {
            if baton {
                let _ = self.take_baton(procno);
            }
            return false;
        }
        p.sem.post();
        true
    }
}

impl Default for FlushWaiters {
    fn default() -> Self {
        Self::new()
    }
}
