//! `postmaster init -D NEW --from-wal SRC`: a data directory made from WAL
//! that left another machine (pg_receivewal's output directory, or what
//! `archive_command` copied into an archive).
//!
//! Everything about SRC is checked before NEW is touched, so a refusal
//! creates nothing:
//! 1. SRC holds segment files (`TTTTTTTTXXXXXXXXYYYYYYYY`, or with
//!    `.partial`: pg_receivewal's segment still being received), and maybe
//!    history files. The newest timeline among the segments is the one
//!    restored, along its history (SRC's history file, if any): for each
//!    segment number the file of the timeline that history reads it from;
//! 2. the segment numbers are contiguous (a gap is refused, naming the
//!    first missing segment), and every file is a full-size segment of one
//!    database system (long page header: system identifier, segment size,
//!    page address);
//! 3. the WAL is read from its first record to its end, validating every
//!    record; it must end in the last file (an earlier end is damage) and
//!    hold a checkpoint record whose redo point is in it: the first such
//!    one is where recovery starts, so everything after it is validated
//!    again by the startup process.
//!
//! Then NEW is created as `init` does, the segments are copied under their
//! plain names (fsynced), every history file with them (the new timeline
//! must be one no history in SRC names yet), and the control file
//! names that checkpoint; `recovery.signal` asks the first start for
//! archive recovery, which ends on a new timeline (backend/src/restore.rs).
//! A failure while copying removes what was created.

use backend::restore::{segment_identity, SegmentIdentity};
use backend::timeline::{self, Timeline};
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use walformat::{format_lsn, Geometry, Lsn, WalFiles, WalReader};

/// One segment file of SRC chosen for the restore.
#[derive(Debug)]
pub struct SourceSegment {
    pub segno: u64,
    pub tli: u32,
    pub path: PathBuf,
}

/// What SRC holds, once validated.
#[derive(Debug)]
pub struct Source {
    pub dir: PathBuf,
    pub geo: Geometry,
    pub system_identifier: u64,
    pub history: Timeline,
    pub segments: Vec<SourceSegment>,
    /// Every history file in SRC: the restored timeline's ancestry, and
    /// timelines branched elsewhere, so that the new timeline is one
    /// nobody used (PostgreSQL's findNewestTimeLine looks in the archive).
    pub history_files: Vec<PathBuf>,
    /// The first checkpoint record whose redo point is in SRC's WAL.
    pub checkpoint: Lsn,
    pub redo: Lsn,
    pub next_xid: u64,
    /// End of valid WAL in SRC.
    pub end: Lsn,
    pub records: u64,
}

/// A file name of SRC: a segment (maybe `.partial`) or a history file.
enum Entry {
    Segment { name: String, partial: bool },
    History,
}

fn classify(name: &str) -> Option<Entry> {
    if timeline::parse_history_file_name(name).is_some() {
        return Some(Entry::History);
    }
    let (base, partial) = match name.strip_suffix(".partial") {
        Some(b) => (b, true),
        None => (name, false),
    };
    let valid = base.len() == 24 && base.bytes().all(|b| b.is_ascii_hexdigit());
    valid.then(|| Entry::Segment {
        name: base.to_string(),
        partial,
    })
}

/// Steps 1-3 of the module header.
pub fn examine(src: &Path) -> Result<Source, String> {
    let names = std::fs::read_dir(src)
        .map_err(|e| {
            format!(
                "could not read WAL source directory \"{}\": {e}",
                src.display()
            )
        })?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Vec<_>>();
    let entries: Vec<(String, Entry)> = names
        .into_iter()
        .filter_map(|n| classify(&n).map(|e| (n, e)))
        .collect();
    let first = entries
        .iter()
        .find(|(_, e)| matches!(e, Entry::Segment { .. }))
        .ok_or_else(|| {
            format!(
                "no WAL segment files in \"{}\" (expected names like 000000010000000000000001, or with .partial)",
                src.display()
            )
        })?;
    let id = segment_identity(&src.join(&first.0))?;
    let geo = Geometry::new(id.seg_size).map_err(|e| format!("{}: {e}", first.0))?;
    let mut found: Vec<(u32, u64, bool, PathBuf)> = Vec::new();
    for (file, e) in &entries {
        if let Entry::Segment { name, partial } = e {
            let (tli, segno) = geo
                .parse_file_name(name)
                .ok_or_else(|| format!("\"{file}\" is not a valid WAL segment name"))?;
            found.push((tli, segno, *partial, src.join(file)));
        }
    }
    let target = found
        .iter()
        .map(|f| f.0)
        .max()
        .expect("one segment at least");
    let history = Timeline::read(src, target).map_err(|e| e.to_string())?;
    let segments = choose_segments(&geo, &history, found)?;
    check_contiguous(&geo, &segments, src)?;
    check_identities(&geo, &segments, id.system_identifier)?;
    let history_files = entries
        .iter()
        .filter_map(|(n, e)| match e {
            Entry::History => Some(src.join(n)),
            _ => None,
        })
        .collect();
    let mut source = Source {
        dir: src.to_path_buf(),
        geo,
        system_identifier: id.system_identifier,
        history,
        segments,
        history_files,
        checkpoint: 0,
        redo: 0,
        next_xid: 0,
        end: 0,
        records: 0,
    };
    read_to_end(&mut source)?;
    Ok(source)
}

/// For each segment number, the file the restored history reads it from
/// (a complete file preferred to a `.partial`); sorted by number.
fn choose_segments(
    geo: &Geometry,
    history: &Timeline,
    found: Vec<(u32, u64, bool, PathBuf)>,
) -> Result<Vec<SourceSegment>, String> {
    let mut chosen: std::collections::BTreeMap<u64, (bool, SourceSegment)> = Default::default();
    for (tli, segno, partial, path) in found {
        if history.timeline_of_segment(segno, geo.seg_size) != tli {
            continue;
        }
        let better = chosen.get(&segno).is_none_or(|(p, _)| *p && !partial);
        if better {
            chosen.insert(segno, (partial, SourceSegment { segno, tli, path }));
        }
    }
    Ok(chosen.into_values().map(|(_, s)| s).collect())
}

fn check_contiguous(geo: &Geometry, segs: &[SourceSegment], src: &Path) -> Result<(), String> {
    for pair in segs.windows(2) {
        if pair[1].segno != pair[0].segno + 1 {
            let missing = pair[0].segno + 1;
            let tli = pair[0].tli;
            return Err(format!(
                "WAL segment {} is missing from \"{}\": the segments there go from {} to {} with a gap, and WAL cannot be restored across a gap",
                geo.file_name(tli, missing),
                src.display(),
                geo.file_name(segs[0].tli, segs[0].segno),
                geo.file_name(segs[segs.len() - 1].tli, segs[segs.len() - 1].segno),
            ));
        }
    }
    Ok(())
}

/// Every file: full size, this system, the page address its name says.
fn check_identities(geo: &Geometry, segs: &[SourceSegment], sysid: u64) -> Result<(), String> {
    for s in segs {
        let shown = s.path.display();
        let len = std::fs::metadata(&s.path)
            .map_err(|e| format!("could not stat \"{shown}\": {e}"))?
            .len();
        if len != geo.seg_size {
            return Err(format!(
                "\"{shown}\" has {len} bytes, but WAL segments of this system have {}",
                geo.seg_size
            ));
        }
        let id: SegmentIdentity = segment_identity(&s.path)?;
        if id.system_identifier != sysid {
            return Err(format!(
                "\"{shown}\" is from a different database system: its system identifier is {}, the other segments' is {sysid}",
                id.system_identifier
            ));
        }
        if id.seg_size != geo.seg_size || id.pageaddr != geo.seg_start(s.segno) {
            return Err(format!(
                "\"{shown}\" does not hold the segment its name says (first page at {}, segment size {})",
                format_lsn(id.pageaddr),
                id.seg_size
            ));
        }
    }
    Ok(())
}

/// Reads SRC's WAL by the chosen files' own names (`.partial` included).
struct SourceFiles;

static SOURCE_FILES: SourceFiles = SourceFiles;

impl WalFiles for SourceFiles {
    fn open(&self, path: &Path) -> io::Result<File> {
        match File::open(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let mut p = path.as_os_str().to_owned();
                p.push(".partial");
                File::open(PathBuf::from(p))
            }
            r => r,
        }
    }

    fn read_to_end(&self, file: &mut File, into: &mut Vec<u8>) -> io::Result<usize> {
        io::Read::read_to_end(file, into)
    }

    fn read_exact_at(&self, file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<OsString>> {
        std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.file_name()))
            .collect()
    }
}

/// Step 3: reads every record from the first segment's first record start.
fn read_to_end(s: &mut Source) -> Result<(), String> {
    let first_seg = s.segments[0].segno;
    let last_seg = s.segments[s.segments.len() - 1].segno;
    let mut reader = WalReader::open_across(
        &SOURCE_FILES,
        &s.dir,
        s.geo,
        s.history.reader_history(),
        Some(s.system_identifier),
        s.geo.seg_start(first_seg),
    )
    .map_err(|e| format!("could not read the WAL in \"{}\": {e}", s.dir.display()))?;
    let mut first_record = None;
    let stop = loop {
        match reader.next_record() {
            Ok(Some(r)) => {
                s.records += 1;
                let first = *first_record.get_or_insert(r.lsn);
                if let Some((cp, _)) = r.as_checkpoint() {
                    if s.checkpoint == 0 && cp.redo >= first {
                        (s.checkpoint, s.redo, s.next_xid) = (r.lsn, cp.redo, cp.next_xid);
                    }
                }
            }
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    s.end = reader.end_of_valid();
    let end_seg = s
        .geo
        .seg_no(s.end.saturating_sub(1).max(s.geo.seg_start(first_seg)));
    if end_seg < last_seg {
        let why = stop.map_or("it ends there".to_string(), |e| e.to_string());
        return Err(format!(
            "the WAL in \"{}\" is damaged: valid WAL ends at {} but segments follow up to {}: {why}",
            s.dir.display(),
            format_lsn(s.end),
            s.geo.file_name(s.segments[s.segments.len() - 1].tli, last_seg)
        ));
    }
    if s.checkpoint == 0 {
        return Err(format!(
            "no checkpoint record in the WAL of \"{}\" (from {} to {}): recovery needs one to start from",
            s.dir.display(),
            format_lsn(first_record.unwrap_or(s.geo.seg_start(first_seg))),
            format_lsn(s.end)
        ));
    }
    Ok(())
}

/// Copies the segments (under their plain names) and history files into
/// `pg_wal`, each fsynced, and creates `archive_status/`.
pub fn copy_into(s: &Source, pg_wal: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let copy = |from: &Path, name: &str| -> Result<(), String> {
        let to = pg_wal.join(name);
        std::fs::copy(from, &to)
            .and_then(|_| std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600)))
            .and_then(|()| File::open(&to)?.sync_all())
            .map_err(|e| {
                format!(
                    "could not copy \"{}\" to \"{}\": {e}",
                    from.display(),
                    to.display()
                )
            })
    };
    for seg in &s.segments {
        copy(&seg.path, &s.geo.file_name(seg.tli, seg.segno))?;
    }
    for h in &s.history_files {
        let name = h
            .file_name()
            .expect("a file")
            .to_string_lossy()
            .into_owned();
        copy(h, &name)?;
    }
    std::fs::create_dir(backend::archive::status_dir(pg_wal))
        .map_err(|e| format!("could not create archive_status: {e}"))?;
    backend::walfile::sync_dir(pg_wal).map_err(|e| e.to_string())
}
