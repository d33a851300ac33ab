//! Synchronous replication (PostgreSQL's syncrep.c): a committing backend
//! waits, after its local flush, until the synchronous standbys named by
//! `synchronous_standby_names` have reported the write (`synchronous_commit
//! = remote_write`), the flush (`on`) or the apply (`remote_apply`) of its
//! commit record; walsenders release the waiters. `local` and `off` never
//! wait here. pg_receivewal reports no apply position (0), so with it as
//! the synchronous standby a `remote_apply` commit waits until cancelled:
//! PostgreSQL does the same (its documentation warns against the
//! combination).
//!
//! The queue (shared memory, `shmem::walsnd`): waiters are linked in LSN
//! order through their `SyncRepWaiter` entries (proc numbers plus one),
//! under `ReplCtl::lock`. Protocol, and the race each step closes:
//! 1. waiter, fast path: if `released_<mode>` already covers its LSN it
//!    does not wait (Acquire, pairs with the releaser's Release store);
//! 2. waiter: under the lock, re-check `released_<mode>` (a release pass
//!    that raised it has finished its walk, so a waiter that missed it
//!    would never be woken), then link itself in LSN order (walking back
//!    from the tail: new commits mostly have the highest LSN) with state
//!    WAITING, unlock, and sleep on its proc semaphore;
//! 3. releaser (a walsender, after a status update): compute what the
//!    synchronous standbys have written, flushed and applied; under the
//!    lock raise `released_write` / `_flush` / `_apply`, then walk the queue from its
//!    head and unlink every waiter whose LSN is now covered, set it
//!    RELEASED (Release, pairs with the waiter's Acquire load); after the
//!    unlock post their semaphores — one pass releases the whole group,
//!    in LSN order;
//! 4. waiter: wakes, sees RELEASED, returns. Spurious wake-ups (a stale
//!    semaphore post) just loop; the sleeps are bounded (`WAIT_SLICE`) so
//!    that cancel and shutdown flags are seen.
//!
//! Interruptions: a cancel request ends the wait with a WARNING (the
//! commit is already durable locally, as PostgreSQL says); a fast shutdown
//! ends the process without acknowledging the commit (PostgreSQL's backend
//! dies without sending the result). A waiter that leaves unlinks itself
//! under the lock unless a releaser already did.
//!
//! With no synchronous standby connected commits wait, as in PostgreSQL.
//!
//! One sleep per commit (`sync_rep_one_sleep = on`, the default; walshm's own):
//! PostgreSQL's committer sleeps twice, for its local flush (XLogFlush)
//! and then here. A walsender sends only WAL below the local flush
//! position, so a standby's write or flush report at or past L implies
//! that the local flush reached L. The committer therefore only makes
//! sure a local flush to its LSN is done or under way
//! (`Xlog::request_flush`: flush as a leader if WALWriteLock is free, or
//! set the walwriter's latch) and sleeps once, in this queue; `xact`
//! checks the local flush after the wait (a cancelled wait flushes
//! locally before it returns). `off` keeps PostgreSQL's order.

use crate::context::ProcContext;
use crate::process::{log, shutdown_requested, CANCEL_REQUESTED, EXIT_FATAL};
use shmem::sync::{AtomicU32, Ordering};
use shmem::walsnd::standby_names::{self, Method, StandbyNames};
use shmem::walsnd::{sync_state, wait_mode, wait_state, ReplCtl, SyncCommit, SyncRepWaiter};
use shmem::Shmem;
use std::sync::atomic::AtomicU8;
use std::sync::OnceLock;
use std::time::Duration;

/// How long a waiter sleeps before it looks at shutdown and cancel flags.
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// What a commit waits for, per `synchronous_commit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// off, local: no wait for standbys.
    Local,
    /// remote_write: the standbys wrote the commit record.
    RemoteWrite,
    /// on: the standbys flushed it.
    RemoteFlush,
    /// remote_apply: the standbys applied it (pg_receivewal never
    /// reports an apply position, so with it such commits wait until
    /// cancelled, as in PostgreSQL).
    RemoteApply,
}

const LEVEL_UNSET: u8 = u8::MAX;
/// This process's session level (a connection's SET synchronous_commit);
/// unset: from the server's setting.
static SESSION_LEVEL: AtomicU8 = AtomicU8::new(LEVEL_UNSET);

/// The level a `synchronous_commit` value asks for.
pub fn level_of(name: &str) -> Level {
    SyncCommit::parse(name).map_or(Level::Local, level_of_setting)
}

fn level_of_setting(v: SyncCommit) -> Level {
    match v.wait_mode() {
        None => Level::Local,
        Some(wait_mode::WRITE) => Level::RemoteWrite,
        Some(wait_mode::FLUSH) => Level::RemoteFlush,
        Some(_) => Level::RemoteApply,
    }
}

/// Sets this process's level from a `synchronous_commit` value.
pub fn set_session_level(name: &str) {
    // Relaxed: read only by this process.
    SESSION_LEVEL.store(level_of(name) as u8, Ordering::Relaxed);
}

fn session_level(ctx: &ProcContext) -> Level {
    match SESSION_LEVEL.load(Ordering::Relaxed) {
        x if x == Level::RemoteWrite as u8 => Level::RemoteWrite,
        x if x == Level::RemoteFlush as u8 => Level::RemoteFlush,
        x if x == Level::RemoteApply as u8 => Level::RemoteApply,
        x if x == Level::Local as u8 => Level::Local,
        _ => level_of_setting(ctx.settings.synchronous_commit),
    }
}

/// `synchronous_standby_names` of this server, parsed once per process
/// (settings are fixed for the server's life; the row's check made sure
/// it parses).
pub fn standby_config(shm: &Shmem) -> Option<&'static StandbyNames> {
    static CONFIG: OnceLock<Option<StandbyNames>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            standby_names::parse(shm.settings().synchronous_standby_names.as_str())
                .ok()
                .flatten()
        })
        .as_ref()
}

/// The queue mode this session's commits wait in; None when they do not
/// wait for standbys (`local`, `off`, or no `synchronous_standby_names`).
fn wait_mode_of(ctx: &ProcContext) -> Option<u32> {
    let mode = match session_level(ctx) {
        Level::Local => return None,
        Level::RemoteWrite => wait_mode::WRITE,
        Level::RemoteFlush => wait_mode::FLUSH,
        Level::RemoteApply => wait_mode::APPLY,
    };
    standby_config(ctx.shm).map(|_| mode)
}

/// Does a commit of this session wait for standbys (so that, with
/// `sync_rep_one_sleep`, it may sleep only in the queue, see `xact`)?
pub fn waits_for_standbys(ctx: &ProcContext) -> bool {
    wait_mode_of(ctx).is_some()
}

/// After the local flush of a commit whose record ends at `lsn` (or its
/// request, with `sync_rep_one_sleep`): waits until the synchronous
/// standbys cover it, as this session's `synchronous_commit` asks (see
/// the module header).
pub fn wait_for(ctx: &ProcContext, lsn: u64) {
    let Some(mode) = wait_mode_of(ctx) else {
        return;
    };
    let ctl = ctx.shm.repl();
    if released(ctl, mode) >= lsn {
        return;
    }
    let me = &ctx.shm.syncrep_waiters()[ctx.procno as usize];
    if !enqueue(ctx.shm, ctx.procno, lsn, mode) {
        return;
    }
    loop {
        // Acquire pairs with the Release store of RELEASED in `release_covered`.
        if me.state.load(Ordering::Acquire) == wait_state::RELEASED {
            me.state.store(wait_state::NOT_WAITING, Ordering::Relaxed);
            return;
        }
        if shutdown_requested() {
            leave_queue(ctx.shm, ctx.procno);
            log(
                "WARNING",
                "canceling the wait for synchronous replication and terminating connection due to administrator command",
            );
            // _exit ends this process without acknowledging the commit;
            // nothing in shared memory is held here (the queue entry was
            // removed under its lock, which is released).
            shmem::sys::exit_now(EXIT_FATAL);
        }
        if CANCEL_REQUESTED.swap(false, Ordering::Relaxed) {
            leave_queue(ctx.shm, ctx.procno);
            log(
                "WARNING",
                "canceling wait for synchronous replication due to user request: the transaction has already committed locally, but might not have been replicated to the standby",
            );
            return;
        }
        ctx.me.sem.wait_timeout(WAIT_SLICE);
    }
}

fn released(ctl: &ReplCtl, mode: u32) -> u64 {
    // Acquire pairs with the Release fetch_max in `release_waiters`.
    match mode {
        wait_mode::WRITE => ctl.released_write.load(Ordering::Acquire),
        wait_mode::FLUSH => ctl.released_flush.load(Ordering::Acquire),
        _ => ctl.released_apply.load(Ordering::Acquire),
    }
}

/// Links proc `procno` into the queue in LSN order; false if, under the
/// lock, its LSN turned out to be released already.
fn enqueue(shm: &Shmem, procno: u32, lsn: u64, mode: u32) -> bool {
    let ctl = shm.repl();
    let waiters = shm.syncrep_waiters();
    let me = &waiters[procno as usize];
    ctl.lock.lock();
    if released(ctl, mode) >= lsn {
        ctl.lock.unlock();
        return false;
    }
    // Relaxed (all queue fields): under ReplCtl::lock.
    me.lsn.store(lsn, Ordering::Relaxed);
    me.mode.store(mode, Ordering::Relaxed);
    me.state.store(wait_state::WAITING, Ordering::Relaxed);
    let mut after = ctl.queue_tail.load(Ordering::Relaxed);
    while after != 0 && waiters[after as usize - 1].lsn.load(Ordering::Relaxed) > lsn {
        after = waiters[after as usize - 1].prev.load(Ordering::Relaxed);
    }
    link_after(ctl, waiters, procno + 1, after);
    ctl.lock.unlock();
    true
}

/// The forward link out of entry `at` (procno + 1): its `next`, or for 0
/// (before the first entry) the queue's head.
fn next_link<'a>(ctl: &'a ReplCtl, waiters: &'a [SyncRepWaiter], at: u32) -> &'a AtomicU32 {
    match at {
        0 => &ctl.queue_head,
        a => &waiters[a as usize - 1].next,
    }
}

/// The backward link out of entry `at` (procno + 1): its `prev`, or for 0
/// (after the last entry) the queue's tail.
fn prev_link<'a>(ctl: &'a ReplCtl, waiters: &'a [SyncRepWaiter], at: u32) -> &'a AtomicU32 {
    match at {
        0 => &ctl.queue_tail,
        n => &waiters[n as usize - 1].prev,
    }
}

/// Links entry `me` (procno + 1) after `after` (0: at the head). Caller
/// holds the lock.
fn link_after(ctl: &ReplCtl, waiters: &[SyncRepWaiter], me: u32, after: u32) {
    let next = next_link(ctl, waiters, after).load(Ordering::Relaxed);
    let w = &waiters[me as usize - 1];
    w.prev.store(after, Ordering::Relaxed);
    w.next.store(next, Ordering::Relaxed);
    next_link(ctl, waiters, after).store(me, Ordering::Relaxed);
    prev_link(ctl, waiters, next).store(me, Ordering::Relaxed);
}

/// Unlinks entry `me` (procno + 1). Caller holds the lock.
fn unlink(ctl: &ReplCtl, waiters: &[SyncRepWaiter], me: u32) {
    let w = &waiters[me as usize - 1];
    let (prev, next) = (
        w.prev.load(Ordering::Relaxed),
        w.next.load(Ordering::Relaxed),
    );
    next_link(ctl, waiters, prev).store(next, Ordering::Relaxed);
    prev_link(ctl, waiters, next).store(prev, Ordering::Relaxed);
    w.prev.store(0, Ordering::Relaxed);
    w.next.store(0, Ordering::Relaxed);
}

/// A waiter gives up: unlinks itself unless a releaser already did.
/// Takes proc `procno` out of the queue (a cancel, or a dead process's
/// clean-up, `crate::abandoned`); returns whether it was in it.
pub fn leave_queue(shm: &Shmem, procno: u32) -> bool {
    let ctl = shm.repl();
    let waiters = shm.syncrep_waiters();
    ctl.lock.lock();
    let state = waiters[procno as usize].state.load(Ordering::Relaxed);
    if state == wait_state::WAITING {
        unlink(ctl, waiters, procno + 1);
    }
    waiters[procno as usize]
        .state
        .store(wait_state::NOT_WAITING, Ordering::Relaxed);
    ctl.lock.unlock();
    state != wait_state::NOT_WAITING
}

/// What one walsender's receiver reported, for the release computation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub sender: usize,
    pub priority: u32,
    pub write: u64,
    pub flush: u64,
    pub apply: u64,
}

/// What the synchronous standbys guarantee together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Covered {
    pub write: u64,
    pub flush: u64,
    pub apply: u64,
}

impl Covered {
    /// The position a waiter of `mode` needs covered.
    fn of(&self, mode: u32) -> u64 {
        match mode {
            wait_mode::WRITE => self.write,
            wait_mode::FLUSH => self.flush,
            _ => self.apply,
        }
    }

    fn highest(&self) -> u64 {
        self.write.max(self.flush).max(self.apply)
    }
}

/// The positions the synchronous standbys guarantee, and which candidates
/// count as synchronous; None when fewer than `num_sync` candidates are
/// connected (nothing can be released).
pub fn sync_positions(cfg: &StandbyNames, cands: &[Candidate]) -> Option<(Covered, Vec<usize>)> {
    let n = cfg.num_sync as usize;
    if cands.len() < n {
        return None;
    }
    match cfg.method {
        Method::Priority => {
            let mut by_priority: Vec<&Candidate> = cands.iter().collect();
            by_priority.sort_by_key(|c| (c.priority, c.sender));
            let chosen = &by_priority[..n];
            let covered = Covered {
                write: chosen.iter().map(|c| c.write).min()?,
                flush: chosen.iter().map(|c| c.flush).min()?,
                apply: chosen.iter().map(|c| c.apply).min()?,
            };
            Some((covered, chosen.iter().map(|c| c.sender).collect()))
        }
        Method::Quorum => {
            let nth_highest = |mut v: Vec<u64>| {
                v.sort_unstable_by(|a, b| b.cmp(a));
                v[n - 1]
            };
            let covered = Covered {
                write: nth_highest(cands.iter().map(|c| c.write).collect()),
                flush: nth_highest(cands.iter().map(|c| c.flush).collect()),
                apply: nth_highest(cands.iter().map(|c| c.apply).collect()),
            };
            Some((covered, cands.iter().map(|c| c.sender).collect()))
        }
    }
}

/// The candidates: live walsenders listed in the setting whose receivers
/// report a flush position (PostgreSQL skips those that do not).
fn candidates(shm: &Shmem) -> Vec<Candidate> {
    let ctl = shm.repl();
    let max = shm.settings().max_wal_senders as usize;
    ctl.senders[..max.min(ctl.senders.len())]
        .iter()
        .enumerate()
        .filter(|(_, s)| s.pid.load(Ordering::Relaxed) > 0)
        .filter(|(_, s)| s.reports_flush.load(Ordering::Relaxed) != 0)
        .filter_map(|(i, s)| {
            let priority = s.sync_priority.load(Ordering::Relaxed);
            (priority > 0).then(|| Candidate {
                sender: i,
                priority,
                // Relaxed: each is one position its walsender published;
                // a stale value only delays a release.
                write: s.write.load(Ordering::Relaxed),
                flush: s.flush.load(Ordering::Relaxed),
                apply: s.apply.load(Ordering::Relaxed),
            })
        })
        .collect()
}

/// A walsender, after a status update: releases, in one pass, every
/// waiter the synchronous standbys now cover. Returns how many.
pub fn release_waiters(shm: &Shmem) -> u64 {
    let Some(cfg) = standby_config(shm) else {
        return 0;
    };
    let cands = candidates(shm);
    let ctl = shm.repl();
    let Some((covered, chosen)) = sync_positions(cfg, &cands) else {
        publish_sync_states(shm, cfg, &cands, &[]);
        return 0;
    };
    publish_sync_states(shm, cfg, &cands, &chosen);
    ctl.lock.lock();
    // Release pairs with the Acquire loads in `released`.
    ctl.released_write
        .fetch_max(covered.write, Ordering::Release);
    ctl.released_flush
        .fetch_max(covered.flush, Ordering::Release);
    ctl.released_apply
        .fetch_max(covered.apply, Ordering::Release);
    let mut woken = Vec::new();
    release_covered(shm, &covered, &mut woken);
    ctl.lock.unlock();
    post_released(shm, &woken);
    let n = woken.len() as u64;
    if n > 0 {
        ctl.released_commits.fetch_add(n, Ordering::Relaxed);
        ctl.release_passes.fetch_add(1, Ordering::Relaxed);
    }
    n
}

/// Walks the queue from its head, releasing each waiter whose mode's
/// position `covered` reaches (their proc numbers are pushed on `woken`,
/// for `post_released` once the lock is released); stops at the first LSN
/// beyond all three. Caller holds the lock.
fn release_covered(shm: &Shmem, covered: &Covered, woken: &mut Vec<u32>) {
    let highest = covered.highest();
    let ctl = shm.repl();
    let waiters = shm.syncrep_waiters();
    let mut at = ctl.queue_head.load(Ordering::Relaxed);
    while at != 0 {
        let w = &waiters[at as usize - 1];
        let next = w.next.load(Ordering::Relaxed);
        let lsn = w.lsn.load(Ordering::Relaxed);
        if lsn > highest {
            break;
        }
        if lsn <= covered.of(w.mode.load(Ordering::Relaxed)) {
            unlink(ctl, waiters, at);
            woken.push(at - 1);
        }
        at = next;
    }
    for &procno in woken.iter() {
        // Release pairs with the waiter's Acquire load in `wait_for`.
        waiters[procno as usize]
            .state
            .store(wait_state::RELEASED, Ordering::Release);
    }
}

/// Posts the semaphores of released waiters, after ReplCtl::lock is
/// released: a futex wake on 2 oversubscribed cores can hand the CPU to
/// the woken backend, which must not find the spinlock still held. A
/// waiter that saw RELEASED first and returned absorbs the late post as a
/// spurious wake-up (its wait loops re-check their condition).
fn post_released(shm: &Shmem, woken: &[u32]) {
    for &procno in woken {
        shm.procs()[procno as usize].sem.post();
    }
}

/// pg_stat_replication.sync_state of every walsender; stored only when it
/// changed, so that a release pass (one per status update) does not dirty
/// the cache lines of every walsender entry.
fn publish_sync_states(shm: &Shmem, cfg: &StandbyNames, cands: &[Candidate], chosen: &[usize]) {
    let ctl = shm.repl();
    let max = shm.settings().max_wal_senders as usize;
    for (i, s) in ctl.senders[..max.min(ctl.senders.len())].iter().enumerate() {
        let state = if chosen.contains(&i) {
            match cfg.method {
                Method::Priority => sync_state::SYNC,
                Method::Quorum => sync_state::QUORUM,
            }
        } else if cands.iter().any(|c| c.sender == i) {
            sync_state::POTENTIAL
        } else {
            sync_state::ASYNC
        };
        if s.sync_state.load(Ordering::Relaxed) != state {
            s.sync_state.store(state, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`sync_positions`] for `synchronous_standby_names` = `names` over
    /// candidates given as (priority, write, flush), sender `i` the `i`th.
    fn sync_of(names: &str, cands: &[(u32, u64, u64)]) -> Option<(Covered, Vec<usize>)> {
        let cfg = standby_names::parse(names).unwrap().unwrap();
        let cands: Vec<Candidate> = cands
            .iter()
            .enumerate()
            .map(|(sender, &(priority, write, flush))| Candidate {
                sender,
                priority,
                write,
                flush,
                apply: 0,
            })
            .collect();
        sync_positions(&cfg, &cands)
    }

    fn covered(write: u64, flush: u64, apply: u64) -> Covered {
        Covered {
            write,
            flush,
            apply,
        }
    }

    #[test]
    fn priority_takes_the_n_best_listed_and_their_minimum() {
        let names = "FIRST 2 (a, b, c)";
        let c = [(3, 500, 500), (1, 300, 200), (2, 400, 350)];
        assert_eq!(sync_of(names, &c), Some((covered(300, 200, 0), vec![1, 2])));
        assert_eq!(sync_of(names, &c[..1]), None);
    }

    #[test]
    fn quorum_takes_the_nth_highest() {
        let c = [(1, 500, 450), (2, 300, 200), (3, 400, 350)];
        let (cov, chosen) = sync_of("ANY 2 (a, b, c)", &c).unwrap();
        assert_eq!((cov.write, cov.flush), (400, 350));
        assert_eq!(chosen.len(), 3);
    }

    fn queue_lsns(shm: &Shmem) -> Vec<u64> {
        let waiters = shm.syncrep_waiters();
        let mut out = Vec::new();
        let mut at = shm.repl().queue_head.load(Ordering::Relaxed);
        while at != 0 {
            out.push(waiters[at as usize - 1].lsn.load(Ordering::Relaxed));
            at = waiters[at as usize - 1].next.load(Ordering::Relaxed);
        }
        out
    }

    #[test]
    fn waiters_queue_in_lsn_order_and_one_pass_releases_the_covered_group() {
        // An unnamed segment: it goes with the test process.
        let shm = &Shmem::create(&shmem::Settings::default(), 5, 1).unwrap();
        for (procno, lsn, mode) in [
            (0, 300, wait_mode::FLUSH),
            (1, 100, wait_mode::FLUSH),
            (2, 200, wait_mode::WRITE),
            (3, 250, wait_mode::FLUSH),
            (4, 150, wait_mode::APPLY),
        ] {
            assert!(enqueue(shm, procno, lsn, mode));
        }
        assert_eq!(queue_lsns(shm), vec![100, 150, 200, 250, 300]);
        // Written up to 260, flushed up to 220, nothing applied (as
        // pg_receivewal reports): 100 (flush) and 200 (write) are
        // covered; 150 waits for its apply and 250 for its flush.
        let ctl = shm.repl();
        ctl.lock.lock();
        let mut woken = Vec::new();
        release_covered(shm, &covered(260, 220, 0), &mut woken);
        ctl.lock.unlock();
        assert_eq!(woken, vec![1, 2]);
        assert_eq!(shm.procs()[1].sem.count(), 0, "posted under the lock");
        // The releaser posts every released waiter, once.
        post_released(shm, &woken);
        assert_eq!(
            (shm.procs()[1].sem.count(), shm.procs()[2].sem.count()),
            (1, 1)
        );
        assert_eq!(shm.procs().iter().map(|p| p.sem.count()).sum::<u32>(), 2);
        assert_eq!(queue_lsns(shm), vec![150, 250, 300]);
        let state = |p: usize| shm.syncrep_waiters()[p].state.load(Ordering::Relaxed);
        assert_eq!(
            (state(1), state(2)),
            (wait_state::RELEASED, wait_state::RELEASED)
        );
        assert_eq!(
            (state(0), state(3)),
            (wait_state::WAITING, wait_state::WAITING)
        );
        assert_eq!(shm.procs()[0].sem.count(), 0);
        // A waiter that gives up leaves the queue; a covered LSN never queues.
        leave_queue(shm, 3);
        assert_eq!(queue_lsns(shm), vec![150, 300]);
        ctl.lock.lock();
        woken.clear();
        release_covered(shm, &covered(260, 220, 160), &mut woken);
        assert_eq!(woken, vec![4]);
        ctl.lock.unlock();
        post_released(shm, &[0, 3]);
        assert_eq!(
            (shm.procs()[0].sem.count(), shm.procs()[3].sem.count()),
            (1, 1)
        );
        assert_eq!(queue_lsns(shm), vec![300]);
        ctl.released_flush.store(400, Ordering::Relaxed);
        assert!(!enqueue(shm, 3, 350, wait_mode::FLUSH));
    }

    #[test]
    fn levels_follow_synchronous_commit_names() {
        assert_eq!(level_of("remote_write"), Level::RemoteWrite);
        assert_eq!(level_of("ON"), Level::RemoteFlush);
        assert_eq!(level_of("yes"), Level::RemoteFlush);
        assert_eq!(level_of("remote_apply"), Level::RemoteApply);
        assert_eq!(level_of("local"), Level::Local);
        assert_eq!(level_of("off"), Level::Local);
    }
}
