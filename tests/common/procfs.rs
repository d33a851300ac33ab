//! Processes as /proc shows them: state, parent, children and memory.

use std::fs;

/// Parses /proc/PID/stat: (comm, state, ppid).
pub fn proc_stat(pid: i32) -> Option<(String, char, i32)> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s[open + 1..close].to_string();
    let mut rest = s[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((comm, state, ppid))
}

/// Is `pid` alive (exists and is not a zombie)?
pub fn alive(pid: i32) -> bool {
    matches!(proc_stat(pid), Some((_, st, _)) if st != 'Z' && st != 'X')
}

/// Live children of `pid`: (pid, comm), sorted by pid.
pub fn children_of(pid: i32) -> Vec<(i32, String)> {
    let mut v = Vec::new();
    if let Ok(rd) = fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(p) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if let Some((comm, st, ppid)) = proc_stat(p) {
                if ppid == pid && st != 'Z' && st != 'X' {
                    v.push((p, comm));
                }
            }
        }
    }
    v.sort();
    v
}

/// Resident set size of `pid` in kB (VmRSS of /proc/PID/status).
pub fn vm_rss_kb(pid: i32) -> u64 {
    status_kb(pid, "VmRSS")
}

/// The kB figure `field` (VmRSS, VmHWM, ...) of /proc/PID/status.
pub fn status_kb(pid: i32, field: &str) -> u64 {
    try_status_kb(pid, field).unwrap_or_else(|| panic!("{field} of process {pid}"))
}

/// `status_kb`, or None if the process is gone (or has no such field).
pub fn try_status_kb(pid: i32, field: &str) -> Option<u64> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.strip_prefix(field).is_some_and(|r| r.starts_with(':')))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}
