//! In-memory reference writer: lays records into pages and segments exactly
//! as PostgreSQL's `CopyXLogRecordToWAL` does. The shared-memory insert path
//! is checked against it.

use crate::consts::XLOG_BLCKSZ;
use crate::geometry::{maxalign, Geometry, Lsn};
use crate::page::{page_header_size, write_page_header};
use crate::record::RecordBuf;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

const BLCKSZ: u64 = XLOG_BLCKSZ as u64;

/// Builds segment images in memory. Records start MAXALIGNed, continuation
/// pages carry `XLP_FIRST_IS_CONTRECORD` and `xlp_rem_len`, and a SWITCH
/// record consumes the rest of its segment (whose remaining pages stay all
/// zero, as in PostgreSQL 14+).
pub struct SegmentWriter {
    geo: Geometry,
    tli: u32,
    sysid: u64,
    segments: BTreeMap<u64, Vec<u8>>,
    /// Insert position as a byte position (PostgreSQL's `CurrBytePos`).
    cur: u64,
    /// LSN of the last record written (`xl_prev` of the next one).
    prev: Lsn,
}

impl SegmentWriter {
    /// A writer whose first record goes at `start_lsn` (rounded up to the
    /// next valid record position; a page boundary means "after the header")
    /// with `xl_prev = prev`. The page holding `start_lsn` and the first page
    /// of its segment get headers with `xlp_rem_len = 0`; other bytes before
    /// `start_lsn` stay zero.
    pub fn new(geo: Geometry, tli: u32, sysid: u64, start_lsn: Lsn, prev: Lsn) -> SegmentWriter {
        let mut writer = SegmentWriter {
            geo,
            tli,
            sysid,
            segments: BTreeMap::new(),
            cur: maxalign(geo.recptr_to_bytepos(start_lsn)),
            prev,
        };
        let first = writer.insert_pos();
        let seg_start = geo.seg_start(geo.seg_no(first));
        // Every segment file has its long header (tools take the segment
        // size from it), even when writing starts in a later page.
        writer.write_header(seg_start, 0);
        writer.write_header(first - first % BLCKSZ, 0);
        writer
    }

    /// Appends `rec` (calling `rec.finish(prev)`) and returns its LSN. A
    /// SWITCH at the very start of a segment is a no-op, as in PostgreSQL:
    /// nothing is written and the segment start is returned.
    pub fn append(&mut self, rec: &mut RecordBuf) -> Lsn {
        let usable = self.geo.usable_bytes_in_segment();
        let end_form = self.geo.bytepos_to_end_recptr(self.cur);
        if rec.is_switch() && self.geo.seg_offset(end_form) == 0 {
            return end_form;
        }
        let start = self.insert_pos();
        rec.finish(self.prev);
        self.copy_record(start, rec.bytes());
        self.prev = start;
        self.cur += maxalign(u64::from(rec.total_len()));
        if rec.is_switch() {
            self.cur = self.cur.div_ceil(usable) * usable;
        }
        start
    }

    /// LSN where the next record will start (`XLogBytePosToRecPtr`).
    pub fn insert_pos(&self) -> Lsn {
        self.geo.bytepos_to_recptr(self.cur)
    }

    /// Insert position as a byte position.
    pub fn insert_bytepos(&self) -> u64 {
        self.cur
    }

    /// Insert position in end form (`XLogBytePosToEndRecPtr`): what
    /// [`crate::WalReader::end_of_valid`] reports after reading everything.
    pub fn end_pos(&self) -> Lsn {
        self.geo.bytepos_to_end_recptr(self.cur)
    }

    /// LSN of the last record appended (the next record's `xl_prev`).
    pub fn prev(&self) -> Lsn {
        self.prev
    }

    /// The geometry in use.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// The image of segment `segno`, if anything was written to it.
    pub fn segment(&self, segno: u64) -> Option<&[u8]> {
        self.segments.get(&segno).map(Vec::as_slice)
    }

    /// Numbers of the segments written to, ascending.
    pub fn segment_numbers(&self) -> Vec<u64> {
        self.segments.keys().copied().collect()
    }

    /// Writes every touched segment as a full-size file named by
    /// [`Geometry::file_name`] into `pg_wal_dir` (created if needed).
    pub fn write_to_dir(&self, pg_wal_dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(pg_wal_dir)?;
        for (segno, data) in &self.segments {
            let name = self.geo.file_name(self.tli, *segno);
            // One WAL page per write: Linux sizes page-cache folios by the
            // write that made them, and the server's later 8 KiB writes to
            // this segment cost less in page-sized folios than in one of
            // several MiB.
            let mut file = std::fs::File::create(pg_wal_dir.join(name))?;
            data.chunks(XLOG_BLCKSZ)
                .try_for_each(|page| file.write_all(page))?;
        }
        Ok(())
    }

    /// Copies a finished record to `start`, writing page headers for every
    /// page whose data area it begins (rem_len 0) or continues into.
    fn copy_record(&mut self, start: Lsn, bytes: &[u8]) {
        let mut lsn = start;
        let mut written = 0usize;
        loop {
            let page = lsn - lsn % BLCKSZ;
            if lsn == page + page_header_size(&self.geo, page) as u64 {
                let rem_len = (bytes.len() - written) as u32;
                self.write_header(page, if written == 0 { 0 } else { rem_len });
            }
            let n = (bytes.len() - written).min((page + BLCKSZ - lsn) as usize);
            let off = self.geo.seg_offset(lsn) as usize;
            self.segment_mut(lsn)[off..off + n].copy_from_slice(&bytes[written..written + n]);
            written += n;
            lsn += n as u64;
            if written == bytes.len() {
                return;
            }
            lsn += page_header_size(&self.geo, lsn) as u64;
        }
    }

    fn write_header(&mut self, page: Lsn, rem_len: u32) {
        let (geo, tli, sysid) = (self.geo, self.tli, self.sysid);
        let off = geo.seg_offset(page) as usize;
        let seg = self.segment_mut(page);
        write_page_header(&mut seg[off..], &geo, page, tli, sysid, rem_len);
    }

    fn segment_mut(&mut self, lsn: Lsn) -> &mut Vec<u8> {
        let size = self.geo.seg_size as usize;
        self.segments
            .entry(self.geo.seg_no(lsn))
            .or_insert_with(|| vec![0u8; size])
    }
}
