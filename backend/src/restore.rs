//! Archive recovery: a data directory restored from received or archived
//! WAL (`postmaster init --from-wal`, `restore_command`) is validated to
//! the end of that WAL and continues as a new primary on a new timeline
//! (PostgreSQL's xlogrecovery.c / xlog.c at the end of archive recovery,
//! and xlogarchive.c's RestoreArchivedFile).
//!
//! `DIR/recovery.signal` (PostgreSQL's name) asks the startup process for
//! archive recovery. It then:
//! 1. with `restore_command`: asks the archive for every segment from the
//!    redo point's on, in order, each landing as `pg_wal/RECOVERYXLOG`,
//!    checked ([`check_segment`]) and renamed to its name. The archive
//!    comes first, as in PostgreSQL: a delivered file replaces pg_wal's
//!    copy, which may be incomplete (a base backup's last segment, a
//!    receiver's unfinished one); a segment the archive lacks is read from
//!    pg_wal if there, and the first that neither has ends the fetching
//!    (the end of the archive). After step 2 it also fetches the history
//!    files of later timelines (to pick a timeline nobody used yet), each
//!    validated as a history file of its name's timeline;
//! 2. recovers as after a crash (reads and validates to the end of valid
//!    WAL: X, refusing damage followed by valid WAL);
//! 3. ends recovery on timeline N = the newest known + 1 (every history
//!    file in pg_wal validated first; `timeline::next_timeline`: never 0,
//!    an error when the newest is already the highest valid ID):
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
//! What `restore_command` delivers is not trusted: a command that ignores
//! `%f` (and copies the same segment every time), or an archive holding
//! another system's or another timeline's files, must not make recovery
//! read WAL that is not the segment asked for. [`check_segment`] (shared
//! with `postmaster init --from-wal`) requires a regular file (checked
//! before it is opened: a FIFO would block the reader) of the segment
//! size, with a long page header of this system whose `xlp_pageaddr` is
//! the start of the requested segment and whose `xlp_tli` is the name's
//! timeline or one of its ancestors in the history read (PostgreSQL's
//! "unexpected pageaddr" and timeline checks). A delivered file that fails
//! is removed and ends recovery with a FATAL error naming the file and
//! the command (exit `EXIT_FATAL`; the postmaster gives up, nothing of a
//! new timeline is written). A command that succeeds without delivering a
//! file is the end of the archive, as in PostgreSQL. The metadata check
//! and the open are two steps: a file swapped for a FIFO in between would
//! still block; the archive is the operator's, not an adversary's.
//!
//! Shutdown: fetching is a loop that can be long (one command per
//! segment). Before each fetch it asks `stop` (the startup process passes
//! its SIGTERM flag, which the postmaster's fast shutdown sets); once set,
//! it returns [`FetchError::ShutdownRequested`] without running another
//! command. What was fetched stays in pg_wal (each file checked and
//! renamed whole), `recovery.signal` stays, and the next start resumes
//! from there. A command already running is stopped: it runs as its own
//! process group, which gets SIGTERM once `stop` is set
//! (`archive::run_shell_until`), and its half-delivered file is removed.
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

/// Reads the long page header of segment file `path`, which must be a
/// regular file (checked before it is opened).
pub fn segment_identity(path: &Path) -> Result<SegmentIdentity, String> {
    regular_file_len(path)
        .map_err(|why| format!("\"{}\" cannot be used: {why}", path.display()))?;
    read_identity(path)
}

/// [`segment_identity`] of a path already known to be a regular file.
fn read_identity(path: &Path) -> Result<SegmentIdentity, String> {
    let file = walfile::open_read(Op::WalRead, path)
        .map_err(|e| format!("could not open \"{}\": {e}", path.display()))?;
    let mut page = vec![0u8; walformat::SIZE_OF_XLOG_LONG_PHD];
    walfile::read_at(Op::WalRead, &file, &mut page, 0)
        .map_err(|e| format!("could not read \"{}\": {e}", path.display()))?;
    match walformat::read_page_header(&page) {
        Some(h) if h.magic == walformat::XLOG_PAGE_MAGIC => {
            if let Some((sysid, seg_size, _)) = h.long {
                return Ok(SegmentIdentity {
                    system_identifier: sysid,
                    seg_size: seg_size as u64,
                    tli: h.tli,
                    pageaddr: h.pageaddr,
                });
            }
        }
        _ => {}
    }
    Err(format!(
        "\"{}\" is not a WAL segment of PostgreSQL 15's format (no valid long page header)",
        path.display()
    ))
}

/// The length of `path` if it is a regular file (or a symbolic link to
/// one); otherwise why not, as a reason ("it is not a regular file but a
/// FIFO"). Never opens the file.
pub fn regular_file_len(path: &Path) -> Result<u64, String> {
    walfile::regular_file_len(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput => format!("it is {e}"),
        _ => format!("could not stat it: {e}"),
    })
}

/// What a file must be to stand for segment `segno` of timeline `tli`.
#[derive(Clone, Copy, Debug)]
pub struct SegmentSpec<'a> {
    pub geo: Geometry,
    pub system_identifier: u64,
    /// The timeline in the file's name.
    pub tli: u32,
    pub segno: u64,
    /// The history WAL is read along: the first page's timeline is in it.
    pub history: &'a Timeline,
}

/// Checks that the file at `path` is the segment `spec` describes (see the
/// module header); the error is the reason, for the caller to prefix with
/// the file's name.
pub fn check_segment(path: &Path, spec: &SegmentSpec) -> Result<(), String> {
    let len = regular_file_len(path)?;
    let size = spec.geo.seg_size;
    if len != size {
        return Err(format!("it has {len} bytes, expected {size}"));
    }
    let id = read_identity(path)
        .map_err(|_| "it has no valid long page header of PostgreSQL 15's format".to_string())?;
    if id.system_identifier != spec.system_identifier {
        return Err(format!(
            "it is from a different database system: its system identifier is {}, expected {}",
            id.system_identifier, spec.system_identifier
        ));
    }
    if id.seg_size != size {
        return Err(format!(
            "its page header gives segment size {}, expected {size}",
            id.seg_size
        ));
    }
    let start = spec.geo.seg_start(spec.segno);
    if id.pageaddr != start {
        return Err(format!(
            "unexpected page address {} in its first page, expected {} (the start of segment {})",
            format_lsn(id.pageaddr),
            format_lsn(start),
            spec.geo.file_name(spec.tli, spec.segno)
        ));
    }
    if id.tli == 0 || id.tli > spec.tli || !spec.history.contains(id.tli) {
        return Err(format!(
            "unexpected timeline ID {} in its first page: not timeline {} of its name nor one of its ancestors",
            id.tli, spec.tli
        ));
    }
    Ok(())
}

/// Why fetching with `restore_command` did not run to the end of the
/// archive.
#[derive(Debug)]
pub enum FetchError {
    /// Recovery cannot go on (the caller logs it as FATAL).
    Failed(String),
    /// A shutdown was requested between two fetches.
    ShutdownRequested,
}

impl From<String> for FetchError {
    fn from(e: String) -> FetchError {
        FetchError::Failed(e)
    }
}

/// Runs `restore_command` for `name`; true if it delivered the file,
/// which is then `pg_wal/name`. `check` validates the delivered file
/// before it is renamed into place (a failure removes it; the error names
/// the file and the command). `stop` is asked before the command starts
/// and while it runs (module header, "Shutdown").
fn restore_file(
    command: &str,
    datadir: &Path,
    name: &str,
    check: impl Fn(&Path) -> Result<(), String>,
    stop: &dyn Fn() -> bool,
) -> Result<bool, FetchError> {
    if stop() {
        return Err(FetchError::ShutdownRequested);
    }
    let pg_wal = datadir.join("pg_wal");
    let target = pg_wal.join(RESTORE_TARGET);
    let _ = walfile::remove_file(Op::WalRemove, &target);
    let cmd = archive::expand_command(command, &format!("pg_wal/{RESTORE_TARGET}"), name);
    match archive::run_shell_until(&cmd, datadir, stop) {
        Outcome::Success => {}
        Outcome::Failed(_) => return Ok(false),
        Outcome::Interrupted => {
            let _ = walfile::remove_file(Op::WalRemove, &target);
            return Err(FetchError::ShutdownRequested);
        }
        outcome => {
            return Err(FetchError::Failed(format!(
                "restore_command {} while fetching \"{name}\"; the command was: {cmd}",
                outcome.describe()
            )))
        }
    }
    match std::fs::symlink_metadata(&target) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("could not stat \"{}\": {e}", target.display()).into()),
    }
    if let Err(why) = check(&target) {
        let _ = walfile::remove_file(Op::WalRemove, &target);
        return Err(format!(
            "could not use file \"{name}\" delivered by restore_command \"{cmd}\": {why}"
        )
        .into());
    }
    walfile::rename(Op::WalRemove, &target, &pg_wal.join(name))
        .map_err(|e| format!("could not rename restored \"{name}\" into pg_wal: {e}"))?;
    Ok(true)
}

/// Fetches with `restore_command` every segment from `from` on, the
/// archive first (see the module header), until one is neither delivered
/// nor in pg_wal; each segment of the timeline `history` reads it from,
/// checked by [`check_segment`] against `control`'s system. `stop` is
/// asked before each fetch (see the module header). Returns how many were
/// fetched.
pub fn fetch_segments(
    command: &str,
    datadir: &Path,
    control: &ControlFile,
    history: &Timeline,
    from: u64,
    stop: &dyn Fn() -> bool,
) -> Result<u64, FetchError> {
    let geo = Geometry::new(control.seg_size).map_err(|e| e.to_string())?;
    let pg_wal = datadir.join("pg_wal");
    let mut fetched = 0;
    let mut segno = from;
    loop {
        let tli = history.timeline_of_segment(segno, geo.seg_size);
        let name = geo.file_name(tli, segno);
        let spec = SegmentSpec {
            geo,
            system_identifier: control.system_identifier,
            tli,
            segno,
            history,
        };
        let check = |p: &Path| check_segment(p, &spec);
        if restore_file(command, datadir, &name, check, stop)? {
            log(
                "LOG",
                &format!("restored WAL segment \"{name}\" from the archive"),
            );
            fetched += 1;
        } else if !pg_wal.join(&name).exists() {
            return Ok(fetched);
        }
        segno += 1;
    }
}

/// A delivered history file: a regular file whose text is a valid history
/// of timeline `tli` (`timeline::parse_history`).
fn check_history_file(path: &Path, tli: u32, name: &str) -> Result<(), String> {
    regular_file_len(path)?;
    let bytes =
        walfile::read_file(Op::WalRead, path).map_err(|e| format!("could not read it: {e}"))?;
    timeline::parse_history(&String::from_utf8_lossy(&bytes), tli, name)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Fetches the history files of timelines after `tli` that the archive
/// holds (PostgreSQL's findNewestTimeLine), each validated, up to
/// [`timeline::MAX_TIMELINE`]; returns the newest timeline known
/// afterwards (local files included, each validated too). `stop` as for
/// [`fetch_segments`].
pub fn fetch_newer_histories(
    command: &str,
    datadir: &Path,
    tli: u32,
    stop: &dyn Fn() -> bool,
) -> Result<u32, FetchError> {
    let pg_wal = datadir.join("pg_wal");
    let mut newest = timeline::newest_timeline(&pg_wal, tli).map_err(|e| e.to_string())?;
    while newest < timeline::MAX_TIMELINE {
        let next = newest + 1;
        let name = timeline::history_file_name(next);
        let check = |p: &Path| check_history_file(p, next, &name);
        if !restore_file(command, datadir, &name, check, stop)? {
            break;
        }
        newest = next;
    }
    Ok(newest)
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
/// `control.timeline` at `at.end` (the history line gives `reason`),
/// writes its first segment with the end-of-recovery checkpoint, updates
/// the control file and removes `recovery.signal`.
pub fn end_recovery(
    datadir: &Path,
    control: &ControlFile,
    geo: &Geometry,
    at: EndOfWal,
    newest: u32,
    reason: &str,
    settings: &shmem::settings::Settings,
) -> Result<Promoted, String> {
    let (fsync, archive_mode) = (settings.fsync, settings.archive_mode);
    let pg_wal = datadir.join("pg_wal");
    let parent = Timeline::read(&pg_wal, control.timeline).map_err(|e| e.to_string())?;
    let tli = timeline::next_timeline(newest.max(control.timeline)).map_err(|e| e.to_string())?;
    timeline::write_history(&pg_wal, tli, &parent, at.end, reason, fsync)
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
    // A promoted standby has standby.signal (and maybe recovery.signal
    // too, which PostgreSQL then ignores): both go.
    for signal in [RECOVERY_SIGNAL, crate::standby::STANDBY_SIGNAL] {
        match walfile::remove_file(Op::WalRemove, &datadir.join(signal)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(format!("could not remove \"{signal}\": {e}"))
            }
            _ => {}
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::HistoryEntry;
    use std::path::PathBuf;

    const SYSID: u64 = 7;

    fn geo() -> Geometry {
        Geometry::new(1 << 20).unwrap()
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("walshm-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A segment file: a long page header (`pageaddr`, `tli`, `sysid`),
    /// zeros after it.
    fn segment_file(path: &Path, pageaddr: Lsn, tli: u32, sysid: u64) {
        let mut image = vec![0u8; geo().seg_size as usize];
        walformat::write_page_header(&mut image, &geo(), pageaddr, tli, sysid, 0);
        std::fs::write(path, image).unwrap();
    }

    fn mkfifo(path: &Path) {
        shmem::sys::fd::make_fifo(path).unwrap();
    }

    #[test]
    fn check_segment_wants_what_the_name_says() {
        let dir = temp_dir("restore-check");
        // Timeline 2 branched from 1 inside segment 2.
        let history = Timeline {
            tli: 2,
            history: vec![HistoryEntry {
                parent: 1,
                switchpoint: 0x28_0000,
                reason: "x".into(),
            }],
        };
        let spec = SegmentSpec {
            geo: geo(),
            system_identifier: SYSID,
            tli: 2,
            segno: 3,
            history: &history,
        };
        let p = dir.join("f");
        let at = geo().seg_start(3);
        for tli in [2, 1] {
            segment_file(&p, at, tli, SYSID);
            assert_eq!(
                check_segment(&p, &spec),
                Ok(()),
                "first page of timeline {tli}"
            );
        }
        let refused = [
            (
                geo().seg_start(2),
                2,
                SYSID,
                "unexpected page address 0/00200000",
            ),
            (at, 3, SYSID, "unexpected timeline ID 3"),
            (at, 0, SYSID, "unexpected timeline ID 0"),
            (at, 2, SYSID + 1, "its system identifier is 8, expected 7"),
        ];
        for (pageaddr, tli, sysid, why) in refused {
            segment_file(&p, pageaddr, tli, sysid);
            let e = check_segment(&p, &spec).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
        std::fs::write(&p, b"short").unwrap();
        let e = check_segment(&p, &spec).unwrap_err();
        assert!(e.contains("5 bytes"), "{e}");
        // A FIFO is refused without being opened (that would block).
        std::fs::remove_file(&p).unwrap();
        mkfifo(&p);
        let e = check_segment(&p, &spec).unwrap_err();
        assert!(e.contains("FIFO"), "{e}");
        let e = segment_identity(&p).unwrap_err();
        assert!(
            e.contains("FIFO") && e.contains(&p.display().to_string()),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn fetching_checks_each_file_and_stops_when_asked() {
        let dir = temp_dir("restore-fetch");
        let (data, arch) = (dir.join("data"), dir.join("arch"));
        std::fs::create_dir_all(data.join("pg_wal")).unwrap();
        std::fs::create_dir_all(&arch).unwrap();
        for n in 2..=4 {
            segment_file(
                &arch.join(geo().file_name(1, n)),
                geo().seg_start(n),
                1,
                SYSID,
            );
        }
        let control = ControlFile {
            state: crate::control::DbState::ShutDown,
            system_identifier: SYSID,
            seg_size: geo().seg_size,
            timeline: 1,
            checkpoint: 0x10_0028,
            redo: 0x10_0028,
            next_xid: 3,
            time: 0,
        };
        let history = Timeline {
            tli: 1,
            history: Vec::new(),
        };
        let a = arch.display();
        let cmd = format!("test -f {a}/%f && cp {a}/%f %p");
        let have = |n| data.join("pg_wal").join(geo().file_name(1, n)).exists();
        // A shutdown request once two fetches are in: no third command.
        let stop = || have(3);
        let r = fetch_segments(&cmd, &data, &control, &history, 2, &stop);
        assert!(matches!(r, Err(FetchError::ShutdownRequested)), "{r:?}");
        assert!(have(2) && have(3) && !have(4));
        // Resumed: the archive first, pg_wal's copies replaced, to its end.
        let r = fetch_segments(&cmd, &data, &control, &history, 2, &|| false);
        assert!(matches!(r, Ok(3)), "{r:?}");
        // The archive lacks segment 5, pg_wal has it: read from there.
        let seg5 = data.join("pg_wal").join(geo().file_name(1, 5));
        segment_file(&seg5, geo().seg_start(5), 1, SYSID);
        let r = fetch_segments(&cmd, &data, &control, &history, 4, &|| false);
        assert!(matches!(r, Ok(1)), "{r:?}");
        // A command that ignores %f: the file is refused and removed,
        // pg_wal's copy kept.
        let same = format!("cp {a}/{} %p", geo().file_name(1, 2));
        let r = fetch_segments(&same, &data, &control, &history, 2, &|| false);
        let Err(FetchError::Failed(e)) = r else {
            panic!("accepted: {r:?}")
        };
        assert!(
            e.contains(&geo().file_name(1, 3)) && e.contains(&same[..10]),
            "{e}"
        );
        assert!(have(3) && !data.join("pg_wal").join(RESTORE_TARGET).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
