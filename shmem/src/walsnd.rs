//! Replication state in shared memory: the walsender array (PostgreSQL's
//! WalSndCtl), the replication slots (ReplicationSlotCtl) and the
//! synchronous-replication wait queue (SyncRepQueue); and the
//! `synchronous_commit` levels ([`SyncCommit`]).
//!
//! Two regions: [`ReplCtl`] (one; fixed-capacity arrays of
//! [`MAX_WAL_SENDERS`] walsenders and [`MAX_SLOTS`] slots, so that the
//! settings only bound how many are used) and [`SyncRepWaiter`] (one per
//! proc slot). All-zero bytes are the valid initial state of both; proc
//! numbers are stored plus one so that 0 means "none".
//!
//! Lock inventory: `ReplCtl::lock` (a spinlock, held for a few loads and
//! stores, never across file I/O, a wait or a wake-up: the sync-rep release
//! posts the released waiters' semaphores after unlocking it) protects
//! * allocation of walsender entries (`WalSnd::pid` 0 <-> nonzero) and slot
//!   entries (`SlotShared::in_use`), and a slot's `active_pid`;
//! * the sync-rep queue: `queue_head`/`queue_tail` and every waiter's
//!   `next`/`prev`/`state` while queued.
//!
//! The positions a walsender publishes (`sent`, `write`, `flush`, ...) are
//! single atomics written only by their walsender and read without a lock
//! (monitoring, and the sync-rep release computed by walsenders).
//!
//! Waking a walsender: a walsender that is about to sleep sets its bit in
//! `sleeping` and then re-checks the flush position; whoever advances the
//! flush position stores it and then swaps `sleeping` to zero and sends
//! SIGURG to each walsender whose bit was set ([`wake_walsenders`]). Both
//! sides put a SeqCst fence between their store and their load (Dekker), so
//! either the walsender sees the new flush position or the flusher sees
//! the bit; the walsender blocks SIGURG outside of its `ppoll`, which
//! unblocks it atomically, so a signal sent between the re-check and the
//! sleep is not lost. SIGURG's default action is to ignore it, so a signal
//! to a pid that has just exited (or been reused) is harmless.
//!
//! Flow control (`max_replication_lag`, walshm's own; [`ThrottleCtl`], its own
//! cache line): `allowed_upto` is the "throttle point" walsenders publish
//! (under `ReplCtl::lock`, so that concurrent publishers cannot leave an
//! older minimum behind a newer one): the least write position reported by
//! the receivers of the streaming walsenders plus the limit, 0 when no
//! receiver counts (throttling off). Inserting backends read it every few
//! kB of WAL and never write it. A throttled backend counts itself in
//! `waiters`, reads `seq`, re-checks, and sleeps on `seq` as a futex; a
//! publisher stores the new point, increments `seq` and, when `waiters` is
//! nonzero, wakes every sleeper. All of these are SeqCst: either the
//! sleeper's re-check sees the new positions or its futex wait finds `seq`
//! changed and returns at once, and either the publisher sees `waiters`
//! nonzero or the sleeper's `seq` load sees the increment (no lost
//! wake-up; the sleep also has a timeout as a guard). So that a
//! publication wakes nobody in vain, a sleeper first lowers
//! `wake_at_write` to the receivers' write position it waits for and
//! re-checks after a SeqCst fence; a publisher, after storing the
//! positions and a SeqCst fence, wakes only when they reached it (Dekker
//! again: either the sleeper's re-check sees the positions or the
//! publisher sees its target).

use crate::spin::SpinLock;
use crate::sync::{fence, AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering};

/// Capacity of the walsender array (the bound of `max_wal_senders`; one
/// bit each in `ReplCtl::sleeping`).
pub const MAX_WAL_SENDERS: usize = 32;
/// Capacity of the slot array (the bound of `max_replication_slots`).
pub const MAX_SLOTS: usize = 32;
/// Bytes of a name in shared memory (PostgreSQL's NAMEDATALEN).
pub const NAME_BYTES: usize = 64;

/// A NUL-padded name of at most `NAME_BYTES - 1` bytes, as atomics (written
/// before the owner publishes the entry, read by monitors).
#[repr(C)]
#[derive(Default)]
pub struct ShName {
    words: [AtomicU64; NAME_BYTES / 8],
}

impl ShName {
    /// Stores `name`, cut at `NAME_BYTES - 1` bytes (on a char boundary).
    pub fn store(&self, name: &str) {
        let mut cut = name.len().min(NAME_BYTES - 1);
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut bytes = [0u8; NAME_BYTES];
        bytes[..cut].copy_from_slice(&name.as_bytes()[..cut]);
        for (w, chunk) in self.words.iter().zip(bytes.chunks_exact(8)) {
            let mut a = [0u8; 8];
            a.copy_from_slice(chunk);
            // Relaxed: published by the owner's Release store of its entry.
            w.store(u64::from_ne_bytes(a), Ordering::Relaxed);
        }
    }

    pub fn load(&self) -> String {
        let mut bytes = Vec::with_capacity(NAME_BYTES);
        for w in &self.words {
            // Relaxed: see `store`.
            bytes.extend_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
        }
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        String::from_utf8_lossy(&bytes[..end]).into_owned()
    }
}

/// WalSnd::state values (pg_stat_replication.state).
pub mod sender_state {
    pub const STARTUP: u32 = 0;
    pub const CATCHUP: u32 = 1;
    pub const STREAMING: u32 = 2;
    pub const STOPPING: u32 = 3;

    pub fn name(state: u32) -> &'static str {
        match state {
            CATCHUP => "catchup",
            STREAMING => "streaming",
            STOPPING => "stopping",
            _ => "startup",
        }
    }
}

/// WalSnd::sync_state values (pg_stat_replication.sync_state).
pub mod sync_state {
    pub const ASYNC: u32 = 0;
    pub const POTENTIAL: u32 = 1;
    pub const SYNC: u32 = 2;
    pub const QUORUM: u32 = 3;

    pub fn name(state: u32) -> &'static str {
        match state {
            POTENTIAL => "potential",
            SYNC => "sync",
            QUORUM => "quorum",
            _ => "async",
        }
    }
}

/// One walsender (PostgreSQL's WalSnd). `pid` 0: free.
#[repr(C)]
#[derive(Default)]
pub struct WalSnd {
    pub pid: AtomicI32,
    pub state: AtomicU32,
    /// Sent up to (exclusive), and what the receiver reported.
    pub sent: AtomicU64,
    pub write: AtomicU64,
    pub flush: AtomicU64,
    pub apply: AtomicU64,
    /// The receiver reports flush positions (it is a sync-rep candidate).
    pub reports_flush: AtomicU32,
    /// The standby's clock in its last status update (microseconds since
    /// 2000-01-01, any value it sent), 0 = none; pg_stat_replication shows
    /// NULL for 0 and for a time timestamptz cannot show.
    pub reply_time: AtomicI64,
    pub backend_start: AtomicI64,
    /// Position of `application_name` in synchronous_standby_names (0 = not listed).
    pub sync_priority: AtomicU32,
    pub sync_state: AtomicU32,
    /// The slot this walsender streams for, plus one (0: none).
    pub slot: AtomicU32,
    /// write_lag, flush_lag, replay_lag in microseconds (-1: NULL), as the
    /// walsender's lag tracker last measured them.
    pub write_lag: AtomicI64,
    pub flush_lag: AtomicI64,
    pub replay_lag: AtomicI64,
    pub application_name: ShName,
    /// The role the replication connection logged in as.
    pub usename: ShName,
}

/// One replication slot. `in_use` 0: free.
#[repr(C)]
#[derive(Default)]
pub struct SlotShared {
    pub in_use: AtomicU32,
    /// The walsender streaming from it (0: inactive).
    pub active_pid: AtomicI32,
    /// Oldest WAL the slot needs (0: none reserved).
    pub restart_lsn: AtomicU64,
    /// `restart_lsn` as last written to the slot's state file.
    pub saved_lsn: AtomicU64,
    /// 1 when max_slot_wal_keep_size made the checkpointer remove WAL it
    /// needed (wal_status 'lost').
    pub lost: AtomicU32,
    /// A temporary slot is dropped when its session ends, never saved.
    pub temporary: AtomicU32,
    /// 1: a logical slot (the fields below mean something), 0: physical.
    pub logical: AtomicU32,
    /// Logical: the client confirmed everything committed before this
    /// position; decoding resumes with the first commit at or after it.
    pub confirmed_flush: AtomicU64,
    /// `confirmed_flush` as last written to the slot's state file.
    pub saved_confirmed: AtomicU64,
    /// Logical: 1 when created with two-phase decoding enabled.
    pub two_phase: AtomicU32,
    pub name: ShName,
    /// Logical: the output plugin's name.
    pub plugin: ShName,
    /// Logical: the database the slot decodes for.
    pub database: ShName,
}

/// The ReplCtl region (see the module header).
#[repr(C)]
#[derive(Default)]
pub struct ReplCtl {
    pub lock: SpinLock,
    /// Bit i: walsender i is about to sleep and wants a wake-up.
    pub sleeping: AtomicU32,
    /// 0: slots not read from disk in this generation yet; 1: being read;
    /// 2: read.
    pub slots_loaded: AtomicU32,
    /// Segments below this one are being or have been removed by the
    /// checkpointer (published before it removes them).
    pub removed_below_seg: AtomicU64,
    /// Upper bound of what the checkpointer may remove, published before
    /// it reads the slots (a slot reserving WAL below it reserves again).
    pub removal_intent_seg: AtomicU64,
    /// Sync-rep queue, waiters in LSN order (proc numbers plus one).
    pub queue_head: AtomicU32,
    pub queue_tail: AtomicU32,
    /// Highest LSN the sync standbys have written / flushed (what the last
    /// release pass covered).
    pub released_write: AtomicU64,
    pub released_flush: AtomicU64,
    pub released_apply: AtomicU64,
    /// Commits released so far, and release passes that released any
    /// (commits released per status update = their ratio).
    pub released_commits: AtomicU64,
    pub release_passes: AtomicU64,
    /// CLOCK_MONOTONIC time (ns, [`crate::clock::monotonic_ns`]) of the last advance of
    /// the flush position, stored by the flusher after its flush_result
    /// store: the walsenders' round timings (`replication::roundstats`) only.
    pub flushed_at_ns: AtomicU64,
    pub senders: [WalSnd; MAX_WAL_SENDERS],
    pub slots: [SlotShared; MAX_SLOTS],
    /// Flow control (`max_replication_lag`, see the module header).
    pub throttle: ThrottleCtl,
    /// A standby's walreceiver and replay state (`crate::walrcv`).
    pub walrcv: crate::walrcv::WalRcvShared,
}

/// Flow control of inserting backends by the receivers' progress
/// (`max_replication_lag`; see the module header). Alone on its cache
/// line: backends read `allowed_upto` on their insert path, and the
/// sync-rep queue's lock beside it is written at every synchronous commit.
#[repr(C, align(128))]
#[derive(Default)]
pub struct ThrottleCtl {
    /// Insertions may go on while the insert position is at or below this
    /// LSN; 0: no receiver counts, nobody is throttled.
    pub allowed_upto: AtomicU64,
    /// Bumped after each publication of `allowed_upto`: the futex word
    /// throttled backends sleep on.
    pub seq: AtomicU32,
    /// Backends in the throttle wait (publishers wake only when nonzero).
    pub waiters: AtomicU32,
    /// The least write position (W) a throttled backend waits for: a
    /// publisher wakes the waiters only once W reaches it, then sets it
    /// to u64::MAX (waiters lower it with fetch_min before they sleep; 0,
    /// the initial state, wakes at every publication).
    pub wake_at_write: AtomicU64,
    /// Throttle waits that slept, and their total time in microseconds
    /// (`postmaster status --json`: `throttle`).
    pub waits: AtomicU64,
    pub wait_us: AtomicU64,
}

/// How a sleep on a sequence futex word (`ThrottleCtl::seq`) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqSleep {
    /// Woken, or the word had already changed.
    Woken,
    TimedOut,
    /// A signal handler ran (a cancel, a library worker's SIGTERM: let the
    /// caller look at its flags).
    Interrupted,
}

#[cfg(not(loom))]
impl ThrottleCtl {
    /// Sleeps while `seq` still holds `seen`, at most `timeout`.
    pub fn sleep(&self, seen: u32, timeout: std::time::Duration) -> SeqSleep {
        let deadline = crate::clock::monotonic_ns() + timeout.as_nanos() as u64;
        match crate::futex::wait(&self.seq, seen, Some(deadline), crate::futex::ANY) {
            crate::futex::Wait::Woken => SeqSleep::Woken,
            crate::futex::Wait::TimedOut => SeqSleep::TimedOut,
            crate::futex::Wait::Interrupted => SeqSleep::Interrupted,
        }
    }

    /// After a new `allowed_upto` (or a receiver left): bumps `seq` and
    /// wakes every throttled backend. One add and one load when none waits.
    pub fn wake_all(&self) {
        // SeqCst: pairs with the SeqCst increment of `waiters` and load of
        // `seq` by the sleeper (see the module header).
        self.seq.fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) == 0 {
            return;
        }
        crate::futex::wake(&self.seq, i32::MAX, crate::futex::ANY);
    }
}

/// SyncRepWaiter::state values.
pub mod wait_state {
    pub const NOT_WAITING: u32 = 0;
    pub const WAITING: u32 = 1;
    pub const RELEASED: u32 = 2;
}

/// Sync-rep wait-queue mode: what a waiter needs the standbys to report.
pub mod wait_mode {
    pub const WRITE: u32 = 0;
    pub const FLUSH: u32 = 1;
    /// remote_apply: the standbys applied (replayed) it. pg_receivewal
    /// reports no apply position, so such a waiter is never released by
    /// it (as in PostgreSQL: its commits block until cancelled).
    pub const APPLY: u32 = 2;
}

/// `synchronous_commit` (PostgreSQL's values and spellings): what a commit
/// waits for before it is acknowledged.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncCommit {
    /// No wait: the walwriter flushes within wal_writer_delay.
    Off,
    /// The local flush only (no standby).
    Local,
    /// The local flush and the synchronous standbys' write.
    RemoteWrite,
    /// The local flush and the synchronous standbys' flush.
    On,
    /// The local flush and the synchronous standbys' apply.
    RemoteApply,
}

impl SyncCommit {
    /// The values PostgreSQL lists in its hint (the boolean spellings are
    /// accepted too but not listed, as in PostgreSQL).
    pub const VALID: &'static str = "local, remote_write, remote_apply, on, off";

    /// Parses a value, case-insensitively: the five names and on/off's
    /// other spellings true/yes/1 and false/no/0.
    pub fn parse(value: &str) -> Option<SyncCommit> {
        Some(match value.trim().to_ascii_lowercase().as_str() {
            "off" | "false" | "no" | "0" => SyncCommit::Off,
            "local" => SyncCommit::Local,
            "remote_write" => SyncCommit::RemoteWrite,
            "on" | "true" | "yes" | "1" => SyncCommit::On,
            "remote_apply" => SyncCommit::RemoteApply,
            _ => return None,
        })
    }

    /// The canonical name SHOW prints.
    pub fn name(self) -> &'static str {
        match self {
            SyncCommit::Off => "off",
            SyncCommit::Local => "local",
            SyncCommit::RemoteWrite => "remote_write",
            SyncCommit::On => "on",
            SyncCommit::RemoteApply => "remote_apply",
        }
    }

    /// Does a commit wait for its local flush (everything but off)?
    pub fn flushes_locally(self) -> bool {
        self != SyncCommit::Off
    }

    /// The sync-rep wait mode, None for off and local.
    pub fn wait_mode(self) -> Option<u32> {
        match self {
            SyncCommit::Off | SyncCommit::Local => None,
            SyncCommit::RemoteWrite => Some(wait_mode::WRITE),
            SyncCommit::On => Some(wait_mode::FLUSH),
            SyncCommit::RemoteApply => Some(wait_mode::APPLY),
        }
    }
}

/// One proc's sync-rep wait (PostgreSQL's PGPROC waitLSN / syncRepState /
/// syncRepLinks). Queue fields under `ReplCtl::lock`.
#[repr(C)]
#[derive(Default)]
pub struct SyncRepWaiter {
    pub lsn: AtomicU64,
    pub mode: AtomicU32,
    pub state: AtomicU32,
    pub next: AtomicU32,
    pub prev: AtomicU32,
}

impl ReplCtl {
    /// Marks walsender `i` as about to sleep; the caller re-checks the
    /// flush position afterwards (see the module header).
    pub fn announce_sleep(&self, i: usize) {
        // SeqCst with the fence: pairs with the fence in `wake_walsenders`
        // (store sleeping, then load flush; the flusher stores flush, then
        // loads sleeping).
        self.sleeping.fetch_or(1 << i, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Clears walsender `i`'s sleeping bit (it woke up by itself).
    pub fn cancel_sleep(&self, i: usize) {
        self.sleeping.fetch_and(!(1 << i), Ordering::Relaxed);
    }
}

/// After the flush position advanced: wakes every walsender that announced
/// it is going to sleep. Costs one fence and one load when none sleeps.
pub fn wake_walsenders(ctl: &ReplCtl) {
    // Pairs with the fence in `announce_sleep`.
    fence(Ordering::SeqCst);
    if ctl.sleeping.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut bits = ctl.sleeping.swap(0, Ordering::AcqRel);
    while bits != 0 {
        let i = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        let pid = ctl.senders[i].pid.load(Ordering::Relaxed);
        if pid > 0 {
            // SAFETY: kill has no memory effects; SIGURG is ignored by
            // default by a process that is not a walsender.
            unsafe { libc::kill(pid, libc::SIGURG) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_cut() {
        let n = ShName::default();
        n.store("pg_receivewal");
        assert_eq!(n.load(), "pg_receivewal");
        let long = "é".repeat(40);
        n.store(&long);
        assert!(n.load().len() < NAME_BYTES);
        assert!(long.starts_with(&n.load()));
    }

    #[test]
    fn synchronous_commit_takes_postgresql_values_and_spellings() {
        for (text, v) in [
            ("OFF", SyncCommit::Off),
            ("no", SyncCommit::Off),
            ("0", SyncCommit::Off),
            ("local", SyncCommit::Local),
            ("Remote_Write", SyncCommit::RemoteWrite),
            ("true", SyncCommit::On),
            ("1", SyncCommit::On),
            ("remote_apply", SyncCommit::RemoteApply),
        ] {
            assert_eq!(SyncCommit::parse(text), Some(v), "{text}");
            assert_eq!(SyncCommit::parse(v.name()), Some(v));
        }
        assert_eq!(SyncCommit::parse("remote"), None);
        assert_eq!(SyncCommit::parse("o"), None);
        assert_eq!(SyncCommit::Local.wait_mode(), None);
        assert!(SyncCommit::Local.flushes_locally());
        assert!(!SyncCommit::Off.flushes_locally());
    }

    #[test]
    fn all_zero_is_the_initial_state() {
        let c = ReplCtl::default();
        assert_eq!(c.queue_head.load(Ordering::Relaxed), 0);
        assert!(c.senders.iter().all(|s| s.pid.load(Ordering::Relaxed) == 0));
        c.announce_sleep(3);
        assert_eq!(c.sleeping.load(Ordering::Relaxed), 8);
        wake_walsenders(&c); // pid 0: no signal sent
        assert_eq!(c.sleeping.load(Ordering::Relaxed), 0);
    }
}

/// `synchronous_standby_names` (PostgreSQL's syncrep_gram.y), parsed:
///
/// ```text
/// ''                          no synchronous replication
/// s1, s2, ...                 FIRST 1 (s1, s2, ...)
/// N (s1, ...)                 FIRST N (s1, ...)   (the pre-9.6 spelling)
/// FIRST N (s1, ...)           the N listed standbys of highest priority
/// ANY N (s1, ...)             a quorum: any N of the listed standbys
/// ```
///
/// A name is an identifier, a number, a double-quoted string, or `*`
/// (every standby). Names match application_name case-insensitively.
pub mod standby_names {
    /// How the synchronous standbys are chosen.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Method {
        Priority,
        Quorum,
    }

    /// A parsed, non-empty synchronous_standby_names.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct StandbyNames {
        pub method: Method,
        pub num_sync: u32,
        pub names: Vec<String>,
    }

    impl StandbyNames {
        /// The 1-based priority of `application_name` (its first match
        /// in the list), or 0 when it is not listed.
        pub fn priority(&self, application_name: &str) -> u32 {
            self.names
                .iter()
                .position(|n| n == "*" || n.eq_ignore_ascii_case(application_name))
                .map_or(0, |i| i as u32 + 1)
        }
    }

    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Tok {
        Name(String),
        Num(u32),
        Open,
        Close,
        Comma,
    }

    fn tokens(text: &str) -> Result<Vec<Tok>, String> {
        let mut out = Vec::new();
        let mut chars = text.char_indices().peekable();
        while let Some(&(i, c)) = chars.peek() {
            match c {
                c if c.is_whitespace() => {
                    chars.next();
                }
                '(' | ')' | ',' => {
                    chars.next();
                    out.push(match c {
                        '(' => Tok::Open,
                        ')' => Tok::Close,
                        _ => Tok::Comma,
                    });
                }
                '*' => {
                    chars.next();
                    out.push(Tok::Name("*".into()));
                }
                '"' => {
                    chars.next();
                    let mut s = String::new();
                    loop {
                        match chars.next() {
                            Some((_, '"')) if chars.peek().map(|p| p.1) == Some('"') => {
                                chars.next();
                                s.push('"');
                            }
                            Some((_, '"')) => break,
                            Some((_, ch)) => s.push(ch),
                            None => return Err("unterminated quoted identifier".into()),
                        }
                    }
                    out.push(Tok::Name(s));
                }
                c if c.is_alphanumeric() || c == '_' || c == '$' => {
                    let mut end = i;
                    while let Some(&(j, ch)) = chars.peek() {
                        if !(ch.is_alphanumeric() || ch == '_' || ch == '$' || ch == '-') {
                            break;
                        }
                        end = j + ch.len_utf8();
                        chars.next();
                    }
                    let word = &text[i..end];
                    if word.bytes().all(|b| b.is_ascii_digit()) {
                        let n = word
                            .parse()
                            .map_err(|_| format!("number out of range: {word}"))?;
                        out.push(Tok::Num(n));
                    } else {
                        out.push(Tok::Name(word.to_string()));
                    }
                }
                other => return Err(format!("syntax error at or near \"{other}\"")),
            }
        }
        Ok(out)
    }

    fn is_keyword(t: Option<&Tok>, kw: &str) -> bool {
        matches!(t, Some(Tok::Name(n)) if n.eq_ignore_ascii_case(kw))
    }

    /// Parses the setting; Ok(None) for the empty string (no sync rep).
    pub fn parse(text: &str) -> Result<Option<StandbyNames>, String> {
        let toks = tokens(text)?;
        if toks.is_empty() {
            return Ok(None);
        }
        let (method, rest) = match (toks.first(), toks.get(1)) {
            (t, Some(Tok::Num(_))) if is_keyword(t, "any") => (Method::Quorum, &toks[1..]),
            (t, Some(Tok::Num(_))) if is_keyword(t, "first") => (Method::Priority, &toks[1..]),
            _ => (Method::Priority, &toks[..]),
        };
        let (num_sync, list) = match rest {
            [Tok::Num(n), Tok::Open, inner @ .., Tok::Close] => (*n, inner),
            [Tok::Num(_), ..] if rest.len() == 1 => (1, rest),
            _ if method == Method::Priority && !rest.contains(&Tok::Open) => (1, rest),
            _ => return Err("syntax error".into()),
        };
        if num_sync == 0 {
            return Err(format!(
                "number of synchronous standbys ({num_sync}) must be greater than zero"
            ));
        }
        let mut names = Vec::new();
        for (i, t) in list.iter().enumerate() {
            match (i % 2, t) {
                (0, Tok::Name(n)) => names.push(n.clone()),
                (0, Tok::Num(n)) => names.push(n.to_string()),
                (1, Tok::Comma) => {}
                _ => return Err("syntax error".into()),
            }
        }
        if names.is_empty() || list.len() % 2 == 0 {
            return Err("syntax error".into());
        }
        Ok(Some(StandbyNames {
            method,
            num_sync,
            names,
        }))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn names(v: &[&str]) -> Vec<String> {
            v.iter().map(|s| s.to_string()).collect()
        }

        #[test]
        fn postgresql_documented_examples() {
            // "synchronous_standby_names = 'FIRST 2 (s1, s2, s3)'"
            assert_eq!(
                parse("FIRST 2 (s1, s2, s3)").unwrap().unwrap(),
                StandbyNames {
                    method: Method::Priority,
                    num_sync: 2,
                    names: names(&["s1", "s2", "s3"])
                }
            );
            // "synchronous_standby_names = 'ANY 2 (s1, s2, s3)'"
            let any = parse("ANY 2 (s1, s2, s3)").unwrap().unwrap();
            assert_eq!((any.method, any.num_sync), (Method::Quorum, 2));
            // The pre-9.6 list form: FIRST 1.
            let list = parse("s1, s2").unwrap().unwrap();
            assert_eq!((list.method, list.num_sync), (Method::Priority, 1));
            assert_eq!(list.names, names(&["s1", "s2"]));
            // "num_sync (standby_name [, ...])" without a keyword.
            assert_eq!(parse("2 (s1, s2)").unwrap().unwrap().num_sync, 2);
            assert_eq!(parse("*").unwrap().unwrap().names, names(&["*"]));
            assert_eq!(parse("  ").unwrap(), None);
            let q = parse("first 1 (\"My Standby\", *)").unwrap().unwrap();
            assert_eq!(q.names, names(&["My Standby", "*"]));
        }

        #[test]
        fn priority_is_the_first_match_case_insensitively() {
            let s = parse("FIRST 1 (a, pg_receivewal, *)").unwrap().unwrap();
            assert_eq!(s.priority("PG_RECEIVEWAL"), 2);
            assert_eq!(s.priority("a"), 1);
            assert_eq!(s.priority("other"), 3);
            assert_eq!(parse("a").unwrap().unwrap().priority("b"), 0);
        }

        #[test]
        fn malformed_values_are_errors() {
            for bad in [
                "FIRST 0 (a)",
                "ANY 2 (a, b",
                "ANY (a)",
                "a,,b",
                "a b",
                "(a)",
                "ANY 1 ()",
                "\"open",
                "a;b",
            ] {
                assert!(parse(bad).is_err(), "{bad}");
            }
        }
    }
}
