//! Test-only stop points: `WALSHM_TEST_STOP=NAME[:after=N]` makes this
//! process stop itself (SIGSTOP) the (N+1)-th time it reaches point NAME,
//! so that a test can kill it there with SIGKILL and check what the
//! server makes of a death at exactly that point (`crate::abandoned`).
//! Compiled in only with the `failpoints` feature (the test build, as
//! the I/O fail points in `walfile`); otherwise every call is empty.
//!
//! Points: `insert_copy` (a record that continues onto another page, after
//! its first page's part is copied: an insertion lock held with a
//! reservation half filled), `xid_assign` (holding XidGenLock, an LWLock).

/// Stops this process here if `WALSHM_TEST_STOP` names `point` (see the
/// module header).
#[cfg(feature = "failpoints")]
pub fn reached(point: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static SPEC: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let spec = SPEC.get_or_init(|| {
        let v = std::env::var("WALSHM_TEST_STOP").ok()?;
        let (name, after) = match v.split_once(":after=") {
            Some((n, a)) => (n.to_string(), a.parse().ok()?),
            None => (v, 0),
        };
        Some((name, after))
    });
    let Some((name, after)) = spec else { return };
    if name != point || CALLS.fetch_add(1, Ordering::Relaxed) < *after {
        return;
    }
    eprintln!("STOPPOINT {point} reached (PID {})", std::process::id());
    // The process stops here until the test kills it.
    shmem::sys::raise(shmem::sys::Signal::SIGSTOP);
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn reached(_point: &str) {}
