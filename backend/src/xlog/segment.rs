//! WAL segment files: open or create, create ahead, sync, and what follows
//! a completed segment.
//!
//! `wal_sync_method` decides how a written segment is made durable:
//! `sync_segment` calls fdatasync or fsync, or nothing for the `open_*`
//! methods, whose segments `segment_file` opens with O_DSYNC / O_SYNC
//! (every `write_run` is then durable when it returns; see `walfile`'s
//! header). A failed sync is a PANIC and never retried: the kernel may
//! have dropped the dirty pages, and a retry could acknowledge WAL that is
//! not on disk.
//!
//! A new segment is created with its first page's long header; the
//! segment after the insert position is created ahead of need
//! (`preallocate_next_segment`), so that the writer crossing into it does
//! not zero-fill a whole segment while holding WALWriteLock.
//!
//! A completed segment is synced at once (as PostgreSQL does, so a later
//! flush only needs the last one), then marked ready for the archiver
//! (with `archive_mode`), and the
//! checkpointer is woken once the WAL since the last redo point reaches
//! `checkpoint_wal_trigger` (the checkpointer also sizes the future
//! segments it recycles from it).

use super::Xlog;
use crate::process::log;
use shmem::proc::ProcCounters;
use shmem::settings::Settings;
use shmem::stats::bump;
use shmem::sync::Ordering;
use std::fs::File;
use walformat::{Lsn, XLOG_BLCKSZ};

impl Xlog<'_> {
    /// After a segment is complete and synced: with `archive_mode`, mark it
    /// ready for the archiver (`archive_status/NAME.ready`).
    pub(super) fn notify_archiver(&self, segno: u64) {
        if self.ctx.settings.archive_mode {
            let name = self.geo.file_name(self.tli, segno);
            crate::archive::notify_or_log(&self.pg_wal, &name, self.fsync);
        }
    }

    /// After a segment is complete: wake the checkpointer when the WAL since
    /// the last checkpoint's redo point reaches its trigger (half of
    /// `max_wal_size`), as PostgreSQL's XLogWrite does, rather than letting
    /// WAL pile up until the checkpointer's next look.
    pub(super) fn maybe_request_checkpoint(&self, written: Lsn) {
        let ck = &self.shm.xlog().checkpointer;
        let trigger = checkpoint_wal_trigger(&self.ctx.settings);
        if written.saturating_sub(ck.last_redo.load(Ordering::Relaxed)) >= trigger {
            ck.latch.set();
        }
    }

    /// Makes the WAL written into segment `segno` durable with
    /// `wal_sync_method`'s call (PostgreSQL's issue_xlog_fsync): nothing
    /// with `fsync = off`, nor with an `open_*` method, whose writes were
    /// durable when they returned (so no sync is counted either).
    pub(super) fn sync_segment(&mut self, segno: u64) {
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
    pub(super) fn segment_file(&mut self, segno: u64) -> &File {
        if self.open_seg.as_ref().map(|(s, _)| *s) != Some(segno) {
            let path = self.pg_wal.join(self.geo.file_name(self.tli, segno));
            let first_page = self.new_segment_first_page(segno);
            let settings = &self.ctx.settings;
            let flags = crate::walfile::sync_open_flag(settings.wal_sync_method, self.fsync);
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
}

/// WAL volume since the last redo point that calls for a checkpoint: half
/// of `max_wal_size` (PostgreSQL spreads checkpoints so that max_wal_size
/// is not exceeded with checkpoint_completion_target 0.9). The writer and
/// the checkpointer both test it.
pub fn checkpoint_wal_trigger(s: &Settings) -> u64 {
    ((s.max_wal_size_mb as u64) << 20) / 2
}
