//! Synchronous replication (PostgreSQL's syncrep.c): a committing backend
//! waits, after its local flush, until the synchronous standbys named by
//! `synchronous_standby_names` have reported the write (`synchronous_commit
//! = remote_write`) or the flush (`on`, `remote_apply`) of its commit
//! record; walsenders release the waiters.
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
//!    synchronous standbys have written and flushed; under the lock raise
//!    `released_write` / `released_flush`, then walk the queue from its
//!    head and unlink every waiter whose LSN is now covered, set it
//!    RELEASED (Release, pairs with the waiter's Acquire load) and post its
//!    semaphore — one pass releases the whole group, in LSN order;
//! 4. waiter: wakes, sees RELEASED, returns. Spurious wake-ups (a stale
//!    semaphore post) just loop.
//!
//! Interruptions: a cancel request ends the wait with a WARNING (the
//! commit is already durable locally, as PostgreSQL says); a fast shutdown
//! ends the process without acknowledging the commit (PostgreSQL's backend
//! dies without sending the result). A waiter that leaves unlinks itself
//! under the lock unless a releaser already did.
//!
//! With no synchronous standby connected commits wait, as in PostgreSQL.

use crate::context::ProcContext;
use crate::process::{log, shutdown_requested, CANCEL_REQUESTED, EXIT_FATAL};
use shmem::sync::Ordering;
use shmem::walsnd::standby_names::{self, Method, StandbyNames};
use shmem::walsnd::{sync_state, wait_mode, wait_state, ReplCtl, SyncRepWaiter};
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
    /// on, remote_apply: the standbys flushed it.
    RemoteFlush,
}

const LEVEL_UNSET: u8 = u8::MAX;
/// This process's session level (a connection's SET synchronous_commit);
/// unset: from the server's setting.
static SESSION_LEVEL: AtomicU8 = AtomicU8::new(LEVEL_UNSET);

/// The level a `synchronous_commit` value asks for.
pub fn level_of(name: &str) -> Level {
    match name.trim().to_ascii_lowercase().as_str() {
        "remote_write" => Level::RemoteWrite,
        "on" | "true" | "yes" | "1" | "remote_apply" => Level::RemoteFlush,
        _ => Level::Local,
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
        x if x == Level::Local as u8 => Level::Local,
        _ if ctx.settings.synchronous_commit => Level::RemoteFlush,
        _ => Level::Local,
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

/// After the local flush of a commit whose record ends at `lsn`: waits
/// until the synchronous standbys cover it, as this session's
/// `synchronous_commit` asks (see the module header).
pub fn wait_for(ctx: &ProcContext, lsn: u64) {
    let mode = match session_level(ctx) {
        Level::Local => return,
        Level::RemoteWrite => wait_mode::WRITE,
        Level::RemoteFlush => wait_mode::FLUSH,
    };
    if standby_config(ctx.shm).is_none() {
        return;
    }
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
            // SAFETY: _exit ends this process without acknowledging the
            // commit; nothing in shared memory is held here (the queue
            // entry was removed under its lock, which is released).
            unsafe { libc::_exit(EXIT_FATAL) };
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
    if mode == wait_mode::WRITE {
        ctl.released_write.load(Ordering::Acquire)
    } else {
        ctl.released_flush.load(Ordering::Acquire)
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

/// Links entry `me` (procno + 1) after `after` (0: at the head). Caller
/// holds the lock.
fn link_after(ctl: &ReplCtl, waiters: &[SyncRepWaiter], me: u32, after: u32) {
    let next = if after == 0 {
        ctl.queue_head.load(Ordering::Relaxed)
    } else {
        waiters[after as usize - 1].next.load(Ordering::Relaxed)
    };
    let w = &waiters[me as usize - 1];
    w.prev.store(after, Ordering::Relaxed);
    w.next.store(next, Ordering::Relaxed);
    match after {
        0 => ctl.queue_head.store(me, Ordering::Relaxed),
        a => waiters[a as usize - 1].next.store(me, Ordering::Relaxed),
    }
    match next {
        0 => ctl.queue_tail.store(me, Ordering::Relaxed),
        n => waiters[n as usize - 1].prev.store(me, Ordering::Relaxed),
    }
}

/// Unlinks entry `me` (procno + 1). Caller holds the lock.
fn unlink(ctl: &ReplCtl, waiters: &[SyncRepWaiter], me: u32) {
    let w = &waiters[me as usize - 1];
    let (prev, next) = (
        w.prev.load(Ordering::Relaxed),
        w.next.load(Ordering::Relaxed),
    );
    match prev {
        0 => ctl.queue_head.store(next, Ordering::Relaxed),
        p => waiters[p as usize - 1].next.store(next, Ordering::Relaxed),
    }
    match next {
        0 => ctl.queue_tail.store(prev, Ordering::Relaxed),
        n => waiters[n as usize - 1].prev.store(prev, Ordering::Relaxed),
    }
    w.prev.store(0, Ordering::Relaxed);
    w.next.store(0, Ordering::Relaxed);
}

/// A waiter gives up: unlinks itself unless a releaser already did.
fn leave_queue(shm: &Shmem, procno: u32) {
    let ctl = shm.repl();
    let waiters = shm.syncrep_waiters();
    ctl.lock.lock();
    if waiters[procno as usize].state.load(Ordering::Relaxed) == wait_state::WAITING {
        unlink(ctl, waiters, procno + 1);
    }
    waiters[procno as usize]
        .state
        .store(wait_state::NOT_WAITING, Ordering::Relaxed);
    ctl.lock.unlock();
}

/// What one walsender's receiver reported, for the release computation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub sender: usize,
    pub priority: u32,
    pub write: u64,
    pub flush: u64,
}

/// The (write, flush) positions the synchronous standbys guarantee, and
/// which candidates count as synchronous; None when fewer than `num_sync`
/// candidates are connected (nothing can be released).
pub fn sync_positions(cfg: &StandbyNames, cands: &[Candidate]) -> Option<(u64, u64, Vec<usize>)> {
    let n = cfg.num_sync as usize;
    if cands.len() < n {
        return None;
    }
    match cfg.method {
        Method::Priority => {
            let mut by_priority: Vec<&Candidate> = cands.iter().collect();
            by_priority.sort_by_key(|c| (c.priority, c.sender));
            let chosen = &by_priority[..n];
            let write = chosen.iter().map(|c| c.write).min()?;
            let flush = chosen.iter().map(|c| c.flush).min()?;
            Some((write, flush, chosen.iter().map(|c| c.sender).collect()))
        }
        Method::Quorum => {
            let nth_highest = |mut v: Vec<u64>| {
                v.sort_unstable_by(|a, b| b.cmp(a));
                v[n - 1]
            };
            let write = nth_highest(cands.iter().map(|c| c.write).collect());
            let flush = nth_highest(cands.iter().map(|c| c.flush).collect());
            Some((write, flush, cands.iter().map(|c| c.sender).collect()))
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
    let Some((write, flush, chosen)) = sync_positions(cfg, &cands) else {
        publish_sync_states(shm, cfg, &cands, &[]);
        return 0;
    };
    publish_sync_states(shm, cfg, &cands, &chosen);
    ctl.lock.lock();
    // Release pairs with the Acquire loads in `released`.
    ctl.released_write.fetch_max(write, Ordering::Release);
    ctl.released_flush.fetch_max(flush, Ordering::Release);
    let n = release_covered(shm, write.max(flush), flush);
    ctl.lock.unlock();
    if n > 0 {
        ctl.released_commits.fetch_add(n, Ordering::Relaxed);
        ctl.release_passes.fetch_add(1, Ordering::Relaxed);
    }
    n
}

/// Walks the queue from its head, releasing each waiter covered by
/// `write` (WRITE mode) or `flush` (FLUSH mode); stops at the first LSN
/// beyond both. Caller holds the lock.
fn release_covered(shm: &Shmem, write: u64, flush: u64) -> u64 {
    let ctl = shm.repl();
    let waiters = shm.syncrep_waiters();
    let mut n = 0;
    let mut at = ctl.queue_head.load(Ordering::Relaxed);
    while at != 0 {
        let w = &waiters[at as usize - 1];
        let next = w.next.load(Ordering::Relaxed);
        let lsn = w.lsn.load(Ordering::Relaxed);
        if lsn > write {
            break;
        }
        let covered = match w.mode.load(Ordering::Relaxed) {
            wait_mode::WRITE => true,
            _ => lsn <= flush,
        };
        if covered {
            unlink(ctl, waiters, at);
            // Release pairs with the waiter's Acquire load in `wait_for`.
            w.state.store(wait_state::RELEASED, Ordering::Release);
            shm.procs()[at as usize - 1].sem.post();
            n += 1;
        }
        at = next;
    }
    n
}

/// pg_stat_replication.sync_state of every walsender.
fn publish_sync_states(shm: &Shmem, cfg: &StandbyNames, cands: &[Candidate], chosen: &[usize]) {
    let ctl = shm.repl();
    for (i, s) in ctl.senders.iter().enumerate() {
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
        s.sync_state.store(state, Ordering::Relaxed);
    }
}

/// The rows of `pg_stat_replication`, one per walsender. Unix-socket
/// clients have no address and port -1, as in PostgreSQL; the lag columns
/// are not measured (NULL).
pub fn pg_stat_replication(shm: &Shmem) -> Vec<protocol::ReplicationRow> {
    let lsn = |v: u64| (v != 0).then_some(v);
    // Stored in PostgreSQL's epoch; the row wants the Unix epoch.
    let time =
        |us: i64| (us != 0).then(|| us.saturating_add(walformat::PG_EPOCH_UNIX_SECS * 1_000_000));
    shm.repl()
        .senders
        .iter()
        .filter_map(|s| {
            // Acquire pairs with the Release store of pid when the entry
            // was claimed: the fields below are its walsender's.
            let pid = s.pid.load(Ordering::Acquire);
            (pid > 0).then(|| protocol::ReplicationRow {
                pid,
                usename: None,
                application_name: s.application_name.load(),
                client_addr: None,
                client_port: Some(-1),
                backend_start: time(s.backend_start.load(Ordering::Relaxed)),
                state: shmem::walsnd::sender_state::name(s.state.load(Ordering::Relaxed)).into(),
                sent_lsn: lsn(s.sent.load(Ordering::Relaxed)),
                write_lsn: lsn(s.write.load(Ordering::Relaxed)),
                flush_lsn: lsn(s.flush.load(Ordering::Relaxed)),
                replay_lsn: lsn(s.apply.load(Ordering::Relaxed)),
                sync_priority: s.sync_priority.load(Ordering::Relaxed) as i32,
                sync_state: sync_state::name(s.sync_state.load(Ordering::Relaxed)).into(),
                reply_time: time(s.reply_time.load(Ordering::Relaxed)),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(sender: usize, priority: u32, write: u64, flush: u64) -> Candidate {
        Candidate {
            sender,
            priority,
            write,
            flush,
        }
    }

    #[test]
    fn priority_takes_the_n_best_listed_and_their_minimum() {
        let cfg = standby_names::parse("FIRST 2 (a, b, c)").unwrap().unwrap();
        let c = [
            cand(0, 3, 500, 500),
            cand(1, 1, 300, 200),
            cand(2, 2, 400, 350),
        ];
        assert_eq!(sync_positions(&cfg, &c), Some((300, 200, vec![1, 2])));
        assert_eq!(sync_positions(&cfg, &c[..1]), None);
    }

    #[test]
    fn quorum_takes_the_nth_highest() {
        let cfg = standby_names::parse("ANY 2 (a, b, c)").unwrap().unwrap();
        let c = [
            cand(0, 1, 500, 450),
            cand(1, 2, 300, 200),
            cand(2, 3, 400, 350),
        ];
        let (w, f, chosen) = sync_positions(&cfg, &c).unwrap();
        assert_eq!((w, f), (400, 350));
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
        let shm = &Shmem::create(&shmem::Settings::default(), 4, 1).unwrap();
        for (procno, lsn, mode) in [
            (0, 300, wait_mode::FLUSH),
            (1, 100, wait_mode::FLUSH),
            (2, 200, wait_mode::WRITE),
            (3, 250, wait_mode::FLUSH),
        ] {
            assert!(enqueue(shm, procno, lsn, mode));
        }
        assert_eq!(queue_lsns(shm), vec![100, 200, 250, 300]);
        // Written up to 260, flushed up to 220: 100 (flush) and 200
        // (write) are covered; 250 waits for its flush.
        let ctl = shm.repl();
        ctl.lock.lock();
        let n = release_covered(shm, 260, 220);
        ctl.lock.unlock();
        assert_eq!(n, 2);
        assert_eq!(queue_lsns(shm), vec![250, 300]);
        let state = |p: usize| shm.syncrep_waiters()[p].state.load(Ordering::Relaxed);
        assert_eq!(
            (state(1), state(2)),
            (wait_state::RELEASED, wait_state::RELEASED)
        );
        assert_eq!(
            (state(0), state(3)),
            (wait_state::WAITING, wait_state::WAITING)
        );
        assert_eq!(shm.procs()[1].sem.count(), 1, "released waiters are posted");
        assert_eq!(shm.procs()[0].sem.count(), 0);
        // A waiter that gives up leaves the queue; a covered LSN never queues.
        leave_queue(shm, 3);
        assert_eq!(queue_lsns(shm), vec![300]);
        ctl.released_flush.store(400, Ordering::Relaxed);
        assert!(!enqueue(shm, 3, 350, wait_mode::FLUSH));
    }

    #[test]
    fn levels_follow_synchronous_commit_names() {
        assert_eq!(level_of("remote_write"), Level::RemoteWrite);
        assert_eq!(level_of("ON"), Level::RemoteFlush);
        assert_eq!(level_of("local"), Level::Local);
        assert_eq!(level_of("off"), Level::Local);
    }
}
