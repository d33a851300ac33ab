//! Temporary directories (tempfile's), removed on drop together with the
//! /dev/shm segment file of any data directory in them.

use super::segment_name;
use std::fs;
use std::path::{Path, PathBuf};

/// A unique directory under the system temp dir, removed on drop.
pub struct TempDir {
    dir: tempfile::TempDir,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = tempfile::Builder::new()
            .prefix(&format!("walshm-it-{tag}-"))
            .tempdir()
            .unwrap_or_else(|e| panic!("temporary directory for {tag}: {e}"));
        TempDir { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // A test that panicked while a server ran has SIGKILLed it (Server's
        // drop runs first): remove the segments of data dirs in here; the
        // directory itself goes when `dir` drops.
        if let Ok(rd) = fs::read_dir(self.dir.path()) {
            for e in rd.flatten() {
                if e.path().join("global").is_dir() {
                    let _ = fs::remove_file(Path::new("/dev/shm").join(segment_name(&e.path())));
                }
            }
        }
    }
}
