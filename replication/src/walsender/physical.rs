//! Physical streaming (walsender.c's StartReplication and its send
//! loop): START_REPLICATION [SLOT s] [PHYSICAL] X/Y [TIMELINE t] and
//! TIMELINE_HISTORY; see the module header of `walsender` for the
//! protocol, the waits and the invariants.

use super::*;

impl<S: Read + Write + AsRawFd> WalSender<'_, S> {
    /// START_REPLICATION: checks, CopyBothResponse, the stream; then the
    /// end of the command (or of the connection). On an older timeline
    /// asked to start at its switch point there is nothing to stream: the
    /// next timeline is named at once, without COPY (as PostgreSQL does).
    pub(super) fn start_replication(
        &mut self,
        slot: Option<String>,
        start: Lsn,
        timeline: Option<u32>,
    ) -> Result<Reply, SqlError> {
        self.segment = None;
        let send_tl = self.send_timeline(timeline, start)?;
        if let Some((switch, next)) = send_tl.ends.filter(|&(switch, _)| start == switch) {
            if let Some(name) = slot {
                slots::validate_name(&name)?;
                let idx = slots::acquire(self.shm, &self.datadir, &name)?;
                slots::release(self.shm, idx);
            }
            let mut out = repl::next_timeline_result(next, switch)?;
            out.extend_from_slice(&repl::command_complete("START_REPLICATION"));
            return Ok(Reply::Bytes(out));
        }
        let flush = self.flush_lsn();
        if start > flush {
            return Err(SqlError::error(
                sqlstate::INTERNAL_ERROR,
                format!(
                    "requested starting point {} is ahead of the WAL flush position of this server {}",
                    repl::format_lsn(start),
                    repl::format_lsn(flush)
                ),
            ));
        }
        self.send_tl = send_tl;
        self.done_sending = false;
        if let Err(e) = self.prepare_stream(start, slot) {
            self.send_tl = self.own_timeline();
            return Err(e);
        }
        if !self.send(&repl::copy_both_response()) {
            return Ok(Reply::Ended(End::ClientGone));
        }
        self.enlarge_send_buffer();
        self.sent = start;
        self.entry().sent.store(start, Ordering::Relaxed);
        self.entry()
            .state
            .store(sender_state::CATCHUP, Ordering::Relaxed);
        self.last_reply = Instant::now();
        self.ping_sent = false;
        let end = self.stream_wal(start);
        self.end_stream(end)
    }

    /// Before the CopyBothResponse: the first segment of the stream can be
    /// opened (58P01 when it is gone) and the slot, if any, acquired.
    pub(super) fn prepare_stream(
        &mut self,
        start: Lsn,
        slot: Option<String>,
    ) -> Result<(), SqlError> {
        self.open_segment(self.geo.seg_no(start))?;
        if let Some(name) = slot {
            slots::validate_name(&name)?;
            let idx = slots::acquire(self.shm, &self.datadir, &name)?;
            self.slot = Some(idx);
            self.entry().slot.store(idx as u32 + 1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The timeline START_REPLICATION asked for (none: the server's),
    /// checked as walsender.c checks it: another timeline must be an
    /// ancestor in this server's history, and `start` not past the point
    /// where it ended (before it, even on the next timeline's part of the
    /// switch segment, is allowed: pg_receivewal starts there).
    pub(super) fn send_timeline(
        &self,
        requested: Option<u32>,
        start: Lsn,
    ) -> Result<SendTimeline, SqlError> {
        let Some(tli) = requested.filter(|&t| t != self.tli) else {
            return Ok(self.own_timeline());
        };
        let history = backend::timeline::Timeline::read(&self.datadir.join("pg_wal"), self.tli)
            .map_err(|e| match e {
                backend::timeline::TimelineError::Io(..) => SqlError::error("58030", e.to_string()),
                _ => SqlError::error(sqlstate::INTERNAL_ERROR, e.to_string()),
            })?;
        let Some((next, switch)) = history.successor(tli) else {
            return Err(SqlError::error(
                sqlstate::INTERNAL_ERROR,
                format!("requested timeline {tli} is not in this server's history"),
            ));
        };
        if start > switch {
            return Err(SqlError::error(
                sqlstate::INTERNAL_ERROR,
                format!(
                    "requested starting point {} on timeline {tli} is not in this server's history",
                    repl::format_lsn(start)
                ),
            )
            .with_detail(format!(
                "This server's history forked from timeline {tli} at {}.",
                repl::format_lsn(switch)
            )));
        }
        Ok(SendTimeline {
            tli,
            ends: Some((switch, next)),
        })
    }

    /// The timeline whose file holds segment `segno` of the stream: the
    /// streamed one's, except that an older timeline's switch segment is
    /// read from the next timeline's file (which holds the older one's
    /// WAL up to the switch point), as walsender.c reads it.
    pub(super) fn segment_tli(&self, segno: u64) -> u32 {
        match self.send_tl.ends {
            Some((switch, next)) if self.geo.seg_no(switch) == segno => next,
            _ => self.send_tl.tli,
        }
    }

    pub(super) fn segment_path(&self, segno: u64) -> PathBuf {
        self.datadir
            .join("pg_wal")
            .join(self.geo.file_name(self.segment_tli(segno), segno))
    }

    pub(super) fn removed_error(&self, segno: u64) -> SqlError {
        SqlError::error(
            "58P01",
            format!(
                "requested WAL segment {} has already been removed",
                self.geo.file_name(self.segment_tli(segno), segno)
            ),
        )
    }

    /// Opens segment `segno` read-only (58P01 when it is gone).
    pub(super) fn open_segment(&mut self, segno: u64) -> Result<(), SqlError> {
        if matches!(&self.segment, Some((n, _)) if *n == segno) {
            return Ok(());
        }
        if self.is_removed(segno) {
            return Err(self.removed_error(segno));
        }
        match walfile::open_read(Op::WalRead, &self.segment_path(segno)) {
            Ok(f) => {
                self.segment = Some((segno, f));
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(self.removed_error(segno)),
            Err(e) => Err(SqlError::error(
                "58030",
                format!(
                    "could not open file \"{}\": {e}",
                    self.segment_path(segno).display()
                ),
            )),
        }
    }

    pub(super) fn is_removed(&self, segno: u64) -> bool {
        // SeqCst: pairs with the checkpointer's store in
        // slots::removal_cutoff, made before it removes anything.
        self.shm.repl().removed_below_seg.load(Ordering::SeqCst) > segno
    }

    /// Appends to `outbuf` one XLogData message with the WAL from `from`
    /// up to at most `upto` (within one segment, at most MAX_SEND bytes),
    /// read from the segment file, its walEnd field `wal_end`; returns its
    /// end.
    pub(super) fn append_wal(
        &mut self,
        from: Lsn,
        upto: Lsn,
        wal_end: Lsn,
    ) -> Result<Lsn, SqlError> {
        let segno = self.geo.seg_no(from);
        let seg_end = self.geo.seg_start(segno + 1);
        let end = upto.min(from + MAX_SEND).min(seg_end);
        let len = (end - from) as usize;
        self.open_segment(segno)?;
        let at = self.outbuf.len();
        repl::xlog_data_header(&mut self.outbuf, from, wal_end, walformat::pg_now_us(), len)
            .ok_or_else(|| SqlError::error("54000", "WAL message too large"))?;
        let data = at + repl::XLOG_DATA_HEADER;
        self.outbuf.resize(data + len, 0);
        let offset = self.geo.seg_offset(from);
        if let Some((_, f)) = &self.segment {
            walfile::read_at(Op::WalRead, f, &mut self.outbuf[data..], offset).map_err(|e| {
                SqlError::error(
                    "58030",
                    format!(
                        "could not read from WAL segment {}, offset {offset}: {e}",
                        self.geo.file_name(self.segment_tli(segno), segno)
                    ),
                )
            })?;
        }
        if self.is_removed(segno) {
            return Err(self.removed_error(segno));
        }
        if end == seg_end {
            self.segment = None;
        }
        Ok(end)
    }

    /// Sends the WAL from `from` up to `upto` as XLogData messages of at
    /// most MAX_SEND bytes, gathered into one write of at most MAX_BATCH;
    /// returns the new sent position.
    pub(super) fn send_wal(&mut self, from: Lsn, upto: Lsn) -> Result<Lsn, SqlError> {
        // Relaxed: a time stamp for the round timings only.
        let flushed_at = self.shm.repl().flushed_at_ns.load(Ordering::Relaxed);
        let wal_end = self.send_upto();
        self.outbuf.clear();
        let mut sent = from;
        while sent < upto && self.outbuf.len() < MAX_BATCH {
            sent = self.append_wal(sent, upto, wal_end)?;
        }
        let batch = std::mem::take(&mut self.outbuf);
        let started = shmem::clock::monotonic_ns();
        let ok = self.send(&batch);
        let ended = shmem::clock::monotonic_ns();
        self.rounds
            .sent(flushed_at, started, ended, sent.saturating_sub(from));
        self.outbuf = batch;
        if !ok {
            return Err(SqlError::fatal(sqlstate::PROTOCOL_VIOLATION, "client gone"));
        }
        Ok(sent)
    }

    /// Asks for a larger socket send buffer for the stream (see
    /// STREAM_SNDBUF); a refusal only leaves the default.
    pub(super) fn enlarge_send_buffer(&self) {
        shmem::sys::sock::set_send_buffer_size(self.stream.as_raw_fd(), STREAM_SNDBUF);
    }

    /// The CopyBoth phase; `sent` is where streaming starts.
    pub(super) fn stream_wal(&mut self, mut sent: Lsn) -> StreamEnd {
        let mut drain_started: Option<Instant> = None;
        loop {
            if let Some(end) = self.serve_client() {
                return end;
            }
            let upto = self.send_upto();
            if sent < upto {
                match self.send_wal(sent, upto) {
                    Ok(s) => sent = s,
                    Err(e) => return StreamEnd::Error(e),
                }
                self.lag.record(sent, walformat::pg_now_us());
                self.sent = sent;
                self.entry().sent.store(sent, Ordering::Relaxed);
                self.ask_for_reply_if_throttling(sent);
                continue;
            }
            if self.send_tl.ends.is_some() && !self.done_sending {
                // The end of an older timeline: CopyDone, then the
                // client's CopyDone is awaited (its reports still count).
                if !self.send(&repl::copy_done()) {
                    return StreamEnd::Ended(End::ClientGone);
                }
                self.done_sending = true;
            }
            self.entry()
                .state
                .store(sender_state::STREAMING, Ordering::Relaxed);
            if shutdown_requested() {
                match self.drain_at_shutdown(&mut drain_started, sent, sent) {
                    Some(end) => return end,
                    None => continue,
                }
            }
            if let Some(end) = self.keepalive_timer(sent) {
                return end;
            }
            self.ask_for_reply_if_throttling(sent);
            self.sleep_until_flush_or_message(sent);
        }
    }

    /// Flow control: asks the receiver for its position (see the module
    /// header) when a quarter of the limit we sent is unreported, or when
    /// backends wait and anything is (then at most every
    /// WAITERS_ASK_SPACING); one request outstanding at a time.
    pub(super) fn ask_for_reply_if_throttling(&mut self, sent: Lsn) {
        let limit = throttle::limit_bytes(self.shm);
        let asked_lately = self.reply_asked.is_some_and(|t| t.elapsed() < REPLY_REASK);
        if limit == 0 || asked_lately || self.done_sending {
            return;
        }
        let unreported = sent.saturating_sub(self.entry().write.load(Ordering::Relaxed));
        let for_waiters =
            || self.last_ask.elapsed() >= WAITERS_ASK_SPACING && throttle::has_waiters(self.shm);
        if unreported == 0 || (unreported < limit / 4 && !for_waiters()) {
            return;
        }
        self.last_ask = Instant::now();
        let ka = repl::keepalive(sent, walformat::pg_now_us(), true);
        self.send(&ka);
        self.reply_asked = Some(Instant::now());
    }

    /// TIMELINE_HISTORY: the history file streamed from disk in chunks
    /// of HISTORY_CHUNK bytes behind a header that gives its length, so
    /// that a file of any size costs one chunk of memory (PostgreSQL
    /// builds the whole message first). The file is replaced only by a
    /// rename, so the open file keeps its length; if it still reads short,
    /// the message cannot be finished and the connection is closed.
    pub(super) fn timeline_history(&mut self, tli: u32) -> Result<Reply, SqlError> {
        let file = backend::timeline::history_file_name(tli);
        let path = self.datadir.join("pg_wal").join(&file);
        let access = |e: std::io::Error| {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => sqlstate::UNDEFINED_FILE,
                _ => "58030",
            };
            SqlError::error(code, format!("could not open file \"pg_wal/{file}\": {e}"))
        };
        let f = walfile::open_read(Op::WalRead, &path).map_err(access)?;
        let len = walfile::file_len(Op::WalRead, &f).map_err(access)?;
        let too_large = || {
            SqlError::error(
                sqlstate::PROGRAM_LIMIT_EXCEEDED,
                format!("history file \"pg_wal/{file}\" is too large to send ({len} bytes)"),
            )
        };
        let len = usize::try_from(len).map_err(|_| too_large())?;
        let head = repl::timeline_history_head(&file, len).map_err(|_| too_large())?;
        if !self.send(&head) {
            return Ok(Reply::Ended(End::ClientGone));
        }
        let mut chunk = vec![0u8; HISTORY_CHUNK.min(len)];
        let mut off = 0;
        while off < len {
            let n = chunk.len().min(len - off);
            if let Err(e) = walfile::read_at(Op::WalRead, &f, &mut chunk[..n], off as u64) {
                log(
                    "LOG",
                    &format!("closing the connection: could not read file \"pg_wal/{file}\" at {off} of {len} bytes: {e}"),
                );
                return Ok(Reply::Ended(End::Fatal));
            }
            if !self.send(&chunk[..n]) {
                return Ok(Reply::Ended(End::ClientGone));
            }
            off += n;
        }
        Ok(Reply::Bytes(repl::command_complete("TIMELINE_HISTORY")))
    }
}
