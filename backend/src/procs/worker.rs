//! The workloads a backend runs for `postmaster start --workers N`.
//!
//! - `emit:SIZE`: non-transactional logical messages with a SIZE-byte
//!   payload (prefix `walshm`), no flush — what
//!   `SELECT pg_logical_emit_message(false, 'walshm', ...)` writes.
//! - `emit-batch:SIZE:N`: N such messages per transaction (the seeds'
//!   "transactions of about 100 kB of WAL" and "10,000 small records"),
//!   no XID, no commit record.
//! - `emit-tx:SIZE`: a transaction: snapshot, XID, transactional logical
//!   message, commit record, flush (synchronous commit), XID clear; with
//!   `--ack`, then `ack LSN` on stdout (LSN = start of the commit record).
//! - `txid`: what `SELECT txid_current()` does: snapshot, XID, commit record
//!   without waiting for its flush (nothing was written before it), clear.
//! - `emit-tx+txid:SIZE`: both side by side, emit-tx on even-numbered
//!   workers (acks with `--ack`), txid on odd-numbered ones, paced at one
//!   transaction per 50 us each (for crash tests).
//! - `lwlock`: take the Test LWLock (one in five exclusive), update or check
//!   plain data under it, release: a cross-process mutual-exclusion check.
//!
//! A backend loops until SIGTERM, finishing the iteration it is in. Every
//! iteration bumps the proc's `transactions` counter, which walbench samples.

use crate::api::Session;
use crate::context::ProcContext;
use crate::process::{shutdown_requested, write_all_fd};
use shmem::histogram::LatencyHistogram;
use shmem::lwlock::LWLockMode;
use shmem::proc::ProcCounters;
use shmem::segment::NamedLock;
use shmem::Shmem;
use std::fmt;
use std::path::Path;
use std::time::Instant;

/// Largest payload a workload may ask for (the insertion API's limit).
pub const MAX_PAYLOAD: usize = crate::api::MAX_PAYLOAD;
/// Prefix of the logical messages the workloads write.
pub const MESSAGE_PREFIX: &str = "walshm";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Emit(usize),
    EmitBatch(usize, usize),
    EmitTx(usize),
    Txid,
    /// `emit-tx+txid:SIZE`: even-numbered workers run emit-tx:SIZE (and
    /// print acks with `--ack`), odd-numbered ones a paced txid, side by
    /// side.
    EmitTxBesideTxid(usize),
    Lwlock,
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Workload::Emit(n) => write!(f, "emit:{n}"),
            Workload::EmitBatch(n, k) => write!(f, "emit-batch:{n}:{k}"),
            Workload::EmitTx(n) => write!(f, "emit-tx:{n}"),
            Workload::Txid => write!(f, "txid"),
            Workload::EmitTxBesideTxid(n) => write!(f, "emit-tx+txid:{n}"),
            Workload::Lwlock => write!(f, "lwlock"),
        }
    }
}

pub const WORKLOAD_HELP: &str =
    "emit:SIZE, emit-batch:SIZE:N, emit-tx:SIZE, txid, emit-tx+txid:SIZE, lwlock";

impl Workload {
    pub fn parse(s: &str) -> Result<Workload, String> {
        let bad = || {
            format!("invalid workload \"{s}\" (valid: {WORKLOAD_HELP}; SIZE in bytes, 0..={MAX_PAYLOAD})")
        };
        let (kind, arg) = match s.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (s, None),
        };
        let size = |a: Option<&str>| -> Result<usize, String> {
            let n: usize = a.ok_or_else(bad)?.parse().map_err(|_| bad())?;
            if n > MAX_PAYLOAD {
                return Err(bad());
            }
            Ok(n)
        };
        match kind {
            "emit" => Ok(Workload::Emit(size(arg)?)),
            "emit-batch" => {
                let (sz, n) = arg.and_then(|a| a.split_once(':')).ok_or_else(bad)?;
                let n: usize = n.parse().map_err(|_| bad())?;
                if !(1..=1_000_000).contains(&n) {
                    return Err(bad());
                }
                Ok(Workload::EmitBatch(size(Some(sz))?, n))
            }
            "emit-tx" => Ok(Workload::EmitTx(size(arg)?)),
            "emit-tx+txid" => Ok(Workload::EmitTxBesideTxid(size(arg)?)),
            "txid" if arg.is_none() => Ok(Workload::Txid),
            "lwlock" if arg.is_none() => Ok(Workload::Lwlock),
            _ => Err(bad()),
        }
    }
}

/// Runs `w` as proc `procno` until shutdown is requested; `ack`: print
/// `ack LSN` after each durable commit.
pub fn run(shm: &Shmem, procno: u32, datadir: &Path, w: Workload, ack: bool) -> i32 {
    let ctx = ProcContext::new(shm, procno, datadir);
    shmem::stats::set_backend_type(shm, procno, shmem::stats::BackendType::Worker);
    match w {
        Workload::Emit(size) => run_emit(&ctx, size, 1),
        Workload::EmitBatch(size, n) => run_emit(&ctx, size, n),
        Workload::EmitTx(size) => run_emit_tx(&ctx, Some(size), ack, None),
        Workload::Txid => run_emit_tx(&ctx, None, false, None),
        Workload::EmitTxBesideTxid(size) if procno.is_multiple_of(2) => {
            run_emit_tx(&ctx, Some(size), ack, None)
        }
        Workload::EmitTxBesideTxid(_) => run_emit_tx(&ctx, None, false, Some(BESIDE_TXID_PACE)),
        Workload::Lwlock => run_lwlock(&ctx),
    }
    0
}

/// Pause between the transactions of `emit-tx+txid`'s txid workers: an
/// unpaced txid loop commits millions of times a second, which would make
/// the WAL of a crash test mostly txid commits (and slow to verify).
const BESIDE_TXID_PACE: std::time::Duration = std::time::Duration::from_micros(50);

/// `emit-tx:SIZE` (message = Some(SIZE)) and `txid` (None); `pace`: sleep
/// that long after each transaction.
fn run_emit_tx(
    ctx: &ProcContext,
    message: Option<usize>,
    ack: bool,
    pace: Option<std::time::Duration>,
) {
    let mut session = Session::new(ctx);
    // Test-only bug for walbench torture to catch: ack without the flush.
    if crate::walfile::test_break(crate::walfile::Break::AckBeforeFsync) {
        session.set_synchronous(false);
    }
    let payload = payload_of(message.unwrap_or(0));
    let mut line = String::with_capacity(32);
    let hist = ctx.shm.latency_histogram(ctx.procno);
    let mut n = 0u64;
    while !shutdown_requested() {
        n += 1;
        let committed = timed(hist, n, SAMPLE_EVERY, || {
            session.begin()?;
            match message {
                Some(_) => session.emit_tx(MESSAGE_PREFIX, &payload).map(drop)?,
                None => session.xid().map(drop)?,
            }
            session.commit()
        });
        // A forked backend's session cannot fail (no generation end, the
        // payload was checked at parsing); an XID was assigned above.
        let Ok(Some(commit)) = committed else {
            break;
        };
        if ack {
            line.clear();
            line.push_str("ack ");
            line.push_str(&walformat::format_lsn(commit.start));
            line.push('\n');
            // One write per line: lines from many backends never interleave.
            if write_all_fd(1, line.as_bytes()).is_err() {
                break;
            }
        }
        if let Some(p) = pace {
            std::thread::sleep(p);
        }
    }
    session.shutdown();
}

/// One transaction in `SAMPLE_EVERY` is timed into the proc's latency
/// histogram (timing every one would cost a measurable share of `emit:16`).
const SAMPLE_EVERY: u64 = 8;

/// The same for the non-transactional `emit` loops, which run at millions
/// of records per second: two clock reads in 8 records were 4 % of an
/// `emit:16` record's CPU in a profile; one in 64 still gives tens of
/// thousands of samples a second.
const EMIT_SAMPLE_EVERY: u64 = 64;

/// Times `f` into `hist` when `n` is a sampled iteration (one in `every`).
#[inline]
fn timed<R>(hist: &LatencyHistogram, n: u64, every: u64, f: impl FnOnce() -> R) -> R {
    if !n.is_multiple_of(every) {
        return f();
    }
    let t = Instant::now();
    let r = f();
    hist.record(t.elapsed().as_nanos() as u64);
    r
}

fn payload_of(size: usize) -> Vec<u8> {
    (0..size).map(|i| b'a' + (i % 26) as u8).collect()
}

/// `n` messages of `size` bytes per transaction.
fn run_emit(ctx: &ProcContext, size: usize, n_per_tx: usize) {
    let mut session = Session::new(ctx);
    let me = ctx.me;
    let hist = ctx.shm.latency_histogram(ctx.procno);
    let payload = payload_of(size);
    let mut n = 0u64;
    while !shutdown_requested() {
        n += 1;
        let done = timed(
            hist,
            n,
            EMIT_SAMPLE_EVERY,
            || -> Result<(), crate::api::ApiError> {
                for _ in 0..n_per_tx {
                    session.emit(MESSAGE_PREFIX, &payload)?;
                    if n_per_tx > 1 && shutdown_requested() {
                        break;
                    }
                }
                Ok(())
            },
        );
        if done.is_err() {
            break;
        }
        ProcCounters::bump(&me.counters.transactions, 1);
    }
    session.shutdown();
}

fn run_lwlock(ctx: &ProcContext) {
    let (shm, env, me) = (ctx.shm, &ctx.env, ctx.me);
    let lock = shm.named_lock(NamedLock::Test);
    let area = shm.lock_test_area();
    let hist = shm.latency_histogram(ctx.procno);
    let mut i: u64 = ctx.procno as u64;
    while !shutdown_requested() {
        i += 1;
        let t = i.is_multiple_of(SAMPLE_EVERY).then(Instant::now);
        if i.is_multiple_of(5) {
            lock.acquire(env, LWLockMode::Exclusive);
            // SAFETY: we hold the Test lock exclusively.
            unsafe { area.bump_exclusive() };
            lock.release(env);
            ProcCounters::bump(&me.counters.lock_acquires, 1);
        } else {
            lock.acquire(env, LWLockMode::Shared);
            // SAFETY: we hold the Test lock in shared mode.
            unsafe { area.check_shared() };
            lock.release(env);
        }
        if let Some(t) = t {
            hist.record(t.elapsed().as_nanos() as u64);
        }
        ProcCounters::bump(&me.counters.transactions, 1);
    }
}

impl Workload {
    /// Does each transaction wait for its commit to be flushed (so that an
    /// `ack` line can promise durability)?
    /// Does the workload run transactions (XIDs, commit records)?
    pub fn is_transactional(self) -> bool {
        matches!(
            self,
            Workload::EmitTx(_) | Workload::Txid | Workload::EmitTxBesideTxid(_)
        )
    }

    /// Some of its workers wait for their commits to be flushed (and can
    /// print acks).
    pub fn waits_for_commit(self) -> bool {
        matches!(self, Workload::EmitTx(_) | Workload::EmitTxBesideTxid(_))
    }
}
