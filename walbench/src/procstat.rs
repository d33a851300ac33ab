//! CPU time and memory of the server's process tree, read from /proc.
//!
//! The postmaster runs in its own process group (walbench starts it with
//! `process_group(0)`), so its tree is every process whose pgrp is the
//! postmaster's pid. CPU is utime+stime ticks summed over that group at the
//! start and end of the window (exact integration over the window, unlike
//! two instantaneous CPU% readings); memory is the private resident pages of
//! each process plus the largest shared resident set (the shared memory
//! segment counted once). On systems without /proc both read as zero.

use shmem::sys::SysconfVar;
use std::collections::HashMap;

/// Per-process CPU ticks and memory pages of one process group.
#[derive(Clone, Debug, Default)]
pub struct TreeSample {
    /// pid -> utime + stime, in clock ticks.
    pub ticks: HashMap<i32, u64>,
    /// Sum of (resident - shared) pages.
    pub private_pages: u64,
    /// Largest shared resident set, in pages.
    pub max_shared_pages: u64,
}

impl TreeSample {
    /// Resident bytes of the group (private + the largest shared set).
    pub fn mem_bytes(&self) -> u64 {
        (self.private_pages + self.max_shared_pages) * page_size()
    }
}

fn page_size() -> u64 {
    shmem::sys::sysconf_or(SysconfVar::PAGE_SIZE, 4096) as u64
}

fn clock_ticks() -> f64 {
    shmem::sys::sysconf_or(SysconfVar::CLK_TCK, 100) as f64
}

/// Parses `/proc/PID/stat`: (pgrp, utime + stime).
pub fn parse_stat(text: &str) -> Option<(i32, u64)> {
    // The command name may contain spaces and parentheses: split after the
    // last ')'. Fields after it start at field 3 (state).
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let pgrp = f.get(2)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((pgrp, utime + stime))
}

/// Parses `/proc/PID/statm`: (resident, shared) pages.
pub fn parse_statm(text: &str) -> Option<(u64, u64)> {
    let mut f = text.split_whitespace().skip(1);
    let resident = f.next()?.parse().ok()?;
    let shared = f.next()?.parse().ok()?;
    Some((resident, shared))
}

/// Samples every process of group `pgid`.
pub fn sample_group(pgid: i32) -> TreeSample {
    let mut s = TreeSample::default();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return s;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((pgrp, ticks)) = parse_stat(&stat) else {
            continue;
        };
        if pgrp != pgid {
            continue;
        }
        s.ticks.insert(pid, ticks);
        if let Some((res, shared)) = std::fs::read_to_string(format!("/proc/{pid}/statm"))
            .ok()
            .and_then(|t| parse_statm(&t))
        {
            s.private_pages += res.saturating_sub(shared);
            s.max_shared_pages = s.max_shared_pages.max(shared);
        }
    }
    s
}

/// CPU cores busy on average between two samples `dt` seconds apart
/// (processes that appeared in between count from zero).
pub fn cpu_cores_between(a: &TreeSample, b: &TreeSample, dt: f64) -> f64 {
    if dt <= 0.0 {
        return 0.0;
    }
    let ticks: u64 = b
        .ticks
        .iter()
        .map(|(pid, t)| t.saturating_sub(a.ticks.get(pid).copied().unwrap_or(0)))
        .sum();
    ticks as f64 / clock_ticks() / dt
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let stat = "123 (post master) S 1 123 123 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 1 0 1 2 3";
        assert_eq!(parse_stat(stat), Some((123, 12)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_statm("100 40 10 1 0 20 0"), Some((40, 10)));
        let me = sample_group(shmem::sys::process_group());
        assert!(me.ticks.contains_key(&(std::process::id() as i32)) || me.ticks.is_empty());
    }
}
