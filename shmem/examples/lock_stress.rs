//! Acquisitions per second of one contended LWLock (the `lwlock` workload:
//! each client loops taking the Test lock, shared or exclusive at random,
//! 80% shared by default) for 2, 4, 16, 64 and 256 forked client processes,
//! with both wait queues, as a table with the ratio modern/legacy.
//!
//! Why: seed 002 argues that the legacy queue (a waiter scans the whole wait
//! list to dequeue itself) collapses with long queues while the modern one
//! (O(1) dequeue thanks to PENDING_WAKEUP) does not; this measures it on the
//! machine at hand. The workload also checks itself: the protected counter
//! must equal the exclusive acquisitions and no shared holder may see a torn
//! pair, otherwise the example fails.
//!
//! Usage: `cargo run -p shmem --release --example lock_stress --
//!   [--seconds S] [--shared-pct P] [--clients 2,4,16,64,256]`

#[path = "../tests/common/anon_map.rs"]
mod anon_map;
#[path = "../tests/common/counters.rs"]
mod counters;
use anon_map::AnonMap;
use counters::counter_sum;
use shmem::lwlock::{LWLockMode, LockEnv};
use shmem::proc::ProcCounters;
use shmem::sync::{AtomicU32, Ordering};
use shmem::variants::WaitQueue;
use shmem::{NamedLock, Settings, Shmem};
use std::time::{Duration, Instant};

/// Acquisitions per second of one contended LWLock, both wait queues.
#[derive(clap::Parser)]
#[command(name = "lock_stress")]
struct Options {
    /// Measured seconds per client count and queue
    #[arg(long, value_name = "S", default_value = "2")]
    seconds: f64,
    /// Share of shared acquisitions, percent
    #[arg(long, value_name = "P", default_value = "80",
          value_parser = clap::value_parser!(u64).range(0..=100))]
    shared_pct: u64,
    /// Comma-separated client process counts
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "2,4,16,64,256",
          action = clap::ArgAction::Set)]
    clients: Vec<usize>,
}

/// Kills leftover children on every exit path (the segment is unnamed:
/// it goes with the last mapping).
struct Guard {
    children: Vec<libc::pid_t>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        for &pid in &self.children {
            // SAFETY: an unreaped child of ours: the pid cannot be reused.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let mut st = 0;
            // SAFETY: reaping our own child.
            unsafe { libc::waitpid(pid, &mut st, 0) };
        }
    }
}

/// Start/stop flags shared with the children (an anonymous shared page).
struct Control {
    map: AnonMap,
}

impl Control {
    fn new() -> Control {
        Control {
            map: AnonMap::new(4096),
        }
    }
    /// 0: ready count, 1: go, 2: stop.
    fn word(&self, i: usize) -> &AtomicU32 {
        assert!(i < 3);
        // SAFETY: inside the mapped page (which lives as long as `self`),
        // aligned, zero is a valid AtomicU32.
        unsafe { &*(self.map.ptr() as *const AtomicU32).add(i) }
    }
}

/// One measurement: `clients` processes for `seconds`; returns acquisitions/s.
fn run(queue: WaitQueue, clients: usize, o: &Options) -> f64 {
    let mut guard = Guard {
        children: Vec::new(),
    };
    let settings = Settings {
        lwlock_queue: queue,
        wal_buffers: 4,
        ..Settings::default()
    };
    let shmem = Shmem::create(&settings, clients.max(4) as u32, 1).expect("create segment");
    let ctl = Control::new();
    for i in 0..clients {
        let env = shmem.lock_env(i as u32);
        // SAFETY: the child uses only inherited mappings and leaves via _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            client(&shmem, &env, &ctl, i, o.shared_pct);
        }
        guard.children.push(pid);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while (ctl.word(0).load(Ordering::Acquire) as usize) < clients {
        assert!(Instant::now() < deadline, "clients did not start");
        std::thread::sleep(Duration::from_millis(1));
    }
    let t0 = Instant::now();
    ctl.word(1).store(1, Ordering::Release);
    std::thread::sleep(Duration::from_secs_f64(o.seconds));
    ctl.word(2).store(1, Ordering::Relaxed);
    let elapsed = t0.elapsed();
    reap_all(&mut guard);
    let procs = &shmem.procs()[..clients];
    let total = counter_sum(procs, |c| &c.lock_acquires);
    let exclusive = counter_sum(procs, |c| &c.transactions);
    let area = shmem.lock_test_area();
    assert_eq!(area.counter_value(), exclusive, "lost exclusive updates");
    assert_eq!(area.torn_reads.load(Ordering::Relaxed), 0, "torn reads");
    assert!(shmem.named_lock(NamedLock::Test).is_free());
    // The clients counted acquisitions until they saw `stop`, slightly after
    // `elapsed`; good enough at these durations.
    total as f64 / elapsed.as_secs_f64()
}

/// A forked client's body: waits for go, then takes the Test lock 16 times
/// per round (shared `shared_pct`% of the time, checking the protected pair;
/// else exclusive, bumping it) until stop; exits 1 if it saw a torn pair.
fn client(shmem: &Shmem, env: &LockEnv, ctl: &Control, i: usize, shared_pct: u64) -> ! {
    let lock = shmem.named_lock(NamedLock::Test);
    let area = shmem.lock_test_area();
    let me = &shmem.procs()[i];
    let mut rng = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    ctl.word(0).fetch_add(1, Ordering::AcqRel);
    while ctl.word(1).load(Ordering::Acquire) == 0 {
        std::thread::sleep(Duration::from_micros(100));
    }
    let mut ok = true;
    while ctl.word(2).load(Ordering::Relaxed) == 0 {
        for _ in 0..16 {
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            let r = (rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) % 100;
            if r < shared_pct {
                lock.acquire(env, LWLockMode::Shared);
                // SAFETY: the Test lock is held shared.
                ok &= unsafe { area.check_shared() };
            } else {
                lock.acquire(env, LWLockMode::Exclusive);
                // SAFETY: the Test lock is held exclusively.
                unsafe { area.bump_exclusive() };
                ProcCounters::bump(&me.counters.transactions, 1);
            }
            lock.release(env);
        }
        ProcCounters::bump(&me.counters.lock_acquires, 16);
    }
    // SAFETY: leaves the child without running the parent's exit path.
    unsafe { libc::_exit(if ok { 0 } else { 1 }) };
}

/// Reaps every client (each must exit 0), or panics after 60 s.
fn reap_all(guard: &mut Guard) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Some(&pid) = guard.children.last() {
        let mut st = 0;
        // SAFETY: polling our own child.
        let r = unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
        if r == pid {
            guard.children.pop();
            assert!(
                libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
                "client {pid} failed (status {st:#x})"
            );
        } else {
            assert!(Instant::now() < deadline, "clients did not stop (hang?)");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

fn main() {
    let o = <Options as clap::Parser>::parse();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "lock_stress: one LWLock, {}% shared / {}% exclusive, {} s per point, {cpus} CPUs",
        o.shared_pct,
        100 - o.shared_pct,
        o.seconds
    );
    println!(
        "{:>8} {:>16} {:>16} {:>14}",
        "clients", "modern acq/s", "legacy acq/s", "modern/legacy"
    );
    for &c in &o.clients {
        let m = run(WaitQueue::Modern, c, &o);
        let l = run(WaitQueue::Legacy, c, &o);
        println!("{c:>8} {m:>16.0} {l:>16.0} {:>14.2}", m / l);
    }
}
