//! Machine facts printed at the top of every reproduction: CPU model, cores,
//! memory, kernel and the file system of the data directory, so that a table
//! is never read without the machine that produced it.

use std::path::Path;

#[derive(Clone, Debug)]
pub struct Machine {
    pub cpu_model: String,
    pub cores: usize,
    pub mem_total_mb: u64,
    pub kernel: String,
    pub data_dir: String,
    pub data_fs: String,
}

/// The first line of `/proc` file `path` that starts with `key`.
fn proc_line(path: &str, key: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find(|l| l.starts_with(key))
        .map(str::to_string)
}

/// The first `model name` of /proc/cpuinfo (or "unknown").
pub fn cpu_model() -> String {
    proc_line("/proc/cpuinfo", "model name")
        .and_then(|l| l.split_once(':').map(|(_, v)| v.trim().to_string()))
        .unwrap_or_else(|| "unknown".into())
}

pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// MemTotal in MB (0 when unknown).
pub fn mem_total_mb() -> u64 {
    proc_line("/proc/meminfo", "MemTotal:")
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

pub fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Name of a statfs `f_type` magic number.
pub fn fs_name(magic: u64) -> String {
    let name = match magic {
        0x0102_1994 => "tmpfs",
        0x8584_58f6 => "ramfs",
        0xEF53 => "ext2/3/4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x794c_7630 => "overlayfs",
        0x2fc1_2fc1 => "zfs",
        0x6969 => "nfs",
        0x6573_5546 => "fuse",
        0xF2F5_2010 => "f2fs",
        0x0102_1997 => "9p",
        _ => return format!("unknown (statfs type 0x{magic:x})"),
    };
    name.to_string()
}

/// File system type of `path` via statfs.
pub fn fs_type(path: &Path) -> String {
    match shmem::sys::fs_magic(path) {
        Some(magic) => fs_name(magic),
        None => "unknown".into(),
    }
}

impl Machine {
    pub fn probe(data_dir: &Path) -> Machine {
        Machine {
            cpu_model: cpu_model(),
            cores: cores(),
            mem_total_mb: mem_total_mb(),
            kernel: kernel(),
            data_dir: data_dir.display().to_string(),
            data_fs: fs_type(data_dir),
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "machine: {} | {} core(s) | {} MB RAM | Linux {} | data dir {} ({})",
            self.cpu_model, self.cores, self.mem_total_mb, self.kernel, self.data_dir, self.data_fs
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_are_present() {
        let m = Machine::probe(&std::env::temp_dir());
        assert!(m.cores >= 1);
        assert!(!m.data_fs.is_empty());
        assert!(m.describe().contains("core(s)"));
        assert_eq!(fs_name(0x0102_1994), "tmpfs");
        assert!(fs_name(1).contains("0x1"));
    }
}
