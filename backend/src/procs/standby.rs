//! Standby mode of the startup process (PostgreSQL's hot standby, reduced
//! to a log without data pages): with `DIR/standby.signal`, recovery does
//! not end at the end of the WAL in pg_wal; the startup process follows
//! what the walreceiver (`replication::walreceiver`) writes into pg_wal,
//! validating each record as it arrives ("replay"), until it is promoted.
//!
//! Steps, after the startup process validated pg_wal to its end X and cut
//! the torn tail there ([`crate::startup`] steps 1-4):
//! 1. publish where streaming starts (the start of X's segment on the
//!    control file's timeline, as PostgreSQL's walreceiver starts at a
//!    segment boundary) and what is replayed (X); write the control file
//!    "in archive recovery" (what `pg_ctl promote` checks);
//! 2. set `recovery = RECOVERY_STANDBY` and send the postmaster SIGUSR1:
//!    it forks the walreceiver and admits read-only sessions;
//! 3. loop: read the records that lie wholly below the walreceiver's
//!    flushed position (`flushed_upto`, Acquire: its fdatasync came
//!    first), advance `replayed_upto`; at each checkpoint record replayed
//!    make a restartpoint (the control file names that checkpoint and its
//!    redo point, still "in archive recovery", so a restarted standby
//!    reads only from there; then the segments wholly before the redo
//!    point, less `wal_keep_size`, are removed, as PostgreSQL's
//!    restartpoints do); sleep on `startup_latch`;
//! 4. a fast shutdown: the control file says "shut down in recovery",
//!    `standby.signal` stays, exit `EXIT_SHUTDOWN`; the next start
//!    resumes standby mode from the last restartpoint and the WAL on disk;
//! 5. promotion (SIGUSR2 from the postmaster, sent only once the
//!    walreceiver has exited, so nothing writes pg_wal any more): replay
//!    to the last flushed byte, cut the WAL there (bytes written but not
//!    flushed are zeroed, as a torn tail), and hand the end of WAL back to
//!    the startup process, which ends recovery as archive recovery does
//!    (a new timeline, its history file, the end-of-recovery checkpoint,
//!    "in production"); last, [`promoted`] stores the new timeline in the
//!    WAL facts and clears `recovery` (Release), so a session that sees
//!    the standby over sees the new timeline and the insert position.
//!
//! Invariants: nothing but the walreceiver writes pg_wal while `recovery`
//! is set (no walwriter nor checkpointer runs, sessions are read-only);
//! replay never reads past `flushed_upto`, so a record it accepted is on
//! disk and will be read again after a crash; the end of WAL at promotion
//! is at or after everything the walreceiver reported as flushed to the
//! primary, so every commit a synchronous primary acknowledged is kept.

use super::startup::{cut_wal_at, RecoveryResult, EXIT_SHUTDOWN};
use crate::control::{unix_now, ControlFile, DbState};
use crate::process::{log, shutdown_requested};
use crate::walfile;
use shmem::sema::Latch;
use shmem::sync::{AtomicBool, Ordering};
use shmem::walrcv::{WalRcvShared, RECOVERY_NONE, RECOVERY_STANDBY};
use shmem::Shmem;
use std::path::Path;
use std::sync::atomic::AtomicPtr;
use std::time::Duration;
use walformat::{format_lsn, Geometry, Lsn, WalReader};

/// The file that makes a start a standby (PostgreSQL's name).
pub const STANDBY_SIGNAL: &str = "standby.signal";
/// The file `pg_ctl promote` and `pg_promote()` create before they send
/// the postmaster SIGUSR1.
pub const PROMOTE_FILE: &str = "promote";

/// How long the replay loop sleeps when nothing wakes it.
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// Set by SIGUSR2 (the postmaster's "promote now").
static PROMOTE: AtomicBool = AtomicBool::new(false);
/// The latch the handler sets (the startup latch in the mapped segment).
static WAKE: AtomicPtr<Latch> = AtomicPtr::new(std::ptr::null_mut());

extern "C" fn on_sigusr2(_: libc::c_int) {
    PROMOTE.store(true, Ordering::Relaxed);
    let latch = WAKE.load(Ordering::Relaxed);
    if !latch.is_null() {
        // SAFETY: the pointer is the startup latch inside the segment,
        // which stays mapped for the life of this process; `set` is an
        // atomic swap and a futex wake, both async-signal-safe.
        unsafe { (*latch).set() };
    }
}

/// Whether this start is a standby's (`DIR/standby.signal`).
pub fn requested(datadir: &Path) -> bool {
    datadir.join(STANDBY_SIGNAL).exists()
}

/// The shared state of the standby.
fn shared(shm: &Shmem) -> &WalRcvShared {
    &shm.repl().walrcv
}

/// Steps 1-5 of the module header. Returns the end of WAL at promotion
/// (already cut there on disk), or the exit code: [`EXIT_SHUTDOWN`] at a
/// fast shutdown, `EXIT_FATAL` when the control file cannot be written.
pub fn follow(
    shm: &Shmem,
    datadir: &Path,
    control: &ControlFile,
    geo: &Geometry,
    mut r: RecoveryResult,
) -> Result<(RecoveryResult, ControlFile), i32> {
    let w = shared(shm);
    let fsync = shm.settings().fsync;
    let mut c = enter_standby(shm, datadir, control, geo, &r, fsync)?;
    let pg_wal = datadir.join("pg_wal");
    let mut stall = Stall::default();
    loop {
        if shutdown_requested() {
            c.state = DbState::ShutDownInRecovery;
            c.time = unix_now();
            write_control(datadir, &c, fsync)?;
            log(
                "LOG",
                "standby stopped at the shutdown request; \"standby.signal\" stays, so the next start follows the primary again",
            );
            return Err(EXIT_SHUTDOWN);
        }
        let promote = PROMOTE.load(Ordering::Relaxed);
        w.startup_latch.reset();
        // Acquire: pairs with the walreceiver's Release store after it
        // wrote the new timeline's history file.
        let received_tli = w.received_tli.load(Ordering::Acquire);
        if received_tli > c.timeline {
            follow_timeline(shm, datadir, &mut c, received_tli)?;
        }
        // Acquire: pairs with the walreceiver's Release store after its
        // fdatasync; the bytes below are in the files.
        let flushed = w.flushed_upto.load(Ordering::Acquire);
        if flushed > r.end_of_wal {
            let stopped = replay_upto(shm, datadir, &mut c, geo, &mut r, flushed)?;
            stall.note(r.end_of_wal, flushed, stopped);
        }
        if promote {
            break;
        }
        w.startup_latch.wait(IDLE_WAIT);
    }
    log(
        "LOG",
        &format!(
            "received promote request; end of received and flushed WAL at {} on timeline {}",
            format_lsn(r.end_of_wal),
            c.timeline
        ),
    );
    cut_wal_at(&pg_wal, geo, c.timeline, r.end_of_wal, fsync).map_err(|e| fatal(&e))?;
    crate::procarray::restore_next_xid(shm, c.next_xid, r.max_xid);
    Ok((r, c))
}

/// Steps 1 and 2 of the module header: the walreceiver's start position
/// and the replay position published, SIGUSR2 (promotion) handled, the
/// control file "in archive recovery", then the postmaster told to start
/// the walreceiver. Returns the control file as written.
fn enter_standby(
    shm: &Shmem,
    datadir: &Path,
    control: &ControlFile,
    geo: &Geometry,
    r: &RecoveryResult,
    fsync: bool,
) -> Result<ControlFile, i32> {
    let w = shared(shm);
    let tli = control.timeline;
    w.received_tli.store(tli, Ordering::Relaxed);
    WAKE.store(
        &w.startup_latch as *const Latch as *mut Latch,
        Ordering::Relaxed,
    );
    // SAFETY: `on_sigusr2` only stores to an atomic and sets a latch
    // (an atomic swap and a futex wake: async-signal-safe) in the
    // segment, which stays mapped for the life of this process.
    unsafe { shmem::sys::signals::set_handler(shmem::sys::Signal::SIGUSR2, on_sigusr2) };
    w.start_lsn
        .store(geo.seg_start(geo.seg_no(r.end_of_wal)), Ordering::Relaxed);
    w.start_tli.store(tli, Ordering::Relaxed);
    w.replay_tli.store(tli, Ordering::Relaxed);
    publish_replay(shm, r.end_of_wal);
    let mut c = *control;
    c.state = DbState::InArchiveRecovery;
    c.time = unix_now();
    write_control(datadir, &c, fsync)?;
    // Release: pairs with the Acquire in `in_recovery`; the postmaster
    // forks the walreceiver only after this signal.
    w.recovery.store(RECOVERY_STANDBY, Ordering::Release);
    // The parent is the postmaster (become_child checked it).
    let _ = shmem::sys::signal_parent(shmem::sys::Signal::SIGUSR1);
    log(
        "LOG",
        &format!(
            "entering standby mode on timeline {tli}: consistent recovery state reached at {}; streaming from {}",
            format_lsn(r.end_of_wal),
            format_lsn(w.start_lsn.load(Ordering::Relaxed))
        ),
    );
    Ok(c)
}

/// The walreceiver follows the primary onto timeline `tli` (its history
/// file is in pg_wal): replay reads along that history from now on (the
/// WAL before the switch from the older timelines' files), the control
/// file and the WAL facts name it. A history file that does not descend
/// from our timeline is refused (FATAL: the postmaster restarts the
/// standby, whose walreceiver checks the primary again).
fn follow_timeline(shm: &Shmem, datadir: &Path, c: &mut ControlFile, tli: u32) -> Result<(), i32> {
    let t = crate::timeline::Timeline::read(&datadir.join("pg_wal"), tli)
        .map_err(|e| fatal(&e.to_string()))?;
    if !t.contains(c.timeline) {
        return Err(fatal(&format!(
            "timeline {tli} received from the primary does not descend from this standby's timeline {}",
            c.timeline
        )));
    }
    log(
        "LOG",
        &format!(
            "following the primary from timeline {} onto timeline {tli}",
            c.timeline
        ),
    );
    c.timeline = tli;
    c.time = unix_now();
    write_control(datadir, c, shm.settings().fsync)?;
    shm.xlog().facts.set_timeline(tli);
    shared(shm).replay_tli.store(tli, Ordering::Relaxed);
    Ok(())
}

/// Replay that stays stopped by a reader error short of what the
/// walreceiver flushed (damage, or a record still arriving): logged once
/// when it lasts [`STALL_LOG_AFTER`], so a stuck standby is not silent.
#[derive(Default)]
struct Stall {
    at: Lsn,
    since: Option<std::time::Instant>,
    logged: bool,
}

/// How long replay may stay stopped by a reader error before it is logged.
const STALL_LOG_AFTER: Duration = Duration::from_secs(10);

impl Stall {
    fn note(&mut self, at: Lsn, flushed: Lsn, stopped: Option<String>) {
        let Some(why) = stopped.filter(|_| flushed > at) else {
            *self = Stall::default();
            return;
        };
        if self.at != at || self.since.is_none() {
            *self = Stall {
                at,
                since: Some(std::time::Instant::now()),
                logged: false,
            };
        }
        if !self.logged && self.since.is_some_and(|s| s.elapsed() >= STALL_LOG_AFTER) {
            self.logged = true;
            log(
                "WARNING",
                &format!(
                    "standby replay has been stopped at {} for {} s although WAL up to {} was received and flushed: {why}; a promotion would end the WAL there",
                    format_lsn(at),
                    STALL_LOG_AFTER.as_secs(),
                    format_lsn(flushed)
                ),
            );
        }
    }
}

/// Reads the records that end at or before `flushed`, from `r.end_of_wal`
/// on; a restartpoint at each checkpoint record. Returns the reader's
/// error when one stopped it (not a clean end, not a record past
/// `flushed`).
fn replay_upto(
    shm: &Shmem,
    datadir: &Path,
    c: &mut ControlFile,
    geo: &Geometry,
    r: &mut RecoveryResult,
    flushed: Lsn,
) -> Result<Option<String>, i32> {
    let pg_wal = datadir.join("pg_wal");
    let history = crate::timeline::Timeline::read(&pg_wal, c.timeline)
        .map(|t| t.reader_history())
        .map_err(|e| fatal(&e.to_string()))?;
    let mut reader = match WalReader::open_across(
        &walfile::SEAM,
        &pg_wal,
        *geo,
        history,
        Some(c.system_identifier),
        r.end_of_wal,
    ) {
        Ok(reader) => reader,
        // The walreceiver has not created the segment yet.
        Err(e) => return Ok(Some(e.to_string())),
    };
    let mut restartpoint = None;
    let mut stopped = None;
    // Stops at the first record not wholly flushed (it may be half
    // written, so an error there is no damage: it is read again later).
    loop {
        let rec = match reader.next_record() {
            Ok(Some(rec)) if rec.next <= flushed => rec,
            Ok(_) => break,
            Err(e) => {
                stopped = Some(e.to_string());
                break;
            }
        };
        r.last_record = rec.lsn;
        r.end_of_wal = rec.next;
        r.records += 1;
        if rec.xid != 0 && (r.max_xid == 0 || crate::procarray::xid_precedes(r.max_xid, rec.xid)) {
            r.max_xid = rec.xid;
        }
        if let Some((cp, _)) = rec.as_checkpoint() {
            restartpoint = Some((rec.lsn, cp));
        }
    }
    // The restartpoint is in the control file before the replay position
    // that covers its checkpoint is published.
    if let Some((at, cp)) = restartpoint {
        c.checkpoint = at;
        c.redo = cp.redo;
        c.next_xid = cp.next_xid;
        c.time = unix_now();
        write_control(datadir, c, shm.settings().fsync)?;
        remove_old_segments(&pg_wal, geo, c.timeline, cp.redo, shm.settings());
    }
    publish_replay(shm, r.end_of_wal);
    Ok(stopped)
}

/// After a restartpoint: removes the segments wholly before `redo` less
/// `wal_keep_size` (the control file names `redo` already, so no restart
/// reads them again). A standby archives nothing, so `archive_mode` keeps
/// none of them (PostgreSQL's standby marks them archived). A failure is
/// logged; the next restartpoint tries again.
fn remove_old_segments(pg_wal: &Path, geo: &Geometry, tli: u32, redo: Lsn, s: &shmem::Settings) {
    let keep = (s.wal_keep_size_mb as u64 * (1 << 20)).div_ceil(geo.seg_size);
    let cutoff = geo.seg_no(redo).saturating_sub(keep);
    let Ok(names) = walfile::list_dir(walfile::Op::WalDir, pg_wal) else {
        return;
    };
    for name in names {
        let name = name.to_string_lossy();
        let old = matches!(geo.parse_file_name(&name), Some((t, n)) if t == tli && n < cutoff);
        if old {
            if let Err(e) = walfile::remove_file(walfile::Op::WalRemove, &pg_wal.join(&*name)) {
                log(
                    "LOG",
                    &format!("could not remove WAL segment \"{name}\": {e}"),
                );
            }
        }
    }
    crate::timeline::remove_older_timelines(pg_wal, geo, tli, cutoff, false);
    // The walreceiver's `.done` marks of the segments just removed.
    crate::archive::remove_orphan_done(pg_wal);
}

/// What pg_last_wal_replay_lsn() and the status updates' apply position
/// show.
fn publish_replay(shm: &Shmem, end: Lsn) {
    let w = shared(shm);
    // Release: pairs with the Acquire load of library readers
    // (`walread::flushed_upto`), which then read the WAL below it.
    w.replayed_upto.store(end, Ordering::Release);
    w.replayed_at_us
        .store(shmem::stats::now_us() as i64, Ordering::Relaxed);
    shm.xlog().readers.flushed.wake();
    // The walreceiver reports the new apply position at once (SIGURG ends
    // its wait; ignored by default, so a stale pid is harmless).
    let pid = w.pid.load(Ordering::Relaxed);
    if pid > 0 {
        shmem::sys::kill(pid, shmem::sys::Signal::SIGURG);
    }
}

/// The last step of a promotion (see the module header): the new
/// timeline into the WAL facts, then the end of recovery for sessions.
pub fn promoted(shm: &Shmem, datadir: &Path) {
    if let Ok(c) = ControlFile::read(datadir) {
        shm.xlog().facts.set_timeline(c.timeline);
    }
    // Release: pairs with the Acquire in `WalRcvShared::in_recovery`.
    shared(shm).recovery.store(RECOVERY_NONE, Ordering::Release);
    log("LOG", "standby promoted: read-write from now on");
}

fn write_control(datadir: &Path, c: &ControlFile, fsync: bool) -> Result<(), i32> {
    c.write(datadir, fsync).map_err(|e| fatal(&e.to_string()))
}

fn fatal(msg: &str) -> i32 {
    log("FATAL", msg);
    crate::process::EXIT_FATAL
}
