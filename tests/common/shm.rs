//! The server's shared-memory segment: the /dev/shm name it had while it
//! was named, and the memfd segments a process maps.

use std::fs;
use std::path::Path;

/// Name the /dev/shm file of a data directory had while the segment was
/// named (FNV-1a of the canonical path, `walshm.<16 hex>`). The segment is
/// now an unnamed memfd: tests check that no such file appears.
pub fn segment_name(datadir: &Path) -> String {
    let canon = datadir
        .canonicalize()
        .unwrap_or_else(|_| datadir.to_path_buf());
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canon.as_os_str().as_encoded_bytes() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("walshm.{h:016x}")
}

/// Every walshm segment in /dev/shm (of any test or user).
pub fn all_segments() -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir("/dev/shm")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("walshm."))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The segments in /dev/shm that belong to `datadir` (must be none).
pub fn segments_for(datadir: &Path) -> Vec<String> {
    let mine = segment_name(datadir);
    all_segments().into_iter().filter(|n| *n == mine).collect()
}

/// The distinct walshm memfd segments process `pid` maps (from
/// /proc/PID/maps: "/memfd:walshm (deleted)", by inode), and whether it
/// maps anything under /dev/shm.
pub fn mapped_segments(pid: i32) -> (usize, bool) {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let mut inodes: Vec<&str> = maps
        .lines()
        .filter(|l| l.contains("/memfd:walshm"))
        .filter_map(|l| l.split_whitespace().nth(4))
        .collect();
    inodes.sort_unstable();
    inodes.dedup();
    (inodes.len(), maps.contains("/dev/shm/"))
}
