//! WAL insertion, buffer management, write and flush (PostgreSQL's xlog.c).
//!
//! Inserting a record (modern path, `wal_insertion = parallel`):
//! 1. the caller builds the record in local memory (`walformat::RecordBuf`,
//!    CRC of the data already computed); a logical message
//!    (`insert_message`) is instead given by its parts and assembled in
//!    step 4 straight into the buffer page, its CRC computed from the
//!    parts, never by loading back the bytes just stored (those
//!    loads waited for the stores' cache misses on buffer lines another
//!    core wrote last), unless it continues onto another page (then it is
//!    built in local memory there and copied as below);
//! 2. take one WAL insertion lock (our preferred one; if we had to sleep for
//!    it, prefer the next one next time);
//! 3. reserve `[start, end)` in usable-byte space: under the insert-position
//!    spinlock (`wal_reservation = spinlock`) or by one fetch-add
//!    (`atomic`, see "lock-free reservation" below); `xl_prev` is the start
//!    of the previous reservation; finish the CRC. The three byte positions
//!    become LSNs through `last_page` (a `walformat::PageMap` of the page
//!    converted last: no division while they stay on it);
//! 4. copy into WAL buffer pages. `get_buffer` finds the page for an LSN; if
//!    the buffer does not hold it yet, we first advertise our progress in
//!    `insertingAt` (so that whoever must write older pages out does not wait
//!    for us — we may be the one waiting for them), then initialize it
//!    (`advance_buffers`), writing older WAL out if the buffer still holds
//!    an unwritten page. A record continuing on a new page marks that page's
//!    header XLP_FIRST_IS_CONTRECORD with `xlp_rem_len`;
//! 5. release the insertion lock, clearing `insertingAt`.
//!
//! With `wal_insertion = single` every backend uses insertion lock 0, so the
//! reservation and the copy are serialized (PostgreSQL before 9.4).
//!
//! Locks in use (`wal_insert_lock_spread`): with `all` a backend
//! rotates over every lock as PostgreSQL does; with `cpus`, over only the
//! first min(`wal_insert_locks`, CPUs it may run on); with `spare-cpu`, over
//! one fewer than CPUs (at least one); with `adaptive` (default), as `all`
//! while the walwriter keeps up and as `spare-cpu` while it falls behind
//! (`PaceWatch`, judged by the walwriter, read by `locks_to_use` on every
//! acquisition from its own cache line).
//!
//! Why a CPU for the walwriter (measured on emit:1024, fsync=off, tmpfs,
//! 2 cores): the walwriter writes what the inserters copy, about as much
//! work per byte (the kernel's copy into the page cache). With two
//! inserters copying on both CPUs it runs only when they are preempted,
//! falls behind, and the inserters meet buffer pages still holding
//! unwritten WAL: they write them themselves under WALWriteLock
//! (`wal_buffers_full` 0.0003-0.0024 per record against 0.00001-0.0002
//! with one lock fewer), and they initialize 67-83 % of the pages. One
//! inserter lock on 2 CPUs pipelines copy and write instead: same-run
//! records/s `spare-cpu` / `all` 1.16-1.89 at 2-256 clients (one pair of
//! 24 at 0.99); but on
//! emit:16, where the walwriter writes a fifteenth of the bytes and sleeps
//! half the time, 0.65-0.77 at 2 clients (two copies in parallel pay
//! there), hence `adaptive`: 1.15-1.51 on emit:1024 at 2-256 clients
//! (one pair of 14 at 0.89), emit:16 0.79-1.08 (it did not engage:
//! the same code path as `all`, so that is this machine's noise), and
//! transactions (emit-tx:100) 0.87-1.16, also not engaged.
//! Tried first and dropped: the inserter that finds a full buffer sleeps
//! while the walwriter writes it (as library workers do): 0.72-0.90x of
//! `all` at 4-256 clients, since the walwriter then does all the writing
//! while still competing for a CPU.
//!
//! `cpus`: more holders than CPUs cannot copy in
//! parallel: on 2 cores with 256 clients the 8
//! holders preempt each other while holding their locks, and every release
//! wakes a waiter that mostly finds the lock taken again (about 9x the
//! context switches of one lock). `cpus` halves those context switches, but
//! when other programs take the CPUs a preempted holder then blocks half of
//! the insert capacity instead of an eighth, and same-run A/Bs on a shared
//! machine went both ways, so it is not the default. The other locks stay
//! free, so `wait_insertions_to_finish`, which still looks at every lock, is
//! unaffected.
//!
//! A busy insertion lock (`wal_insert_lock_wait`): `queue`
//! sleeps on it as PostgreSQL does; `scan` first takes any other free lock
//! in use (`take_a_free_insert_lock`, one load per busy lock); `scan-yield`
//! also gives the CPU away (`sched_yield`) and re-scans, up to
//! `INSERT_LOCK_YIELDS` times, before sleeping; `adaptive` (the default)
//! queues until this backend's recent acquisitions waited often (one in
//! 200, `ContentionScore`), then behaves as `scan-yield` until they stop.
//! Any lock works for any insertion: `wait_insertions_to_finish` looks at
//! all of them.
//!
//! Why `queue` loses under oversubscription (emit:1024, fsync=off, tmpfs,
//! 2 cores, shared; per record at 256 clients, `queue` vs one insertion
//! lock): insertion-lock sleeps 0.015-0.022 vs 0.0005-0.0009, WAL-buffer
//! waits (`wal_buffers_full`: the buffer page still holds unwritten WAL)
//! 0.0034-0.0065 vs 0.0002-0.0005, WALWrite sleeps 0.004-0.007 vs 0.001;
//! futile wake-ups (woken, lock retaken, sleep again) only 0.001-0.003, so
//! barging releasers are not the cause. A holder preempted with 8 locks
//! in use leaves 7 lock queues running, so the run queue stays long and the
//! holder stays off the CPU while its `insertingAt` pins the write
//! position: the buffers fill and everyone waits for a page. With one lock
//! every other backend sleeps on it and the holder runs again at once.
//! wal_buffers 128MB halved the buffer waits but kept the insertion-lock
//! sleeps. `adaptive` at 256 clients: insertion-lock sleeps 0.004-0.006,
//! buffer waits 0.003-0.006; at 1-4 clients it never engages (scans per
//! record < 0.0002), emit:16 engages at most 1.4 % of acquisitions.
//! Same-run records/s adaptive/queue (3 interleaved pairs, medians) at
//! 1/2/4/16/64/256 clients: emit:1024 1.01/1.16/1.04/1.06/1.01/1.21,
//! emit:16 1.23/0.90/0.92/0.98/1.02/1.22. At 1-4 clients it never
//! engages (0 scans), so the code path is queue's and those ratios are the
//! machine's noise (pairs spread 0.77-1.29; earlier runs 1.02-1.11 there).
//! Not closed: in a later run one insertion lock (`wal_insertion =
//! single`) still did 1.12-1.22x adaptive's records/s at 256 clients (3
//! pairs; adaptive/queue 1.03-1.49 in the same run), with 10x fewer
//! buffer waits. Adding `wal_insert_lock_spread = cpus` to `adaptive`
//! (the other locks stay free) did 1.11-1.43x adaptive alone at 256
//! clients (3 pairs) with 3x fewer buffer waits, about single's figures;
//! tried and dropped as part of `adaptive` (scanning only one lock per CPU
//! once engaged): 1.33x queue at 256 but 0.90-1.02 (median 0.92) at 16
//! clients on emit:16, where its scans then hit busy locks and yield.
//! `wal_insert_lock_wait = queue` keeps the old form.
//!
//! Per-record cost (emit:16 at 2 clients, perf of the server's
//! processes, 2 cores, shared): backends 70 %, walwriter 25 % (the kernel
//! copying WAL into tmpfs, 13 % of all), checkpointer 5 % (removing old
//! segments). In the backends: CRC-32C 10 %, building the record and its
//! copies 17 % (`try_rebuild`, memmove), the reservation spinlock's line
//! moving between the two cores (most of `insert`'s own 7 %), insertion
//! lock 9 %, LSN conversions 7 %, page zeroing 4 %. Kept: the short-input
//! CRC (`walformat::record`, 17 -> 7.5 ns per record) and a plain store of
//! `insertingAt` at release (`LWLock::release_clear_var`). Dropped after
//! measuring: a constant-divisor LSN conversion, an inlined `acquire` fast
//! path, a record header written as one array (no gain in same-run A/Bs).
//!
//! A profile of the whole machine (emit:16 at 2 clients, fsync=off, tmpfs,
//! 2 cores, shared with other builds): backends 55 %, walwriter
//! 16 % (kernel copy into tmpfs 6.4 %, page allocation, memset of
//! pre-initialized pages 1.7 %), checkpointer 3 %, other programs 25 %.
//! Per record (about 300 ns of server CPU on both cores): `insert` 18 ns,
//! building the record (`try_rebuild`) 15, CRC-32C 13, memmove 11,
//! insertion lock acquire+release 12, LSN conversions 9, the workload
//! loop 7. Tried and dropped at review: the record's end and `xl_prev`
//! derived from its start by an addition when on the same page (a
//! microbenchmark of insert's three conversions gave 7.1-12.7 against
//! 10.1-13.2 ns per record, but no whole-server A/B showed it beyond this
//! machine's +-30 % noise, so the insert path keeps the plain
//! conversions). Kept: the checkpointer recycles as many future segments as one checkpoint
//! distance fills (was a quarter of max_wal_size, half of what the writer
//! then needed: the rest were new files, whose tmpfs pages the writer
//! allocated and the checkpointer freed): same-run server CPU per record
//! recycled/before 0.66, 0.66, 0.73 (emit:1024, 2 clients; records/s
//! 2.56/1.64, 2.55/1.63, 2.46/1.69 M), 0.71, 0.68, 0.91 (emit:1024, 256
//! clients; 2.04/1.50, 1.96/1.36, 1.79/1.52 M), median 0.90 on emit:16 at
//! 2 and 16 clients (2 cores, shared). Dropped:
//! `wal_insert_lock_spread = auto` as the default (one insertion lock per
//! CPU while active backends exceed 16 per CPU, re-decided every 1024
//! acquisitions while waits were frequent): same-run records/s auto/all
//! at 256 clients on emit:1024 0.93, 0.74, 0.91 (3 pairs).
//!
//! A call-graph profile (emit:16 at 2 clients, fsync=off, tmpfs, perf -g
//! of the walbench tree, 2 cores, shared with other builds and
//! benchmarks, load average 3-7). Before a logical message was assembled
//! in its buffer page: backends 68 % of the samples;
//! in them `insert` 19 % (its reservation spinlock swap 44 % of that: the
//! line moving between the two cores), `LWLock::release` 14 % (its
//! `lock xadd`, which also drains the page copy's stores), building the
//! record (`try_rebuild`, `try_logical_message_into`) 16 %, memmove 10 %,
//! CRC-32C 9 %, LSN conversions 8.5 %. Kept: a logical message is
//! assembled in its buffer page (`insert_message`, step 1): same-run
//! records/s new/old 1.01, 1.21, 1.54, 1.10, 1.24, 1.52 (6 interleaved
//! pairs, median 1.22); at 16 clients 0.86-1.35, median 0.93 (7 pairs,
//! not shown either way: assembly now runs under the insertion lock).
//! After it the backends' own share is CRC-32C 17 % (now the first
//! loads of the just-written page lines), the LSN
//! conversions 14 %, the reservation spinlock's swap about 9 %, the
//! insertion lock acquire 13 %, release 6 %. Tried and dropped: the body
//! CRC computed from the parts before the insertion lock (so that
//! nothing reads the page back): 0.70-1.18, median 0.80 against the kept
//! form (12 pairs); `LockEnv::forget` popping the last entry instead of
//! `Vec::remove`: median 0.90 (6 pairs). Every figure is within this
//! machine's noise except the kept one; absolute rates were 2-7 M/s, far
//! from the quiet machine's 13.6 M/s, so the 20 M/s target is not judged.
//!
//! Writing (`xlog_write`, WALWriteLock held): pages from the write result up
//! to the request, contiguous runs of at most `MAX_WRITE_PAGES` in one
//! `pwrite`, a completed segment fdatasynced at once, the last one when a
//! flush is requested. Only WAL that every insertion has finished copying is
//! written: callers first compute `wait_insertions_to_finish(upto)`, the
//! minimum `insertingAt` over busy insertion locks (waiting on those still
//! below `upto`). After each run the writer publishes the new write result
//! as WALWriteLock's variable (`update_var`), so a backend that only needs
//! one old buffer page written (`write_upto`) waits for that run with
//! `wait_for_var`, not for the whole write: inserting continues while a
//! large write is still going on (PostgreSQL publishes only at the end).
//!
//! Flushing (`flush`): return at once if the flush result already covers the
//! LSN (group flush); otherwise record the request in `req_flush`, wait for
//! insertions, then `acquire_or_wait(WALWriteLock)`: whoever gets it writes
//! and syncs as far as insertions allow, and everybody who waited re-checks
//! whether that covered them. A backend that only writes (to free a buffer)
//! also syncs when a flush request is pending, so flushers are served even
//! when write-only backends keep winning the lock.
//!
//! Who flushes for a commit (`group_commit`; backends only, see
//! `group_commit_for`): `leader` is the algorithm above (PostgreSQL's);
//! `flusher` hands every flush to the walwriter through the no-I/O
//! machinery below (publish the LSN, one sleep, one post from the
//! notifier); `hybrid` (`flush_as_hybrid`) leads when WALWriteLock is
//! free, and otherwise publishes its LSN in the waiter bitmap and sleeps
//! once. Every release of WALWriteLock then runs the notifier
//! (`notify_flush_waiters`): it ends the covered requests, hands the next
//! flush to the waiting backend with the oldest request (one post: it
//! wakes and leads), then posts the covered ones. So a committer sleeps
//! once and is woken once, one extra wake-up per fdatasync carries the
//! leadership on, and neither the walwriter nor a herd of lock waiters
//! (acquire_or_wait wakes them all, the uncovered ones sleep again) is in
//! the path. A leader with `commit_delay` set sleeps that long before its
//! fdatasync when `commit_siblings` others are in a transaction
//! (`delay_before_flush`, PostgreSQL's rule), in both `leader` and `hybrid`.
//! Measured (pgbench autocommit, fsync on, 2 cores shared): `hybrid` is the
//! default, 6-20 % less server CPU per commit than `leader` at 16-256
//! clients, a quarter fewer context switches, ties at 1-4 clients. Tried
//! and dropped: a leader flushing up to 2 more rounds for new waiters
//! before releasing (slower at 4-256), handing off to the newest waiter
//! instead of the oldest (no gain), a 5 ms first wait timeout (at 256
//! clients waiters timed out during a slow round and slept again: that
//! was hybrid's loss there). commit_delay 100-1000 us raised commits per
//! fdatasync (7 -> 11 at 16 clients, 20 -> 31 at 64) but not tps.
//! `wal_sync_method` decides how a written segment is made
//! durable: `sync_segment` calls fdatasync or fsync, or nothing for the
//! `open_*` methods, whose segments `segment_file` opens with O_DSYNC /
//! O_SYNC (every `write_run` is then durable when it returns; see
//! `walfile`'s header).
//!
//! The baton (`group_commit_baton`, off by default; `FlushWaiters`): a
//! hand-off posts a waiter, and until that waiter runs and takes
//! WALWriteLock the lock is free, so a commit arriving then used to lead a
//! flush of its own and split the group. With the baton it joins the
//! handed-off flush instead. Same-run A/Bs, one binary, off/on, pgbench
//! autocommit (2 cores, shared): at 64 clients 8 pairs (both orders),
//! commits per fdatasync 1.03-1.23x (every pair up), server CPU per commit
//! median 0.96x, context switches 0.85x in the 3 pairs counted cleanly;
//! at 256 clients 3 pairs, commits per fdatasync 1.06-2.0x, CPU 0.72-0.96x,
//! tps 1.04-1.25x; at 16 clients 5 pairs, commits per fdatasync median
//! 1.06x, CPU 0.96x, tps 0.98x; at 4 clients 3 pairs, tps 0.72-0.92x (the
//! disk idles while the handed-off backend waits to be scheduled, and
//! there is little to gather). So it stays off by default until a quiet
//! machine confirms where it wins.
//!
//! Where a durable commit's server CPU goes (pgbench -M prepared
//! autocommit `pg_logical_emit_message(true, ...)`, perf -F 999 of the
//! server's processes only, ext4, 2 cores, shared; us per transaction,
//! walshm / PostgreSQL 15): at 16 clients 47 / 63 in all, of which the
//! kernel's context-switch return (`finish_task_switch`, a VM's cost of
//! every sleep and preemption) 18 / 22, futex 12 / 17, recv 8 (PG: recv 2
//! plus epoll_wait 7), send 5.5 / 4.5, fdatasync 5.7 / 7.9, pwrite 1.2 /
//! 1.4, user space about 8; at 64 clients 41.5 / 66.5 (futex 11.4 / 16.1,
//! fdatasync 2.0 / 4.7); at 4 clients 71 in all, fdatasync 20.6 (about
//! 40 us of CPU per call, two sleeps in it: writeback, then the cache
//! flush). A backend makes per transaction one recv, one send, about 0.9
//! futex waits and 0.9 wakes (strace -c: 1413 recv, 1413 send, 2113 futex
//! for 1413 transactions at 16 clients; PostgreSQL: 1.8 recv, 0.8
//! epoll_wait, 2.7 futex), i.e. one sleep in recv and one in the commit
//! wait: the floor of this design. Context switches at 16 clients
//! (sched_switch): recv 37 %, commit wait 37 %, fdatasync 12 %,
//! preempted by the wake-up it caused (send to pgbench, post of a waiter)
//! 18 %; LWLock sleeps under 1 %. What is left is the kernel's price per
//! switch. pgbench's own CPU per transaction is the same against both
//! servers when measured directly (perf stat of pgbench, 16 clients:
//! 16.2 and 17.3 against walshm, 17.4 and 18.9 against PostgreSQL), its
//! system calls per transaction too (2 recv, one of them EAGAIN, 1 send,
//! about 0.4 ppoll), and both servers answer with the same 94 bytes in
//! one send. Tried and dropped (same-run A/Bs): SCHED_BATCH for the whole
//! server (tps 0.13x at 16 clients, 0.37x at 64, more CPU per commit);
//! commit_delay=100 at 4 clients (tps 0.4-0.6x); a 100 us EEVDF slice
//! (sched_attr.sched_runtime) for the server (no difference within the
//! noise).
//!
//! Lock-free reservation (`wal_reservation = atomic`): `CurrBytePos` is
//! advanced with one fetch-add, and `xl_prev` is handed over from the
//! predecessor through `shmem::prevlink` (its header states the bound the
//! table is sized from: we reserve inside an insertion lock).
//!
//! No-I/O mode (`IoMode::ViaWalwriter`, library workers): this
//! process never writes or syncs a WAL file. `flush` and a buffer page
//! whose old content is unwritten publish the wanted LSN in our proc slot's
//! `flush_wanted`, set the walwriter's latch and sleep on our semaphore in
//! bounded waits (`wait_for_walwriter`); the walwriter writes, flushes and
//! posts every waiter it covered. The walwriter never sleeps on an
//! insertion that advertised its progress (`finished_insertions_nowait`),
//! because such an inserter may be one of its waiters: waiting for it
//! would be a deadlock. If the server generation ends during a wait, the
//! insertion is finished into a process-local scratch page (nothing of the
//! dead generation is touched any more) and the handle is marked `stale`:
//! its caller must report the operation as failed.
//!
//! Crash invariants: WAL reaches a file only after every insertion below the
//! written position finished; `flush_result` never passes what was
//! fdatasynced (or written with an `open_*` sync method, or, with
//! `fsync = off`, written); a failed fdatasync (with `open_*`, write) is a
//! PANIC (the page cache may have dropped the data: retrying could
//! acknowledge WAL that is not on disk).

use crate::context::ProcContext;
use crate::process::log;
use shmem::lwlock::{LWLockMode, VarWait};
use shmem::prevlink;
use shmem::proc::ProcCounters;
use shmem::segment::NamedLock;
use shmem::settings::Settings;
use shmem::stats::{bump, FlatCounters};
use shmem::sync::{fence, AtomicU64, Ordering};
use shmem::variants::{GroupCommit, InsertLockSpread, InsertLockWait, Insertion, Reservation};
use shmem::{Proc, Shmem};
use std::fs::File;
use std::path::PathBuf;
use walformat::{Geometry, Lsn, PageMap, RecordBuf, XLOG_BLCKSZ};

const BLCKSZ: u64 = XLOG_BLCKSZ as u64;

/// Most pages one `pwrite` hands the kernel before the writer publishes its
/// progress (512 KiB: long enough that the syscall costs nothing next to the
/// copy, short enough that a backend waiting for one page is not held up by
/// a multi-megabyte write).
const MAX_WRITE_PAGES: usize = 64;

/// `wal_insert_lock_wait = scan-yield`: how many times a backend that found
/// every insertion lock busy yields the CPU and scans again before it sleeps.
const INSERT_LOCK_YIELDS: u32 = 8;

/// `wal_insert_lock_wait = adaptive`: one backend's recent waits for an
/// insertion lock. Each acquisition decays the score by
/// 1/2^`CONTENTION_DECAY_SHIFT` (a window of about 2048 acquisitions, a
/// few ms: waits come in bursts when a holder is preempted, and a shorter
/// window engaged on those bursts at 16 clients on emit:16) and adds
/// `CONTENTION_EVENT` if it waited (slept, or needed a yield), so the
/// score settles at (waits per acquisition) x 2^23; scanning engages at
/// `CONTENTION_ENGAGE`, a wait in 1 of 200 acquisitions (one wait alone,
/// worth 2^12, never engages it). Measured wait
/// rates with `queue` (fsync=off, tmpfs, 2 cores, shared): emit:1024 about
/// 1/5000 at 2-4 clients, 1/350 at 16, 1/100 at 64, 1/50 at 256; emit:16
/// at most 1/800 at any client count.
#[derive(Clone, Copy, Debug, Default)]
struct ContentionScore(u32);

const CONTENTION_DECAY_SHIFT: u32 = 11;
const CONTENTION_EVENT: u32 = 1 << 12;
const CONTENTION_ENGAGE: u32 = (CONTENTION_EVENT << CONTENTION_DECAY_SHIFT) / 200;
const _: () = assert!(CONTENTION_EVENT < CONTENTION_ENGAGE);

impl ContentionScore {
    /// One acquisition: decay, then count it if it waited.
    fn note(&mut self, waited: bool) {
        let decay = (self.0 >> CONTENTION_DECAY_SHIFT).max(1);
        self.0 = self.0.saturating_sub(decay);
        if waited {
            self.0 = self.0.saturating_add(CONTENTION_EVENT);
        }
    }

    /// Whether waits were frequent enough to scan and yield first.
    fn engaged(self) -> bool {
        self.0 >= CONTENTION_ENGAGE
    }
}

/// The walwriter's judgement of whether it keeps up with the inserters
/// (`wal_insert_lock_spread = adaptive`), made every
/// `PACE_WINDOW` from two measures of that window: the share of buffer
/// pages backends initialized themselves, and the walwriter's duty cycle
/// (the part of the time it was not asleep on its latch). When backends
/// initialized most pages and the walwriter hardly slept, inserters on
/// every CPU are starving the process that writes what they copy:
/// `WriterPace::behind` is set, and backends leave a CPU to the walwriter
/// by spreading over one lock fewer than CPUs (`InsertLockSpread::SpareCpu`).
/// It is cleared when the walwriter has time to spare (duty below
/// `PACE_BUSY`): the page share cannot judge that, since with the spare
/// CPU the walwriter pre-initializes nearly every page. Measured (emit,
/// fsync=off, tmpfs, 2 cores; all locks / one lock): 1 kB records at 2 and
/// 256 clients, page share 69-83 % / 28-48 %, duty 83-86 % / 80-86 %;
/// 16 B records page share 0-39 % / 0 %, duty 52-78 % / 19-35 %.
#[derive(Debug)]
pub struct PaceWatch {
    /// When the window began, and the page counters (backends, walwriter)
    /// then.
    since: std::time::Instant,
    pages: (u64, u64),
    /// Time the walwriter slept on its latch in this window.
    slept: std::time::Duration,
}

/// How long one judgement's window lasts.
const PACE_WINDOW: std::time::Duration = std::time::Duration::from_millis(50);
/// Backends' share of page initializations (percent) that sets `behind`.
const PACE_FALL_BEHIND: u64 = 50;
/// The walwriter's duty cycle (percent) at or above which it counts as
/// busy: needed to set `behind`, and `behind` is cleared below it.
const PACE_BUSY: u64 = 60;
/// Fewest pages in a window for the page share to count: the walwriter
/// pre-initializes in sweeps of up to every buffer at once.
const PACE_MIN_BUFFERS: u64 = 2;

/// One window's measures.
#[derive(Clone, Copy, Debug)]
struct PaceWindow {
    by_backends: u64,
    by_walwriter: u64,
    /// Percent of the window the walwriter was awake.
    duty: u64,
    /// `PACE_MIN_BUFFERS` times `wal_buffers`, in pages.
    min_pages: u64,
}

/// Whether the walwriter counts as behind after window `w`.
fn writer_behind(was_behind: bool, w: PaceWindow) -> bool {
    let busy = w.duty >= PACE_BUSY;
    if was_behind {
        return busy;
    }
    let pages = w.by_backends + w.by_walwriter;
    busy && pages >= w.min_pages && w.by_backends * 100 >= PACE_FALL_BEHIND * pages
}

impl PaceWatch {
    pub fn new(shm: &Shmem) -> PaceWatch {
        Self::window_from(std::time::Instant::now(), Self::page_counters(shm))
    }

    /// A window beginning at `since` with the page counters `pages`.
    fn window_from(since: std::time::Instant, pages: (u64, u64)) -> PaceWatch {
        PaceWatch {
            since,
            pages,
            slept: std::time::Duration::ZERO,
        }
    }

    /// The walwriter slept `d` on its latch.
    pub fn note_sleep(&mut self, d: std::time::Duration) {
        self.slept += d;
    }

    /// Pages initialized so far by backends and by the walwriter.
    fn page_counters(shm: &Shmem) -> (u64, u64) {
        let bufmap = &shm.xlog().bufmap;
        // Relaxed: statistics counters; a judgement off by a few pages
        // only moves the window's edge.
        (
            bufmap.backend_init_pages.load(Ordering::Relaxed),
            bufmap.preinit_pages.load(Ordering::Relaxed),
        )
    }

    /// One walwriter round: judge the window once it is over, and publish
    /// the judgement.
    pub fn observe(&mut self, shm: &Shmem) {
        let at = std::time::Instant::now();
        let elapsed = at - self.since;
        if elapsed < PACE_WINDOW {
            return;
        }
        let now = Self::page_counters(shm);
        let asleep = (self.slept.as_micros() * 100 / elapsed.as_micros().max(1)) as u64;
        let w = PaceWindow {
            by_backends: now.0.wrapping_sub(self.pages.0),
            by_walwriter: now.1.wrapping_sub(self.pages.1),
            duty: 100u64.saturating_sub(asleep),
            min_pages: PACE_MIN_BUFFERS * shm.layout().n_buffers as u64,
        };
        *self = Self::window_from(at, now);
        let pace = &shm.xlog().writer_pace.behind;
        // Relaxed: a hint (see `Xlog::locks_to_use`).
        let was = pace.load(Ordering::Relaxed) != 0;
        let is = writer_behind(was, w);
        if is != was {
            pace.store(is as u32, Ordering::Relaxed);
        }
    }
}

/// One WAL page aligned for O_DIRECT writes.
#[repr(C, align(4096))]
struct AlignedPage([u8; XLOG_BLCKSZ]);

impl Default for AlignedPage {
    fn default() -> Self {
        AlignedPage([0; XLOG_BLCKSZ])
    }
}

/// Zeroes the MAXALIGN padding after a record that ends at `end`: the
/// buffer page is not zeroed when initialized (`Xlog::init_page`).
///
/// # Safety
/// `page` is the buffer page holding `end` (if `end` is not a page
/// boundary), and the bytes up to `maxalign(end)` are the caller's to write.
unsafe fn zero_padding(page: *mut u8, end: Lsn) {
    let pad = (walformat::maxalign(end) - end) as usize;
    if pad > 0 {
        // SAFETY: the caller's contract; the padding ends at or before
        // the page's end, which is MAXALIGNed.
        unsafe { std::ptr::write_bytes(page.add((end % BLCKSZ) as usize), 0, pad) };
    }
}

/// Where a record landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inserted {
    /// LSN of the record's first byte.
    pub start: Lsn,
    /// LSN just past the record (what a flush must cover).
    pub end: Lsn,
}

/// One process's handle on the shared WAL; borrows the process's context.
/// What `lead_if_free` did: led a flush (WALWriteLock taken, WAL
/// flushed past the record), or found the lock busy (or the baton held
/// elsewhere) with the record already flushed by somebody else, or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lead {
    Led,
    Covered,
    Pending,
}

impl Lead {
    /// The record is flushed.
    fn done(self) -> bool {
        self != Lead::Pending
    }
}

pub struct Xlog<'a> {
    ctx: &'a ProcContext<'a>,
    /// `ctx.shm` and `ctx.me`, copied for the insert path.
    shm: &'a Shmem,
    me: &'a Proc,
    /// Our mechanism and pg_stat_wal counters (`shmem::stats`).
    stats: &'a FlatCounters,
    /// track_wal_io_timing: time writes and syncs.
    io_timing: bool,
    geo: Geometry,
    /// The page of our last converted byte position (start, end
    /// and `xl_prev` of a record are nearly always on it, and converting
    /// there needs no division).
    last_page: PageMap,
    tli: u32,
    sysid: u64,
    n_buffers: u64,
    /// The insertion lock we try first (below `locks_in_use`).
    lock_to_try: usize,
    /// How many insertion locks we spread over (see the module header).
    locks_in_use: usize,
    /// `wal_insert_lock_spread = adaptive`: how many while the walwriter
    /// is behind (`WriterPace::behind`).
    locks_when_writer_behind: Option<usize>,
    /// The insertion lock we hold, if any.
    holding: Option<usize>,
    /// What we do when our insertion lock is busy (`wal_insert_lock_wait`).
    lock_wait: InsertLockWait,
    /// `adaptive`: our recent waits for an insertion lock.
    contention: ContentionScore,
    fsync: bool,
    insertion: Insertion,
    reservation: Reservation,
    pg_wal: PathBuf,
    /// The segment file this process last wrote: (segment number, file).
    open_seg: Option<(u64, File)>,
    /// No-I/O mode (see the module header).
    no_io: bool,
    /// No-I/O mode: the generation ended during a wait, so an insertion or
    /// flush since the last `take_stale` did not really happen.
    stale: bool,
    /// No-I/O mode: where an insertion finishes once the generation ended.
    scratch: Vec<u8>,
    /// `write_run_upto`: the copy of a partial last page, zeros after its
    /// finished WAL (aligned for O_DIRECT).
    zero_tail_page: Option<Box<AlignedPage>>,
    /// `xlog_write` advanced the flush position: wake the walsenders once
    /// WALWriteLock is released (`release_wal_write_lock`).
    walsenders_to_wake: bool,
    /// Who flushes for our commits (`group_commit`; always `Leader` for
    /// processes other than backends, see `group_commit_for`).
    group_commit: GroupCommit,
}

/// What a no-I/O process waits for the walwriter to do.
#[derive(Clone, Copy, PartialEq, Eq)]
enum WalwriterWait {
    /// The write result reaches the LSN (a buffer page to recycle).
    Written,
    /// The flush result reaches the LSN.
    Flushed,
}

/// First and longest bounded sleep of a no-I/O wait: each timeout re-checks
/// the positions and the generation, and sets the walwriter latch again.
const WALWRITER_WAIT_FIRST: std::time::Duration = std::time::Duration::from_micros(500);
const WALWRITER_WAIT_MAX: std::time::Duration = std::time::Duration::from_millis(20);

/// First bounded sleep of a backend waiting for the walwriter's flush
/// (`group_commit = flusher | hybrid`): long enough that a loaded
/// fdatasync does not time it out (the notifier misses no waiter, see
/// `shmem::proc::FlushWaiters`; the timeout only guards against a
/// walwriter that stopped, which is a crash restart anyway).
const FLUSHER_WAIT_FIRST: std::time::Duration = std::time::Duration::from_millis(5);

/// First and longest bounded sleep of a `hybrid` committer. Every release
/// of WALWriteLock posts or hands off to each waiter (the loom model
/// `loom_flushwaiters` checks that none is missed), so a timeout is only a
/// guard; at 256 clients on 2 cores a flush round can take longer than
/// 5 ms of wall time (the leader waits for a CPU), and a shorter timeout
/// made waiters wake, find the lock held and sleep again.
const HYBRID_WAIT_FIRST: std::time::Duration = std::time::Duration::from_millis(100);
const HYBRID_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// The `group_commit` variant this process uses. Only backends hand their
/// flush to the walwriter: the walwriter itself, the startup process (no
/// walwriter runs yet), the checkpointer (its shutdown checkpoint is
/// written after the walwriter exited) always flush themselves; and a
/// proc beyond the waiter bitmap's capacity cannot be notified.
fn group_commit_for(ctx: &ProcContext) -> GroupCommit {
    let is_backend = ctx.procno < ctx.shm.layout().max_backends;
    let fits = (ctx.procno as usize) < shmem::proc::FLUSH_WAITER_CAPACITY;
    if is_backend && fits {
        ctx.settings.group_commit
    } else {
        GroupCommit::Leader
    }
}

/// Reads the current insert position (end of reserved WAL) in usable bytes.
fn reserved_bytepos(shm: &Shmem) -> u64 {
    // Acquire pairs with the Release store of a spinlock reservation
    // (`reserve`, `reserve_switch`) and the AcqRel fetch-add / CAS of an
    // atomic one: whoever sees a reservation also sees the insertion lock
    // its reserver took before it, which `wait_insertions_to_finish` relies
    // on. A slightly stale value only makes callers wait or write less.
    shm.xlog().insert.curr_byte_pos.load(Ordering::Acquire)
}

/// How many of `n_locks` insertion locks backends spread over.
/// `cpus`: the CPUs this process may run on.
fn insert_locks_in_use(n_locks: usize, spread: InsertLockSpread, cpus: usize) -> usize {
    let cap = match spread {
        InsertLockSpread::All | InsertLockSpread::Adaptive => n_locks,
        InsertLockSpread::Cpus => cpus,
        InsertLockSpread::SpareCpu => cpus.saturating_sub(1),
    };
    n_locks.min(cap).max(1)
}

impl<'a> Xlog<'a> {
    pub fn new(ctx: &'a ProcContext<'a>) -> Xlog<'a> {
        let shm = ctx.shm;
        let s = &ctx.settings;
        let facts = &shm.xlog().facts;
        let geo = Geometry::new(facts.seg_size).expect("segment size validated at start-up");
        let cpus = crate::client_poll::cpus_allowed() as usize;
        let n_locks = shm.n_insert_locks();
        let locks_in_use = insert_locks_in_use(n_locks, s.wal_insert_lock_spread, cpus);
        let locks_when_writer_behind = (s.wal_insert_lock_spread == InsertLockSpread::Adaptive)
            .then(|| insert_locks_in_use(n_locks, InsertLockSpread::SpareCpu, cpus));
        Xlog {
            ctx,
            shm,
            me: ctx.me,
            stats: &shm.proc_stats(ctx.procno).counters.flat,
            io_timing: s.track_wal_io_timing,
            geo,
            last_page: PageMap::default(),
            tli: facts.timeline,
            sysid: facts.system_identifier,
            n_buffers: shm.layout().n_buffers as u64,
            lock_to_try: ctx.procno as usize % locks_in_use,
            locks_in_use,
            locks_when_writer_behind,
            holding: None,
            lock_wait: s.wal_insert_lock_wait,
            contention: ContentionScore::default(),
            fsync: s.fsync,
            insertion: s.wal_insertion,
            reservation: s.wal_reservation,
            pg_wal: ctx.pg_wal(),
            open_seg: None,
            no_io: matches!(ctx.io, crate::context::IoMode::ViaWalwriter(_)),
            stale: false,
            scratch: Vec::new(),
            zero_tail_page: None,
            walsenders_to_wake: false,
            group_commit: group_commit_for(ctx),
        }
    }

    /// No-I/O mode: whether an operation since the last call did not
    /// complete because the server generation ended; clears the mark.
    pub fn take_stale(&mut self) -> bool {
        std::mem::take(&mut self.stale)
    }

    /// The process context this handle borrows.
    pub fn context(&self) -> &'a ProcContext<'a> {
        self.ctx
    }

    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// End of reserved WAL (an LSN).
    pub fn insert_lsn(&self) -> Lsn {
        self.geo.bytepos_to_end_recptr(reserved_bytepos(self.shm))
    }

    /// Where the next record will start (a record-start LSN, after any
    /// page header).
    pub fn insert_rec_ptr(&self) -> Lsn {
        self.geo.bytepos_to_recptr(reserved_bytepos(self.shm))
    }

    pub fn write_lsn(&self) -> Lsn {
        // Acquire pairs with the Release fetch_max in `xlog_write` (and the
        // variable update in `publish_written`): the writer's reads of the
        // buffer pages below happen before a caller reuses them.
        self.shm.xlog().write.write_result.load(Ordering::Acquire)
    }

    pub fn flush_lsn(&self) -> Lsn {
        // Acquire pairs with the Release fetch_max of `flush_result` in
        // `xlog_write`.
        self.shm.xlog().write.flush_result.load(Ordering::Acquire)
    }

    // ------------------------------------------------------------------
    // Insertion
    // ------------------------------------------------------------------

    /// Inserts a record; returns where it landed. A WAL switch at a segment
    /// start inserts nothing and returns `start == end ==` that position.
    pub fn insert(&mut self, rec: &mut RecordBuf) -> Inserted {
        let is_switch = rec.is_switch();
        self.insert_placed(rec.total_len(), is_switch, |xlog, start, end, prev| {
            rec.finish(prev);
            xlog.copy_record(rec.bytes(), start, end, is_switch);
        })
    }

    /// Inserts a logical message assembled straight into the WAL buffer
    /// page it is reserved in (no local record and copy), or,
    /// when it continues onto another page, built in `spill` and copied as
    /// `insert` does. The WAL is the same bytes either way.
    pub fn insert_message(
        &mut self,
        msg: &walformat::LogicalMessage,
        spill: &mut RecordBuf,
    ) -> Inserted {
        let len = msg.total_len();
        self.insert_placed(len, false, |xlog, start, end, prev| {
            let off = (start % BLCKSZ) as usize;
            if off + len as usize > XLOG_BLCKSZ {
                msg.build_into(spill);
                spill.finish(prev);
                xlog.copy_record(spill.bytes(), start, end, false);
                return;
            }
            let page = xlog.get_buffer(start);
            // SAFETY: `page` is the buffer page holding `start`, and the
            // record's `len` bytes from there lie in this page and in our
            // reservation: no other process writes them, and the page
            // cannot be recycled before our insertion lock is released.
            let dst = unsafe { std::slice::from_raw_parts_mut(page.add(off), len as usize) };
            msg.write_into(dst, prev);
            // SAFETY: as above; the padding lies in our reservation too.
            unsafe { zero_padding(page, start + len as u64) };
        })
    }

    /// The insert protocol around placing one record of `len` bytes: flow
    /// control, insertion lock, reservation, then `place(self, start, end,
    /// xl_prev)` writes the record's bytes at `[start, end)`, then release
    /// and the counters.
    #[inline]
    fn insert_placed(
        &mut self,
        len: u32,
        is_switch: bool,
        place: impl FnOnce(&mut Self, Lsn, Lsn, Lsn),
    ) -> Inserted {
        // Flow control (`max_replication_lag`): before any lock is taken.
        crate::throttle::before_insert(self.ctx, len as u64, || self.insert_lsn());
        let lock = self.acquire_insert_lock();
        let placed = if is_switch {
            self.reserve_switch()
        } else {
            Some(self.reserve(len as u64))
        };
        let Some((start_pos, end_pos, prev_pos)) = placed else {
            self.release_insert_lock(lock);
            let at = self.insert_lsn();
            return Inserted { start: at, end: at };
        };
        let start = self.bytepos_to_lsn(start_pos, false);
        let end = self.bytepos_to_lsn(end_pos, true);
        let prev = self.bytepos_to_lsn(prev_pos, false);
        place(self, start, end, prev);
        self.release_insert_lock(lock);

        // One count per record serves pg_stat_wal, the postmaster's summary
        // and walbench (`shmem::stats`: written by us only, never reset).
        bump(&self.stats.wal_records, 1);
        bump(&self.stats.wal_bytes, len as u64);
        if start / BLCKSZ != end / BLCKSZ {
            self.note_page_completed(end);
        }
        Inserted { start, end }
    }

    /// `bytepos_to_recptr(pos)` (with `end`, `bytepos_to_end_recptr`),
    /// through [`Xlog::last_page`]; off it, the map moves to `pos`'s page
    /// (one dividing conversion) and converts there.
    #[inline]
    fn bytepos_to_lsn(&mut self, pos: u64, end: bool) -> Lsn {
        if let Some(lsn) = self.last_page.lsn(pos, end) {
            return lsn;
        }
        self.last_page = self.geo.page_map(pos);
        self.last_page
            .lsn(pos, end)
            .expect("a page map covers the position it was made for")
    }

    /// How many insertion locks we spread over now: fewer while the
    /// walwriter is behind (`wal_insert_lock_spread = adaptive`).
    fn locks_to_use(&self) -> usize {
        match self.locks_when_writer_behind {
            Some(n) if self.writer_behind() => n,
            _ => self.locks_in_use,
        }
    }

    /// Whether the walwriter's `PaceWatch` says it falls behind (never
    /// unless `wal_insert_lock_spread = adaptive`).
    fn writer_behind(&self) -> bool {
        // Relaxed: a hint; any insertion lock is correct for any insertion,
        // and a page is correct zeroed or not (`init_page`).
        self.shm.xlog().writer_pace.behind.load(Ordering::Relaxed) != 0
    }

    fn acquire_insert_lock(&mut self) -> usize {
        let in_use = self.locks_to_use();
        let i = match self.insertion {
            Insertion::Single => 0,
            // `lock_to_try` is below `locks_in_use`; only while the walwriter
            // is behind can it be at or above `in_use` (no division then
            // on the common path).
            Insertion::Parallel if self.lock_to_try < in_use => self.lock_to_try,
            Insertion::Parallel => self.lock_to_try % in_use,
        };
        if self.insertion == Insertion::Parallel && self.scans_first() {
            if let Some((j, yielded)) = self.take_a_free_insert_lock(i, in_use) {
                self.note_contention(yielded);
                self.lock_to_try = j;
                self.holding = Some(j);
                return j;
            }
        }
        let l = self.shm.insert_lock(i);
        let at_once = l.lock.acquire(&self.ctx.env, LWLockMode::Exclusive);
        if !at_once && self.insertion == Insertion::Parallel {
            // We had to wait: try another lock next time, which spreads
            // backends over the locks.
            self.lock_to_try = (i + 1) % in_use;
        }
        self.note_contention(!at_once);
        self.holding = Some(i);
        i
    }

    /// Whether a busy insertion lock sends us scanning the others first.
    fn scans_first(&self) -> bool {
        match self.lock_wait {
            InsertLockWait::Queue => false,
            InsertLockWait::Scan | InsertLockWait::ScanYield => true,
            InsertLockWait::Adaptive => self.contention.engaged(),
        }
    }

    /// `adaptive`: one acquisition's share of the contention score.
    fn note_contention(&mut self, waited: bool) {
        if self.lock_wait == InsertLockWait::Adaptive {
            self.contention.note(waited);
        }
    }

    /// `wal_insert_lock_wait = scan | scan-yield | adaptive`: takes the
    /// first free insertion lock of the `in_use`, starting at `first`, without
    /// waiting; with `scan-yield` (and `adaptive` once engaged) gives the
    /// CPU away and scans again, up to `INSERT_LOCK_YIELDS` times. Returns
    /// the lock and whether we yielded; None when every one stayed busy.
    fn take_a_free_insert_lock(&self, first: usize, in_use: usize) -> Option<(usize, bool)> {
        let rounds = match self.lock_wait {
            InsertLockWait::ScanYield | InsertLockWait::Adaptive => INSERT_LOCK_YIELDS + 1,
            _ => 1,
        };
        bump(&self.stats.insert_lock_scans, 1);
        for round in 0..rounds {
            if round > 0 {
                bump(&self.stats.insert_lock_yields, 1);
                shmem::sync::yield_now();
            }
            for k in 0..in_use {
                let j = (first + k) % in_use;
                let l = self.shm.insert_lock(j);
                if l.lock
                    .conditional_acquire(&self.ctx.env, LWLockMode::Exclusive)
                {
                    return Some((j, round > 0));
                }
            }
        }
        None
    }

    fn release_insert_lock(&mut self, i: usize) {
        let l = self.shm.insert_lock(i);
        l.lock.release_clear_var(&self.ctx.env, &l.inserting_at, 0);
        self.holding = None;
    }

    /// Advertises that we will not write below `at` any more.
    fn update_inserting_at(&self, at: Lsn) {
        if let Some(i) = self.holding {
            let l = self.shm.insert_lock(i);
            l.lock.update_var(&self.ctx.env, &l.inserting_at, at);
        }
    }

    /// Reserves `size` bytes (MAXALIGNed here); returns (start, end, prev)
    /// in usable-byte space.
    fn reserve(&self, size: u64) -> (u64, u64, u64) {
        let size = walformat::maxalign(size);
        let ins = &self.shm.xlog().insert;
        match self.reservation {
            Reservation::Spinlock => {
                ins.lock.lock();
                let start = ins.curr_byte_pos.load(Ordering::Relaxed);
                let prev = ins.prev_byte_pos.load(Ordering::Relaxed);
                // Release pairs with the Acquire load in `reserved_bytepos`
                // (the insert spinlock's release does not: readers of the
                // insert position do not take it).
                ins.curr_byte_pos.store(start + size, Ordering::Release);
                ins.prev_byte_pos.store(start, Ordering::Relaxed);
                ins.lock.unlock();
                (start, start + size, prev)
            }
            Reservation::Atomic => {
                // AcqRel: the fetch-add orders reservations; the hand-off of
                // xl_prev goes through the prev-link table.
                let start = ins.curr_byte_pos.fetch_add(size, Ordering::AcqRel);
                let end = start + size;
                (
                    start,
                    end,
                    prevlink::hand_off(self.shm.prev_links(), start, end),
                )
            }
        }
    }

    /// Reserves a WAL switch record and the rest of its segment; None when
    /// the insert position is already at a segment start.
    fn reserve_switch(&self) -> Option<(u64, u64, u64)> {
        let size = walformat::maxalign(walformat::SIZE_OF_XLOG_RECORD as u64);
        let ins = &self.shm.xlog().insert;
        let geo = self.geo;
        let switch_end = |start: u64| -> Option<u64> {
            if geo.seg_offset(geo.bytepos_to_end_recptr(start)) == 0 {
                return None;
            }
            let end_ptr = geo.bytepos_to_end_recptr(start + size);
            let left = geo.seg_size - geo.seg_offset(end_ptr);
            let end_ptr = if left != geo.seg_size {
                end_ptr + left
            } else {
                end_ptr
            };
            Some(geo.recptr_to_bytepos(end_ptr))
        };
        match self.reservation {
            Reservation::Spinlock => {
                ins.lock.lock();
                let start = ins.curr_byte_pos.load(Ordering::Relaxed);
                let prev = ins.prev_byte_pos.load(Ordering::Relaxed);
                let r = switch_end(start).map(|end| {
                    // Release: as in `reserve`.
                    ins.curr_byte_pos.store(end, Ordering::Release);
                    ins.prev_byte_pos.store(start, Ordering::Relaxed);
                    (start, end, prev)
                });
                ins.lock.unlock();
                r
            }
            Reservation::Atomic => {
                let mut start = ins.curr_byte_pos.load(Ordering::Relaxed);
                loop {
                    let end = switch_end(start)?;
                    // AcqRel: as the fetch-add in `reserve` (its Release half
                    // pairs with the Acquire load in `reserved_bytepos`).
                    match ins.curr_byte_pos.compare_exchange_weak(
                        start,
                        end,
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => {
                            let prev = prevlink::hand_off(self.shm.prev_links(), start, end);
                            return Some((start, end, prev));
                        }
                        Err(v) => start = v,
                    }
                }
            }
        }
    }

    /// Copies a reserved record into the WAL buffers (CopyXLogRecordToWAL).
    fn copy_record(&mut self, bytes: &[u8], start: Lsn, end: Lsn, is_switch: bool) {
        let mut ptr = start;
        let mut rest = bytes;
        let mut page = self.get_buffer(ptr);
        loop {
            let off = (ptr % BLCKSZ) as usize;
            let n = rest.len().min(XLOG_BLCKSZ - off);
            // SAFETY: `page` is the buffer page holding `ptr`, which lies in
            // our reservation: no other process writes these bytes, and the
            // page cannot be recycled before our insertion lock is released.
            unsafe { std::ptr::copy_nonoverlapping(rest.as_ptr(), page.add(off), n) };
            rest = &rest[n..];
            ptr += n as u64;
            if rest.is_empty() {
                break;
            }
            // Continue on the next page: mark it as a continuation.
            page = self.get_buffer(ptr);
            // SAFETY: the first bytes of this page (its header) belong to
            // the record that continues onto it — ours.
            let header = unsafe { std::slice::from_raw_parts_mut(page, XLOG_BLCKSZ) };
            let hdr = walformat::write_page_header(
                header,
                &self.geo,
                ptr,
                self.tli,
                self.sysid,
                rest.len() as u32,
            );
            ptr += hdr as u64;
        }
        // SAFETY: `page` holds `ptr` (unless `ptr` is its end, when there
        // is no padding), and the padding lies in our reservation.
        unsafe { zero_padding(page, ptr) };
        if is_switch {
            self.fill_switch_pages(walformat::maxalign(ptr), end);
        }
    }

    /// After a switch record: zero the rest of its page, and make every
    /// remaining page of the segment exist in the buffers (so it can be
    /// written), all zeros, header included, as PostgreSQL leaves them.
    fn fill_switch_pages(&mut self, from: Lsn, end: Lsn) {
        let tail = (from % BLCKSZ) as usize;
        if tail != 0 {
            let page = self.get_buffer(from);
            // SAFETY: the rest of the page from `from` is inside our
            // reservation (it runs to the end of the segment).
            unsafe { std::ptr::write_bytes(page.add(tail), 0, XLOG_BLCKSZ - tail) };
        }
        let mut ptr = from.div_ceil(BLCKSZ) * BLCKSZ;
        while ptr < end {
            let page = self.get_buffer(ptr);
            // SAFETY: the whole page is inside our reservation.
            unsafe { std::ptr::write_bytes(page, 0, XLOG_BLCKSZ) };
            ptr += BLCKSZ;
        }
    }

    /// Buffer page address for `ptr`, initializing the page first if the
    /// buffer does not hold it yet (GetXLogBuffer).
    fn get_buffer(&mut self, ptr: Lsn) -> *mut u8 {
        let page_start = ptr - ptr % BLCKSZ;
        let expected_end = page_start + BLCKSZ;
        let idx = ((ptr / BLCKSZ) % self.n_buffers) as usize;
        let xlblocks = self.shm.xlblocks();
        // Acquire pairs with the Release store in `init_page`: the page's
        // initialization is visible before we write into it.
        if xlblocks[idx].load(Ordering::Acquire) != expected_end {
            // We will not write below this page any more: say so before we
            // possibly wait for older WAL to be written.
            let hdr = self.geo.page_header_size_at(page_start) as u64;
            let advertised = if ptr % BLCKSZ == hdr { page_start } else { ptr };
            self.update_inserting_at(advertised);
            self.advance_buffers(ptr, false);
            // Acquire: same partner as above.
            let got = xlblocks[idx].load(Ordering::Acquire);
            if got != expected_end && self.no_io && self.ctx.generation_ended() {
                return self.scratch_page();
            }
            if got != expected_end {
                panic!(
                    "could not find WAL buffer for {}: buffer {idx} holds page ending at {}",
                    walformat::format_lsn(ptr),
                    walformat::format_lsn(got)
                );
            }
        }
        self.shm.wal_page(idx)
    }

    /// No-I/O mode, generation ended: the rest of the insertion goes to a
    /// local page, and the handle is stale (see the module header).
    #[cold]
    fn scratch_page(&mut self) -> *mut u8 {
        self.stale = true;
        self.scratch.resize(XLOG_BLCKSZ, 0);
        self.scratch.as_mut_ptr()
    }

    /// After a record crossed into a new page: ask for that WAL to be
    /// written, and wake the walwriter when a quarter of the buffers is
    /// waiting to be written.
    fn note_page_completed(&self, end: Lsn) {
        let w = &self.shm.xlog().write;
        let complete = end - end % BLCKSZ;
        w.req_write.fetch_max(complete, Ordering::Relaxed);
        let written = w.write_result.load(Ordering::Relaxed);
        if complete.saturating_sub(written) >= self.n_buffers * BLCKSZ / 4 {
            self.shm.xlog().walwriter_latch.set();
        }
    }

    // ------------------------------------------------------------------
    // Buffer initialization
    // ------------------------------------------------------------------

    /// Initializes buffer pages up to the one holding `upto`
    /// (AdvanceXLInsertBuffer). `opportunistic`: initialize as many pages
    /// as possible without writing anything (walwriter pre-init).
    /// Returns the number of pages initialized.
    pub fn advance_buffers(&mut self, upto: Lsn, opportunistic: bool) -> u64 {
        let map = self.shm.named_lock(NamedLock::WalBufMapping);
        let bufmap = &self.shm.xlog().bufmap;
        let xlblocks = self.shm.xlblocks();
        let mut pages = 0;
        if !map.acquire(&self.ctx.env, LWLockMode::Exclusive) && !opportunistic {
            bump(&self.stats.insert_bufmapping_waits, 1);
        }
        loop {
            let next = bufmap.initialized_up_to.load(Ordering::Relaxed);
            if !opportunistic && upto < next {
                break;
            }
            let idx = ((next / BLCKSZ) % self.n_buffers) as usize;
            let old_end = xlblocks[idx].load(Ordering::Relaxed);
            if self.write_lsn() < old_end {
                if opportunistic {
                    break;
                }
                // The buffer still holds WAL that is not written: write it
                // out (or have the walwriter write it), without holding the
                // mapping lock.
                map.release(&self.ctx.env);
                bufmap.buffer_full_waits.fetch_add(1, Ordering::Relaxed);
                bump(&self.stats.insert_buffer_waits, 1);
                bump(&self.stats.wal_buffers_full, 1);
                if !self.no_io {
                    self.write_upto(old_end);
                } else if !self.wait_for_walwriter(old_end, WalwriterWait::Written) {
                    return pages;
                }
                map.acquire(&self.ctx.env, LWLockMode::Exclusive);
                continue;
            }
            self.init_page(idx, next);
            bufmap
                .initialized_up_to
                .store(next + BLCKSZ, Ordering::Relaxed);
            pages += 1;
        }
        map.release(&self.ctx.env);
        let counter = if opportunistic {
            &bufmap.preinit_pages
        } else {
            &bufmap.backend_init_pages
        };
        counter.fetch_add(pages, Ordering::Relaxed);
        let mine = if opportunistic {
            &self.stats.pages_init_walwriter
        } else {
            &self.stats.pages_init_backend
        };
        bump(mine, pages);
        pages
    }

    /// Writes the header of the page at `page_start` into buffer `idx`,
    /// and zeroes the rest unless the walwriter is behind (`PaceWatch`).
    /// Zeroing is not needed for the files: every byte below the finished
    /// insert position is written by an inserter (records, their MAXALIGN
    /// padding, continuation headers, switch fill), and a write of a
    /// partial page sends zeros for the rest (`write_run_upto`), so the
    /// files hold what a zeroed buffer would give (tests/common's
    /// `assert_gaps_are_zero`). Skipping it saves the walwriter a pass over
    /// every page when its kernel copy bounds the insert rate (emit:1024,
    /// 1.18-1.32x at 256 clients); while it has time to spare the zeroing
    /// brings the page's lines into the cache ahead of the inserter, which
    /// paid at 1 client on emit:16 (skipping: 0.72-1.06x;
    /// docs/benchmarks.md, the runs of `wal_insert_lock_spread = adaptive`).
    fn init_page(&self, idx: usize, page_start: Lsn) {
        let xlblocks = self.shm.xlblocks();
        // Invalidate first: a reader that still expects the old page must
        // not take the half-initialized one for it.
        xlblocks[idx].store(0, Ordering::Relaxed);
        // SAFETY: we hold WALBufMappingLock and the old page is written, so
        // nobody writes this buffer; the page is 8 KiB inside the mapping.
        let page = unsafe { std::slice::from_raw_parts_mut(self.shm.wal_page(idx), XLOG_BLCKSZ) };
        if !self.writer_behind() {
            page.fill(0);
        }
        walformat::write_page_header(page, &self.geo, page_start, self.tli, self.sysid, 0);
        // Release pairs with the Acquire load in `get_buffer`.
        xlblocks[idx].store(page_start + BLCKSZ, Ordering::Release);
    }

    /// Walwriter: initialize buffer pages ahead of the insert position.
    pub fn preinit_buffers(&mut self) -> u64 {
        self.advance_buffers(0, true)
    }

    // ------------------------------------------------------------------
    // Waiting for insertions, writing, flushing
    // ------------------------------------------------------------------

    /// Waits until every insertion below `upto` has finished copying;
    /// returns the position below which all insertions are finished
    /// (WaitXLogInsertionsToFinish).
    pub fn wait_insertions_to_finish(&self, upto: Lsn) -> Lsn {
        let reserved = self.insert_lsn();
        let upto = upto.min(reserved);
        let mut finished = reserved;
        for i in 0..self.shm.n_insert_locks() {
            let l = self.shm.insert_lock(i);
            let mut at = 0;
            loop {
                match l.lock.wait_for_var(&self.ctx.env, &l.inserting_at, at) {
                    VarWait::Free => {
                        at = 0;
                        break;
                    }
                    VarWait::Changed(v) => {
                        at = v;
                        if v >= upto {
                            break;
                        }
                    }
                }
            }
            if at != 0 && at < finished {
                finished = at;
            }
        }
        finished
    }

    /// Walwriter: the position below which every insertion has finished,
    /// sleeping only on insertion locks whose holder has not advertised a
    /// position yet (a short copy). An inserter that advertised one may be
    /// waiting for the walwriter itself (no-I/O mode), so its advertised
    /// position is taken as it is.
    pub fn finished_insertions_nowait(&self) -> Lsn {
        let mut finished = self.insert_lsn();
        for i in 0..self.shm.n_insert_locks() {
            let l = self.shm.insert_lock(i);
            if let VarWait::Changed(at) = l.lock.wait_for_var(&self.ctx.env, &l.inserting_at, 0) {
                finished = finished.min(at);
            }
        }
        finished
    }

    /// No-I/O mode: asks the walwriter to write (`Written`) or flush
    /// (`Flushed`) up to `lsn` and waits for it; false if the server
    /// generation ended first (the handle is then stale).
    fn wait_for_walwriter(&mut self, lsn: Lsn, what: WalwriterWait) -> bool {
        let done = |x: &Self| match what {
            WalwriterWait::Written => x.write_lsn() >= lsn,
            WalwriterWait::Flushed => x.flush_lsn() >= lsn,
        };
        let latch = &self.shm.xlog().walwriter_latch;
        let waiters = &self.shm.xlog().flush_waiters;
        // Publishing pairs with the SeqCst fence in the notifier (between
        // its flush-result update and its look at the waiters): either it
        // sees our request, or we see its flush below (our fence).
        waiters.publish(self.me, lsn);
        latch.set();
        let mut nap = if self.no_io {
            WALWRITER_WAIT_FIRST
        } else {
            FLUSHER_WAIT_FIRST
        };
        let ok = loop {
            fence(Ordering::SeqCst);
            if done(self) {
                break true;
            }
            if self.ctx.generation_ended() {
                self.stale = true;
                break false;
            }
            if !self.me.sem.wait_timeout(nap) {
                if self.ctx.server_gone() {
                    self.stale = true;
                    break false;
                }
                // Timed out: maybe the walwriter missed us; ask again.
                waiters.publish(self.me, lsn);
                latch.set();
                nap = (nap * 2).min(WALWRITER_WAIT_MAX);
            }
        };
        // A post may still come for this wait; the LWLock waits absorb and
        // re-post unrelated wake-ups (PGSemaphore semantics).
        self.me.flush_wanted.store(0, Ordering::Relaxed);
        ok
    }

    /// Writes (not syncs) WAL up to at least `upto` (a page end), or waits
    /// for whoever is writing to get past it.
    fn write_upto(&mut self, upto: Lsn) {
        let finished = self.wait_insertions_to_finish(upto);
        let ww = self.shm.named_lock(NamedLock::WalWrite);
        let written = &self.shm.xlog().write.write_result;
        loop {
            let seen = self.write_lsn();
            if seen >= upto {
                return;
            }
            if ww.conditional_acquire(&self.ctx.env, LWLockMode::Exclusive) {
                if self.write_lsn() < upto {
                    self.xlog_write(finished, false);
                }
                self.release_wal_write_lock();
                return;
            }
            // Somebody is writing: sleep until it publishes a run or is done.
            ww.wait_for_var(&self.ctx.env, written, seen);
        }
    }

    /// Makes WAL up to `record` durable (XLogFlush). Returns at once when
    /// somebody already flushed past it.
    pub fn flush(&mut self, record: Lsn) {
        bump(&self.stats.flush_requests, 1);
        if record <= self.flush_lsn() {
            return;
        }
        if self.no_io {
            self.wait_for_walwriter(record, WalwriterWait::Flushed);
            return;
        }
        match self.group_commit {
            GroupCommit::Leader => self.flush_as_leader(record),
            GroupCommit::Flusher => self.flush_via_walwriter(record),
            GroupCommit::Hybrid => self.flush_as_hybrid(record),
        }
    }

    /// `group_commit = flusher`: the walwriter flushes for us. A direct
    /// backend's wait ends only with the flush: if the walwriter dies, the
    /// postmaster's crash restart ends this process.
    fn flush_via_walwriter(&mut self, record: Lsn) {
        self.wait_for_walwriter(record, WalwriterWait::Flushed);
    }

    /// `group_commit = hybrid`: lead when WALWriteLock is free; otherwise
    /// publish our LSN and sleep once, until whoever releases WALWriteLock
    /// either covers us (one post from its notifier) or hands the next
    /// flush to us (one post, then we lead). The walwriter is not needed:
    /// every release of WALWriteLock notifies (`release_wal_write_lock`).
    fn flush_as_hybrid(&mut self, record: Lsn) {
        let mut nap = HYBRID_WAIT_FIRST;
        let mut heed_baton = self.ctx.settings.group_commit_baton;
        let mut baton = false;
        loop {
            let lead = self.lead_if_free(record, heed_baton);
            if lead.done() {
                self.pass_baton_on(baton, lead);
                return;
            }
            let waiters = &self.shm.xlog().flush_waiters;
            waiters.publish(self.me, record);
            // SeqCst: pairs with the fence in `release_wal_write_lock`
            // (after its release, before it reads the waiter bits): either
            // that releaser sees our bit, or we see the lock free below (or
            // its flush); and with the fence of the pass the baton's holder
            // runs after clearing it (see `FlushWaiters`' baton).
            fence(Ordering::SeqCst);
            let lead = if record <= self.flush_lsn() {
                Lead::Covered
            } else {
                self.lead_if_free(record, heed_baton)
            };
            if lead.done() {
                baton |= self.withdraw_flush_request();
                self.pass_baton_on(baton, lead);
                return;
            }
            let posted = self.me.sem.wait_timeout(nap);
            // A hand-off's post: the next flush is ours, or we are covered.
            baton |= waiters.take_baton(self.ctx.procno);
            if record <= self.flush_lsn() {
                baton |= self.withdraw_flush_request();
                self.pass_baton_on(baton, Lead::Covered);
                return;
            }
            if !posted {
                // Timed out (a long fdatasync): look again, a bit later
                // next time, and lead even if a baton is out (its holder
                // may be gone).
                nap = (nap * 2).min(HYBRID_WAIT_MAX);
                heed_baton = false;
            }
            // Posted but not covered: the flush was handed to us.
            baton |= self.withdraw_flush_request();
        }
    }

    /// We took the baton (a hand-off woke us) and are done: if we did not
    /// lead (somebody else's flush covered us), committers who deferred to
    /// us may be asleep, so run the notifier pass a leader's release would
    /// have run (it also hands the next flush on). After leading, our
    /// release already ran one; one more is a cheap no-op pass.
    fn pass_baton_on(&self, baton: bool, lead: Lead) {
        let heeded = self.ctx.settings.group_commit_baton;
        if heeded && baton && lead != Lead::Led {
            self.notify_flush_waiters();
        }
    }

    /// Ends our published flush request (if a notifier ended it first, its
    /// post may still come: semaphore waits absorb a stray post).
    /// Returns true if the request had been ended by a hand-off to us
    /// (we then hold the baton, see `pass_baton_on`).
    fn withdraw_flush_request(&self) -> bool {
        self.shm.xlog().flush_waiters.withdraw(self.me)
    }

    /// If nobody holds WALWriteLock: take it and flush for everybody up to
    /// what insertions finished (after `commit_delay`, see
    /// `delay_before_flush`). Says whether we led, or else whether
    /// `record` is flushed all the same.
    fn lead_if_free(&mut self, record: Lsn, heed_baton: bool) -> Lead {
        let finished = self.wait_insertions_to_finish(record);
        let waiters = &self.shm.xlog().flush_waiters;
        let ww = self.shm.named_lock(NamedLock::WalWrite);
        let baton_elsewhere = heed_baton && waiters.baton_held_by_other(self.ctx.procno);
        if baton_elsewhere || !ww.conditional_acquire(&self.ctx.env, LWLockMode::Exclusive) {
            return if record <= self.flush_lsn() {
                Lead::Covered
            } else {
                Lead::Pending
            };
        }
        // We lead: a request we published must not make us post ourselves;
        // a baton handed to us is ours to drop (our release notifies).
        self.withdraw_flush_request();
        let _ = waiters.take_baton(self.ctx.procno);
        if record > self.flush_lsn() {
            let finished = self.delay_before_flush(finished);
            self.xlog_write(finished, true);
        }
        self.release_wal_write_lock();
        Lead::Led
    }

    /// commit_delay / commit_siblings (PostgreSQL's, in XLogFlush): a
    /// leader holding WALWriteLock sleeps `commit_delay` us before its
    /// fdatasync when at least `commit_siblings` other processes are in a
    /// transaction, so that their commits join it; then it flushes as far
    /// as insertions have finished meanwhile. `finished` is what
    /// insertions had finished before; waiting for insertions here never
    /// waits for one that needs WALWriteLock (an inserter advertises its
    /// position before it waits for a buffer page). Returns how far to
    /// flush.
    fn delay_before_flush(&self, finished: Lsn) -> Lsn {
        let s = &self.ctx.settings;
        if s.commit_delay_us == 0
            || !self.fsync
            || !crate::procarray::others_in_transaction(
                self.shm,
                self.ctx.procno,
                s.commit_siblings,
            )
        {
            return finished;
        }
        std::thread::sleep(std::time::Duration::from_micros(s.commit_delay_us as u64));
        self.wait_insertions_to_finish(finished).max(finished)
    }

    /// Posts every proc waiting for a flush the flush result now covers;
    /// the walwriter calls it after each round, and with `group_commit =
    /// hybrid` every release of WALWriteLock (`release_wal_write_lock`).
    ///
    /// Hybrid hand-off: before those posts (each may preempt us), the
    /// waiting backend with the oldest request is posted to lead the next
    /// flush, so that the requests that arrived during our fdatasync fill
    /// the next one without waking the walwriter or every waiter. Our
    /// notifier's SeqCst fence follows the release of WALWriteLock: it
    /// pairs with the fence a waiter makes between publishing and trying
    /// the lock (`flush_as_hybrid`), so a waiter that found the lock held
    /// is seen by this notifier, or by a concurrent one that took its bit
    /// (which hands off too).
    pub fn notify_flush_waiters(&self) -> shmem::proc::Notified {
        let waiters = &self.shm.xlog().flush_waiters;
        let procs = self.shm.procs();
        let leaders_below = self.shm.layout().max_backends;
        let hand_off = self.ctx.settings.group_commit == GroupCommit::Hybrid;
        loop {
            let mut baton_withdrawn = false;
            let n = waiters.notify_with(
                procs,
                leaders_below,
                || self.flush_lsn(),
                |n| {
                    if let (true, Some(next)) = (hand_off, n.oldest) {
                        baton_withdrawn = !waiters.hand_off(procs, next);
                    }
                },
            );
            // A hand-off that failed took its baton back; a committer that
            // saw it meanwhile deferred and sleeps: a pass after the take-
            // back sees it (see `FlushWaiters`' baton).
            if !(baton_withdrawn && self.ctx.settings.group_commit_baton) {
                return n;
            }
        }
    }

    /// Of the waiters a notifier pass left waiting, those only the
    /// walwriter serves: every one with `flusher`; with `hybrid`, the no-I/O
    /// processes (library workers), since a waiting backend is woken by
    /// the next release of WALWriteLock.
    pub fn waiting_for_walwriter(&self, n: shmem::proc::Notified) -> usize {
        match self.ctx.settings.group_commit {
            GroupCommit::Hybrid => n.waiting - n.leaders_waiting,
            _ => n.waiting,
        }
    }

    /// `group_commit = leader` (PostgreSQL's XLogFlush): wait for
    /// insertions, then whoever gets WALWriteLock flushes for everybody.
    fn flush_as_leader(&mut self, record: Lsn) {
        let w = &self.shm.xlog().write;
        let ww = self.shm.named_lock(NamedLock::WalWrite);
        w.req_flush.fetch_max(record, Ordering::Relaxed);
        loop {
            let target = record.max(w.req_write.load(Ordering::Relaxed));
            let finished = self.wait_insertions_to_finish(target);
            if !ww.acquire_or_wait(&self.ctx.env, LWLockMode::Exclusive) {
                // Somebody held WALWriteLock and probably flushed for us.
                if record <= self.flush_lsn() {
                    return;
                }
                continue;
            }
            if record > self.flush_lsn() {
                let finished = self.delay_before_flush(finished);
                self.xlog_write(finished, true);
            }
            self.release_wal_write_lock();
            return;
        }
    }

    /// Walwriter: write and flush everything inserted so far. Returns true
    /// if it wrote anything.
    pub fn background_flush(&mut self) -> bool {
        let ww = self.shm.named_lock(NamedLock::WalWrite);
        loop {
            let reserved = self.insert_lsn();
            if reserved <= self.flush_lsn() {
                return false;
            }
            let finished = self.finished_insertions_nowait();
            if finished <= self.flush_lsn() {
                return false;
            }
            // If somebody (a hybrid leader) holds WALWriteLock, wait until
            // it is free and look again: what we computed is stale by then,
            // and the insertions finished during its fdatasync are what
            // our flush should carry.
            if !ww.acquire_or_wait(&self.ctx.env, LWLockMode::Exclusive) {
                continue;
            }
            let wrote = finished > self.flush_lsn();
            if wrote {
                self.xlog_write(finished, true);
            }
            self.release_wal_write_lock();
            return wrote;
        }
    }

    /// Writes WAL from the write result up to `rqst` (and syncs if
    /// `flush`). Caller holds WALWriteLock and has waited for insertions
    /// below `rqst` (XLogWrite).
    fn xlog_write(&mut self, rqst: Lsn, flush: bool) {
        let w = &self.shm.xlog().write;
        let xlblocks = self.shm.xlblocks();
        let mut written = self.write_lsn();
        // A run of contiguous buffer pages: (first buffer index, first LSN, pages).
        let mut run: Option<(usize, Lsn, usize)> = None;
        while written < rqst {
            let page_start = written - written % BLCKSZ;
            let page_end = page_start + BLCKSZ;
            let idx = ((page_start / BLCKSZ) % self.n_buffers) as usize;
            // Acquire pairs with the Release store in `init_page` (and in
            // startup's install_end_of_wal): the page header is visible
            // before we write the page out.
            let holds = xlblocks[idx].load(Ordering::Acquire);
            if holds != page_end {
                panic!(
                    "xlog write request {} is past the WAL in buffers (buffer {idx} holds page ending at {})",
                    walformat::format_lsn(rqst),
                    walformat::format_lsn(holds)
                );
            }
            run = match run {
                Some((first, lsn, n))
                    if first + n == idx
                        && n < MAX_WRITE_PAGES
                        && self.geo.seg_no(lsn) == self.geo.seg_no(page_start) =>
                {
                    Some((first, lsn, n + 1))
                }
                Some((first, lsn, n)) => {
                    self.write_run(first, lsn, n);
                    self.publish_written(lsn + n as u64 * BLCKSZ);
                    Some((idx, page_start, 1))
                }
                None => Some((idx, page_start, 1)),
            };
            written = page_end.min(rqst);
            let seg_done = written == page_end && self.geo.seg_offset(page_end) == 0;
            if seg_done {
                if let Some((first, lsn, n)) = run.take() {
                    self.write_run(first, lsn, n);
                    self.publish_written(page_end);
                }
                // A completed segment is synced at once (PostgreSQL does
                // the same), so a later flush only needs the last one.
                self.sync_segment(self.geo.seg_no(page_start));
                self.notify_archiver(self.geo.seg_no(page_start));
                self.maybe_request_checkpoint(page_end);
            }
        }
        if let Some((first, lsn, n)) = run {
            self.write_run_upto(first, lsn, n, written);
        }
        // Release pairs with the Acquire load in `write_lsn`.
        w.write_result.fetch_max(written, Ordering::Release);
        // A flusher waiting for WAL we just wrote: sync for it as well.
        let flush = flush || w.req_flush.load(Ordering::Relaxed) > self.flush_lsn();
        if flush && written > self.flush_lsn() {
            if self.geo.seg_offset(written) != 0 {
                self.sync_segment(self.geo.seg_no(written));
            }
            // Release pairs with the Acquire load in `flush_lsn`.
            w.flush_result.fetch_max(written, Ordering::Release);
            // Relaxed: a time stamp for the walsenders' round timings only.
            self.shm
                .repl()
                .flushed_at_ns
                .store(shmem::walsnd::monotonic_ns(), Ordering::Relaxed);
            self.walsenders_to_wake = true;
        }
    }

    /// Releases WALWriteLock, then wakes the walsenders if our
    /// `xlog_write` advanced the flush position: outside the lock, and the
    /// wake-up's fence follows the flush_result store either way, so none
    /// is lost. Every release of WALWriteLock in this file goes through here.
    fn release_wal_write_lock(&mut self) {
        self.shm
            .named_lock(NamedLock::WalWrite)
            .release(&self.ctx.env);
        if std::mem::take(&mut self.walsenders_to_wake) {
            shmem::walsnd::wake_walsenders(self.shm.repl());
        }
        if self.ctx.settings.group_commit == GroupCommit::Hybrid {
            self.notify_flush_waiters();
        }
    }

    /// Mid-write: everything below `end` (a page end) is handed to the
    /// kernel. Published as WALWriteLock's variable, which wakes the
    /// backends sleeping in `write_upto` for a page below it. The caller
    /// holds WALWriteLock, so the write result only grows.
    fn publish_written(&self, end: Lsn) {
        let ww = self.shm.named_lock(NamedLock::WalWrite);
        ww.update_var(&self.ctx.env, &self.shm.xlog().write.write_result, end);
    }

    /// After a segment is complete and synced: with `archive_mode`, mark it
    /// ready for the archiver (`archive_status/NAME.ready`).
    fn notify_archiver(&self, segno: u64) {
        if self.ctx.settings.archive_mode {
            let name = self.geo.file_name(self.tli, segno);
            crate::archive::notify_or_log(&self.pg_wal, &name, self.fsync);
        }
    }

    /// After a segment is complete: wake the checkpointer when the WAL since
    /// the last checkpoint's redo point reaches its trigger (half of
    /// `max_wal_size`), as PostgreSQL's XLogWrite does, rather than letting
    /// WAL pile up until the checkpointer's next look.
    fn maybe_request_checkpoint(&self, written: Lsn) {
        let ck = &self.shm.xlog().checkpointer;
        let trigger = checkpoint_wal_trigger(&self.ctx.settings);
        if written.saturating_sub(ck.last_redo.load(Ordering::Relaxed)) >= trigger {
            ck.latch.set();
        }
    }

    /// Writes `n` buffer pages starting at buffer `first` (WAL at `lsn`),
    /// of which WAL below `valid_end` is finished: a last page holding
    /// unfinished or never-written bytes (the buffer is not zeroed, see
    /// `init_page`) goes out as a copy with zeros from `valid_end` on.
    fn write_run_upto(&mut self, first: usize, lsn: Lsn, n: usize, valid_end: Lsn) {
        let last_start = lsn + (n as u64 - 1) * BLCKSZ;
        if valid_end >= last_start + BLCKSZ {
            return self.write_run(first, lsn, n);
        }
        if n > 1 {
            self.write_run(first, lsn, n - 1);
        }
        let idx = (first + n - 1) % self.n_buffers as usize;
        let valid = (valid_end - last_start) as usize;
        let mut copy = self.zero_tail_page.take().unwrap_or_default();
        // SAFETY: buffer `idx` holds the page at `last_start`; its bytes
        // below `valid_end` are finished insertions (our caller waited), so
        // they are stable while we read them.
        let src = unsafe { std::slice::from_raw_parts(self.shm.wal_page(idx), valid) };
        copy.0[..valid].copy_from_slice(src);
        copy.0[valid..].fill(0);
        self.write_bytes(&copy.0, last_start, 1);
        self.zero_tail_page = Some(copy);
    }

    /// Writes `n` buffer pages starting at buffer `first` (WAL at `lsn`)
    /// with one pwrite.
    fn write_run(&mut self, first: usize, lsn: Lsn, n: usize) {
        // SAFETY: pages first..first+n are contiguous in the mapping (the
        // run never wraps the ring), and every insertion into them has
        // finished (our caller waited), so they are stable while we read.
        let bytes =
            unsafe { std::slice::from_raw_parts(self.shm.wal_page(first), n * XLOG_BLCKSZ) };
        self.write_bytes(bytes, lsn, n);
    }

    /// Writes `bytes`, `n` whole WAL pages, at `lsn` with one pwrite.
    fn write_bytes(&mut self, bytes: &[u8], lsn: Lsn, n: usize) {
        let segno = self.geo.seg_no(lsn);
        let offset = self.geo.seg_offset(lsn);
        let timer = self.io_timer();
        let file = self.segment_file(segno);
        if let Err(e) = crate::walfile::write_at(crate::walfile::Op::WalWrite, file, bytes, offset)
        {
            panic!(
                "could not write to WAL segment {} at offset {offset}, length {}: {e}",
                self.geo.file_name(self.tli, segno),
                bytes.len()
            );
        }
        self.shm
            .xlog()
            .write
            .writes
            .fetch_add(n as u64, Ordering::Relaxed);
        bump(&self.stats.wal_write, 1);
        Self::add_elapsed(timer, &self.stats.wal_write_time_us);
    }

    /// A clock for pg_stat_wal's I/O times (None: track_wal_io_timing off).
    fn io_timer(&self) -> Option<std::time::Instant> {
        self.io_timing.then(std::time::Instant::now)
    }

    fn add_elapsed(timer: Option<std::time::Instant>, into: &AtomicU64) {
        if let Some(t) = timer {
            bump(into, t.elapsed().as_micros() as u64);
        }
    }

    /// Makes the WAL written into segment `segno` durable with
    /// `wal_sync_method`'s call (PostgreSQL's issue_xlog_fsync): nothing
    /// with `fsync = off`, nor with an `open_*` method, whose writes were
    /// durable when they returned (so no sync is counted either).
    fn sync_segment(&mut self, segno: u64) {
        let method = self.ctx.settings.wal_sync_method;
        if !self.fsync || crate::walfile::write_is_durable(method, self.fsync) {
            return;
        }
        let timer = self.io_timer();
        let file = self.segment_file(segno);
        if let Err(e) = crate::walfile::sync_wal(crate::walfile::Op::WalFsync, file, method) {
            // Never retry: the kernel may have dropped the dirty pages.
            panic!(
                "PANIC: could not {} WAL segment {}: {e}",
                crate::walfile::sync_call_name(method),
                self.geo.file_name(self.tli, segno)
            );
        }
        self.shm.xlog().write.syncs.fetch_add(1, Ordering::Relaxed);
        ProcCounters::bump(&self.me.counters.wal_syncs, 1);
        bump(&self.stats.fdatasyncs, 1);
        bump(&self.stats.wal_sync, 1);
        Self::add_elapsed(timer, &self.stats.wal_sync_time_us);
    }

    /// The open file of segment `segno`, creating the segment if needed.
    fn segment_file(&mut self, segno: u64) -> &File {
        if self.open_seg.as_ref().map(|(s, _)| *s) != Some(segno) {
            let path = self.pg_wal.join(self.geo.file_name(self.tli, segno));
            let first_page = self.new_segment_first_page(segno);
            let settings = &self.ctx.settings;
            let flags = crate::walfile::sync_open_flag(settings.wal_sync_method, self.fsync)
                | crate::walfile::direct_open_flag(settings.wal_direct_io, self.fsync);
            let file = match crate::walfile::open_or_create_segment(
                &path,
                self.geo.seg_size,
                self.fsync,
                flags,
                &first_page,
            ) {
                Ok(f) => f,
                Err(e) => panic!("could not open WAL segment {}: {e}", path.display()),
            };
            self.open_seg = Some((segno, file));
        }
        &self.open_seg.as_ref().expect("just opened").1
    }

    /// The first page of a new segment file: its long header, no data.
    fn new_segment_first_page(&self, segno: u64) -> Vec<u8> {
        let mut page = vec![0u8; XLOG_BLCKSZ];
        walformat::write_page_header(
            &mut page,
            &self.geo,
            self.geo.seg_start(segno),
            self.tli,
            self.sysid,
            0,
        );
        page
    }

    /// Creates the segment after the one being inserted into, ahead of need
    /// (PostgreSQL's PreallocXlogFiles), so that the process that crosses
    /// into it does not zero-fill 16 MiB while holding WALWriteLock. A
    /// failure here is only a warning: the writer tries again, and PANICs
    /// if it cannot.
    pub fn preallocate_next_segment(&self) {
        let next = self.geo.seg_no(self.insert_lsn()) + 1;
        let path = self.pg_wal.join(self.geo.file_name(self.tli, next));
        if path.exists() {
            return;
        }
        let first_page = self.new_segment_first_page(next);
        if let Err(e) =
            crate::walfile::create_segment(&path, self.geo.seg_size, self.fsync, &first_page)
        {
            log(
                "WARNING",
                &format!("could not create WAL segment {} ahead: {e}", path.display()),
            );
        }
    }

    /// Writes and flushes everything inserted (shutdown).
    pub fn flush_all(&mut self) {
        let at = self.insert_lsn();
        self.flush(at);
        log(
            "DEBUG",
            &format!(
                "flushed WAL up to {}",
                walformat::format_lsn(self.flush_lsn())
            ),
        );
    }

    /// For `sync_rep_one_sleep` (one sleep per synchronous commit): makes sure
    /// a flush covering `record` is done or will be, without waiting for
    /// one somebody else is doing. If WALWriteLock is free we flush as a
    /// leader (`lead_if_free`, whose release wakes the walsenders); if it is
    /// held, the holder's flush may stop below `record`, so the
    /// walwriter's latch is set: its next round starts after this call,
    /// when every insertion below `record` has finished (we waited for
    /// them), so it flushes past `record`. With `group_commit = flusher`
    /// the walwriter is always the one asked. False in no-I/O mode (the
    /// caller then flushes with `flush`).
    pub fn request_flush(&mut self, record: Lsn) -> bool {
        if record <= self.flush_lsn() {
            return true;
        }
        if self.no_io {
            return false;
        }
        let flushed =
            self.group_commit != GroupCommit::Flusher && self.lead_if_free(record, false).done();
        if !flushed {
            self.shm.xlog().walwriter_latch.set();
        }
        true
    }
}

/// WAL volume since the last redo point that calls for a checkpoint: half
/// of `max_wal_size` (PostgreSQL spreads checkpoints so that max_wal_size
/// is not exceeded with checkpoint_completion_target 0.9). The writer and
/// the checkpointer both test it.
pub fn checkpoint_wal_trigger(s: &Settings) -> u64 {
    ((s.max_wal_size_mb as u64) << 20) / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `n` acquisitions, one in `every` of them waited; returns how
    /// many of the last `n / 2` saw the score engaged.
    fn engaged_share(every: u32, n: u32, score: &mut ContentionScore) -> f64 {
        let mut engaged = 0;
        for k in 0..n {
            score.note(k % every == every - 1);
            if k >= n / 2 && score.engaged() {
                engaged += 1;
            }
        }
        f64::from(engaged) / f64::from(n / 2)
    }

    #[test]
    fn adaptive_insert_lock_wait_engages_only_when_waits_are_frequent() {
        let mut s = ContentionScore::default();
        assert!(!s.engaged(), "a new backend queues");
        // Uncontended (1-16 clients): never engages.
        assert_eq!(engaged_share(5000, 20_000, &mut s), 0.0);
        assert_eq!(engaged_share(400, 20_000, &mut s), 0.0);
        // Oversubscribed (64-256 clients on 2 cores): engaged all along.
        assert_eq!(engaged_share(50, 20_000, &mut s), 1.0);
        assert!(engaged_share(100, 20_000, &mut s) > 0.9);
        // Calm again: disengages within a few windows.
        assert_eq!(engaged_share(u32::MAX, 20_000, &mut s), 0.0);
    }

    #[test]
    fn backends_spread_over_at_most_one_insertion_lock_per_cpu() {
        use InsertLockSpread::{All, Cpus};
        assert_eq!(insert_locks_in_use(8, All, 2), 8);
        assert_eq!(insert_locks_in_use(8, Cpus, 2), 2);
        assert_eq!(insert_locks_in_use(8, Cpus, 64), 8);
        assert_eq!(insert_locks_in_use(1, Cpus, 2), 1);
        assert_eq!(insert_locks_in_use(128, Cpus, 64), 64);
        // adaptive starts from all of them (see `locks_to_use`).
        assert_eq!(insert_locks_in_use(8, InsertLockSpread::Adaptive, 2), 8);
    }

    #[test]
    fn the_walwriter_is_behind_while_backends_initialize_most_pages_and_it_hardly_sleeps() {
        let w = |by_backends, by_walwriter, duty| PaceWindow {
            by_backends,
            by_walwriter,
            duty,
            min_pages: 4096,
        };
        // 1 kB records, all locks: backends 78 % of the pages, duty 85 %.
        assert!(writer_behind(false, w(8000, 2200, 85)));
        // ... but a walwriter with time to spare is not behind.
        assert!(!writer_behind(false, w(8000, 2200, 40)));
        // 16 B records at 256 clients: share 39 %, duty 78 %.
        assert!(!writer_behind(false, w(400, 620, 78)));
        // Too few pages to judge the share.
        assert!(!writer_behind(false, w(3000, 0, 90)));
        // Behind: stays so while busy, whatever the share (the spare CPU
        // lets the walwriter pre-initialize nearly every page).
        assert!(writer_behind(true, w(0, 9000, 82)));
        assert!(!writer_behind(true, w(0, 9000, 30)));
    }

    #[test]
    fn spare_cpu_leaves_one_cpu_to_the_walwriter_but_keeps_one_lock() {
        use InsertLockSpread::SpareCpu;
        assert_eq!(insert_locks_in_use(8, SpareCpu, 2), 1);
        assert_eq!(insert_locks_in_use(8, SpareCpu, 1), 1);
        assert_eq!(insert_locks_in_use(8, SpareCpu, 4), 3);
        assert_eq!(insert_locks_in_use(8, SpareCpu, 64), 8);
        assert_eq!(insert_locks_in_use(128, SpareCpu, 64), 63);
    }
}
