//! Round trips per second between two processes ping-ponging on
//! (a) the crate's futex `Semaphore` and (b) a POSIX `sem_t` initialized
//! with `sem_init(pshared = 1)`, in the same run, plus their ratio.
//!
//! Why: `sema.rs` chose a raw futex over `sem_init(pshared=1)` claiming the
//! same speed; this measures that claim. Every round trip is two wake-ups of
//! a process that is (usually) asleep, which is the cost an LWLock hand-off
//! pays.
//!
//! Usage: `cargo run -p shmem --release --example sema_pingpong [ROUND_TRIPS]`
//! (default 200000 per variant).

#[path = "../tests/common/anon_map.rs"]
mod anon_map;
use anon_map::AnonMap;
use shmem::sema::Semaphore;
use std::time::{Duration, Instant};

/// Two objects of type `T` in one shared anonymous mapping, inherited by the
/// child across fork.
struct SharedPair<T> {
    /// Owns the mapping `ptr` points into (unmapped on drop).
    _map: AnonMap,
    ptr: *mut T,
}

impl<T> SharedPair<T> {
    /// Maps room for two `T`s and initializes them with `init`; the mapping
    /// is page-aligned, enough for any `T` here.
    fn new(init: impl Fn(*mut T)) -> SharedPair<T> {
        let map = AnonMap::new(2 * std::mem::size_of::<T>());
        let ptr = map.ptr() as *mut T;
        init(ptr);
        // SAFETY: the second slot lies inside the mapping of 2 * size_of::<T>.
        init(unsafe { ptr.add(1) });
        SharedPair { _map: map, ptr }
    }

    fn get(&self, i: usize) -> *mut T {
        assert!(i < 2);
        // SAFETY: i < 2, inside the mapping (alive as long as `self.map`).
        unsafe { self.ptr.add(i) }
    }
}

/// Forks a child that runs `pong` `n` times while the parent runs `ping` `n`
/// times; returns the parent's elapsed time. The child `_exit`s.
fn run_pair(n: u64, ping: impl Fn(), pong: impl Fn()) -> Duration {
    // SAFETY: the child only uses the inherited mapping and exits with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        for _ in 0..n {
            pong();
        }
        // SAFETY: leaves the child without running the parent's exit path.
        unsafe { libc::_exit(0) };
    }
    let t0 = Instant::now();
    for _ in 0..n {
        ping();
    }
    let elapsed = t0.elapsed();
    let mut status = 0;
    // SAFETY: reaping our own child; `status` is a valid out-pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child failed: {status:#x}"
    );
    elapsed
}

fn futex_round_trips(n: u64) -> Duration {
    let sems = SharedPair::<Semaphore>::new(|p| {
        // SAFETY: `p` points into our fresh mapping, aligned for Semaphore.
        unsafe { p.write(Semaphore::new()) }
    });
    // SAFETY: both semaphores were initialized above and live as long as
    // `sems` (the child has its own copy of the mapping's address range).
    let (a, b) = unsafe { (&*sems.get(0), &*sems.get(1)) };
    run_pair(
        n,
        || {
            a.post();
            b.wait();
        },
        || {
            a.wait();
            b.post();
        },
    )
}

fn posix_round_trips(n: u64) -> Duration {
    let sems = SharedPair::<libc::sem_t>::new(|p| {
        // SAFETY: `p` points to writable, aligned room for a sem_t in a
        // MAP_SHARED mapping, as sem_init(pshared = 1) requires.
        let r = unsafe { libc::sem_init(p, 1, 0) };
        assert_eq!(r, 0, "sem_init: {}", std::io::Error::last_os_error());
    });
    let (a, b) = (sems.get(0), sems.get(1));
    let wait = |s: *mut libc::sem_t| loop {
        // SAFETY: `s` is an initialized process-shared semaphore.
        if unsafe { libc::sem_wait(s) } == 0 {
            break;
        }
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EINTR)
        );
    };
    let post = |s: *mut libc::sem_t| {
        // SAFETY: `s` is an initialized process-shared semaphore.
        let r = unsafe { libc::sem_post(s) };
        assert_eq!(r, 0);
    };
    let d = run_pair(
        n,
        || {
            post(a);
            wait(b);
        },
        || {
            wait(a);
            post(b);
        },
    );
    for i in 0..2 {
        // SAFETY: nobody uses the semaphores any more (the child exited).
        unsafe { libc::sem_destroy(sems.get(i)) };
    }
    d
}

/// Round trips per second of a futex `Semaphore` and a POSIX `sem_t`.
#[derive(clap::Parser)]
#[command(name = "sema_pingpong")]
struct Args {
    /// Round trips per variant
    #[arg(value_name = "ROUND_TRIPS", default_value = "200000")]
    n: u64,
}

fn main() {
    let n = <Args as clap::Parser>::parse().n;
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("sema_pingpong: {n} round trips per variant, {cpus} CPUs");
    let futex = futex_round_trips(n);
    let posix = posix_round_trips(n);
    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    println!(
        "futex Semaphore   : {:>10.0} round trips/s ({:.2} us each)",
        rate(futex),
        futex.as_secs_f64() * 1e6 / n as f64
    );
    println!(
        "sem_t (pshared=1) : {:>10.0} round trips/s ({:.2} us each)",
        rate(posix),
        posix.as_secs_f64() * 1e6 / n as f64
    );
    println!("ratio futex/sem_t : {:.2}", rate(futex) / rate(posix));
}
