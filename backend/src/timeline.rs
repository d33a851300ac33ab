//! Timeline history: which timeline a WAL position belongs to, and the
//! `pg_wal/0000000N.history` files that record how timelines branched
//! (PostgreSQL's timeline.c).
//!
//! A timeline begins when a restored copy ends recovery and becomes a new
//! primary: the new timeline `N` branches from its parent at the switch
//! point (the end of the WAL that recovery validated). Its history file
//! lists every ancestor, oldest first, one line each, in PostgreSQL's
//! format (which pg_receivewal fetches with TIMELINE_HISTORY and stores):
//!
//! ```text
//! parentTLI <TAB> switchpoint (%X/%X) <TAB> free-text reason
//! ```
//!
//! Blank lines and lines starting with `#` are ignored. Timeline 1 has no
//! history file; an absent file for another timeline also means "no
//! parents", as PostgreSQL assumes.
//!
//! Invariants checked when parsing (PostgreSQL's readTimeLineHistory): the
//! file's own timeline is a valid ID; parent timeline IDs strictly increase
//! and are below the file's own timeline; switch points never decrease. So
//! [`Timeline::ranges`] is a partition of the LSN space, oldest first, the
//! last range (the file's own timeline) open-ended.
//!
//! Valid timeline IDs are 1 to [`MAX_TIMELINE`] (`0xFFFFFFFE`): a new
//! timeline is the newest known + 1 ([`next_timeline`]), which must never
//! wrap to 0 (no timeline) nor reach `0xFFFFFFFF`; when the newest is
//! already the maximum, choosing a new one is an error. A history file
//! whose name is out of that range, whose text breaks the rules above, or
//! which is not a regular file (a FIFO would block its reader) is refused
//! with an error naming it, never skipped: [`newest_timeline`] validates
//! every history file in `pg_wal` before any is used to pick the new
//! timeline, so a stray or damaged file stops recovery instead of steering
//! it.
//!
//! For the walsender (TIMELINE_HISTORY, the end of a timeline in
//! START_REPLICATION): [`history_file_name`] (it streams the file itself),
//! [`Timeline::read`] and [`Timeline::successor`] (an ancestor's switch
//! point and the timeline that followed it); the running server's
//! timeline is `shm.xlog().facts.timeline`.
//!
//! Old timelines' segments ([`remove_older_timelines`], called by the
//! checkpointer): after a restore or promotion, segments of an earlier
//! timeline below the checkpointer's removal cutoff are removed as
//! PostgreSQL's RemoveOldXlogFiles does (it compares segment numbers
//! whatever the timeline), once archived when `archive_mode` is on; the
//! history files stay (pg_receivewal and recovery read them).
//!
//! Crash safety: a history file is written whole to a temporary file,
//! fsynced, renamed into place and the directory fsynced (through the I/O
//! seam), so a reader sees either no file or the complete one.

use crate::walfile::{self, Op};
use std::fmt;
use std::path::Path;
use walformat::{parse_lsn, Lsn};

/// Removes the segments of timelines before `tli` whose segment number is
/// below `cutoff` (everything the checkpointer may remove on the current
/// timeline is older than the redo point, so older-timeline segments below
/// it are needed by nobody); with `archive_mode`, only those archived
/// (`archive::keep_unarchived` per timeline). Returns how many it removed.
pub fn remove_older_timelines(
    pg_wal: &Path,
    geo: &walformat::Geometry,
    tli: u32,
    cutoff: u64,
    archive_mode: bool,
) -> u64 {
    let Ok(names) = walfile::list_dir(Op::WalDir, pg_wal) else {
        return 0;
    };
    let mut by_tli: std::collections::BTreeMap<u32, Vec<u64>> = Default::default();
    for (t, n) in names
        .iter()
        .filter_map(|name| geo.parse_file_name(&name.to_string_lossy()))
        .filter(|&(t, n)| t < tli && n < cutoff)
    {
        by_tli.entry(t).or_default().push(n);
    }
    let mut removed = 0;
    for (old, mut segs) in by_tli {
        segs.sort_unstable();
        let limit = crate::archive::keep_unarchived(archive_mode, pg_wal, geo, old, &segs, cutoff);
        for n in segs.into_iter().filter(|&n| n < limit) {
            if walfile::remove_file(Op::WalRemove, &pg_wal.join(geo.file_name(old, n))).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

/// One line of a history file: timeline `parent` ended at `switchpoint`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryEntry {
    pub parent: u32,
    pub switchpoint: Lsn,
    pub reason: String,
}

/// One timeline's stretch of WAL: `[begin, end)`; `end` None for the
/// newest (still being written).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimelineRange {
    pub tli: u32,
    pub begin: Lsn,
    pub end: Option<Lsn>,
}

/// A timeline and its ancestry, as its history file gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timeline {
    pub tli: u32,
    /// Ancestors, oldest first.
    pub history: Vec<HistoryEntry>,
}

/// The highest valid timeline ID: a new timeline (+1) after any valid one
/// is still a valid, non-zero ID.
pub const MAX_TIMELINE: u32 = 0xFFFF_FFFE;

/// Why a history file could not be read or used.
#[derive(Debug)]
pub enum TimelineError {
    Io(String, std::io::Error),
    Syntax {
        file: String,
        line: usize,
        why: String,
    },
    /// A history file's own timeline ID (its name) is not a valid one.
    OutOfRange {
        file: String,
        tli: u32,
    },
    /// No timeline ID is left after `newest`.
    Exhausted {
        newest: u32,
    },
}

impl fmt::Display for TimelineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimelineError::Io(p, e) => write!(f, "could not access history file \"{p}\": {e}"),
            TimelineError::Syntax { file, line, why } => {
                write!(
                    f,
                    "invalid data in history file \"{file}\", line {line}: {why}"
                )
            }
            TimelineError::OutOfRange { file, tli } => write!(
                f,
                "invalid history file \"{file}\": timeline ID {tli} is out of range (1 to {MAX_TIMELINE})"
            ),
            TimelineError::Exhausted { newest } => write!(
                f,
                "could not select a new timeline ID: no valid ID is left after timeline {newest} (history file \"{}\"; the highest allowed is {MAX_TIMELINE})",
                history_file_name(*newest)
            ),
        }
    }
}

impl std::error::Error for TimelineError {}

/// `0000000N.history`.
pub fn history_file_name(tli: u32) -> String {
    format!("{tli:08X}.history")
}

/// The timeline of a history file name, if `name` is one.
pub fn parse_history_file_name(name: &str) -> Option<u32> {
    let hex = name.strip_suffix(".history")?;
    let valid = hex.len() == 8 && hex.bytes().all(|b| b.is_ascii_hexdigit());
    valid.then(|| u32::from_str_radix(hex, 16).ok()).flatten()
}

/// Whether `tli` is a valid timeline ID (1 to [`MAX_TIMELINE`]).
pub fn valid_timeline(tli: u32) -> bool {
    (1..=MAX_TIMELINE).contains(&tli)
}

/// The timeline after `newest`; an error (never 0, never a wrap) when
/// `newest` is already [`MAX_TIMELINE`].
pub fn next_timeline(newest: u32) -> Result<u32, TimelineError> {
    match newest.checked_add(1) {
        Some(tli) if tli <= MAX_TIMELINE => Ok(tli),
        _ => Err(TimelineError::Exhausted { newest }),
    }
}

/// Parses the text of timeline `tli`'s history file (`file` names it in
/// errors); `tli` itself must be a valid timeline ID.
pub fn parse_history(text: &str, tli: u32, file: &str) -> Result<Vec<HistoryEntry>, TimelineError> {
    if !valid_timeline(tli) {
        return Err(TimelineError::OutOfRange {
            file: file.to_string(),
            tli,
        });
    }
    let mut entries: Vec<HistoryEntry> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: String| TimelineError::Syntax {
            file: file.to_string(),
            line: i + 1,
            why,
        };
        let entry = parse_line(line).map_err(bad)?;
        check_order(&entries, &entry, tli).map_err(bad)?;
        entries.push(entry);
    }
    Ok(entries)
}

/// One `parent <TAB> X/X <TAB> reason` line.
fn parse_line(line: &str) -> Result<HistoryEntry, String> {
    let mut fields = line.splitn(3, ['\t', ' ']);
    let parent = fields.next().unwrap_or_default();
    let parent: u32 = parent
        .parse()
        .map_err(|_| format!("timeline ID expected, found \"{parent}\""))?;
    let lsn = fields.next().unwrap_or_default().trim();
    let switchpoint =
        parse_lsn(lsn).map_err(|_| format!("switch point X/X expected, found \"{lsn}\""))?;
    let reason = fields.next().unwrap_or_default().trim().to_string();
    Ok(HistoryEntry {
        parent,
        switchpoint,
        reason,
    })
}

/// Parents strictly increase and stay below `tli`; switch points never
/// decrease.
fn check_order(before: &[HistoryEntry], e: &HistoryEntry, tli: u32) -> Result<(), String> {
    if e.parent == 0 || e.parent >= tli {
        return Err(format!(
            "parent timeline {} is not between 1 and {}",
            e.parent,
            tli.saturating_sub(1)
        ));
    }
    if let Some(last) = before.last() {
        if e.parent <= last.parent {
            return Err("timeline IDs must be in increasing sequence".into());
        }
        if e.switchpoint < last.switchpoint {
            return Err("switch points must not decrease".into());
        }
    }
    Ok(())
}

/// The text of a history file holding `entries`.
pub fn format_history(entries: &[HistoryEntry]) -> String {
    entries
        .iter()
        .map(|e| {
            format!(
                "{}\t{}\t{}\n",
                e.parent,
                format_lsn_short(e.switchpoint),
                e.reason
            )
        })
        .collect()
}

/// `%X/%X` (no zero padding), as history files write switch points.
fn format_lsn_short(lsn: Lsn) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

impl Timeline {
    /// Reads timeline `tli`'s history from `pg_wal` (timeline 1, or an
    /// absent file: no ancestors; a file present for an invalid ID, 0
    /// included, is an error).
    pub fn read(pg_wal: &Path, tli: u32) -> Result<Timeline, TimelineError> {
        let history = if tli == 1 {
            Vec::new()
        } else {
            match history_file_bytes(pg_wal, tli)? {
                Some(b) => {
                    parse_history(&String::from_utf8_lossy(&b), tli, &history_file_name(tli))?
                }
                None => Vec::new(),
            }
        };
        Ok(Timeline { tli, history })
    }

    /// The WAL ranges of this timeline and its ancestors, oldest first.
    pub fn ranges(&self) -> Vec<TimelineRange> {
        let mut out = Vec::with_capacity(self.history.len() + 1);
        let mut begin = 0;
        for e in &self.history {
            out.push(TimelineRange {
                tli: e.parent,
                begin,
                end: Some(e.switchpoint),
            });
            begin = e.switchpoint;
        }
        out.push(TimelineRange {
            tli: self.tli,
            begin,
            end: None,
        });
        out
    }

    /// The timeline that WAL position `lsn` belongs to in this history
    /// (PostgreSQL's tliOfPointInHistory: a switch point belongs to the
    /// child).
    pub fn timeline_of(&self, lsn: Lsn) -> u32 {
        self.ranges()
            .into_iter()
            .find(|r| r.end.is_none_or(|end| lsn < end))
            .map_or(self.tli, |r| r.tli)
    }

    /// Where timeline `tli` ended in this history (its child began): None
    /// for this timeline itself or one not in the history
    /// (PostgreSQL's tliSwitchPoint; the walsender's end of a timeline).
    pub fn switch_point(&self, tli: u32) -> Option<Lsn> {
        self.history
            .iter()
            .find(|e| e.parent == tli)
            .map(|e| e.switchpoint)
    }

    /// (timeline, begin) oldest first: what `walformat::WalReader::open_across`
    /// takes to read this history's segment files.
    pub fn reader_history(&self) -> Vec<(u32, Lsn)> {
        self.ranges().iter().map(|r| (r.tli, r.begin)).collect()
    }

    /// The timeline that followed `tli` in this history and the LSN where
    /// it began (a walsender streaming `tli` ends there and names the
    /// next one); None for this timeline or one not in the history.
    pub fn successor(&self, tli: u32) -> Option<(u32, Lsn)> {
        let at = self.history.iter().position(|e| e.parent == tli)?;
        let next = self.history.get(at + 1).map_or(self.tli, |e| e.parent);
        Some((next, self.history[at].switchpoint))
    }

    /// Whether `tli` is this timeline or one of its ancestors.
    pub fn contains(&self, tli: u32) -> bool {
        tli == self.tli || self.history.iter().any(|e| e.parent == tli)
    }

    /// The timeline whose segment file holds segment `segno` (of `seg_size`
    /// bytes): the newest one that began at or before the segment's end
    /// (the switch segment is read from the child's file, which holds the
    /// parent's prefix; PostgreSQL's XLogFileReadAnyTLI order).
    pub fn timeline_of_segment(&self, segno: u64, seg_size: u64) -> u32 {
        let seg_end = (segno + 1).saturating_mul(seg_size);
        self.ranges()
            .into_iter()
            .rev()
            .find(|r| r.begin < seg_end)
            .map_or(self.tli, |r| r.tli)
    }
}

/// The current timeline of data directory `datadir` (its control file's)
/// with its history.
pub fn current(datadir: &Path) -> Result<Timeline, String> {
    let control = crate::control::ControlFile::read(datadir).map_err(|e| e.to_string())?;
    Timeline::read(&datadir.join("pg_wal"), control.timeline).map_err(|e| e.to_string())
}

/// The bytes of timeline `tli`'s history file (what TIMELINE_HISTORY
/// sends); None when there is none (timeline 1). Anything but a regular
/// file (or a symbolic link to one) under that name is an error, found
/// before it is opened.
pub fn history_file_bytes(pg_wal: &Path, tli: u32) -> Result<Option<Vec<u8>>, TimelineError> {
    let path = pg_wal.join(history_file_name(tli));
    let io_error = |e| TimelineError::Io(path.display().to_string(), e);
    match walfile::regular_file_len(&path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(e)),
    }
    walfile::read_file(walfile::Op::WalRead, &path)
        .map(Some)
        .map_err(io_error)
}

/// Writes the history file of `new_tli`, branched from `parent` (whose own
/// history is read from `pg_wal`) at `switchpoint`, crash-safely. Returns
/// the new timeline.
pub fn write_history(
    pg_wal: &Path,
    new_tli: u32,
    parent: &Timeline,
    switchpoint: Lsn,
    reason: &str,
    fsync: bool,
) -> Result<Timeline, TimelineError> {
    let mut history = parent.history.clone();
    history.push(HistoryEntry {
        parent: parent.tli,
        switchpoint,
        reason: reason.to_string(),
    });
    let path = pg_wal.join(history_file_name(new_tli));
    walfile::write_file_atomically(&path, format_history(&history).as_bytes(), fsync)
        .map_err(|e| TimelineError::Io(path.display().to_string(), e))?;
    Ok(Timeline {
        tli: new_tli,
        history,
    })
}

/// The highest timeline with a history file in `pg_wal`, at least `floor`
/// (PostgreSQL's findNewestTimeLine over the local directory). Every
/// history file there is validated first ([`Timeline::read`]: a valid
/// timeline ID, a regular file, the parsing rules of the module header);
/// the first invalid one is the error.
pub fn newest_timeline(pg_wal: &Path, floor: u32) -> Result<u32, TimelineError> {
    let mut tlis: Vec<u32> = walfile::list_dir(walfile::Op::WalDir, pg_wal)
        .unwrap_or_default()
        .iter()
        .filter_map(|n| parse_history_file_name(&n.to_string_lossy()))
        .collect();
    tlis.sort_unstable();
    for &tli in &tlis {
        Timeline::read(pg_wal, tli)?;
    }
    Ok(tlis.into_iter().fold(floor, u32::max))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tl3() -> Timeline {
        let text = "1\t0/3000A28\tno recovery target specified\n\n# comment\n2\t0/5000000\tagain\n";
        Timeline {
            tli: 3,
            history: parse_history(text, 3, "00000003.history").unwrap(),
        }
    }

    #[test]
    fn older_timelines_go_below_the_cutoff_once_archived() {
        let dir = std::env::temp_dir().join(format!("walshm-tl-clean-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let status = dir.join(crate::archive::STATUS_DIR);
        std::fs::create_dir_all(&status).unwrap();
        let geo = walformat::Geometry::new(1 << 20).unwrap();
        let touch = |name: String| std::fs::write(dir.join(name), b"").unwrap();
        for n in 1..=5 {
            touch(geo.file_name(1, n));
        }
        for n in 3..=6 {
            touch(geo.file_name(2, n));
        }
        touch("00000002.history".into());
        let have = |t: u32| -> Vec<u64> {
            let mut v: Vec<u64> = std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .filter_map(|e| geo.parse_file_name(&e.file_name().to_string_lossy()))
                .filter(|&(x, _)| x == t)
                .map(|(_, n)| n)
                .collect();
            v.sort_unstable();
            v
        };
        // archive_mode: segment 2 of timeline 1 is not archived yet.
        for n in [1, 3] {
            std::fs::write(status.join(format!("{}.done", geo.file_name(1, n))), b"").unwrap();
        }
        std::fs::write(status.join(format!("{}.ready", geo.file_name(1, 2))), b"").unwrap();
        assert_eq!(remove_older_timelines(&dir, &geo, 2, 4, true), 1);
        assert_eq!(have(1), vec![2, 3, 4, 5]);
        // Without archiving: everything below the cutoff, on timeline 1 only.
        assert_eq!(remove_older_timelines(&dir, &geo, 2, 4, false), 2);
        assert_eq!(have(1), vec![4, 5]);
        assert_eq!(have(2), vec![3, 4, 5, 6]);
        assert!(dir.join("00000002.history").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn parse_and_format_round_trip() {
        let t = tl3();
        assert_eq!(t.history.len(), 2);
        assert_eq!(t.history[0].switchpoint, 0x3000A28);
        assert_eq!(t.history[0].reason, "no recovery target specified");
        let text = format_history(&t.history);
        assert_eq!(
            text.lines().next(),
            Some("1\t0/3000A28\tno recovery target specified")
        );
        assert_eq!(parse_history(&text, 3, "x").unwrap(), t.history);
    }

    #[test]
    fn timeline_of_lsn_and_segment() {
        let t = tl3();
        assert_eq!(t.timeline_of(0), 1);
        assert_eq!(t.timeline_of(0x3000A27), 1);
        assert_eq!(
            t.timeline_of(0x3000A28),
            2,
            "a switch point belongs to the child"
        );
        assert_eq!(t.timeline_of(0x4FFFFFF), 2);
        assert_eq!(t.timeline_of(0x5000000), 3);
        assert_eq!(t.switch_point(1), Some(0x3000A28));
        assert_eq!(t.switch_point(2), Some(0x5000000));
        assert_eq!(t.switch_point(3), None);
        assert_eq!(t.successor(1), Some((2, 0x3000A28)));
        assert_eq!(t.successor(2), Some((3, 0x5000000)));
        assert_eq!(t.successor(3), None);
        assert!(t.contains(1) && t.contains(3) && !t.contains(4));
        let seg = 16 << 20;
        assert_eq!(t.timeline_of_segment(2, seg), 1);
        assert_eq!(
            t.timeline_of_segment(3, seg),
            2,
            "switch segment: the child's copy"
        );
        // Timeline 2 ended exactly at segment 5's start: segment 4 is 2's.
        assert_eq!(t.timeline_of_segment(4, seg), 2);
        assert_eq!(t.timeline_of_segment(5, seg), 3);
        let ranges = t.ranges();
        assert_eq!(ranges.len(), 3);
        assert_eq!(
            ranges[2],
            TimelineRange {
                tli: 3,
                begin: 0x5000000,
                end: None
            }
        );
    }

    #[test]
    fn bad_history_is_refused() {
        for text in [
            "2\t0/1000000\tx\n1\t0/2000000\ty\n", // parents not increasing
            "1\t0/3000000\tx\n2\t0/2000000\ty\n", // switch points decrease
            "3\t0/1000000\tx\n",                  // parent not below the file's timeline
            "0\t0/1000000\tx\n",                  // parent 0 is no timeline
            "1\t0/1000000\tx\n1\t0/2000000\ty\n", // the same parent twice
            "one\t0/1000000\tx\n",
            "1\tnot-an-lsn\tx\n",
        ] {
            assert!(parse_history(text, 3, "f").is_err(), "accepted {text:?}");
        }
    }

    #[test]
    fn timeline_ids_stay_in_range() {
        assert!(!valid_timeline(0) && !valid_timeline(u32::MAX));
        assert!(valid_timeline(1) && valid_timeline(MAX_TIMELINE));
        assert_eq!(next_timeline(1).unwrap(), 2);
        assert_eq!(next_timeline(MAX_TIMELINE - 1).unwrap(), MAX_TIMELINE);
        for newest in [MAX_TIMELINE, u32::MAX] {
            let e = next_timeline(newest).unwrap_err();
            assert!(matches!(e, TimelineError::Exhausted { .. }), "{e}");
        }
        // The file's own timeline (its name) must be valid too.
        for tli in [0, u32::MAX] {
            let e = parse_history("1\t0/1000000\tx\n", tli, "FFFFFFFF.history").unwrap_err();
            assert!(matches!(e, TimelineError::OutOfRange { .. }), "{e}");
            assert!(e.to_string().contains("\"FFFFFFFF.history\""), "{e}");
        }
        assert!(parse_history("1\t0/1000000\tx\n", MAX_TIMELINE, "f").is_ok());
    }

    #[test]
    fn newest_timeline_validates_every_history_file() {
        let dir = std::env::temp_dir().join(format!("walshm-tl-newest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("00000002.history"), "1\t0/3000000\tx\n").unwrap();
        assert_eq!(newest_timeline(&dir, 1).unwrap(), 2);
        let bad = [
            ("FFFFFFFF.history", "1\t0/3000000\tx\n"),
            ("00000000.history", ""),
            ("00000005.history", "3\t0/1000000\tx\n2\t0/2000000\ty\n"),
            ("00000006.history", "1\t0/3000000\tx\n2\t0/2000000\ty\n"),
            ("00000007.history", "7\t0/3000000\tx\n"),
        ];
        for (name, text) in bad {
            std::fs::write(dir.join(name), text).unwrap();
            let e = newest_timeline(&dir, 1).unwrap_err().to_string();
            assert!(e.contains(name), "{name}: {e}");
            std::fs::remove_file(dir.join(name)).unwrap();
        }
        // A FIFO is refused before it is opened (opening it would block).
        let fifo = dir.join("00000004.history");
        shmem::sys::fd::make_fifo(&fifo).unwrap();
        let e = newest_timeline(&dir, 1).unwrap_err().to_string();
        assert!(e.contains("00000004.history") && e.contains("FIFO"), "{e}");
        std::fs::remove_file(&fifo).unwrap();
        assert_eq!(newest_timeline(&dir, 1).unwrap(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn file_names() {
        assert_eq!(history_file_name(2), "00000002.history");
        assert_eq!(parse_history_file_name("0000000A.history"), Some(10));
        assert_eq!(parse_history_file_name("000000010000000000000001"), None);
        assert_eq!(parse_history_file_name("0000000A.history.ready"), None);
    }

    #[test]
    fn write_read_and_newest() {
        let dir = std::env::temp_dir().join(format!("walshm-timeline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let t1 = Timeline::read(&dir, 1).unwrap();
        assert!(t1.history.is_empty());
        let t2 = write_history(&dir, 2, &t1, 0x3000A28, "restored", false).unwrap();
        let t3 = write_history(&dir, 3, &t2, 0x5000000, "again", false).unwrap();
        assert_eq!(Timeline::read(&dir, 3).unwrap(), t3);
        let bytes = history_file_bytes(&dir, 3).unwrap().unwrap();
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            format_history(&t3.history)
        );
        assert!(history_file_bytes(&dir, 1).unwrap().is_none());
        assert_eq!(t3.history[0].parent, 1);
        assert_eq!(newest_timeline(&dir, 1).unwrap(), 3);
        assert_eq!(newest_timeline(&dir, 7).unwrap(), 7);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
