//! The walreceiver: on a standby, streams WAL from the primary named by
//! `primary_conninfo` into `pg_wal` (PostgreSQL's walreceiver.c). The
//! postmaster forks it once the startup process entered standby mode
//! (`backend::standby`); it runs until the postmaster sends SIGTERM (a
//! shutdown, or a promotion: the postmaster waits for it to exit before it
//! tells the startup process to promote).
//!
//! One connection, as PostgreSQL's:
//! 1. parse `primary_conninfo` ([`conninfo`]), connect over a Unix socket
//!    (host is a directory) or TCP ([`client`]) as a physical replication
//!    connection with application_name from the conninfo, else
//!    `cluster_name`, else "walreceiver";
//! 2. IDENTIFY_SYSTEM: the system identifier must be ours; the primary's
//!    timeline ours or newer. A newer one is fetched with TIMELINE_HISTORY
//!    to say where it forked off ours: if this standby's WAL goes past the
//!    fork point its history has diverged (an old primary started as a
//!    standby of the promoted one): it is refused with that message and
//!    nothing is written. Otherwise the standby follows: it streams its
//!    own timeline up to the fork point (the primary ends that stream with
//!    CopyDone and names the next timeline), writes the next timeline's
//!    history file into pg_wal (under the name it makes, never the
//!    server's), publishes the timeline (`received_tli`, Release after the
//!    file; the startup process then replays along the new history) and
//!    starts again from the fork point's segment on the new timeline, as
//!    many times as there are newer timelines;
//! 3. START_REPLICATION [SLOT primary_slot_name] PHYSICAL X TIMELINE t,
//!    X the start of the segment holding the end of this standby's WAL
//!    (the first connection: what the startup process published; later
//!    ones: after what was flushed);
//! 4. stream: each XLogData is written at its position into its segment
//!    (created zero-filled through the I/O seam, `backend::walfile`, with
//!    its fail points); when no whole message is left in the buffer, the
//!    written WAL is fdatasynced, `flushed_upto` published (Release, after
//!    the sync) and the startup process woken, and a status update sent
//!    (write, flush, apply = the startup process's replay position), so a
//!    synchronous primary releases its commits as soon as they are on this
//!    disk. A status update also goes out when the primary asks for one,
//!    every `wal_receiver_status_interval`, and when the startup process
//!    replayed more (it sends SIGURG, which ends the wait for the socket:
//!    `crate::wakeup`), so `remote_apply` commits wait for the replay, not
//!    for a timeout.
//!
//! Invariants: WAL is written in order, each XLogData where the previous
//! ended (a gap or an overlap ends the connection); a segment is
//! fdatasynced before the first byte of the next
//! is written (the startup process's torn-tail rule: unsynced WAL lies in
//! one segment); `flushed_upto` never passes what was fdatasynced (with
//! `fsync = on`), and the flush position reported to the primary is
//! `flushed_upto`, so a commit the primary acknowledged because of this
//! standby is in this standby's pg_wal. A failed write or fdatasync is a
//! PANIC, as for every WAL write (the postmaster restarts the standby).
//!
//! Errors (a bad conninfo, an unreachable primary, a refused command, a
//! lost connection) are logged and the connection is tried again after
//! `wal_retrieve_retry_interval`, as PostgreSQL's startup process starts
//! a new walreceiver; a shutdown request ends the wait at once.

pub mod client;
pub mod conninfo;

use backend::process::{log, shutdown_requested};
use backend::walfile::{self, Op};
use client::{be_u64, message, Conn, Started, Target};
use conninfo::ConnInfo;
use shmem::sync::Ordering;
use shmem::walrcv::{rcv_state, WalRcvShared};
use shmem::Shmem;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use walformat::{format_lsn, Geometry, Lsn};

/// Microseconds between the Unix epoch and PostgreSQL's (2000-01-01).
const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;

/// The walreceiver process body; returns its exit code (0 after a
/// shutdown request).
pub fn run(shm: &Shmem, datadir: &Path) -> i32 {
    let w = &shm.repl().walrcv;
    // Acquire: pairs with the startup process's Release store of
    // `recovery`, after it published where streaming starts.
    if !w.in_recovery() {
        log(
            "FATAL",
            "walreceiver started while the server is not a standby",
        );
        return backend::process::EXIT_FATAL;
    }
    crate::wakeup::block_sigurg();
    w.pid.store(std::process::id() as i32, Ordering::Relaxed);
    let mut rcv = match Receiver::new(shm, datadir) {
        Ok(r) => r,
        Err(e) => {
            log("FATAL", &e);
            return backend::process::EXIT_FATAL;
        }
    };
    let retry = Duration::from_millis(shm.settings().wal_retrieve_retry_interval_ms as u64);
    while !shutdown_requested() {
        w.state.store(rcv_state::STARTING, Ordering::Relaxed);
        if let Err(e) = rcv.stream_once() {
            log("LOG", &format!("walreceiver: {e}"));
        }
        rcv.flush();
        w.state.store(rcv_state::WAITING, Ordering::Relaxed);
        nap(retry);
    }
    rcv.flush();
    w.state.store(rcv_state::STOPPED, Ordering::Relaxed);
    w.pid.store(0, Ordering::Relaxed);
    0
}

/// Sleeps `d` in steps, ending early at a shutdown request.
fn nap(d: Duration) {
    let until = Instant::now() + d;
    while !shutdown_requested() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50).min(until - Instant::now()));
    }
}

/// Unix microseconds now.
fn now_us() -> i64 {
    shmem::stats::now_us() as i64
}

/// How a stream ended (errors aside).
enum Streamed {
    Shutdown,
    /// The primary ended the timeline streamed: (next timeline, where it
    /// began).
    TimelineEnd(u32, Lsn),
}

/// The receiving side's state across connections.
struct Receiver<'a> {
    w: &'a WalRcvShared,
    geo: Geometry,
    tli: u32,
    sysid: u64,
    pg_wal: PathBuf,
    fsync: bool,
    archive_mode: bool,
    status_interval: Option<Duration>,
    /// `wal_receiver_timeout` (None: 0, never).
    timeout: Option<Duration>,
    conninfo: String,
    slot: String,
    cluster_name: String,
    /// The open segment: its number and file, and whether bytes were
    /// written to it since its last fdatasync.
    segment: Option<(u64, File, bool)>,
    written: Lsn,
    flushed: Lsn,
    /// The apply position of the last status update.
    reported_apply: Lsn,
}

impl<'a> Receiver<'a> {
    fn new(shm: &'a Shmem, datadir: &Path) -> Result<Receiver<'a>, String> {
        let w = &shm.repl().walrcv;
        let s = shm.settings();
        let facts = &shm.xlog().facts;
        let geo = Geometry::new(facts.seg_size).map_err(|e| e.to_string())?;
        // After a restart of this process: from what was flushed before.
        let start = w
            .start_lsn
            .load(Ordering::Relaxed)
            .max(w.flushed_upto.load(Ordering::Acquire));
        Ok(Receiver {
            w,
            geo,
            // After a restart of this process: the timeline it followed
            // the primary onto, if newer.
            tli: w
                .start_tli
                .load(Ordering::Relaxed)
                .max(w.received_tli.load(Ordering::Acquire)),
            sysid: facts.system_identifier,
            pg_wal: datadir.join("pg_wal"),
            fsync: s.fsync,
            archive_mode: s.archive_mode,
            status_interval: (s.wal_receiver_status_interval_s > 0)
                .then(|| Duration::from_secs(s.wal_receiver_status_interval_s as u64)),
            timeout: (s.wal_receiver_timeout_ms > 0)
                .then(|| Duration::from_millis(s.wal_receiver_timeout_ms as u64)),
            conninfo: s.primary_conninfo.as_str().to_string(),
            slot: s.primary_slot_name.as_str().to_string(),
            cluster_name: s.cluster_name.as_str().to_string(),
            segment: None,
            written: start,
            flushed: start,
            reported_apply: 0,
        })
    }

    /// Steps 1-4 of the module header, until the connection ends (Err) or
    /// a shutdown request (Ok).
    fn stream_once(&mut self) -> Result<(), String> {
        let info = ConnInfo::parse(&self.conninfo)
            .map_err(|e| format!("invalid primary_conninfo: {e}"))?;
        let host = info
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .ok_or("primary_conninfo names no host (set host=DIRECTORY or host=NAME)")?;
        let port = info.port.unwrap_or(5432);
        self.w.store_conninfo(&info.display_without_password());
        self.w.sender_host.store(&host);
        self.w.sender_port.store(port as i32, Ordering::Relaxed);
        self.w.slot_name.store(&self.slot);
        let app = self.application_name(&info);
        let user = info.user.clone().unwrap_or_else(os_user);
        let stop = shutdown_requested;
        let password = password_for(&info, &host, port, &user)?;
        let target = Target {
            host: &host,
            port,
            user: &user,
            password: password.as_deref(),
            application_name: &app,
        };
        let mut conn = Conn::connect(&target, &stop)
            .map_err(|e| format!("could not connect to the primary server: {e}"))?;
        let result = self
            .identify(&mut conn, &stop)
            .and_then(|()| self.replicate(&mut conn, &stop));
        conn.terminate();
        result
    }

    /// START_REPLICATION and streaming, from the start of the segment
    /// holding what was flushed, following the primary onto each newer
    /// timeline, until an error or a shutdown request (Ok).
    fn replicate(&mut self, conn: &mut Conn, stop: &dyn Fn() -> bool) -> Result<(), String> {
        let mut start = self.geo.seg_start(self.geo.seg_no(self.flushed));
        loop {
            let slot = match self.slot.as_str() {
                "" => String::new(),
                s => format!("SLOT {s} "),
            };
            let command = format!(
                "START_REPLICATION {slot}PHYSICAL {} TIMELINE {}",
                format_lsn(start),
                self.tli
            );
            let ended = match conn.start_replication(&command, stop)? {
                Started::TimelineEnd(next, at) => Streamed::TimelineEnd(next, at),
                Started::Streaming => {
                    self.streaming_from(start);
                    self.stream(conn)?
                }
            };
            match ended {
                Streamed::Shutdown => return Ok(()),
                Streamed::TimelineEnd(next, at) => {
                    self.adopt_timeline(conn, next, at, stop)?;
                    start = self.geo.seg_start(self.geo.seg_no(at));
                }
            }
        }
    }

    /// Streaming began at `start` (rewritten from the segment start: the
    /// same bytes up to what was flushed before, which came from this
    /// primary's history).
    fn streaming_from(&mut self, start: Lsn) {
        self.written = start;
        self.w.receive_start_lsn.store(start, Ordering::Relaxed);
        self.w.receive_start_tli.store(self.tli, Ordering::Relaxed);
        self.w.state.store(rcv_state::STREAMING, Ordering::Relaxed);
        log(
            "LOG",
            &format!(
                "started streaming WAL from primary at {} on timeline {}",
                format_lsn(start),
                self.tli
            ),
        );
    }

    /// The primary ended our timeline at `at` and continues on `next`:
    /// its history file goes into pg_wal (under the name we make, not the
    /// server's), then the startup process is told (`received_tli`,
    /// Release after the file is written; see `backend::standby`).
    fn adopt_timeline(
        &mut self,
        conn: &mut Conn,
        next: u32,
        at: Lsn,
        stop: &dyn Fn() -> bool,
    ) -> Result<(), String> {
        self.flush();
        let (text, entries) = self.fetch_history(conn, next, stop)?;
        let parent_ok = entries
            .last()
            .is_some_and(|e| e.parent == self.tli && e.switchpoint == at);
        if !parent_ok || next <= self.tli {
            return Err(format!(
                "the primary's timeline {next} does not continue this standby's timeline {} at {}",
                self.tli,
                format_lsn(at)
            ));
        }
        let path = self.pg_wal.join(backend::timeline::history_file_name(next));
        walfile::write_file_atomically(&path, text.as_bytes(), self.fsync)
            .map_err(|e| format!("could not write \"{}\": {e}", path.display()))?;
        log(
            "LOG",
            &format!(
                "timeline {} ended at {} on the primary: following it onto timeline {next}",
                self.tli,
                format_lsn(at)
            ),
        );
        self.segment = None;
        self.tli = next;
        // Release: the history file is written; pairs with the startup
        // process's Acquire load.
        self.w.received_tli.store(next, Ordering::Release);
        self.w.startup_latch.set();
        Ok(())
    }

    /// TIMELINE_HISTORY `tli`: the file's text and its parsed entries.
    fn fetch_history(
        &self,
        conn: &mut Conn,
        tli: u32,
        stop: &dyn Fn() -> bool,
    ) -> Result<(String, Vec<backend::timeline::HistoryEntry>), String> {
        let rows = conn.query(&format!("TIMELINE_HISTORY {tli}"), stop)?;
        let text = rows
            .first()
            .and_then(|r| r.get(1).cloned().flatten())
            .ok_or("TIMELINE_HISTORY returned no file")?;
        let name = backend::timeline::history_file_name(tli);
        let entries =
            backend::timeline::parse_history(&text, tli, &name).map_err(|e| e.to_string())?;
        Ok((text, entries))
    }

    /// application_name: the conninfo's, else cluster_name, else
    /// "walreceiver" (PostgreSQL's order).
    fn application_name(&self, info: &ConnInfo) -> String {
        info.application_name
            .clone()
            .or_else(|| (!self.cluster_name.is_empty()).then(|| self.cluster_name.clone()))
            .unwrap_or_else(|| "walreceiver".into())
    }

    /// IDENTIFY_SYSTEM and the checks of step 2.
    fn identify(&self, conn: &mut Conn, stop: &dyn Fn() -> bool) -> Result<(), String> {
        let rows = conn.query("IDENTIFY_SYSTEM", stop)?;
        let row = rows.first().ok_or("IDENTIFY_SYSTEM returned no row")?;
        let field = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
        let sysid: u64 = field(0).parse().unwrap_or(0);
        if sysid != self.sysid {
            return Err(format!(
                "database system identifier differs between the primary and standby: the primary's identifier is {sysid}, the standby's identifier is {}",
                self.sysid
            ));
        }
        let primary_tli: u32 = field(1)
            .parse()
            .map_err(|_| "IDENTIFY_SYSTEM returned an invalid timeline")?;
        if primary_tli == self.tli {
            return Ok(());
        }
        if primary_tli < self.tli {
            return Err(format!(
                "highest timeline {primary_tli} of the primary is behind recovery timeline {}",
                self.tli
            ));
        }
        let fork = self.fork_point(conn, primary_tli, stop)?;
        let ours = self
            .flushed
            .max(self.w.replayed_upto.load(Ordering::Relaxed));
        if ours > fork {
            return Err(format!(
                "the primary's timeline {primary_tli} forked off this standby's timeline {} at {}, before this standby's end of WAL {}: this server's history has diverged from the primary's; it will not follow it (make it a standby anew from a base backup of the primary)",
                self.tli,
                format_lsn(fork),
                format_lsn(ours)
            ));
        }
        log(
            "LOG",
            &format!(
                "the primary is on timeline {primary_tli}, which forked off this standby's timeline {} at {}: streaming up to there, then following it",
                self.tli,
                format_lsn(fork)
            ),
        );
        Ok(())
    }

    /// Where the primary's timeline `tli` left ours, from its history
    /// file (TIMELINE_HISTORY).
    fn fork_point(
        &self,
        conn: &mut Conn,
        tli: u32,
        stop: &dyn Fn() -> bool,
    ) -> Result<Lsn, String> {
        let (_, entries) = self.fetch_history(conn, tli, stop)?;
        entries
            .iter()
            .find(|e| e.parent == self.tli)
            .map(|e| e.switchpoint)
            .ok_or_else(|| {
                format!(
                    "the primary's timeline {tli} does not descend from this standby's timeline {}",
                    self.tli
                )
            })
    }

    /// Step 4: the CopyBoth stream, until an error or a shutdown request.
    fn stream(&mut self, conn: &mut Conn) -> Result<Streamed, String> {
        let mut last_status = Instant::now();
        let mut last_heard = Instant::now();
        let mut pinged = false;
        self.send_status(conn, false)?;
        loop {
            let mut reply_requested = false;
            while let Some(m) = conn.next_message()? {
                last_heard = Instant::now();
                pinged = false;
                match m.tag {
                    b'd' => reply_requested |= self.copy_data(&m.body)?,
                    b'c' => {
                        // The end of an old timeline: what came is flushed,
                        // then the primary names the next one.
                        self.flush();
                        let (next, at) = conn.end_copy(&shutdown_requested)?;
                        return Ok(Streamed::TimelineEnd(next, at));
                    }
                    b'E' => return Err(client::error_text(&m.body)),
                    _ => {}
                }
            }
            let flushed_more = self.flush();
            let due = self
                .status_interval
                .is_some_and(|i| last_status.elapsed() >= i);
            let applied_more = self.apply_position() > self.reported_apply;
            if flushed_more || applied_more || reply_requested || due {
                self.send_status(conn, false)?;
                last_status = Instant::now();
            }
            if let Some(t) = self.timeout {
                let silent = last_heard.elapsed();
                if silent >= t {
                    return Err("terminating walreceiver due to timeout".into());
                }
                if silent >= t / 2 && !pinged {
                    // Ask the primary for a reply (a sign of life).
                    self.send_status(conn, true)?;
                    pinged = true;
                }
            }
            if shutdown_requested() {
                return Ok(Streamed::Shutdown);
            }
            conn.fill()?;
        }
    }

    /// One CopyData message: XLogData is written, a keepalive noted.
    /// Returns whether the primary asked for a reply.
    fn copy_data(&mut self, body: &[u8]) -> Result<bool, String> {
        let bad = || "invalid CopyData message from the primary".to_string();
        let (&kind, rest) = body.split_first().ok_or_else(bad)?;
        match kind {
            b'w' => {
                let start = be_u64(rest, 0).ok_or_else(bad)?;
                let wal_end = be_u64(rest, 8).ok_or_else(bad)?;
                let sent = be_u64(rest, 16).ok_or_else(bad)? as i64;
                self.note_message(wal_end, sent);
                // WAL arrives in order from where streaming started: a
                // gap or an overlap is refused before anything is written.
                if start != self.written {
                    return Err(format!(
                        "the primary sent WAL at {}, expected {}",
                        format_lsn(start),
                        format_lsn(self.written)
                    ));
                }
                self.write(start, &rest[24..]);
                Ok(false)
            }
            b'k' => {
                let wal_end = be_u64(rest, 0).ok_or_else(bad)?;
                let sent = be_u64(rest, 8).ok_or_else(bad)? as i64;
                self.note_message(wal_end, sent);
                Ok(rest.get(16).is_some_and(|&b| b != 0))
            }
            _ => Err(bad()),
        }
    }

    /// pg_stat_wal_receiver's message times and the primary's WAL end.
    fn note_message(&self, wal_end: Lsn, sent_pg_us: i64) {
        let sent = sent_pg_us.saturating_add(PG_EPOCH_OFFSET_US);
        self.w.last_msg_send_us.store(sent, Ordering::Relaxed);
        self.w
            .last_msg_receipt_us
            .store(now_us(), Ordering::Relaxed);
        if wal_end != self.w.latest_end_lsn.load(Ordering::Relaxed) {
            self.w.latest_end_lsn.store(wal_end, Ordering::Relaxed);
            self.w.latest_end_us.store(sent, Ordering::Relaxed);
        }
    }

    /// Writes `bytes` of WAL starting at `start`, segment by segment.
    fn write(&mut self, start: Lsn, mut bytes: &[u8]) {
        let seg_size = self.geo.seg_size;
        let mut at = start;
        while !bytes.is_empty() {
            let segno = self.geo.seg_no(at);
            let offset = self.geo.seg_offset(at);
            let n = bytes.len().min((seg_size - offset) as usize);
            let file = self.segment_file(segno);
            if let Err(e) = walfile::write_at(Op::WalWrite, file, &bytes[..n], offset) {
                panic!(
                    "could not write to WAL segment {} at offset {offset}: {e}",
                    self.geo.file_name(self.tli, segno)
                );
            }
            if let Some(s) = self.segment.as_mut() {
                s.2 = true;
            }
            if offset + n as u64 == seg_size {
                self.mark_archived(segno);
            }
            at += n as u64;
            bytes = &bytes[n..];
        }
        self.written = at;
        self.w.written_upto.store(at, Ordering::Relaxed);
    }

    /// The open file of segment `segno`; the previous segment is
    /// fdatasynced first (see the invariants).
    fn segment_file(&mut self, segno: u64) -> &File {
        if self.segment.as_ref().is_some_and(|s| s.0 != segno) {
            self.flush();
            self.segment = None;
        }
        if self.segment.is_none() {
            let path = self.pg_wal.join(self.geo.file_name(self.tli, segno));
            let seg_size = self.geo.seg_size;
            let file = walfile::open_or_create_segment(&path, seg_size, self.fsync, 0, &[])
                .unwrap_or_else(|e| {
                    panic!("could not open WAL segment \"{}\": {e}", path.display())
                });
            self.segment = Some((segno, file, false));
        }
        &self.segment.as_ref().expect("opened above").1
    }

    /// With `archive_mode = on`, a segment received whole is marked
    /// archived (`.done`), as PostgreSQL's walreceiver does: the primary
    /// archives it, the standby never does, and its removal after a
    /// restartpoint or a promotion is not held back.
    fn mark_archived(&self, segno: u64) {
        if !self.archive_mode {
            return;
        }
        let name = self.geo.file_name(self.tli, segno);
        let marked = backend::archive::notify(&self.pg_wal, &name, self.fsync)
            .and_then(|()| backend::archive::mark_done(&self.pg_wal, &name, self.fsync));
        if let Err(e) = marked {
            log(
                "LOG",
                &format!("could not mark WAL segment \"{name}\" archived: {e}"),
            );
        }
    }

    /// fdatasyncs what was written and publishes it; true if the flush
    /// position moved.
    fn flush(&mut self) -> bool {
        if self.written <= self.flushed {
            return false;
        }
        if let Some((segno, file, dirty)) = self.segment.as_mut() {
            if *dirty && self.fsync {
                if let Err(e) = walfile::sync_data(Op::WalFsync, file) {
                    panic!(
                        "could not fdatasync WAL segment {}: {e}",
                        self.geo.file_name(self.tli, *segno)
                    );
                }
            }
            *dirty = false;
        }
        self.flushed = self.written;
        // Release: after the fdatasync; pairs with the startup process's
        // Acquire load before it reads the bytes.
        self.w.flushed_upto.store(self.flushed, Ordering::Release);
        self.w.startup_latch.set();
        true
    }

    /// A standby status update ('r'): write, flush, apply, our clock.
    /// What the startup process replayed, never past what was flushed.
    fn apply_position(&self) -> Lsn {
        self.w
            .replayed_upto
            .load(Ordering::Relaxed)
            .min(self.flushed)
    }

    fn send_status(&mut self, conn: &mut Conn, reply: bool) -> Result<(), String> {
        let apply = self.apply_position();
        self.reported_apply = apply;
        let mut body = vec![b'r'];
        body.extend_from_slice(&self.written.max(self.flushed).to_be_bytes());
        body.extend_from_slice(&self.flushed.to_be_bytes());
        body.extend_from_slice(&apply.to_be_bytes());
        body.extend_from_slice(&(now_us() - PG_EPOCH_OFFSET_US).to_be_bytes());
        body.push(reply as u8);
        conn.send(&message(b'd', &body))
    }
}

/// The password, as libpq finds it: the conninfo's `password`, else
/// `PGPASSWORD`, else the password file (`passfile`, `PGPASSFILE`, or
/// `~/.pgpass`). None: none found (enough for trust).
fn password_for(
    info: &ConnInfo,
    host: &str,
    port: u16,
    user: &str,
) -> Result<Option<String>, String> {
    if let Some(p) = info
        .password
        .clone()
        .or_else(|| std::env::var("PGPASSWORD").ok())
    {
        return Ok(Some(p));
    }
    let file = info
        .passfile
        .clone()
        .or_else(|| std::env::var("PGPASSFILE").ok())
        .or_else(|| std::env::var("HOME").ok().map(|h| format!("{h}/.pgpass")));
    match file {
        Some(f) => conninfo::password_from_file(Path::new(&f), host, port, user),
        None => Ok(None),
    }
}

/// libpq's default user: the operating system user's name.
fn os_user() -> String {
    shmem::sys::user_name()
        .unwrap_or_else(|| std::env::var("USER").unwrap_or_else(|_| "postgres".into()))
}
