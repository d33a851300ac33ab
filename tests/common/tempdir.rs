//! Temporary directories, removed on drop together with the /dev/shm
//! segment file of any data directory in them.

use super::segment_name;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A unique directory under the system temp dir, removed on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "walshm-it-{tag}-{}-{n}-{nanos:08x}",
            std::process::id()
        ));
        fs::create_dir_all(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.path.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // A test that panicked while a server ran has SIGKILLed it (Server's
        // drop runs first): remove the segments of data dirs in here.
        if let Ok(rd) = fs::read_dir(&self.path) {
            for e in rd.flatten() {
                if e.path().join("global").is_dir() {
                    let _ = fs::remove_file(Path::new("/dev/shm").join(segment_name(&e.path())));
                }
            }
        }
        let _ = fs::remove_dir_all(&self.path);
    }
}
