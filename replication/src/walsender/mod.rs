//! The walsender: a connection that asked for `replication=true` or
//! `replication=database` in its StartupMessage (PostgreSQL's
//! walsender.c). Logical streaming is in `logical`, the SQL a database
//! connection may send between commands in `sql`.
//! It answers the replication commands (`protocol::replication`) and, after
//! START_REPLICATION, streams WAL in a CopyBoth stream: XLogData from the
//! requested position up to the flush position, read from the segment
//! files (read-only), keepalives, and the receiver's status updates, which
//! it publishes in its `WalSnd` entry, applies to its slot and uses to
//! release synchronous commits (`syncrep::release_waiters`: one pass per
//! batch of status updates read in one wake-up). It measures
//! the lag columns of pg_stat_replication (`lagtracker`): a sample (sent
//! position, time) after each batch sent, read back when the receiver
//! reports its write, flush and apply positions. When a stream ends it
//! logs where its rounds spent their time (`roundstats`: local flush to
//! send, socket writes, send to flush report, release passes).
//!
//! Sending: XLogData messages of at most 128 kB (PostgreSQL's
//! MAX_SEND_SIZE) are gathered into one socket write of up to 1 MB, read
//! from the segment file into one reused buffer, and the socket's send
//! buffer is raised to 4 MB while streaming, so that a receiver that gets
//! the CPU finds much queued (measured: the receiver, not the walsender,
//! bounds asynchronous streaming on 2 shared cores).
//!
//! Waiting: with nothing to send, the walsender announces that it sleeps
//! (`ReplCtl::announce_sleep`), re-checks the flush position and `ppoll`s
//! its socket with SIGURG unblocked; whoever advances the flush position
//! sends SIGURG (`walsnd::wake_walsenders`). SIGURG is blocked everywhere
//! else, so a wake-up between the re-check and `ppoll` stays pending and
//! ends the `ppoll` at once. The `ppoll` timeout is the keepalive timer
//! (half of `wal_sender_timeout`: a keepalive asking for a reply), and a
//! receiver silent for `wal_sender_timeout` is disconnected.
//!
//! Timelines (walsender.c's StartReplication): START_REPLICATION on the
//! server's timeline streams without end; on an ancestor of it (from the
//! current timeline's history file) it streams up to that timeline's
//! switch point, reading the switch segment from the next timeline's file
//! (which holds the ancestor's WAL below the switch point), then sends
//! CopyDone, sends no CopyData after it, waits for the client's CopyDone
//! (a stream the client ends first is answered the same way) and answers
//! with the next timeline and where it began (a result set), then
//! CommandComplete "START_STREAMING" and "START_REPLICATION", which is
//! what pg_receivewal reads to follow a switch. A start exactly at the
//! switch point gets that answer without COPY; a start past it, or a
//! timeline not in the history, is XX000 with PostgreSQL's message.
//!
//! TIMELINE_HISTORY sends the file from disk in 64 kB pieces behind a
//! header that gives its length: a hostile, huge history file costs one
//! piece of memory, never the whole file.
//!
//! Invariants: only WAL below the flush position is sent (it never
//! changes on disk afterwards); a segment read while the checkpointer
//! removes it is detected (`ReplCtl::removed_below_seg`, published before
//! removal, checked after each read) and ends the stream with 58P01 rather
//! than sending recycled bytes; a receiver's reported write, flush and
//! apply positions are clamped to what this connection sent before
//! anything uses them (sync-rep release, the slot, pg_stat_replication):
//! a report of WAL never sent releases no commit; bad client input is an
//! ERROR (commands) or FATAL 08P01 (stream), never a panic.
//!
//! Fast shutdown: the postmaster sends SIGTERM to walsenders only after the
//! shutdown checkpoint is flushed; the walsender then sends everything up
//! to the flush position, asks the receiver for a reply, waits (bounded)
//! for its write or flush report to reach the end, and ends the stream
//! with CommandComplete "COPY 0", as PostgreSQL's WalSndDone does.
//!
//! Flow control (`max_replication_lag`, `throttle`): after each batch of
//! status updates the walsender publishes the throttle point and wakes
//! throttled backends; when it leaves the CopyBoth phase (receiver gone,
//! CopyDone, exit) it publishes again, so its receiver stops counting at
//! once. While the limit is on it asks for a reply (a keepalive with the
//! reply flag, one outstanding at a time) when a quarter of the limit it
//! sent is unreported or backends wait: pg_receivewal reports on its own
//! only every `--status-interval` (10 s by default).

mod basebackup;
mod logical;
mod physical;
mod sql;

use crate::lagtracker::{self, LagTracker};
use crate::roundstats::RoundStats;
use backend::process::{log, shutdown_requested, EXIT_FATAL};
use backend::walfile::{self, Op};
use backend::{slots, syncrep, throttle};
use protocol::replication::{self as repl, ColumnType, Command, StreamMessage};
use protocol::{sqlstate, ReplicationMode, SqlError, StartupInfo};
use shmem::sync::Ordering;
use shmem::walsnd::{sender_state, WalSnd};
use shmem::Shmem;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use walformat::{Geometry, Lsn};

/// Most WAL bytes in one XLogData message (PostgreSQL's MAX_SEND_SIZE).
const MAX_SEND: u64 = 16 * 8192;
/// Most WAL bytes gathered into one socket write (several XLogData
/// messages back to back): one syscall per 1 MB instead of per 128 kB.
const MAX_BATCH: usize = 8 * MAX_SEND as usize;
/// The socket send buffer asked for while streaming (capped by the
/// kernel's net.core.wmem_max): a receiver that gets the CPU finds up to
/// this much queued and need not wait for the walsender to be scheduled
/// again after each 208 kB (the default for a Unix socket).
const STREAM_SNDBUF: usize = 4 << 20;
/// TIMELINE_HISTORY reads and sends the history file in pieces this large.
const HISTORY_CHUNK: usize = 64 << 10;
/// How long the shutdown drain waits for the receiver's last report.
const SHUTDOWN_REPLY_WAIT: Duration = Duration::from_secs(10);
/// ppoll timeout when no keepalive timer applies.
const IDLE_POLL: Duration = Duration::from_millis(1000);
/// Flow control: a reply asked for and not received after this long is
/// asked for again.
const REPLY_REASK: Duration = Duration::from_millis(500);
/// Flow control: least spacing of the replies asked for only because
/// backends wait (a quarter of the limit unreported asks at once).
const WAITERS_ASK_SPACING: Duration = Duration::from_millis(10);

/// How a session or stream ended.
enum End {
    /// The client left (Terminate or EOF): exit 0.
    ClientGone,
    /// A FATAL was sent (or could not be): exit with EXIT_FATAL.
    Fatal,
    /// Streaming ended at a fast shutdown: exit 0.
    Shutdown,
}

/// One walsender's state.
struct WalSender<'a, S: Read + Write + AsRawFd> {
    shm: &'a Shmem,
    datadir: PathBuf,
    stream: S,
    me: usize,
    geo: Geometry,
    tli: u32,
    mode: ReplicationMode,
    database: String,
    inbuf: Vec<u8>,
    /// The slot streamed for, if any.
    slot: Option<usize>,
    temp_slots: Vec<String>,
    /// The timeline the current START_REPLICATION streams.
    send_tl: SendTimeline,
    /// Sent up to (exclusive) on the current stream: what the receiver's
    /// reports are clamped to.
    sent: Lsn,
    /// The stream of an older timeline reached its end and we sent
    /// CopyDone: no CopyData may follow, the client's CopyDone is awaited.
    done_sending: bool,
    /// The open segment (segno, file).
    segment: Option<(u64, File)>,
    /// XLogData messages being gathered for one write (kept between
    /// batches so that it is allocated once).
    outbuf: Vec<u8>,
    last_reply: Instant,
    ping_sent: bool,
    lag: LagTracker,
    /// Flow control: when we last asked for a reply not yet received.
    reply_asked: Option<Instant>,
    /// Flow control: when we last asked for a reply at all.
    last_ask: Instant,
    /// Where the stream's rounds spend their time (logged at its end).
    rounds: RoundStats,
    /// While streaming logically: the client's last flush report (0 before
    /// one), which confirms the slot; None for a physical stream.
    logical_confirm: Option<Lsn>,
}

/// The timeline a START_REPLICATION streams: the server's own, or an
/// older one of its history, which ends at its switch point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SendTimeline {
    tli: u32,
    /// For an older timeline: where it ended (the switch point, where the
    /// next one began) and the timeline that followed it.
    ends: Option<(Lsn, u32)>,
}

fn entry(shm: &Shmem, i: usize) -> &WalSnd {
    &shm.repl().senders[i]
}

/// A replication connection, authenticated: takes a free WalSnd entry
/// among the first `max_wal_senders` (an entry whose process is gone
/// without releasing it counts as free); FATAL 53300 when none is free.
pub fn claim(shm: &Shmem, application_name: &str) -> Result<usize, SqlError> {
    claim_entry(shm, application_name).ok_or_else(|| {
        SqlError::fatal(
            sqlstate::TOO_MANY_CONNECTIONS,
            format!(
                "number of requested standby connections exceeds max_wal_senders (currently {})",
                shm.settings().max_wal_senders
            ),
        )
    })
}

/// Gives back an entry taken by `claim` whose connection never streamed.
pub fn release(shm: &Shmem, me: usize) {
    free_entry(shm, me);
}

fn claim_entry(shm: &Shmem, application_name: &str) -> Option<usize> {
    let ctl = shm.repl();
    let max = (shm.settings().max_wal_senders as usize).min(ctl.senders.len());
    ctl.lock.lock();
    let free = ctl.senders[..max].iter().position(|s| {
        let pid = s.pid.load(Ordering::Relaxed);
        pid == 0 || !shmem::sys::process_exists(pid)
    });
    if let Some(i) = free {
        let s = &ctl.senders[i];
        s.application_name.store(application_name);
        for pos in [&s.sent, &s.write, &s.flush, &s.apply] {
            pos.store(0, Ordering::Relaxed);
        }
        s.reports_flush.store(0, Ordering::Relaxed);
        s.reply_time.store(0, Ordering::Relaxed);
        s.slot.store(0, Ordering::Relaxed);
        for lag in [&s.write_lag, &s.flush_lag, &s.replay_lag] {
            lag.store(-1, Ordering::Relaxed);
        }
        s.usename.store("");
        s.state.store(sender_state::STARTUP, Ordering::Relaxed);
        s.backend_start
            .store(walformat::pg_now_us(), Ordering::Relaxed);
        let priority = syncrep::standby_config(shm).map_or(0, |c| c.priority(application_name));
        s.sync_priority.store(priority, Ordering::Relaxed);
        s.sync_state.store(0, Ordering::Relaxed);
        // Release (under the lock too): monitors that see the pid see the
        // fields above (pairs with their Acquire load of pid).
        s.pid.store(std::process::id() as i32, Ordering::Release);
    }
    ctl.lock.unlock();
    free
}

fn free_entry(shm: &Shmem, i: usize) {
    let ctl = shm.repl();
    ctl.cancel_sleep(i);
    ctl.lock.lock();
    ctl.senders[i].pid.store(0, Ordering::Release);
    ctl.lock.unlock();
    throttle::publish(shm);
}

/// With synchronous replication on: how many commits the walsenders
/// released so far and in how many passes (one pass per status update
/// that released any), for the benchmark's "commits per status update".
fn log_release_totals(shm: &Shmem) {
    if syncrep::standby_config(shm).is_none() {
        return;
    }
    let ctl = shm.repl();
    let commits = ctl.released_commits.load(Ordering::Relaxed);
    let passes = ctl.release_passes.load(Ordering::Relaxed);
    let per = commits as f64 / passes.max(1) as f64;
    log(
        "LOG",
        &format!("synchronous replication: {commits} commits released in {passes} status updates ({per:.1} per update)"),
    );
}

/// A connection's life as a walsender; returns the exit code.
/// Entry `me` comes from [`claim`].
pub fn run<S: Read + Write + AsRawFd>(
    shm: &Shmem,
    datadir: &Path,
    stream: S,
    info: &StartupInfo,
    me: usize,
) -> i32 {
    let mode = info.replication.unwrap_or(ReplicationMode::Physical);
    shmem::sys::set_comm("walsender");
    crate::wakeup::block_sigurg();
    let geo = match Geometry::new(shm.xlog().facts.seg_size) {
        Ok(g) => g,
        Err(e) => {
            log("FATAL", &format!("bad WAL segment size: {e}"));
            free_entry(shm, me);
            return EXIT_FATAL;
        }
    };
    let mut ws = WalSender {
        shm,
        datadir: datadir.to_path_buf(),
        stream,
        me,
        geo,
        tli: shm.xlog().facts.timeline(),
        mode,
        database: info.database.clone(),
        inbuf: Vec::new(),
        slot: None,
        temp_slots: Vec::new(),
        send_tl: SendTimeline {
            tli: shm.xlog().facts.timeline(),
            ends: None,
        },
        sent: 0,
        done_sending: false,
        segment: None,
        outbuf: Vec::new(),
        last_reply: Instant::now(),
        ping_sent: false,
        lag: LagTracker::default(),
        reply_asked: None,
        last_ask: Instant::now(),
        rounds: RoundStats::default(),
        logical_confirm: None,
    };
    ws.entry().usename.store(&info.user);
    let end = ws.command_loop();
    ws.cleanup();
    log_release_totals(shm);
    free_entry(shm, me);
    match end {
        End::ClientGone | End::Shutdown => 0,
        End::Fatal => EXIT_FATAL,
    }
}

impl<S: Read + Write + AsRawFd> WalSender<'_, S> {
    fn entry(&self) -> &WalSnd {
        entry(self.shm, self.me)
    }

    fn flush_lsn(&self) -> Lsn {
        // Acquire pairs with the Release fetch_max of flush_result in
        // xlog_write: the WAL below it is in the segment files.
        self.shm.xlog().write.flush_result.load(Ordering::Acquire)
    }

    /// Where the current stream's WAL ends for now: the flush position,
    /// or for an older timeline its switch point (never past the flush).
    fn send_upto(&self) -> Lsn {
        let flush = self.flush_lsn();
        match self.send_tl.ends {
            Some((switch, _)) => switch.min(flush),
            None => flush,
        }
    }

    fn cleanup(&mut self) {
        if let Some(idx) = self.slot.take() {
            slots::release(self.shm, idx);
        }
        for name in std::mem::take(&mut self.temp_slots) {
            let _ = slots::drop_slot(self.shm, &self.datadir, &name, false);
        }
    }

    // ---- socket I/O ----

    /// Writes all of `bytes`; false if the client is gone or the write
    /// could not finish within `wal_sender_timeout`.
    fn send(&mut self, bytes: &[u8]) -> bool {
        let started = Instant::now();
        let limit = self.timeout().unwrap_or(Duration::from_secs(3600));
        let mut off = 0;
        while off < bytes.len() {
            match self.stream.write(&bytes[off..]) {
                Ok(0) => return false,
                Ok(n) => off += n,
                Err(e) if shmem::sys::sock::cut_short(&e) => {
                    if started.elapsed() > limit {
                        log(
                            "LOG",
                            "terminating walsender process: client stopped reading",
                        );
                        return false;
                    }
                }
                Err(_) => return false,
            }
        }
        true
    }

    fn send_fatal(&mut self, e: &SqlError) -> End {
        let mut e = e.clone();
        e.severity = "FATAL";
        let bytes = repl::error_response(&e);
        self.send(&bytes);
        End::Fatal
    }

    /// Reads what the client sent without blocking; false at EOF or error.
    fn read_available(&mut self) -> bool {
        let mut buf = [0u8; 16384];
        loop {
            match shmem::sys::sock::recv(self.stream.as_raw_fd(), &mut buf, true) {
                Ok(0) => return false,
                Ok(n) => {
                    self.inbuf.extend_from_slice(&buf[..n]);
                    if self.inbuf.len() > 4 * repl::MAX_CLIENT_MESSAGE {
                        return true;
                    }
                }
                Err(e) => {
                    return matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                    );
                }
            }
        }
    }

    /// Waits until the socket is readable, SIGURG or SIGTERM arrives, or
    /// `timeout` passes.
    fn wait(&self, timeout: Duration) {
        crate::wakeup::wait_readable(self.stream.as_raw_fd(), timeout);
    }

    /// The next complete message, waiting for it (command mode).
    fn next_message(&mut self) -> Result<Option<(u8, Vec<u8>)>, End> {
        loop {
            match repl::take_message(&mut self.inbuf) {
                Ok(Some(m)) => return Ok(Some(m)),
                Ok(None) => {}
                Err(e) => return Err(self.send_fatal(&e)),
            }
            if shutdown_requested() {
                let e = SqlError::fatal(
                    sqlstate::ADMIN_SHUTDOWN,
                    "terminating connection due to administrator command",
                );
                return Err(self.send_fatal(&e));
            }
            let had = self.inbuf.len();
            if !self.read_available() {
                return Ok(None);
            }
            if self.inbuf.len() == had {
                self.wait(Duration::from_millis(200));
            }
        }
    }

    // ---- commands ----

    fn command_loop(&mut self) -> End {
        loop {
            let (tag, body) = match self.next_message() {
                Ok(Some(m)) => m,
                Ok(None) => return End::ClientGone,
                Err(end) => return end,
            };
            match tag {
                b'Q' => {}
                b'X' => return End::ClientGone,
                other => {
                    let e = SqlError::fatal(
                        sqlstate::PROTOCOL_VIOLATION,
                        format!("invalid frontend message type {other}"),
                    );
                    return self.send_fatal(&e);
                }
            }
            let text = match repl::query_text(&body) {
                Ok(t) => t,
                Err(e) => return self.send_fatal(&e),
            };
            if self.mode == ReplicationMode::Database && !repl::is_replication_command(&text) {
                let mut out = self.sql_reply(&text);
                out.extend_from_slice(&repl::ready_for_query());
                if !self.send(&out) {
                    return End::ClientGone;
                }
                continue;
            }
            let outcome = repl::parse_command(&text).map(|cmd| self.execute(cmd));
            let reply = match outcome {
                Ok(Ok(Reply::Bytes(b))) => b,
                Ok(Ok(Reply::Ended(end))) => return end,
                Ok(Err(e)) | Err(e) if e.is_fatal() => return self.send_fatal(&e),
                Ok(Err(e)) | Err(e) => repl::error_response(&e),
            };
            let mut out = reply;
            out.extend_from_slice(&repl::ready_for_query());
            if !self.send(&out) {
                return End::ClientGone;
            }
        }
    }

    /// The reply to SQL on a `replication=database` connection.
    fn sql_reply(&mut self, text: &str) -> Vec<u8> {
        let mut session = sql::WalSenderSql {
            shm: self.shm,
            synchronous_commit: true,
        };
        protocol::simple_query_reply(&mut session, text)
    }

    fn execute(&mut self, cmd: Command) -> Result<Reply, SqlError> {
        let bytes = match cmd {
            Command::Empty => repl::empty_query_response(),
            Command::IdentifySystem => self.identify_system()?,
            Command::Show(name) => self.show(&name)?,
            Command::ReadReplicationSlot(name) => self.read_slot(&name)?,
            Command::TimelineHistory(tli) => return self.timeline_history(tli),
            Command::CreatePhysicalSlot {
                name,
                temporary,
                reserve_wal,
            } => self.create_slot(&name, temporary, reserve_wal)?,
            Command::CreateLogicalSlot {
                name,
                temporary,
                plugin,
                two_phase,
            } => self.create_logical_slot(&name, temporary, &plugin, two_phase)?,
            Command::StartLogical {
                slot,
                start,
                options,
            } => return self.start_logical(&slot, start, &options),
            Command::DropSlot { name, wait } => {
                slots::drop_slot(self.shm, &self.datadir, &name, wait)?;
                repl::command_complete("DROP_REPLICATION_SLOT")
            }
            Command::StartReplication {
                slot,
                start,
                timeline,
            } => return self.start_replication(slot, start, timeline),
            Command::BaseBackup(options) => return self.base_backup(options),
        };
        Ok(Reply::Bytes(bytes))
    }

    fn identify_system(&self) -> Result<Vec<u8>, SqlError> {
        let facts = &self.shm.xlog().facts;
        let dbname = match self.mode {
            ReplicationMode::Database => Some(self.database.clone()),
            ReplicationMode::Physical => None,
        };
        repl::result_set(
            &[
                ("systemid", ColumnType::Text),
                ("timeline", ColumnType::Int4),
                ("xlogpos", ColumnType::Text),
                ("dbname", ColumnType::Text),
            ],
            &[vec![
                Some(facts.system_identifier.to_string()),
                Some(self.tli.to_string()),
                Some(repl::format_lsn(self.flush_lsn())),
                dbname,
            ]],
            "IDENTIFY_SYSTEM",
        )
    }

    fn show(&self, name: &str) -> Result<Vec<u8>, SqlError> {
        let seg_mb = self.geo.seg_size >> 20;
        let value = match name {
            "data_directory_mode" => Some("0700".to_string()),
            "wal_segment_size" if seg_mb >= 1024 && seg_mb.is_multiple_of(1024) => {
                Some(format!("{}GB", seg_mb / 1024))
            }
            "wal_segment_size" => Some(format!("{seg_mb}MB")),
            "server_version" => Some(protocol::DEFAULT_SERVER_VERSION.to_string()),
            "server_version_num" => Some("150000".to_string()),
            "integer_datetimes" => Some("on".to_string()),
            "wal_block_size" | "block_size" => Some("8192".to_string()),
            other => self.shm.settings().show(other),
        };
        let Some(value) = value else {
            return Err(SqlError::error(
                sqlstate::UNDEFINED_OBJECT,
                format!("unrecognized configuration parameter \"{name}\""),
            ));
        };
        repl::result_set(&[(name, ColumnType::Text)], &[vec![Some(value)]], "SHOW")
    }

    fn read_slot(&self, name: &str) -> Result<Vec<u8>, SqlError> {
        slots::validate_name(name)?;
        let row = match slots::row(self.shm, &self.datadir, name) {
            None => vec![None, None, None],
            Some(r) => {
                let reserved = r.restart_lsn != 0;
                vec![
                    Some("physical".to_string()),
                    reserved.then(|| repl::format_lsn(r.restart_lsn)),
                    reserved.then(|| self.tli.to_string()),
                ]
            }
        };
        repl::result_set(
            &[
                ("slot_type", ColumnType::Text),
                ("restart_lsn", ColumnType::Text),
                ("restart_tli", ColumnType::Int8),
            ],
            &[row],
            "READ_REPLICATION_SLOT",
        )
    }

    fn create_slot(
        &mut self,
        name: &str,
        temporary: bool,
        reserve: bool,
    ) -> Result<Vec<u8>, SqlError> {
        let fsync = self.shm.settings().fsync;
        let lsn = slots::create(self.shm, &self.datadir, name, temporary, reserve, fsync)?;
        self.slot_created(name, temporary, lsn, None)
    }

    /// CREATE_REPLICATION_SLOT's reply (and the end of a temporary slot
    /// with the session).
    fn slot_created(
        &mut self,
        name: &str,
        temporary: bool,
        lsn: Lsn,
        plugin: Option<&str>,
    ) -> Result<Vec<u8>, SqlError> {
        if temporary {
            self.temp_slots.push(name.to_string());
        }
        repl::result_set(
            &[
                ("slot_name", ColumnType::Text),
                ("consistent_point", ColumnType::Text),
                ("snapshot_name", ColumnType::Text),
                ("output_plugin", ColumnType::Text),
            ],
            &[vec![
                Some(name.to_string()),
                Some(repl::format_lsn(lsn)),
                None,
                plugin.map(str::to_string),
            ]],
            "CREATE_REPLICATION_SLOT",
        )
    }

    // ---- streaming ----

    /// The server's own timeline, streamed without end.
    fn own_timeline(&self) -> SendTimeline {
        SendTimeline {
            tli: self.tli,
            ends: None,
        }
    }

    /// After the CopyBoth phase: the slot released, the state back to
    /// startup, and the end of the command. A client's CopyDone is
    /// answered with ours (unless an older timeline's end already sent
    /// it), the next timeline's result set for an older timeline, then
    /// CommandComplete "START_STREAMING" and "START_REPLICATION" (the
    /// second is PostgreSQL's too: receivelog.c reads the result set, then
    /// a command result).
    fn end_stream(&mut self, end: StreamEnd) -> Result<Reply, SqlError> {
        if !self.rounds.is_empty() {
            log("LOG", &std::mem::take(&mut self.rounds).summary());
        }
        if let Some(idx) = self.slot.take() {
            slots::release(self.shm, idx);
            self.entry().slot.store(0, Ordering::Relaxed);
        }
        self.entry()
            .state
            .store(sender_state::STARTUP, Ordering::Relaxed);
        // Our receiver no longer holds the backends back.
        throttle::publish(self.shm);
        self.segment = None;
        let own = self.own_timeline();
        let ended = std::mem::replace(&mut self.send_tl, own);
        let copy_done_sent = std::mem::take(&mut self.done_sending);
        match end {
            StreamEnd::ClientCopyDone => {
                let mut out = if copy_done_sent {
                    Vec::new()
                } else {
                    repl::copy_done()
                };
                match ended.ends {
                    Some((switch, next)) => {
                        out.extend_from_slice(&repl::next_timeline_result(next, switch)?)
                    }
                    None => out.extend_from_slice(&repl::command_complete("START_STREAMING")),
                }
                out.extend_from_slice(&repl::command_complete("START_REPLICATION"));
                Ok(Reply::Bytes(out))
            }
            StreamEnd::Ended(end) => Ok(Reply::Ended(end)),
            StreamEnd::Error(e) => Ok(Reply::Ended(self.send_fatal(&e))),
        }
    }

    fn timeout(&self) -> Option<Duration> {
        match self.shm.settings().wal_sender_timeout_ms {
            0 => None,
            ms => Some(Duration::from_millis(ms as u64)),
        }
    }

    /// The client's side of a streaming round: reads what it sent and
    /// handles it. Some: the stream ends (the client went away, ended the
    /// copy or broke the protocol).
    fn serve_client(&mut self) -> Option<StreamEnd> {
        if !self.read_available() {
            return Some(StreamEnd::Ended(End::ClientGone));
        }
        self.handle_client_messages()
    }

    /// Handles every complete client message in the buffer; then, if
    /// status updates came, releases the synchronous commits they cover
    /// in one pass (several updates read in one wake-up cost one pass).
    fn handle_client_messages(&mut self) -> Option<StreamEnd> {
        let mut reported = false;
        let end = loop {
            let (tag, body) = match repl::take_message(&mut self.inbuf) {
                Ok(Some(m)) => m,
                Ok(None) => break None,
                Err(e) => break Some(StreamEnd::Error(e)),
            };
            match tag {
                b'd' => match repl::parse_stream_message(&body) {
                    Ok(StreamMessage::Status(st)) => {
                        self.status_update(st);
                        reported = true;
                    }
                    Ok(StreamMessage::HotStandbyFeedback) => {
                        self.last_reply = Instant::now();
                    }
                    Err(e) => break Some(StreamEnd::Error(e)),
                },
                b'c' => break Some(StreamEnd::ClientCopyDone),
                b'X' => break Some(StreamEnd::Ended(End::ClientGone)),
                other => {
                    break Some(StreamEnd::Error(SqlError::fatal(
                        sqlstate::PROTOCOL_VIOLATION,
                        format!("invalid standby message type \"{}\"", other as char),
                    )))
                }
            }
        };
        if reported {
            throttle::publish(self.shm);
        }
        if reported
            && entry(self.shm, self.me)
                .sync_priority
                .load(Ordering::Relaxed)
                > 0
        {
            let started = shmem::clock::monotonic_ns();
            let n = syncrep::release_waiters(self.shm);
            let ns = shmem::clock::monotonic_ns().saturating_sub(started);
            self.rounds.released(n, ns);
        }
        end
    }

    /// A standby status update: clamped to what this connection sent (a
    /// receiver cannot have written, flushed or applied WAL it was never
    /// sent, so a report beyond it is not believed: it would release
    /// synchronous commits, advance the slot and show in
    /// pg_stat_replication positions no standby holds), then published,
    /// applied to the slot, and a reply request answered (the release
    /// follows in `handle_client_messages`).
    fn status_update(&mut self, st: repl::StandbyStatus) {
        self.last_reply = Instant::now();
        self.ping_sent = false;
        self.reply_asked = None;
        let st = clamp_to_sent(st, self.sent);
        let e = entry(self.shm, self.me);
        // Relaxed: each is a position read by monitors and by
        // syncrep::release_waiters, which needs no order between them.
        e.write.store(st.write, Ordering::Relaxed);
        e.flush.store(st.flush, Ordering::Relaxed);
        e.apply.store(st.apply, Ordering::Relaxed);
        e.reply_time.store(st.send_time, Ordering::Relaxed);
        e.reports_flush
            .store((st.flush != 0) as u32, Ordering::Relaxed);
        self.publish_lags(&st);
        if self.logical_confirm.is_some() {
            self.logical_confirm = Some(st.flush);
        } else if let Some(idx) = self.slot {
            slots::advance(self.shm, idx, st.flush);
        }
        if st.reply_requested && !self.done_sending {
            let ka = repl::keepalive(self.send_upto(), walformat::pg_now_us(), false);
            self.send(&ka);
        }
    }

    /// The lags the receiver's report measures; a kind with no new
    /// measurement keeps its last value (as PostgreSQL does).
    fn publish_lags(&mut self, st: &repl::StandbyStatus) {
        let now = walformat::pg_now_us();
        let e = entry(self.shm, self.me);
        for (kind, pos, out) in [
            (lagtracker::Kind::Write, st.write, &e.write_lag),
            (lagtracker::Kind::Flush, st.flush, &e.flush_lag),
            (lagtracker::Kind::Apply, st.apply, &e.replay_lag),
        ] {
            if let Some(us) = self.lag.read(kind, pos, now) {
                if kind == lagtracker::Kind::Flush {
                    self.rounds.reported(us);
                }
                // Relaxed: a figure for monitors, like the positions.
                out.store(us, Ordering::Relaxed);
            }
        }
    }

    /// A fast shutdown with everything sent: once the receiver reported
    /// `upto` (or after SHUTDOWN_REPLY_WAIT) the stream ends with
    /// CommandComplete "COPY 0"; until then it asks once for a reply (a
    /// keepalive at `sent`) and naps. Both streams end this way.
    fn drain_at_shutdown(
        &mut self,
        started: &mut Option<Instant>,
        upto: Lsn,
        sent: Lsn,
    ) -> Option<StreamEnd> {
        let started = *started.get_or_insert_with(Instant::now);
        if self.drained(upto) || started.elapsed() > SHUTDOWN_REPLY_WAIT {
            self.send(&repl::command_complete("COPY 0"));
            return Some(StreamEnd::Ended(End::Shutdown));
        }
        if !self.ping_sent {
            self.entry()
                .state
                .store(sender_state::STOPPING, Ordering::Relaxed);
            self.ping(sent);
        }
        self.wait(Duration::from_millis(100));
        None
    }

    /// At shutdown: has the receiver reported (flush, or write when it
    /// reports no flush) everything up to `upto`?
    fn drained(&self, upto: Lsn) -> bool {
        let e = self.entry();
        let flush = e.flush.load(Ordering::Relaxed);
        let done = if flush != 0 {
            flush
        } else {
            e.write.load(Ordering::Relaxed)
        };
        done >= upto
    }

    /// Asks the receiver for a reply (a keepalive with the reply flag);
    /// nothing once our CopyDone is sent.
    fn ping(&mut self, sent: Lsn) {
        if self.done_sending {
            return;
        }
        let ka = repl::keepalive(sent, walformat::pg_now_us(), true);
        self.send(&ka);
        self.ping_sent = true;
    }

    /// Half of wal_sender_timeout without a reply: ask for one; all of
    /// it: give up on the receiver.
    fn keepalive_timer(&mut self, sent: Lsn) -> Option<StreamEnd> {
        let timeout = self.timeout()?;
        let silent = self.last_reply.elapsed();
        if silent >= timeout {
            log(
                "LOG",
                "terminating walsender process due to replication timeout",
            );
            return Some(StreamEnd::Ended(End::Fatal));
        }
        if silent >= timeout / 2 && !self.ping_sent {
            self.ping(sent);
        }
        None
    }

    /// Sleeps until the flush position passes `sent`, a client message
    /// arrives, a signal, or the keepalive timer is due.
    fn sleep_until_flush_or_message(&self, sent: Lsn) {
        let ctl = self.shm.repl();
        ctl.announce_sleep(self.me);
        if self.send_upto() > sent || shutdown_requested() {
            ctl.cancel_sleep(self.me);
            return;
        }
        let nap = match self.timeout() {
            Some(t) => {
                let due = if self.ping_sent { t } else { t / 2 };
                due.saturating_sub(self.last_reply.elapsed())
                    .max(Duration::from_millis(1))
            }
            None => IDLE_POLL,
        };
        self.wait(nap.min(IDLE_POLL));
        ctl.cancel_sleep(self.me);
    }
}

/// A status update with its write, flush and apply positions lowered to
/// at most `sent` (0, "not reported", stays 0).
fn clamp_to_sent(st: repl::StandbyStatus, sent: Lsn) -> repl::StandbyStatus {
    repl::StandbyStatus {
        write: st.write.min(sent),
        flush: st.flush.min(sent),
        apply: st.apply.min(sent),
        ..st
    }
}

/// What a command produced.
enum Reply {
    Bytes(Vec<u8>),
    /// The connection is over (after streaming).
    Ended(End),
}

/// How the CopyBoth phase ended.
enum StreamEnd {
    /// The client sent CopyDone: finish the command, back to commands.
    ClientCopyDone,
    Ended(End),
    /// A FATAL to send, then exit.
    Error(SqlError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_clamped_to_what_was_sent() {
        let st = repl::StandbyStatus {
            write: u64::MAX,
            flush: 0x3000,
            apply: 0,
            send_time: 7,
            reply_requested: true,
        };
        let c = clamp_to_sent(st, 0x2000);
        assert_eq!((c.write, c.flush, c.apply), (0x2000, 0x2000, 0));
        assert_eq!((c.send_time, c.reply_requested), (7, true));
        assert_eq!(clamp_to_sent(st, u64::MAX).flush, 0x3000);
    }
}
