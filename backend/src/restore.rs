//! Archive recovery: a data directory restored from received or archived
//! WAL (`postmaster init --from-wal`, `restore_command`) is validated to
//! the end of that WAL and continues as a new primary on a new timeline
//! (PostgreSQL's xlogrecovery.c / xlog.c at the end of archive recovery,
//! and xlogarchive.c's RestoreArchivedFile).
//!
//! `DIR/recovery.signal` (PostgreSQL's name) asks the startup process for
//! archive recovery. It then:
//! 1. with `restore_command`: fetches the history files of later timelines
//!    (to pick a timeline nobody used yet) and every segment after the last
//!    one in pg_wal, in order, until the command fails (the end of the
//!    archive); each lands as `pg_wal/RECOVERYXLOG`, is checked (size,
//!    system identifier) and renamed to its name;
//! 2. recovers as after a crash (reads and validates to the end of valid
//!    WAL: X, refusing damage followed by valid WAL);
//! 3. ends recovery on timeline N = the newest known + 1:
//!    a. writes `pg_wal/0000000N.history` (parent's lines + `parent TAB X
//!    TAB reason`), durably;
//!    b. writes the new timeline's first segment: the switch segment's
//!    bytes before X copied, zeros after, and at X an end-of-recovery
//!    checkpoint (a shutdown checkpoint record with `tli = N`,
//!    `prev_tli = parent`, as PostgreSQL's end-of-recovery checkpoint),
//!    through a temporary file and a rename; pages after X carry TLI N;
//!    c. updates the control file (timeline N, that checkpoint);
//!    d. renames the parent's switch segment to `NAME.partial` (it is not
//!    a complete segment of either history), hands the history file and
//!    the `.partial` to the archiver (with `archive_mode`), and removes
//!    `recovery.signal`.
//!
//! A crash before (c) repeats archive recovery from the old checkpoint and
//! picks the next free timeline (the history file written in (a) exists):
//! the same as PostgreSQL, which never reuses a timeline ID. A crash after
//! (c) but before (d) repeats it from the end-of-recovery checkpoint,
//! branching once more: harmless, every timeline's history is on disk.

use crate::archive::{self, Outcome};
use crate::control::{unix_now, ControlFile, DbState};
use crate::process::log;
use crate::timeline::{self, Timeline};
use crate::walfile::{self, Op};
use std::path::Path;
use walformat::{format_lsn, Geometry, Lsn, SegmentWriter};

/// The file that requests archive recovery.
pub const RECOVERY_SIGNAL: &str = "recovery.signal";
/// Where `restore_command` puts the file it fetches (`%p`).
const RESTORE_TARGET: &str = "RECOVERYXLOG";
/// The reason written into a new timeline's history line.
pub const END_OF_RECOVERY_REASON: &str = "end of restored WAL reached";

/// Archive recovery was requested for `datadir`.
pub fn requested(datadir: &Path) -> bool {
    datadir.join(RECOVERY_SIGNAL).exists()
}

/// What a segment file's first page says about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentIdentity {
    pub system_identifier: u64,
    pub seg_size: u64,
    /// `xlp_tli` of the first page.
    pub tli: u32,
    /// `xlp_pageaddr` of the first page.
    pub pageaddr: Lsn,
}

/// Reads the long page header of segment file `path`.
pub fn segment_identity(path: &Path) -> Result<SegmentIdentity, String> {
    let file = walfile::open_read(Op::WalRead, path)
        .map_err(|e| format!("could not open \"{}\": {e}", path.display()))?;
    let mut page = vec![0u8; walformat::SIZE_OF_XLOG_LONG_PHD];
    walfile::read_at(Op::WalRead, &file, &mut page, 0)
        .map_err(|e| format!("could not read \"{}\": {e}", path.display()))?;
    let h = walformat::read_page_header(&page);
    match h {
        Some(h) if h.magic == walformat::XLOG_PAGE_MAGIC && h.long.is_some() => {
            let (sysid, seg_size, _) = h.long.expect("checked");
            Ok(SegmentIdentity {
                system_identifier: sysid,
                seg_size: seg_size as u64,
                tli: h.tli,
                pageaddr: h.pageaddr,
            })
        }
        _ => Err(format!(
            "\"{}\" is not a WAL segment of PostgreSQL 15's format (no valid long page header)",
            path.display()
        )),
    }
}

/// Runs `restore_command` for `name`; true if it delivered the file,
/// which is then `pg_wal/name`. `check` validates the delivered file
/// before it is renamed into place (a failure removes it).
fn restore_file(
    command: &str,
    datadir: &Path,
    name: &str,
    check: impl Fn(&Path) -> Result<(), String>,
) -> Result<bool, String> {
    let pg_wal = datadir.join("pg_wal");
    let target = pg_wal.join(RESTORE_TARGET);
    let _ = walfile::remove_file(Op::WalRemove, &target);
    let cmd = archive::expand_command(command, &format!("pg_wal/{RESTORE_TARGET}"), name);
    match archive::run_shell(&cmd, datadir) {
        Outcome::Success if target.is_file() => {}
        Outcome::Success | Outcome::Failed(_) => return Ok(false),
        outcome => {
            return Err(format!(
                "restore_command {} while fetching \"{name}\"; the command was: {cmd}",
                outcome.describe()
            ))
        }
    }
    if let Err(e) = check(&target) {
        let _ = walfile::remove_file(Op::WalRemove, &target);
        return Err(e);
    }
    walfile::rename(Op::WalRemove, &target, &pg_wal.join(name))
        .map_err(|e| format!("could not rename restored \"{name}\" into pg_wal: {e}"))?;
    Ok(true)
}

/// Fetches with `restore_command` every segment from `from` on that
/// pg_wal lacks, until the command fails; each segment of the timeline
/// `history` reads it from. Each must have the segment size and
/// `control`'s system identifier. Returns how many were fetched.
pub fn fetch_segments(
    command: &str,
    datadir: &Path,
    control: &ControlFile,
    geo: &Geometry,
    history: &Timeline,
    from: u64,
) -> Result<u64, String> {
    let pg_wal = datadir.join("pg_wal");
    let mut fetched = 0;
    let mut segno = from;
    loop {
        let name = geo.file_name(history.timeline_of_segment(segno, geo.seg_size), segno);
        if !pg_wal.join(&name).exists() {
            let check = |p: &Path| check_restored_segment(p, &name, control);
            if !restore_file(command, datadir, &name, check)? {
                return Ok(fetched);
            }
            log(
                "LOG",
                &format!("restored WAL segment \"{name}\" from the archive"),
            );
            fetched += 1;
        }
        segno += 1;
    }
}

/// A restored segment has the segment size and this system's identifier.
fn check_restored_segment(path: &Path, name: &str, control: &ControlFile) -> Result<(), String> {
    let len = walfile::open_read(Op::WalRead, path)
        .and_then(|f| f.metadata())
        .map_or(0, |m| m.len());
    if len != control.seg_size {
        return Err(format!(
            "restored WAL segment \"{name}\" has {len} bytes, expected {}",
            control.seg_size
        ));
    }
    let id = segment_identity(path)?;
    if id.system_identifier != control.system_identifier {
        return Err(format!(
            "restored WAL segment \"{name}\" is from a different database system: its system identifier is {}, this data directory's is {}",
            id.system_identifier, control.system_identifier
        ));
    }
    Ok(())
}

/// Fetches the history files of timelines after `tli` that the archive
/// holds (PostgreSQL's findNewestTimeLine); returns the newest timeline
/// known afterwards (local files included).
pub fn fetch_newer_histories(command: &str, datadir: &Path, tli: u32) -> Result<u32, String> {
    let pg_wal = datadir.join("pg_wal");
    let mut newest = timeline::newest_timeline(&pg_wal, tli);
    loop {
        let name = timeline::history_file_name(newest + 1);
        if pg_wal.join(&name).exists() {
            newest += 1;
            continue;
        }
        let check = |p: &Path| {
            let bytes = walfile::read_file(Op::WalRead, p).unwrap_or_default();
            timeline::parse_history(&String::from_utf8_lossy(&bytes), newest + 1, &name)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        if !restore_file(command, datadir, &name, check)? {
            return Ok(newest);
        }
        newest += 1;
    }
}

/// Where recovery ended, as the startup process found it.
#[derive(Clone, Copy, Debug)]
pub struct EndOfWal {
    /// Start of the last valid record.
    pub last_record: Lsn,
    /// End of valid WAL (the switch point).
    pub end: Lsn,
    /// The next XID to assign.
    pub next_xid: u64,
}

/// The new timeline's state after [`end_recovery`].
#[derive(Clone, Copy, Debug)]
pub struct Promoted {
    pub tli: u32,
    /// LSN of the end-of-recovery checkpoint record.
    pub checkpoint: Lsn,
    /// Where the next record goes.
    pub end: Lsn,
}

/// Step 3 of the module header: branches timeline `newest + 1` off
/// `control.timeline` at `at.end`, writes its first segment with the
/// end-of-recovery checkpoint, updates the control file and removes
/// `recovery.signal`.
pub fn end_recovery(
    datadir: &Path,
    control: &ControlFile,
    geo: &Geometry,
    at: EndOfWal,
    newest: u32,
    fsync: bool,
    archive_mode: bool,
) -> Result<Promoted, String> {
    let pg_wal = datadir.join("pg_wal");
    let parent = Timeline::read(&pg_wal, control.timeline).map_err(|e| e.to_string())?;
    let tli = newest.max(control.timeline) + 1;
    timeline::write_history(&pg_wal, tli, &parent, at.end, END_OF_RECOVERY_REASON, fsync)
        .map_err(|e| e.to_string())?;
    let (checkpoint, end) = write_first_segment(&pg_wal, control, geo, tli, at, fsync)?;
    let mut c = *control;
    c.timeline = tli;
    c.checkpoint = checkpoint;
    c.redo = checkpoint;
    c.next_xid = at.next_xid;
    c.state = DbState::InProduction;
    c.time = unix_now();
    c.write(datadir, fsync).map_err(|e| e.to_string())?;
    retire_parent_segment(&pg_wal, geo, control.timeline, at.end, tli, archive_mode)?;
    walfile::remove_file(Op::WalRemove, &datadir.join(RECOVERY_SIGNAL))
        .map_err(|e| format!("could not remove \"{RECOVERY_SIGNAL}\": {e}"))?;
    if fsync {
        walfile::sync_dir(&pg_wal)
            .and_then(|()| walfile::sync_dir(datadir))
            .map_err(|e| format!("could not fsync the data directory: {e}"))?;
    }
    log(
        "LOG",
        &format!(
            "archive recovery complete: selected new timeline ID {tli} (switch point {} on timeline {}); end-of-recovery checkpoint at {}",
            format_lsn(at.end),
            control.timeline,
            format_lsn(checkpoint)
        ),
    );
    Ok(Promoted {
        tli,
        checkpoint,
        end,
    })
}

/// Step 3b: the new timeline's segment(s) holding the switch point: the
/// parent's bytes before `at.end`, then the end-of-recovery checkpoint.
/// Returns (checkpoint LSN, end of WAL after it).
fn write_first_segment(
    pg_wal: &Path,
    control: &ControlFile,
    geo: &Geometry,
    tli: u32,
    at: EndOfWal,
    fsync: bool,
) -> Result<(Lsn, Lsn), String> {
    let mut w = SegmentWriter::new(*geo, tli, control.system_identifier, at.end, at.last_record);
    let redo = w.insert_pos();
    let mut cp = crate::checkpointer::checkpoint_contents(redo, tli, at.next_xid);
    cp.prev_tli = control.timeline;
    let checkpoint = w.append(&mut walformat::checkpoint_record(&cp, true));
    let switch_seg = geo.seg_no(at.end);
    for segno in w.segment_numbers() {
        let mut image = w.segment(segno).expect("listed").to_vec();
        if segno == switch_seg {
            copy_parent_prefix(pg_wal, geo, control.timeline, at.end, &mut image)?;
        }
        let path = pg_wal.join(geo.file_name(tli, segno));
        walfile::write_file_atomically(&path, &image, fsync)
            .map_err(|e| format!("could not write \"{}\": {e}", path.display()))?;
    }
    Ok((checkpoint, w.end_pos()))
}

/// Puts the parent's bytes of the switch segment before `end` into
/// `image` (PostgreSQL copies them too: the new timeline's file must hold
/// the WAL before the switch point in that segment). The partial page
/// keeps the parent's header (its timeline ID and continuation flags), as
/// PostgreSQL's last page does.
fn copy_parent_prefix(
    pg_wal: &Path,
    geo: &Geometry,
    parent: u32,
    end: Lsn,
    image: &mut [u8],
) -> Result<(), String> {
    let upto = geo.seg_offset(end) as usize;
    if upto == 0 {
        return Ok(());
    }
    let path = pg_wal.join(geo.file_name(parent, geo.seg_no(end)));
    let file = walfile::open_read(Op::WalRead, &path)
        .map_err(|e| format!("could not open \"{}\": {e}", path.display()))?;
    walfile::read_at(Op::WalRead, &file, &mut image[..upto], 0)
        .map_err(|e| format!("could not read \"{}\": {e}", path.display()))?;
    Ok(())
}

/// Step 3d: the parent's switch segment becomes `NAME.partial`; with
/// `archive_mode` the new history file and the `.partial` are marked ready.
fn retire_parent_segment(
    pg_wal: &Path,
    geo: &Geometry,
    parent: u32,
    end: Lsn,
    tli: u32,
    archive_mode: bool,
) -> Result<(), String> {
    if archive_mode {
        archive::notify_or_log(pg_wal, &timeline::history_file_name(tli), true);
    }
    if geo.seg_offset(end) == 0 {
        return Ok(());
    }
    let name = geo.file_name(parent, geo.seg_no(end));
    let from = pg_wal.join(&name);
    if !from.exists() {
        return Ok(());
    }
    let partial = format!("{name}.partial");
    walfile::rename(Op::WalRemove, &from, &pg_wal.join(&partial))
        .map_err(|e| format!("could not rename \"{name}\" to \"{partial}\": {e}"))?;
    if archive_mode {
        archive::notify_or_log(pg_wal, &partial, true);
    }
    Ok(())
}
