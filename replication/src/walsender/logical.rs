//! Logical streaming (PostgreSQL's walsender.c StartLogicalReplication
//! and its logical loop): CREATE_REPLICATION_SLOT ... LOGICAL and
//! START_REPLICATION SLOT ... LOGICAL on a `replication=database`
//! connection.
//!
//! START_REPLICATION takes the slot (55006 if another process has it,
//! 55000 if it is physical or invalidated), starts the plugin with the
//! client's options (its errors come before CopyBoth, as PostgreSQL's),
//! and decodes from the slot's restart_lsn, delivering what commits at or
//! after max(requested start, confirmed_flush). Each plugin output is one
//! XLogData message whose dataStart and walEnd are the output's write
//! location; keepalives carry the decoding position. The client's flush
//! report confirms the slot (`slots::confirm`), with the restart point
//! the decoder had right after the last delivered commit it covers.
//!
//! Waiting: decoding stops where the flushed WAL ends (a record that
//! ends past the flush position is not read); the walsender then sleeps
//! until the flush position passes what it decoded up to (the same
//! SIGURG wake-up as physical streaming), a client message or a timer.
//!
//! Fast shutdown: everything flushed is decoded and sent, the client is
//! asked for a reply, and once it reported what was sent (bounded wait)
//! the stream ends with CommandComplete "COPY 0", as PostgreSQL's
//! WalSndDone does.

use super::*;
use crate::logical::plugin::{self, Output};
use crate::logical::{append_xlog_data, publication, Decoder};
use backend::slots::NewLogical;
use protocol::replication::PluginOption;

/// Outputs decoded per round before they are sent.
const OUTPUTS_PER_ROUND: usize = 256;

impl<S: Read + Write + AsRawFd> WalSender<'_, S> {
    fn require_database(&self) -> Result<(), SqlError> {
        match self.mode {
            ReplicationMode::Database => Ok(()),
            ReplicationMode::Physical => Err(SqlError::error(
                sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
                "logical decoding requires a database connection",
            )),
        }
    }

    pub(super) fn create_logical_slot(
        &mut self,
        name: &str,
        temporary: bool,
        plugin_name: &str,
        two_phase: bool,
    ) -> Result<Vec<u8>, SqlError> {
        self.require_database()?;
        plugin::check_name(plugin_name)?;
        let new = NewLogical {
            name,
            temporary,
            plugin: plugin_name,
            database: &self.database,
            two_phase,
        };
        let lsn = slots::create_logical(self.shm, &self.datadir, &new, self.shm.settings().fsync)?;
        self.slot_created(name, temporary, lsn, Some(plugin_name))
    }

    pub(super) fn start_logical(
        &mut self,
        slot: &str,
        start: Lsn,
        options: &[PluginOption],
    ) -> Result<Reply, SqlError> {
        self.require_database()?;
        slots::validate_name(slot)?;
        let (idx, state) = slots::acquire_logical(self.shm, &self.datadir, slot)?;
        let datadir = self.datadir.clone();
        let decoder = plugin::start(&state.plugin, options, &|p| {
            publication::exists(&datadir, p)
        })
        .and_then(|p| {
            let restart = slots::restart_lsn(self.shm, idx);
            let from = start.max(state.confirmed_flush);
            Decoder::new(self.shm, &datadir, restart, from, p)
        });
        let mut decoder = match decoder {
            Ok(d) => d,
            Err(e) => {
                slots::release(self.shm, idx);
                return Err(e);
            }
        };
        self.slot = Some(idx);
        self.entry().slot.store(idx as u32 + 1, Ordering::Relaxed);
        if !self.send(&repl::copy_both_response()) {
            return Ok(Reply::Ended(End::ClientGone));
        }
        self.sent = decoder.position();
        self.entry().sent.store(self.sent, Ordering::Relaxed);
        self.entry()
            .state
            .store(sender_state::CATCHUP, Ordering::Relaxed);
        self.last_reply = Instant::now();
        self.ping_sent = false;
        self.logical_confirm = Some(0);
        let end = self.stream_logical(&mut decoder);
        self.logical_confirm = None;
        self.end_stream(end)
    }

    /// Applies the client's last flush report to the slot.
    fn apply_confirm(&mut self, decoder: &mut Decoder) {
        let (Some(idx), Some(confirmed)) = (self.slot, self.logical_confirm) else {
            return;
        };
        if confirmed == 0 {
            return;
        }
        let restart = decoder.restart_for(confirmed);
        slots::confirm(self.shm, idx, confirmed, restart);
    }

    /// Sends `outputs` as XLogData messages, in writes of at most
    /// MAX_BATCH bytes.
    fn send_outputs(&mut self, outputs: &[Output]) -> bool {
        let now = walformat::pg_now_us();
        self.outbuf.clear();
        for o in outputs {
            if append_xlog_data(&mut self.outbuf, o, now).is_none() {
                continue;
            }
            if self.outbuf.len() >= MAX_BATCH {
                let batch = std::mem::take(&mut self.outbuf);
                let ok = self.send(&batch);
                self.outbuf = batch;
                self.outbuf.clear();
                if !ok {
                    return false;
                }
            }
        }
        let batch = std::mem::take(&mut self.outbuf);
        let ok = batch.is_empty() || self.send(&batch);
        self.outbuf = batch;
        ok
    }

    /// The CopyBoth phase of a logical stream.
    fn stream_logical(&mut self, decoder: &mut Decoder) -> StreamEnd {
        let mut outputs = Vec::with_capacity(OUTPUTS_PER_ROUND);
        let mut last_output: Lsn = 0;
        let mut drain_started: Option<Instant> = None;
        loop {
            if let Some(end) = self.serve_client() {
                return end;
            }
            self.apply_confirm(decoder);
            let upto = self.flush_lsn();
            outputs.clear();
            let caught_up = match decoder.decode(upto, &mut outputs, OUTPUTS_PER_ROUND) {
                Ok(c) => c,
                Err(e) => return StreamEnd::Error(e),
            };
            if let Some(o) = outputs.last() {
                last_output = last_output.max(o.lsn);
                if !self.send_outputs(&outputs) {
                    return StreamEnd::Ended(End::ClientGone);
                }
            }
            self.sent = decoder.position().max(last_output);
            self.entry().sent.store(self.sent, Ordering::Relaxed);
            if !caught_up {
                continue;
            }
            self.entry()
                .state
                .store(sender_state::STREAMING, Ordering::Relaxed);
            if shutdown_requested() {
                let sent = self.sent;
                match self.drain_at_shutdown(&mut drain_started, last_output, sent) {
                    Some(end) => return end,
                    None => continue,
                }
            }
            if let Some(end) = self.keepalive_timer(self.sent) {
                return end;
            }
            self.sleep_until_flush_or_message(upto);
        }
    }
}
