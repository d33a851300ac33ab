//! Looking past the point where reading WAL stopped: is this a torn tail,
//! or is there valid WAL of this system after it (so the stop is damage)?
//!
//! After a crash, only the tail of WAL may be unreadable: everything the
//! runtime wrote before its last flush is a prefix of the insert stream,
//! so a reader that stops at X (an invalid record, a zeroed page, an absent
//! segment) has found the end of WAL only if nothing valid follows X. If a
//! WAL page of this system with a record whose CRC verifies follows, WAL
//! was damaged before its end, and treating X as the end would overwrite
//! (lose) everything after it, acknowledged commits included.
//!
//! What counts as valid WAL after X, page by page from the page after X's
//! page (X's own page may legitimately hold a complete record after a hole:
//! a flush writes the whole page holding its target while later insertions
//! into that page are still being copied):
//!
//! * a page whose header carries its own address (and for a long header the
//!   system identifier, segment size and block size), with a timeline not
//!   above ours, from which [`WalReader`] reads at least one record whose CRC
//!   verifies (the reader resyncs there: it skips a leading continuation);
//! * a page whose header carries a LATER address than its position in the
//!   segment (a segment put under a wrong, earlier name, e.g. two segments
//!   swapped), with a record that decodes whole inside the page.
//!
//! What never counts: all-zero pages, pre-initialized pages with a header
//! but no record, pages with an EARLIER address than their position (a
//! recycled segment, renamed to a future name, keeps its old pages), pages
//! with a bad magic or foreign long header, and garbage (a random record
//! passes the length, rmgr and CRC-32C checks with probability ~2^-32).
//!
//! Cost: the scan reads only page headers (one 40-byte `pread` per page)
//! until a header matches; only then does it read whole segments. So a
//! clean start with nothing after X reads the rest of X's segment and each
//! later segment file's headers, and nothing more.
//!
//! The scan never writes. A segment file shorter than the segment size (a
//! truncated segment) is examined as far as it goes, as if zero-padded.
//!
//! # The unsynced window: what a power loss can leave after X
//!
//! A power loss (unlike a `kill -9`) also takes writes that were never
//! fdatasynced, and it may drop or tear them in any order: a torn page at X
//! can be followed by a LATER unsynced page that survived whole. Such WAL
//! was never acknowledged (an acknowledgement waits for the fdatasync), so
//! it is a torn tail too. Where can it lie? The writer (`backend::xlog`'s
//! `xlog_write`, under WALWriteLock, for backends, the walwriter and
//! segment switches alike) writes WAL in LSN order and fdatasyncs every
//! segment as soon as its last page is written, BEFORE any byte of the next
//! segment is written; startup fdatasyncs the segment before X's after a
//! crash (see `backend::procs::startup`), so this also holds across crash
//! restarts. Hence at any instant every byte written but not yet synced
//! lies in ONE segment, the one being written; a power loss damages only
//! such bytes, so X lies in that segment (or at its start), and so does
//! every page that survived after X. The window is therefore
//! `[X, end of X's segment)` ([`unsynced_window_end`]): exactly what startup
//! zeroes when it cuts WAL at X.
//!
//! Not `wal_buffers`: a backend that writes old pages out only to free a
//! buffer (`write_upto`) does not sync unless a flush is pending, so written
//! but unsynced WAL can run up to a segment ahead of the last sync, however
//! small the buffer ring; and the setting of the crashed run is not known.
//!
//! Verdict ([`Lookahead::verdict`]): nothing valid after X is the end of WAL;
//! valid records that all lie wholly inside the window are a possible
//! power-loss tail (recovery ends at X); a valid record that ends beyond the
//! window, or any misplaced page (a power loss moves no page), is damage.
//! Cost of this policy: media damage inside the last segment of WAL is
//! taken for a torn tail, losing what follows it in that segment
//! (acknowledged commits included), as PostgreSQL does for all damage;
//! damage in any earlier segment is still refused. With `fsync = off`
//! nothing is synced and nothing is promised: a power loss may then also
//! leave WAL beyond the window, which is refused as damage.
//!
//! The scan always reads on to the end (the counts name what a refusal
//! would keep or a `--discard-damaged-wal` would discard); that costs
//! nothing on a clean start, where nothing follows X.

use crate::consts::{
    SIZE_OF_XLOG_LONG_PHD, SIZE_OF_XLOG_SHORT_PHD, XLOG_BLCKSZ, XLOG_PAGE_MAGIC, XLP_ALL_FLAGS,
    XLP_FIRST_IS_CONTRECORD, XLP_LONG_HEADER,
};
use crate::decode::{decode_record_bytes, DecodedRecord};
use crate::geometry::{maxalign, Geometry, Lsn};
use crate::page::{read_page_header, PageHeader};
use crate::reader::{StdWalFiles, WalError, WalFiles, WalReader};
use std::path::{Path, PathBuf};

const BLCKSZ: u64 = XLOG_BLCKSZ as u64;

/// Valid WAL found after the stop point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidWalAfter {
    /// Segment file holding the first valid record found (for a misplaced
    /// page: the file it was found in, not the one its address names).
    pub first_file: String,
    /// Offset of that record in the file.
    pub first_offset: u64,
    /// LSN of the first valid record found.
    pub first_record: Lsn,
    /// Highest end (`EndRecPtr`) of a valid record found.
    pub last_end: Lsn,
    /// Valid records found.
    pub records: u64,
    /// Of which COMMIT records.
    pub commits: u64,
    /// Pages found at a position earlier than their address (misplaced
    /// segments) that hold valid records.
    pub misplaced_pages: u64,
    /// LSN of the first valid record found that does not lie wholly inside
    /// the unsynced window (it ends beyond it, or lies in a misplaced
    /// page); `None`: everything found lies inside the window.
    pub first_beyond_window: Option<Lsn>,
}

/// What the WAL after the stop point means (see the module header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing valid follows: the stop is the end of WAL.
    EndOfWal,
    /// Valid WAL follows, but only inside the unsynced window: a possible
    /// power-loss tail, never acknowledged; recovery ends at the stop.
    PowerLossTail,
    /// Valid WAL follows beyond the window (or misplaced): damage.
    Damaged,
}

/// What the look-ahead examined and found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lookahead {
    /// `Some` if valid WAL follows the stop point: the stop is damage.
    pub found: Option<ValidWalAfter>,
    /// Segment files examined.
    pub files: u64,
    /// Page headers examined.
    pub pages: u64,
    /// End of the unsynced window after the stop point
    /// ([`unsynced_window_end`]).
    pub window_end: Lsn,
}

impl Lookahead {
    /// The decision the module header states.
    pub fn verdict(&self) -> Verdict {
        match &self.found {
            None => Verdict::EndOfWal,
            Some(f) if f.first_beyond_window.is_none() => Verdict::PowerLossTail,
            Some(_) => Verdict::Damaged,
        }
    }
}

/// End of the unsynced window after stop point `stop`: the end of the
/// segment holding `stop` (a stop at a segment start opens that segment's
/// window). Every written but unsynced byte a power loss can leave behind
/// after a stop it caused lies below it (see the module header).
pub fn unsynced_window_end(geo: &Geometry, stop: Lsn) -> Lsn {
    geo.seg_start(geo.seg_no(stop)) + geo.seg_size
}

/// How a page header relates to the page's position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PageKind {
    /// Zeroed, bad magic, foreign, or an older address (recycled).
    NotOurs,
    /// Carries its own address.
    InPlace,
    /// Carries a later address than its position.
    Misplaced(Lsn),
}

/// Whose WAL a look-ahead accepts: the segment geometry, the timeline and
/// the system identifier its pages must carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalSystem {
    /// Segment size (and so the file names and page positions).
    pub geo: Geometry,
    /// The timeline read; a page of a later timeline is not ours.
    pub tli: u32,
    /// The system identifier a long page header must carry.
    pub sysid: u64,
}

impl WalSystem {
    /// Classifies the header of the page found at `page` (its position).
    fn classify(&self, page: Lsn, hdr: &PageHeader) -> PageKind {
        let offset = self.geo.seg_offset(page);
        let is_long = hdr.info & XLP_LONG_HEADER != 0;
        let plausible = hdr.magic == XLOG_PAGE_MAGIC
            && hdr.info & !XLP_ALL_FLAGS == 0
            && is_long == (offset == 0)
            && hdr.tli != 0
            && hdr.tli <= self.tli
            && hdr.pageaddr % BLCKSZ == 0
            && self.geo.seg_offset(hdr.pageaddr) == offset;
        let long_ok = match hdr.long {
            Some((sysid, seg_size, blcksz)) => {
                sysid == self.sysid
                    && u64::from(seg_size) == self.geo.seg_size
                    && blcksz as usize == XLOG_BLCKSZ
            }
            None => true,
        };
        match (plausible && long_ok, hdr.pageaddr.cmp(&page)) {
            (true, std::cmp::Ordering::Equal) => PageKind::InPlace,
            (true, std::cmp::Ordering::Greater) => PageKind::Misplaced(hdr.pageaddr),
            _ => PageKind::NotOurs,
        }
    }
}

/// Scans `pg_wal` for valid WAL of system `sys` after `stop` (where reading
/// stopped): the pages after `stop`'s page in its segment, then every later
/// segment file present, in segment order. Errors only if a file cannot be
/// read (the caller should not guess then).
pub fn look_ahead(pg_wal: &Path, sys: WalSystem, stop: Lsn) -> Result<Lookahead, WalError> {
    look_ahead_from(&StdWalFiles, pg_wal, sys, stop)
}

/// [`look_ahead`] reading every file (and the directory) through `files`.
pub fn look_ahead_from(
    files: &'static dyn WalFiles,
    pg_wal: &Path,
    sys: WalSystem,
    stop: Lsn,
) -> Result<Lookahead, WalError> {
    let geo = sys.geo;
    let first_page = stop - stop % BLCKSZ + BLCKSZ;
    let mut scan = Scan {
        sys,
        files,
        dir: pg_wal.to_path_buf(),
        reader: None,
        out: Lookahead {
            window_end: unsynced_window_end(&geo, stop),
            ..Lookahead::default()
        },
        cursor: first_page,
    };
    for segno in segments_from(files, pg_wal, &geo, sys.tli, geo.seg_no(first_page))? {
        scan.segment(segno)?;
    }
    Ok(scan.out)
}

/// Segment numbers of timeline `tli` present in `pg_wal`, `>= from`, sorted.
fn segments_from(
    files: &dyn WalFiles,
    pg_wal: &Path,
    geo: &Geometry,
    tli: u32,
    from: u64,
) -> Result<Vec<u64>, WalError> {
    let io_err = |error| WalError::Io {
        lsn: geo.seg_start(from),
        path: pg_wal.to_path_buf(),
        error,
    };
    let mut segs = Vec::new();
    for name in files.list_dir(pg_wal).map_err(io_err)? {
        if let Some((t, segno)) = geo.parse_file_name(&name.to_string_lossy()) {
            if t == tli && segno >= from {
                segs.push(segno);
            }
        }
    }
    segs.sort_unstable();
    Ok(segs)
}

/// State of one look-ahead pass.
struct Scan {
    sys: WalSystem,
    files: &'static dyn WalFiles,
    dir: PathBuf,
    /// Opened at the first in-place page found, then repositioned.
    reader: Option<WalReader>,
    out: Lookahead,
    /// Next page to examine (pages before it were read or skipped).
    cursor: Lsn,
}

impl Scan {
    /// Examines the pages of segment `segno` from the cursor on.
    fn segment(&mut self, segno: u64) -> Result<(), WalError> {
        let geo = self.sys.geo;
        let seg_start = geo.seg_start(segno);
        let seg_end = seg_start + geo.seg_size;
        if self.cursor >= seg_end {
            return Ok(());
        }
        let name = geo.file_name(self.sys.tli, segno);
        let path = self.dir.join(&name);
        let io_err = |error| WalError::Io {
            lsn: seg_start,
            path: path.clone(),
            error,
        };
        let file = match self.files.open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err(e)),
        };
        let len = file.metadata().map_err(io_err)?.len().min(geo.seg_size);
        self.out.files += 1;
        let mut page = self.cursor.max(seg_start);
        let mut hdr_buf = [0u8; SIZE_OF_XLOG_LONG_PHD];
        while page < seg_end && geo.seg_offset(page) + SIZE_OF_XLOG_SHORT_PHD as u64 <= len {
            let offset = geo.seg_offset(page);
            let n = (len - offset).min(SIZE_OF_XLOG_LONG_PHD as u64) as usize;
            self.files
                .read_exact_at(&file, &mut hdr_buf[..n], offset)
                .map_err(io_err)?;
            hdr_buf[n..].fill(0);
            self.out.pages += 1;
            let kind = match read_page_header(&hdr_buf) {
                Some(hdr) => self.sys.classify(page, &hdr),
                None => PageKind::NotOurs,
            };
            let next = match kind {
                PageKind::NotOurs => page + BLCKSZ,
                PageKind::InPlace => self.read_in_place(page),
                PageKind::Misplaced(addr) => {
                    self.read_misplaced(&file, &name, page, addr, len)
                        .map_err(io_err)?;
                    page + BLCKSZ
                }
            };
            self.cursor = next;
            if next >= seg_end {
                // The reader went on into later segments (or the end).
                return Ok(());
            }
            page = next;
        }
        self.cursor = self.cursor.max(seg_end);
        Ok(())
    }

    /// Reads records with [`WalReader`] from in-place page `page` (skipping
    /// a leading continuation) until the first invalid record or a clean
    /// end; returns the next page to examine.
    fn read_in_place(&mut self, page: Lsn) -> Lsn {
        let sys = self.sys;
        let reader = match self.reader.as_mut() {
            Some(r) => {
                r.restart_at(page);
                r
            }
            None => {
                let opened = WalReader::open_with(
                    self.files,
                    &self.dir,
                    sys.geo,
                    sys.tli,
                    Some(sys.sysid),
                    page,
                    true,
                );
                match opened {
                    Ok(r) => self.reader.insert(r),
                    Err(_) => return page + BLCKSZ,
                }
            }
        };
        let mut read = 0u64;
        while let Ok(Some(r)) = reader.next_record() {
            read += 1;
            let place = || {
                let segno = sys.geo.seg_no(r.lsn);
                (sys.geo.file_name(sys.tli, segno), sys.geo.seg_offset(r.lsn))
            };
            let beyond = r.next > self.out.window_end;
            note_record(&mut self.out.found, place, &r, beyond);
        }
        let end = reader.end_of_valid();
        if read == 0 {
            return page + BLCKSZ;
        }
        // Resume at the page after the one where valid records ended.
        let end_page = end - end % BLCKSZ;
        (end_page + BLCKSZ).max(page + BLCKSZ)
    }

    /// Decodes the records that lie whole inside misplaced page `page`
    /// (header address `addr`, later than `page`); counts them if any.
    fn read_misplaced(
        &mut self,
        file: &std::fs::File,
        name: &str,
        page: Lsn,
        addr: Lsn,
        len: u64,
    ) -> std::io::Result<()> {
        let geo = self.sys.geo;
        let offset = geo.seg_offset(page);
        let mut buf = vec![0u8; XLOG_BLCKSZ];
        let n = (len - offset).min(BLCKSZ) as usize;
        self.files.read_exact_at(file, &mut buf[..n], offset)?;
        let Some(hdr) = read_page_header(&buf) else {
            return Ok(());
        };
        let mut pos = geo.page_header_size_at(addr) as u64;
        if hdr.info & XLP_FIRST_IS_CONTRECORD != 0 {
            pos += maxalign(u64::from(hdr.rem_len));
        }
        let mut records = Vec::new();
        while pos + 24 <= BLCKSZ {
            match decode_record_bytes(addr + pos, &buf[pos as usize..]) {
                Ok(r) => {
                    pos += maxalign(u64::from(r.tot_len));
                    records.push(r);
                }
                Err(_) => break,
            }
        }
        for r in &records {
            let place = || (name.to_string(), offset + (r.lsn - addr));
            // A power loss moves no page: misplaced WAL is always damage.
            note_record(&mut self.out.found, place, r, true);
        }
        if let (Some(found), false) = (self.out.found.as_mut(), records.is_empty()) {
            found.misplaced_pages += 1;
        }
        Ok(())
    }
}

/// Counts valid record `r`; `place` says in which file and at which offset
/// it lies (asked only for the first record found); `beyond`: it does not
/// lie wholly inside the unsynced window.
fn note_record(
    found: &mut Option<ValidWalAfter>,
    place: impl FnOnce() -> (String, u64),
    r: &DecodedRecord,
    beyond: bool,
) {
    let f = found.get_or_insert_with(|| {
        let (first_file, first_offset) = place();
        ValidWalAfter {
            first_file,
            first_offset,
            first_record: r.lsn,
            last_end: r.next,
            records: 0,
            commits: 0,
            misplaced_pages: 0,
            first_beyond_window: None,
        }
    });
    if beyond && f.first_beyond_window.is_none() {
        f.first_beyond_window = Some(r.lsn);
    }
    f.records += 1;
    f.commits += u64::from(r.is_commit());
    f.last_end = f.last_end.max(r.next);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::write_page_header;
    use crate::record::{commit_record, logical_message};
    use crate::writer::SegmentWriter;

    const SYSID: u64 = 4242;

    /// A directory under the system temp dir, removed on drop.
    struct Dir(PathBuf);

    impl Dir {
        fn new(tag: &str) -> Dir {
            use std::sync::atomic::{AtomicU64, Ordering};
            static N: AtomicU64 = AtomicU64::new(0);
            let p = std::env::temp_dir().join(format!(
                "walformat-lookahead-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn geo() -> Geometry {
        Geometry::new(1 << 20).unwrap()
    }

    /// Segments 1 and 2 with messages and commits; returns the LSNs.
    fn write_wal(dir: &Path) -> Vec<Lsn> {
        let geo = geo();
        let mut w = SegmentWriter::new(geo, 1, SYSID, geo.seg_start(1), 0);
        let mut lsns = Vec::new();
        for i in 0..400u32 {
            lsns.push(w.append(&mut logical_message(0, true, "t", &[7u8; 3000])));
            lsns.push(w.append(&mut commit_record(1000 + i, 0)));
        }
        assert!(w.insert_pos() > geo.seg_start(2), "WAL reaches segment 2");
        w.write_to_dir(dir).unwrap();
        lsns
    }

    /// A fresh directory holding [`write_wal`]'s segments, their LSNs and
    /// their geometry.
    fn wal_dir(tag: &str) -> (Dir, Vec<Lsn>, Geometry) {
        let d = Dir::new(tag);
        let lsns = write_wal(&d.0);
        (d, lsns, geo())
    }

    /// [`look_ahead`] over `d` (timeline 1, [`SYSID`]) after `stop`.
    fn look(d: &Dir, stop: Lsn) -> Lookahead {
        let sys = WalSystem {
            geo: geo(),
            tli: 1,
            sysid: SYSID,
        };
        look_ahead(&d.0, sys, stop).unwrap()
    }

    fn seg_path(dir: &Path, segno: u64) -> PathBuf {
        dir.join(geo().file_name(1, segno))
    }

    /// Rewrites segment `segno` in `dir` as `edit` changes its bytes.
    fn edit_segment(dir: &Path, segno: u64, edit: impl FnOnce(&mut Vec<u8>)) {
        let mut data = std::fs::read(seg_path(dir, segno)).unwrap();
        edit(&mut data);
        std::fs::write(seg_path(dir, segno), &data).unwrap();
    }

    /// Offset, in its segment, of the page after the one holding `lsn`.
    fn next_page_offset(g: &Geometry, lsn: Lsn) -> usize {
        (g.seg_offset(lsn) - g.seg_offset(lsn) % BLCKSZ + BLCKSZ) as usize
    }

    #[test]
    fn valid_page_after_stop_counts() {
        let (d, lsns, g) = wal_dir("valid");
        // Pretend reading stopped at record 10 (say a flipped byte there).
        let stop = lsns[10];
        let la = look(&d, stop);
        let found = la.found.clone().expect("valid WAL after the stop");
        let first_page = stop - stop % BLCKSZ + BLCKSZ;
        assert!(found.first_record > first_page);
        let later: Vec<usize> = (0..lsns.len()).filter(|i| lsns[*i] > first_page).collect();
        assert_eq!(lsns[later[0]], found.first_record);
        assert_eq!(found.records as usize, later.len());
        // Records alternate message, commit.
        let commits = later.iter().filter(|i| *i % 2 == 1).count();
        assert_eq!(found.commits as usize, commits);
        assert_eq!(found.misplaced_pages, 0);
        assert!(found.last_end > lsns[lsns.len() - 1]);
        // Segment 2 holds valid WAL: beyond the window of a stop in 1.
        assert_eq!(la.window_end, g.seg_start(2));
        let beyond = found.first_beyond_window.expect("WAL beyond the window");
        assert!(beyond < g.seg_start(2) && beyond >= first_page, "{found:?}");
        assert_eq!(la.verdict(), Verdict::Damaged);
    }

    #[test]
    fn window_is_the_rest_of_the_stop_segment() {
        let g = geo();
        assert_eq!(unsynced_window_end(&g, g.seg_start(3)), g.seg_start(4));
        assert_eq!(unsynced_window_end(&g, g.seg_start(3) + 40), g.seg_start(4));
        assert_eq!(unsynced_window_end(&g, g.seg_start(4) - 1), g.seg_start(4));
    }

    #[test]
    fn valid_wal_only_inside_the_window_is_a_power_loss_tail() {
        let (d, lsns, g) = wal_dir("window");
        // Reading stopped in segment 2 (the last), valid pages follow in it.
        let i = lsns
            .iter()
            .position(|l| *l > g.seg_start(2) + 2 * BLCKSZ)
            .unwrap();
        let stop = lsns[i];
        let la = look(&d, stop);
        assert_eq!(la.window_end, g.seg_start(3));
        let found = la.found.clone().expect("valid WAL after the stop");
        assert!(found.records > 0 && found.commits > 0, "{found:?}");
        assert_eq!(found.first_beyond_window, None, "{found:?}");
        assert_eq!(la.verdict(), Verdict::PowerLossTail);
    }

    #[test]
    fn record_crossing_out_of_the_window_is_damage() {
        let (d, lsns, g) = wal_dir("crossing");
        // The record that continues from segment 1 into segment 2.
        let k = lsns.iter().rposition(|l| *l < g.seg_start(2)).unwrap();
        let crossing = lsns[k];
        assert!(lsns[k + 1] > g.seg_start(2), "record {k} crosses");
        // Reading stopped 4 pages earlier; the pages between are zeroed,
        // so the scan resyncs in the crossing record's page: records
        // wholly inside the window, then the crossing one.
        let stop_i = lsns
            .iter()
            .rposition(|l| *l + 4 * BLCKSZ < crossing)
            .unwrap();
        let stop = lsns[stop_i];
        let from = next_page_offset(&g, stop);
        let to = (g.seg_offset(crossing) - g.seg_offset(crossing) % BLCKSZ) as usize;
        assert!(from < to);
        edit_segment(&d.0, 1, |data| data[from..to].fill(0));
        let la = look(&d, stop);
        let found = la.found.clone().expect("valid WAL after the stop");
        assert!(found.first_record < crossing, "{found:?}");
        assert_eq!(found.first_beyond_window, Some(crossing), "{found:?}");
        assert_eq!(la.verdict(), Verdict::Damaged);
        // Without segment 2 the crossing record cannot verify: only WAL
        // inside the window remains.
        std::fs::remove_file(seg_path(&d.0, 2)).unwrap();
        let la = look(&d, stop);
        assert_eq!(la.verdict(), Verdict::PowerLossTail, "{la:?}");
    }

    #[test]
    fn nothing_after_the_end_counts_nothing() {
        let (d, lsns, g) = wal_dir("end");
        let end = {
            let mut r = WalReader::open(&d.0, g, 1, Some(SYSID), lsns[0]).unwrap();
            while r.next_record().unwrap().is_some() {}
            r.end_of_valid()
        };
        let la = look(&d, end);
        assert_eq!(la.found, None);
        assert_eq!(la.verdict(), Verdict::EndOfWal);
        assert!(la.pages > 0 && la.files == 1, "{la:?}");
    }

    #[test]
    fn recycled_page_with_an_old_address_does_not_count() {
        let (d, lsns, g) = wal_dir("recycled");
        // Segment 1 renamed to segment 5, as the checkpointer recycles it:
        // valid pages and records, but the addresses of segment 1.
        std::fs::copy(seg_path(&d.0, 1), seg_path(&d.0, 5)).unwrap();
        std::fs::remove_file(seg_path(&d.0, 2)).unwrap();
        // Reading stopped at the end of segment 1 (segment 2 absent).
        let la = look(&d, g.seg_start(2));
        assert_eq!(la.found, None, "recycled segment counted: {la:?}");
        assert_eq!(la.files, 1);
        assert_eq!(la.pages, g.seg_size / BLCKSZ);
        // A lone page with a wrong (older) address inside segment 1.
        let stop = lsns[4];
        let page_off = next_page_offset(&g, stop);
        edit_segment(&d.0, 1, |data| {
            data[page_off + BLCKSZ as usize..].fill(0);
            let old_addr = g.seg_start(1) + page_off as u64 - 2 * BLCKSZ;
            let hdr = read_page_header(&data[page_off..]).unwrap();
            write_page_header(&mut data[page_off..], &g, old_addr, 1, SYSID, hdr.rem_len);
        });
        let la = look(&d, stop);
        assert_eq!(la.found, None, "page with an older address counted: {la:?}");
    }

    #[test]
    fn pre_initialized_and_foreign_pages_do_not_count() {
        let (d, lsns, g) = wal_dir("preinit");
        let stop = lsns[4];
        let page_off = next_page_offset(&g, stop);
        // Pages after the stop: headers with their own addresses, no record.
        edit_segment(&d.0, 1, |data| {
            data[page_off..].fill(0);
            for off in (page_off..data.len()).step_by(XLOG_BLCKSZ) {
                let addr = g.seg_start(1) + off as u64;
                write_page_header(&mut data[off..], &g, addr, 1, SYSID, 0);
            }
        });
        // Segment 2 from another system (its short pages carry our
        // addresses too, but the long header says foreign).
        edit_segment(&d.0, 2, |seg2| {
            seg2[BLCKSZ as usize..].fill(0);
            write_page_header(seg2, &g, g.seg_start(2), 1, SYSID + 1, 0);
        });
        let la = look(&d, stop);
        assert_eq!(la.found, None, "{la:?}");
    }

    #[test]
    fn misplaced_segment_with_a_later_address_counts() {
        let (d, _, g) = wal_dir("swap");
        // Segment 2's content under segment 1's name... and nothing else.
        std::fs::rename(seg_path(&d.0, 2), seg_path(&d.0, 1)).unwrap();
        let la = look(&d, g.seg_start(1));
        // Inside the stop's window, but a power loss moves no page.
        assert_eq!(la.window_end, g.seg_start(2));
        assert_eq!(la.verdict(), Verdict::Damaged);
        let found = la.found.clone().expect("misplaced WAL counts");
        assert!(found.misplaced_pages > 0);
        assert!(found.first_record > g.seg_start(2));
    }

    #[test]
    fn truncated_segment_is_examined_as_far_as_it_goes() {
        let (d, _, g) = wal_dir("trunc");
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(seg_path(&d.0, 2))
            .unwrap();
        f.set_len(3 * BLCKSZ).unwrap();
        let la = look(&d, g.seg_start(2));
        let found = la.found.expect("records in the truncated segment");
        assert!(found.first_record >= g.seg_start(2) + BLCKSZ);
        assert!(found.last_end <= g.seg_start(2) + 3 * BLCKSZ);
    }
}
