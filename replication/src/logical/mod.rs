//! Logical decoding (PostgreSQL's replication/logical), for what walshm's
//! WAL holds: logical messages and the transactions around them. A
//! [`Decoder`] reads the flushed WAL from a logical slot's restart_lsn,
//! passes each record through the reorder buffer
//! ([`backend::reorder`]) and each completed change through the slot's
//! output plugin ([`plugin`]: `test_decoding`, `pgoutput`). The walsender
//! streams its output (START_REPLICATION ... LOGICAL) and the SQL
//! functions return it as rows (`pg_logical_slot_get_changes`, ...:
//! [`sql`]).
//!
//! Invariants: only WAL below the flush position is decoded (a record
//! that ends past it waits), so nothing a crash can take back is ever
//! delivered; a transaction is delivered at its COMMIT, in commit order,
//! never if it aborted or never ended; what a client receives again after
//! reconnecting starts at its slot's confirmed_flush (at least once).

pub mod pgoutput;
pub mod plugin;
pub mod publication;
pub mod sql;
pub mod test_decoding;

use backend::reorder::Reorder;
use plugin::{Output, Plugin};
use protocol::SqlError;
use shmem::sync::Ordering;
use shmem::Shmem;
use std::path::{Path, PathBuf};
use walformat::{DecodedRecord, Geometry, Lsn, WalError, WalReader};

/// How far past a read error the flush position must be before the error
/// is reported rather than taken for WAL not yet flushed (a record may
/// straddle the flush position).
const STRADDLE_WINDOW: u64 = 2 << 20;

/// Decodes a slot's WAL (see the module header).
pub struct Decoder<'a> {
    source: Source<'a>,
    reorder: Reorder,
    plugin: Box<dyn Plugin>,
}

impl<'a> Decoder<'a> {
    /// Reads from `restart_lsn`, delivers what commits at or after
    /// `start`.
    pub fn new(
        shm: &'a Shmem,
        datadir: &Path,
        restart_lsn: Lsn,
        start: Lsn,
        plugin: Box<dyn Plugin>,
    ) -> Result<Decoder<'a>, SqlError> {
        Ok(Decoder {
            source: Source::new(shm, datadir, restart_lsn)?,
            reorder: Reorder::new(start, restart_lsn),
            plugin,
        })
    }

    pub fn binary(&self) -> bool {
        self.plugin.binary()
    }

    /// Decodes WAL below `upto` until at least `min_outputs` outputs were
    /// appended to `out` (whole transactions: more may come) or no more
    /// WAL is there; true when it stopped for want of WAL.
    pub fn decode(
        &mut self,
        upto: Lsn,
        out: &mut Vec<Output>,
        min_outputs: usize,
    ) -> Result<bool, SqlError> {
        let goal = out.len() + min_outputs.max(1);
        while out.len() < goal {
            if !self.step(upto, out)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Decodes one record below `upto`; false if there is none yet.
    pub fn step(&mut self, upto: Lsn, out: &mut Vec<Output>) -> Result<bool, SqlError> {
        let Some(rec) = self.source.next_record(upto)? else {
            return Ok(false);
        };
        if let Some(change) = self.reorder.add(&rec) {
            self.plugin.render(&change, out);
        }
        Ok(true)
    }

    /// Where the next record starts (everything before it was decoded).
    pub fn position(&self) -> Lsn {
        self.reorder.position()
    }

    /// The oldest WAL needed to go on from here (see `backend::reorder`).
    pub fn restart_point(&self) -> Lsn {
        self.reorder.restart_point()
    }

    /// The restart_lsn a slot may keep once `confirmed` is confirmed.
    pub fn restart_for(&mut self, confirmed: Lsn) -> Option<Lsn> {
        self.reorder.restart_for(confirmed)
    }
}

/// The records of the flushed WAL, read from the segment files.
struct Source<'a> {
    shm: &'a Shmem,
    pg_wal: PathBuf,
    geo: Geometry,
    tli: u32,
    sysid: u64,
    inner: Option<WalReader>,
    next: Lsn,
    prev: Option<Lsn>,
}

impl<'a> Source<'a> {
    fn new(shm: &'a Shmem, datadir: &Path, from: Lsn) -> Result<Source<'a>, SqlError> {
        let facts = &shm.xlog().facts;
        let geo = Geometry::new(facts.seg_size)
            .map_err(|e| SqlError::error("XX000", format!("bad WAL segment size: {e}")))?;
        Ok(Source {
            shm,
            pg_wal: datadir.join("pg_wal"),
            geo,
            tli: facts.timeline,
            sysid: facts.system_identifier,
            inner: None,
            next: from,
            prev: None,
        })
    }

    fn removed(&self, segno: u64) -> SqlError {
        SqlError::error(
            "58P01",
            format!(
                "requested WAL segment {} has already been removed",
                self.geo.file_name(self.tli, segno)
            ),
        )
    }

    fn is_removed(&self, segno: u64) -> bool {
        // SeqCst: pairs with the checkpointer's store in
        // slots::removal_cutoff, made before it removes anything.
        self.shm.repl().removed_below_seg.load(Ordering::SeqCst) > segno
    }

    /// The next record that ends at or below `upto`; None if there is
    /// none yet.
    fn next_record(&mut self, upto: Lsn) -> Result<Option<DecodedRecord>, SqlError> {
        if self.next >= upto {
            return Ok(None);
        }
        loop {
            let fresh = self.inner.is_none();
            if fresh && !self.open()? {
                return Ok(None);
            }
            let inner = self.inner.as_mut().expect("opened above");
            match inner.next_record() {
                Ok(Some(rec)) if rec.end > upto => {
                    self.inner = None;
                    return Ok(None);
                }
                Ok(Some(rec)) => {
                    if self.is_removed(self.geo.seg_no(rec.lsn)) {
                        return Err(self.removed(self.geo.seg_no(rec.lsn)));
                    }
                    self.next = rec.next;
                    self.prev = Some(rec.lsn);
                    return Ok(Some(rec));
                }
                Ok(None) => {}
                Err(e) if upto < e.lsn().max(self.next).saturating_add(STRADDLE_WINDOW) => {}
                Err(e) => {
                    self.inner = None;
                    return Err(SqlError::error(
                        "XX000",
                        format!("could not decode WAL: {e}"),
                    ));
                }
            }
            self.inner = None;
            if fresh {
                return Ok(None);
            }
        }
    }

    /// Opens the files' reader at `next`; false if its segment does not
    /// exist yet.
    fn open(&mut self) -> Result<bool, SqlError> {
        let segno = self.geo.seg_no(self.next);
        if self.is_removed(segno) {
            return Err(self.removed(segno));
        }
        match WalReader::open_from(
            &backend::walfile::SEAM,
            &self.pg_wal,
            self.geo,
            self.tli,
            Some(self.sysid),
            self.next,
        ) {
            Ok(mut r) => {
                if let Some(prev) = self.prev {
                    r.set_expected_prev(prev);
                }
                self.inner = Some(r);
                Ok(true)
            }
            Err(WalError::MissingSegment { .. }) if !self.is_removed(segno) => Ok(false),
            Err(WalError::MissingSegment { .. }) => Err(self.removed(segno)),
            Err(e) => Err(SqlError::error("XX000", format!("could not read WAL: {e}"))),
        }
    }
}

/// Output as CopyData 'w' messages (XLogData: dataStart and walEnd the
/// output's write location, as PostgreSQL's logical walsender sends them).
pub fn append_xlog_data(buf: &mut Vec<u8>, o: &Output, now: i64) -> Option<()> {
    protocol::replication::xlog_data_header(buf, o.lsn, o.lsn, now, o.data.len())?;
    buf.extend_from_slice(&o.data);
    Some(())
}
