//! Flow control of asynchronous streaming (`max_replication_lag`,
//! walshm's own: PostgreSQL has none).
//!
//! Why: a receiver slower than the backends generating WAL (pg_receivewal
//! starved of CPU by 16 `emit:1024` workers on 2 cores receives ~135 MB/s
//! of the ~1 GB/s they insert) falls behind without bound; no sender
//! speed fixes that. The only bound is back-pressure on the generators.
//! PostgreSQL hackers discussed this as "WAL throttling" in 2023
//! (`synchronous_commit_wal_throttle_threshold`: a backend that wrote that
//! much WAL waits for the synchronous standby's flush, as a commit would);
//! it was not committed. Here the rule is a bound on the lag itself.
//!
//! Rule: with `max_replication_lag` = L > 0, a backend (client backend or
//! library worker; never the walsender, walwriter, checkpointer or startup
//! process) about to insert WAL waits while
//! `insert position - W > L`, W being the least write position reported
//! by the receivers of every walsender in the CopyBoth phase (state
//! catchup, streaming or stopping) that has reported at least once.
//! * Every such walsender counts, not only those named in
//!   `synchronous_standby_names` or streaming for a slot: the simplest rule
//!   that bounds what an unmodified pg_receivewal may miss. A receiver that
//!   connects far behind therefore holds the backends until it is within L.
//! * The write position, not the flush: every receiver reports it (a
//!   receiver without `--synchronous` reports its flush only at segment
//!   ends, pg_basebackup's stream never), and it is what the receiver has
//!   taken off the server's hands; durability is synchronous replication's
//!   business.
//! * A receiver that disconnects stops counting at once: its walsender
//!   leaves the CopyBoth phase, republishes and wakes the waiters, so a
//!   dead receiver never stops the server. With no receiver, nothing waits.
//!
//! Cost: off (L = 0), one test of a process-local setting per record. On
//! and under the limit: a process-local byte count per record, and every
//! `check_interval(L)` bytes (L/64, 8 kB..1 MB) one load of the published
//! throttle point (`ThrottleCtl::allowed_upto`, a read-mostly line) and of
//! the insert position; no shared write. Overshoot: each backend may
//! insert up to one check interval (plus one record) past the point, so the
//! lag stays below L + backends x interval (+ the receiver's report delay).
//!
//! The wait (`wait_for_receivers`, cold): re-computes W from the walsender
//! array (the published point is only the fast path's filter), sleeps on
//! `ThrottleCtl::seq` (a futex; see shmem::walsnd for the no-lost-wake-up
//! argument) in slices of `SLEEP_SLICE`, showing the wait event
//! IPC:ReplicationThrottle, and sets the walwriter's latch so that the WAL
//! already inserted gets flushed (the walsender sends only flushed WAL).
//! Once asleep it goes on only when the receivers are `resume_margin`
//! (L/8) inside the limit, and it announces the W it waits for in
//! `ThrottleCtl::wake_at_write`, so that publishers wake the waiters once
//! per such round instead of at every status update (16 backends woken
//! for each reply cost the walsender and the receiver more CPU per MB
//! than the streaming itself).
//! It is entered before the insertion lock is taken, so it never holds an
//! insertion lock or WALWriteLock, and it never waits for anything a
//! synchronous commit holds. It ends at a fast shutdown (the backend's
//! SIGTERM flag, or a signal interrupting the sleep of a library worker,
//! whose own flag lives in its library), when the server generation ends
//! (library workers), when the receivers catch up, or when none is left.
//! The walsender (`publish`, after each batch of status updates and when
//! it leaves the CopyBoth phase) asks its receiver for a reply when the
//! unreported part of what it sent reaches L/4 or backends wait, because
//! pg_receivewal otherwise reports only every `--status-interval`.

use crate::context::ProcContext;
use crate::process::shutdown_requested;
use shmem::segment::NUM_AUX_PROCS;
use shmem::sync::{fence, Ordering};
use shmem::walsnd::{sender_state, SeqSleep, WalSnd};
use shmem::{waitevent, Shmem};
use std::cell::Cell;
use std::time::{Duration, Instant};
use walformat::Lsn;

/// The longest single sleep: a guard against a lost wake-up, and how often
/// a throttled process re-checks its shutdown flag.
const SLEEP_SLICE: Duration = Duration::from_millis(100);
/// Bounds of the check interval (bytes a backend inserts between looks at
/// the throttle point).
const MIN_CHECK_INTERVAL: u64 = 8 << 10;
const MAX_CHECK_INTERVAL: u64 = 1 << 20;

thread_local! {
    /// WAL bytes this process inserted since it last looked at the point.
    static SINCE_CHECK: Cell<u64> = const { Cell::new(0) };
}

/// The limit in bytes (0: off).
pub fn limit_bytes(shm: &Shmem) -> u64 {
    mb_to_bytes(shm.settings().max_replication_lag_mb)
}

fn mb_to_bytes(mb: u32) -> u64 {
    u64::from(mb) << 20
}

/// Bytes a backend inserts between two looks at the throttle point.
pub fn check_interval(limit: u64) -> u64 {
    (limit / 64).clamp(MIN_CHECK_INTERVAL, MAX_CHECK_INTERVAL)
}

/// The insert entry's hook (`Xlog::insert`, before the insertion lock):
/// waits while this process is too far ahead of the streaming receivers.
/// `insert_lsn` reads the current insert position (called only when due).
#[inline]
pub fn before_insert(ctx: &ProcContext, len: u64, insert_lsn: impl Fn() -> Lsn) {
    let mb = ctx.settings.max_replication_lag_mb;
    if mb != 0 {
        check_if_due(ctx, mb_to_bytes(mb), len, &insert_lsn);
    }
}

fn check_if_due(ctx: &ProcContext, limit: u64, len: u64, insert_lsn: &dyn Fn() -> Lsn) {
    if !is_throttled_process(ctx) || !count_and_due(len, check_interval(limit)) {
        return;
    }
    // Relaxed: a hint; the wait re-computes from the walsender array.
    let allowed = ctx.shm.repl().throttle.allowed_upto.load(Ordering::Relaxed);
    if allowed != 0 && insert_lsn() > allowed {
        wait_for_receivers(ctx, limit, insert_lsn);
    }
}

/// Client backends and library workers insert under flow control; the
/// auxiliary processes (startup, walwriter, checkpointer) never wait.
fn is_throttled_process(ctx: &ProcContext) -> bool {
    let aux_first = ctx.shm.layout().max_backends;
    !(aux_first..aux_first + NUM_AUX_PROCS).contains(&ctx.procno)
}

/// Adds `len` to this process's byte count; true (and resets it) once it
/// reached `interval`.
fn count_and_due(len: u64, interval: u64) -> bool {
    SINCE_CHECK.with(|c| {
        let n = c.get() + len;
        let due = n >= interval;
        c.set(if due { 0 } else { n });
        due
    })
}

/// Does walsender entry `s` hold the backends back (see the module
/// header: in the CopyBoth phase and reported once)?
fn counts(s: &WalSnd) -> bool {
    // Acquire pairs with the Release store of pid in `claim_entry`.
    s.pid.load(Ordering::Acquire) != 0
        && matches!(
            s.state.load(Ordering::Relaxed),
            sender_state::CATCHUP | sender_state::STREAMING | sender_state::STOPPING
        )
        && s.write.load(Ordering::Relaxed) != 0
}

/// W: the least write position the counted receivers reported (None: no
/// receiver counts).
pub fn least_reported_write(shm: &Shmem) -> Option<Lsn> {
    let ctl = shm.repl();
    let max = (shm.settings().max_wal_senders as usize).min(ctl.senders.len());
    ctl.senders[..max]
        .iter()
        .filter(|s| counts(s))
        .map(|s| s.write.load(Ordering::Relaxed))
        .min()
}

/// Walsender side: re-computes and publishes the throttle point and wakes
/// the throttled backends once the receivers reached what they wait for
/// (or none counts any more). Called after a batch of status updates and
/// when a walsender leaves the CopyBoth phase; does nothing when off.
pub fn publish(shm: &Shmem) {
    let limit = limit_bytes(shm);
    if limit == 0 {
        return;
    }
    let ctl = shm.repl();
    let t = &ctl.throttle;
    // Under the lock: the last publisher computed from every position
    // stored before it took the lock, so no older minimum wins.
    ctl.lock.lock();
    let w = least_reported_write(shm);
    let point = w.map_or(0, |w| w.saturating_add(limit).max(1));
    t.allowed_upto.store(point, Ordering::Relaxed);
    ctl.lock.unlock();
    // Pairs with the fence in `wait_for_receivers` (store positions, then
    // load the target; the sleeper stores its target, then loads them).
    fence(Ordering::SeqCst);
    if w.is_none_or(|w| w >= t.wake_at_write.load(Ordering::SeqCst)) {
        t.wake_at_write.store(u64::MAX, Ordering::SeqCst);
        t.wake_all();
    }
}

/// Once throttled, a backend goes on only when the receivers are this
/// much inside the limit (fewer, larger rounds of sleep and wake-up).
fn resume_margin(limit: u64) -> u64 {
    limit / 8
}

/// Do backends wait for the receivers right now?
pub fn has_waiters(shm: &Shmem) -> bool {
    shm.repl().throttle.waiters.load(Ordering::Relaxed) != 0
}

/// The cold path: sleeps until the receivers are within `limit` of the
/// insert position, none counts any more, or the process must stop.
#[cold]
fn wait_for_receivers(ctx: &ProcContext, limit: u64, insert_lsn: &dyn Fn() -> Lsn) {
    let t = &ctx.shm.repl().throttle;
    // SeqCst: pairs with the load of `waiters` in `ThrottleCtl::wake_all`.
    t.waiters.fetch_add(1, Ordering::SeqCst);
    let previous = waitevent::report(waitevent::REPLICATION_THROTTLE);
    let started = Instant::now();
    let mut slept = false;
    let mut nudge = true;
    while !must_stop(ctx) {
        // SeqCst: pairs with the increment in `wake_all`, made after the
        // positions it announces were stored.
        let seen = t.seq.load(Ordering::SeqCst);
        let at = insert_lsn();
        // First the limit itself; once asleep, the limit less the margin.
        let margin = if slept { resume_margin(limit) } else { 0 };
        let wanted = at.saturating_sub(limit) + margin;
        if !behind(ctx.shm, wanted) {
            break;
        }
        t.wake_at_write.fetch_min(wanted, Ordering::SeqCst);
        // Pairs with the fence in `publish` (see shmem::walsnd).
        fence(Ordering::SeqCst);
        if !behind(ctx.shm, wanted) {
            break;
        }
        if std::mem::take(&mut nudge) {
            flush_for_the_walsender(ctx.shm, at);
        }
        slept = true;
        match t.sleep(seen, SLEEP_SLICE) {
            SeqSleep::Interrupted => break,
            SeqSleep::TimedOut => nudge = true,
            SeqSleep::Woken => {}
        }
    }
    waitevent::restore(previous);
    t.waiters.fetch_sub(1, Ordering::SeqCst);
    if slept {
        t.waits.fetch_add(1, Ordering::Relaxed);
        t.wait_us
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
}

/// Is some counted receiver's write position still below `wanted`? (false
/// too when none counts: nobody holds us.)
fn behind(shm: &Shmem, wanted: Lsn) -> bool {
    least_reported_write(shm).is_some_and(|w| w < wanted)
}

/// A fast shutdown (a forked backend's SIGTERM) or the end of the server
/// generation (a library worker) ends a throttle wait.
fn must_stop(ctx: &ProcContext) -> bool {
    shutdown_requested() || ctx.generation_ended()
}

/// The walsender sends only flushed WAL: if WAL below `at` is not flushed,
/// wake the walwriter to flush it (cheap when its latch is already set);
/// and wake a walsender that sleeps with nothing new to send, so that it
/// asks its receiver for a reply (one fence and one load when none sleeps).
fn flush_for_the_walsender(shm: &Shmem, at: Lsn) {
    // Relaxed: a hint; the walwriter decides what it can flush.
    if shm.xlog().write.flush_result.load(Ordering::Relaxed) < at {
        shm.xlog().walwriter_latch.set();
    }
    shmem::walsnd::wake_walsenders(shm.repl());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_interval_is_a_64th_of_the_limit_within_bounds() {
        assert_eq!(check_interval(256 << 10), MIN_CHECK_INTERVAL);
        assert_eq!(check_interval(4 << 20), 64 << 10);
        assert_eq!(check_interval(1 << 40), MAX_CHECK_INTERVAL);
    }

    #[test]
    fn the_byte_count_is_due_once_per_interval() {
        let due: Vec<bool> = (0..6).map(|_| count_and_due(3000, 8192)).collect();
        assert_eq!(due, [false, false, true, false, false, true]);
    }
}
