//! Attaching a library worker to a test's server.

use super::TIMEOUT;
use std::path::Path;
use std::time::{Duration, Instant};
use walshm::Worker;

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
