//! Data directories made by `postmaster init`, and what their files hold.

use super::postmaster;
use std::fs;
use std::path::{Path, PathBuf};

/// A data directory made by `postmaster init`.
#[derive(Clone, Debug)]
pub struct DataDir {
    pub path: PathBuf,
    pub seg_size: u64,
    /// LSN of init's shutdown checkpoint (first record).
    pub first_lsn: u64,
}

/// `postmaster init -D DIR ARGS...`; panics on failure.
pub fn init(dir: &Path, args: &[&str]) -> DataDir {
    let d = dir.to_str().unwrap();
    let mut all = vec!["init", "-D", d];
    all.extend_from_slice(args);
    let o = postmaster(&all);
    assert!(o.status.success(), "init failed\n{}", o.describe());
    // "... WAL segment size 1 MB, first checkpoint at 0/00100028)"
    let mb: u64 = o
        .stdout
        .split("WAL segment size ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no segment size in init output\n{}", o.describe()));
    let first = o
        .stdout
        .split("first checkpoint at ")
        .nth(1)
        .map(|s| s.trim_end_matches(|c: char| c == ')' || c.is_whitespace()))
        .and_then(|s| s.split(')').next())
        .map(|s| walformat::parse_lsn(s).expect("checkpoint LSN"))
        .unwrap_or_else(|| panic!("no checkpoint LSN in init output\n{}", o.describe()));
    let seg_size = mb << 20;
    assert_eq!(
        first,
        seg_size + 0x28,
        "init's checkpoint is not at the start of segment 1 (after the long page header)"
    );
    DataDir {
        path: dir.to_path_buf(),
        seg_size,
        first_lsn: first,
    }
}

/// `init` with `wal_keep_size` so large that checkpoints never remove or
/// recycle a segment: every record ever written stays readable, so the
/// tests can count them.
pub fn init_keep(dir: &Path, args: &[&str]) -> DataDir {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--set", "wal_keep_size=1000000"]);
    init(dir, &all)
}

impl DataDir {
    /// Where the first record inserted at `end` (an end of WAL as recovery
    /// reports it) starts: past the page header when `end` is a page boundary.
    pub fn first_record_at(&self, end: u64) -> u64 {
        let geo = walformat::Geometry::new(self.seg_size).unwrap();
        geo.bytepos_to_recptr(geo.recptr_to_bytepos(end))
    }
}

/// Sum of the sizes of the files in `dir` (not recursive).
pub fn dir_size(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The timeline in a data directory's control file.
pub fn control_timeline(dir: &Path) -> u32 {
    backend::control::ControlFile::read(dir).unwrap().timeline
}

/// The single line of timeline 2's history file in `dir`'s pg_wal (a
/// restore that ended archive recovery once): (parent, switch point,
/// reason).
pub fn history_line(dir: &Path) -> (u32, u64, String) {
    let text = fs::read_to_string(dir.join("pg_wal/00000002.history"))
        .expect("no 00000002.history in the restored pg_wal");
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "history of timeline 2: {text:?}");
    let f: Vec<&str> = lines[0].split('\t').collect();
    assert_eq!(
        f.len(),
        3,
        "parentTLI<TAB>switchpoint<TAB>reason: {:?}",
        lines[0]
    );
    (
        f[0].parse().unwrap(),
        walformat::parse_lsn(f[1]).unwrap(),
        f[2].to_string(),
    )
}
