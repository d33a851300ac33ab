//! Attaching a library worker to a test's server, and what its readers
//! say once that server is gone.

use super::TIMEOUT;
use std::path::Path;
use std::time::{Duration, Instant};
use walshm::{Error, Worker};

/// Attaches to the server in `dir`, retrying until it is up (and done
/// with any recovery); panics after `TIMEOUT`.
pub fn attach_when_ready(dir: &Path) -> Worker {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match Worker::attach(Some(dir)) {
            Ok(w) => return w,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("could not attach to {}: {e}", dir.display()),
        }
    }
}

/// `next` (a reader's `next_wait` with a timeout of its own, longer than
/// 5 s) reports that the server restarted, and does so within 5 s.
pub fn assert_restart_reported_soon(next: impl FnOnce() -> walshm::Result<bool>) {
    let t = Instant::now();
    assert_eq!(next(), Err(Error::ServerRestarted));
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
}
