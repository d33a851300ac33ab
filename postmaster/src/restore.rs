//! `postmaster init -D NEW --from-wal SRC`: a data directory made from WAL
//! that left another machine (pg_receivewal's output directory, or what
//! `archive_command` copied into an archive).
//!
//! Everything about SRC is checked before NEW is touched, so a refusal
//! creates nothing:
//! 1. SRC holds segment files (`TTTTTTTTXXXXXXXXYYYYYYYY`, or with
//!    `.partial`: pg_receivewal's segment still being received), and maybe
//!    history files. Every file under such a name must be a regular file
//!    (or a symbolic link to one): anything else (a FIFO, a directory) is
//!    refused, naming it, before any file is opened (opening a FIFO would
//!    block, and skipping it would turn a missing segment into a gap).
//!    Every history file is validated (`timeline::parse_history`: its
//!    timeline ID in range, parents increasing and below it, switch points
//!    not decreasing), so that no invalid one reaches pg_wal, where it
//!    would steer the choice of the new timeline. The newest timeline
//!    among the segments (a valid ID) is the one restored, along its
//!    history (SRC's history file, if any): for each segment number the
//!    file of the timeline that history reads it from;
//! 2. the segment numbers are contiguous (a gap is refused, naming the
//!    first missing segment), and every file is a full-size segment of one
//!    database system at the page address and on a timeline its name says
//!    (`backend::restore::check_segment`, which also checks what
//!    `restore_command` delivers);
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

use backend::restore::{check_segment, regular_file_len, segment_identity, SegmentSpec};
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
    History { tli: u32 },
}

fn classify(name: &str) -> Option<Entry> {
    if let Some(tli) = timeline::parse_history_file_name(name) {
        return Some(Entry::History { tli });
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
    let entries = list_source(src)?;
    let history_files = check_history_files(src, &entries)?;
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
    let found = parse_segment_names(&geo, &entries, src)?;
    let target = found.iter().map(|f| f.0).max().unwrap_or(1);
    let history = Timeline::read(src, target).map_err(|e| e.to_string())?;
    let segments = choose_segments(&geo, &history, found)?;
    check_contiguous(&geo, &segments, src)?;
    check_identities(&geo, &segments, id.system_identifier, &history)?;
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

/// SRC's segment and history files, by name; any of them that is not a
/// regular file is refused before anything is opened.
fn list_source(src: &Path) -> Result<Vec<(String, Entry)>, String> {
    let unreadable = |e: io::Error| {
        format!(
            "could not read WAL source directory \"{}\": {e}",
            src.display()
        )
    };
    let mut entries = Vec::new();
    for e in std::fs::read_dir(src).map_err(unreadable)? {
        let name = e
            .map_err(unreadable)?
            .file_name()
            .to_string_lossy()
            .into_owned();
        let Some(entry) = classify(&name) else {
            continue;
        };
        let path = src.join(&name);
        regular_file_len(&path).map_err(|why| {
            format!(
                "\"{}\" cannot be restored: {why}; a WAL source holds regular files only",
                path.display()
            )
        })?;
        entries.push((name, entry));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(entries)
}

/// Every history file of SRC, validated as its name's timeline's history.
fn check_history_files(src: &Path, entries: &[(String, Entry)]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for (name, e) in entries {
        let Entry::History { tli } = e else { continue };
        let path = src.join(name);
        let shown = path.display().to_string();
        let bytes = std::fs::read(&path).map_err(|e| format!("could not read \"{shown}\": {e}"))?;
        timeline::parse_history(&String::from_utf8_lossy(&bytes), *tli, &shown)
            .map_err(|e| e.to_string())?;
        files.push(path);
    }
    Ok(files)
}

/// (timeline, segment number, `.partial`, path) of every segment file;
/// each name's timeline must be a valid ID.
fn parse_segment_names(
    geo: &Geometry,
    entries: &[(String, Entry)],
    src: &Path,
) -> Result<Vec<(u32, u64, bool, PathBuf)>, String> {
    let mut found = Vec::new();
    for (file, e) in entries {
        let Entry::Segment { name, partial } = e else {
            continue;
        };
        let (tli, segno) = geo
            .parse_file_name(name)
            .ok_or_else(|| format!("\"{file}\" is not a valid WAL segment name"))?;
        if !timeline::valid_timeline(tli) {
            return Err(format!(
                "\"{file}\" names timeline ID {tli}, which is out of range (1 to {})",
                timeline::MAX_TIMELINE
            ));
        }
        found.push((tli, segno, *partial, src.join(file)));
    }
    Ok(found)
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

/// Every file: full size, this system, the page address and a timeline
/// its name says (`check_segment`).
fn check_identities(
    geo: &Geometry,
    segs: &[SourceSegment],
    sysid: u64,
    history: &Timeline,
) -> Result<(), String> {
    for s in segs {
        let spec = SegmentSpec {
            geo: *geo,
            system_identifier: sysid,
            tli: s.tli,
            segno: s.segno,
            history,
        };
        check_segment(&s.path, &spec).map_err(|why| {
            format!(
                "\"{}\" cannot be restored as WAL segment {}: {why}",
                s.path.display(),
                geo.file_name(s.tli, s.segno)
            )
        })?;
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
