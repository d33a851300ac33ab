//! The one shared-memory segment: creating, attaching, and finding each
//! region in it.
//!
//! The segment has no name. The postmaster creates it with
//! `memfd_create("walshm", MFD_CLOEXEC)`, sizes it (`ftruncate`), maps it
//! (`mmap(MAP_SHARED)`), lays out every structure in it, and only then forks
//! children, which inherit the mapping. A process the postmaster did not
//! fork gets the descriptor over the registration socket (`register`: peer
//! uid checked, the fd passed with SCM_RIGHTS) and maps it with
//! [`Shmem::from_fd`], which validates the header (magic, layout version,
//! size, generation) and refuses a segment that does not match.
//!
//! Why unnamed: a named `/dev/shm` object outlives a postmaster killed with
//! SIGKILL (holding its RAM until someone removes it), and a predictable
//! name lets another local user create it first. A memfd is freed by the
//! kernel when the last descriptor is closed and the last mapping is
//! unmapped, so nothing is left once the server's processes are gone, and
//! nobody can open it without being handed the descriptor.
//!
//! What lies where is declared in `layout` (one row per region, with its
//! diagram); the accessors here find a region by name through the
//! `Layout`, and each checks (in debug builds) that the type it reads has
//! the region's element size and alignment.
//!
//! Generations: each crash restart creates a new segment with the next
//! generation number. Just before the postmaster abandons a generation (a
//! crash restart or a shutdown) it sets the header's `ended` flag (a plain
//! atomic store, no lock); an external process still mapping the old
//! segment reads it ([`Shmem::has_ended`]) and learns that the server
//! restarted. The old segment stays valid memory for it until it unmaps.
//!
//! Worker slots: `max_worker_processes` proc slots follow the auxiliary
//! ones. The postmaster alone decides which is in use (in its own memory,
//! `postmaster::registry`), so it never takes a lock here to hand one out;
//! it resets a free slot's fields with plain atomic stores
//! ([`Shmem::reset_worker_slot`]) before giving it to a worker.
//!
//! Invariants: the segment holds no pointers, only indices and offsets; a
//! child never unmaps it; only the creator keeps the descriptor (children
//! close it with every other inherited descriptor), so the segment's life
//! is the creator's plus the mappings'.

#[cfg(test)]
use crate::layout::WAL_PAGE;
pub use crate::layout::{Layout, Region};
pub use crate::locktest::LockTestArea;
use crate::lwlock::{LWLock, LockEnv};
use crate::prevlink::PrevLink;
use crate::proc::{Proc, INVALID_PROCNO, LW_WS_NOT_WAITING};
use crate::settings::Settings;
use crate::spin::SpinLock;
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::xlogctl::{WalInsertLock, XLogCtl};
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::ptr::NonNull;

/// This process's settings after a reload (see [`Shmem::settings`]):
/// process-local memory, never shared.
static RELOADED: std::sync::OnceLock<Settings> = std::sync::OnceLock::new();

pub const SHMEM_MAGIC: u64 = u64::from_le_bytes(*b"WALSHM\0\x01");
/// Bump whenever any `#[repr(C)]` struct in the segment, or the layout,
/// changes.
pub const LAYOUT_VERSION: u32 = 43;

crate::code_enum! {
    /// Individually named LWLocks, with their tranche names (the tranche
    /// id of each is its code).
    pub enum NamedLock: u32 {
        XidGen = 0 => "XidGen",
        ProcArray = 1 => "ProcArray",
        WalWrite = 2 => "WALWrite",
        WalBufMapping = 3 => "WALBufMapping",
        ControlFile = 4 => "ControlFile",
        Checkpoint = 5 => "Checkpoint",
        /// Used by the `lwlock` workload.
        Test = 6 => "Test",
    }
}

pub const NUM_NAMED_LOCKS: usize = NamedLock::ALL.len();
/// Tranche id of the WAL insertion locks (named locks use their index).
pub const TRANCHE_WAL_INSERT: u32 = 100;

crate::code_enum! {
    /// Auxiliary processes have fixed proc slots after the backends'.
    pub enum AuxProc: u32 {
        Startup = 0,
        Walwriter = 1,
        Checkpointer = 2,
        /// Finishes what a dead attached process or session left
        /// (`backend::abandoned`), one at a time.
        Cleaner = 3,
    }
}
pub const NUM_AUX_PROCS: u32 = AuxProc::ALL.len() as u32;

/// A named LWLock alone on its line.
#[repr(C, align(128))]
pub struct PaddedLWLock {
    lock: LWLock,
}

/// Segment header.
#[repr(C)]
pub struct ShmemHeader {
    pub magic: u64,
    pub layout_version: u32,
    pub creator_pid: i32,
    pub total_size: u64,
    pub generation: u64,
    pub max_backends: u32,
    pub n_insert_locks: u32,
    pub n_buffers: u32,
    pub n_prevlinks: u32,
    /// Nonzero once the postmaster abandoned this generation (crash
    /// restart or shutdown). Set with a Release store by `mark_ended`,
    /// read with an Acquire load by `has_ended`.
    pub ended: AtomicU32,
    /// Processes the postmaster had cleaned up after without a restart
    /// since it started, and its crash restarts (written by the
    /// postmaster only; read by `postmaster status` and pg_stat views).
    pub processes_cleaned: AtomicU64,
    pub crash_restarts: AtomicU64,
    pub settings: Settings,
}

/// Free list of backend proc slots.
#[repr(C, align(128))]
pub struct ProcGlobal {
    pub lock: SpinLock,
    pub free_head: AtomicU32,
    /// Connection backends holding a slot (changed under `lock`).
    pub sessions: AtomicU32,
}

/// Why a segment could not be created or attached.
#[derive(Debug)]
pub enum ShmemError {
    Os {
        what: &'static str,
        err: std::io::Error,
    },
    BadHeader {
        reason: String,
    },
}

impl fmt::Display for ShmemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShmemError::Os { what, err } => {
                write!(f, "could not {what} the shared memory segment: {err}")
            }
            ShmemError::BadHeader { reason } => {
                write!(f, "the shared memory segment is not usable: {reason}")
            }
        }
    }
}

impl std::error::Error for ShmemError {}

/// A mapping of the segment in this process.
pub struct Shmem {
    base: NonNull<u8>,
    layout: Layout,
    /// The memfd, kept by the creator to hand to registering processes;
    /// None in a process that attached with `from_fd` (it closed its copy).
    fd: Option<OwnedFd>,
}

// SAFETY: everything reachable through `Shmem` is atomics, or plain data
// whose access is governed by the locks documented at each field.
unsafe impl Send for Shmem {}
// SAFETY: as above.
unsafe impl Sync for Shmem {}

fn os_err(what: &'static str) -> ShmemError {
    ShmemError::Os {
        what,
        err: std::io::Error::last_os_error(),
    }
}

/// A new anonymous memory file of `size` zero bytes (close-on-exec).
fn create_memfd(size: usize) -> Result<OwnedFd, ShmemError> {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let fd = memfd_create(c"walshm", MFdFlags::MFD_CLOEXEC).map_err(|_| os_err("create"))?;
    nix::unistd::ftruncate(&fd, size as libc::off_t).map_err(|_| os_err("size"))?;
    Ok(fd)
}

/// The size of the file behind `fd`.
fn file_size(fd: BorrowedFd<'_>) -> Result<usize, ShmemError> {
    let st = nix::sys::stat::fstat(fd).map_err(|_| os_err("stat"))?;
    Ok(st.st_size as usize)
}

/// Maps `size` bytes of `fd` shared, read-write.
fn map_fd(fd: BorrowedFd<'_>, size: usize) -> Result<NonNull<u8>, ShmemError> {
    if size < std::mem::size_of::<ShmemHeader>() {
        return Err(ShmemError::BadHeader {
            reason: format!("size {size} is smaller than a header"),
        });
    }
    // SAFETY: mapping a fresh region of `size` bytes of a valid fd; the
    // kernel picks the address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(os_err("map"));
    }
    NonNull::new(p as *mut u8).ok_or_else(|| ShmemError::BadHeader {
        reason: "mmap returned address 0".into(),
    })
}

/// Why the header at `base` (a mapping of `size` bytes) is not one this
/// program can use, if it is not.
fn header_problem(hdr: &ShmemHeader, size: usize, generation: Option<u64>) -> Option<String> {
    if hdr.magic != SHMEM_MAGIC {
        return Some(format!("bad magic {:#x}", hdr.magic));
    }
    if hdr.layout_version != LAYOUT_VERSION {
        return Some(format!(
            "layout version {} (this program uses {LAYOUT_VERSION})",
            hdr.layout_version
        ));
    }
    if hdr.total_size as usize != size {
        return Some(format!(
            "header says {} bytes, segment has {size}",
            hdr.total_size
        ));
    }
    if let Some(g) = generation {
        if hdr.generation != g {
            return Some(format!("generation {} (expected {g})", hdr.generation));
        }
    }
    let layout = Layout::compute(&hdr.settings, hdr.max_backends);
    if layout.total != size {
        return Some(format!(
            "layout of {} bytes does not match size {size}",
            layout.total
        ));
    }
    None
}

impl Shmem {
    /// Creates a new unnamed segment, lays out and initializes every
    /// structure.
    pub fn create(
        settings: &Settings,
        max_backends: u32,
        generation: u64,
    ) -> Result<Shmem, ShmemError> {
        let layout = Layout::compute(settings, max_backends);
        let fd = create_memfd(layout.total)?;
        let base = map_fd(fd.as_fd(), layout.total)?;
        let shmem = Shmem {
            base,
            layout,
            fd: Some(fd),
        };
        // SAFETY: the segment was just created and mapped by us; no other
        // process knows it yet, so plain initializing writes cannot race.
        unsafe { shmem.initialize(settings, generation) };
        Ok(shmem)
    }

    /// Maps the segment behind `fd` (received from the postmaster) and
    /// validates its header; takes and closes `fd` (the mapping keeps the
    /// segment alive). `expected_generation`: refuse any other generation
    /// when given.
    pub fn from_fd(fd: OwnedFd, expected_generation: Option<u64>) -> Result<Shmem, ShmemError> {
        let size = file_size(fd.as_fd())?;
        let base = map_fd(fd.as_fd(), size)?;
        drop(fd);
        // SAFETY: the mapping is at least a header long (checked in map_fd)
        // and a header's fields are integers, for which any bytes are valid.
        let hdr = unsafe { &*(base.as_ptr() as *const ShmemHeader) };
        if let Some(reason) = header_problem(hdr, size, expected_generation) {
            // SAFETY: unmapping the region we just mapped; `hdr` is not
            // used after this.
            unsafe { libc::munmap(base.as_ptr() as *mut libc::c_void, size) };
            return Err(ShmemError::BadHeader { reason });
        }
        let layout = Layout::compute(&hdr.settings, hdr.max_backends);
        Ok(Shmem {
            base,
            layout,
            fd: None,
        })
    }

    /// The segment's descriptor, in the process that created it.
    pub fn raw_fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(|fd| fd.as_raw_fd())
    }

    /// The segment's descriptor, borrowed, in the process that created it
    /// (to pass to a registering worker).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|fd| fd.as_fd())
    }

    /// Marks this generation as abandoned (the postmaster, just before a
    /// crash restart or at shutdown). Release: pairs with the Acquire in
    /// `has_ended`, so a process that sees the flag also sees every store
    /// the postmaster made before it.
    pub fn mark_ended(&self) {
        self.header().ended.store(1, Ordering::Release);
    }

    /// Has the postmaster abandoned this generation? (Acquire: pairs with
    /// `mark_ended`.)
    pub fn has_ended(&self) -> bool {
        self.header().ended.load(Ordering::Acquire) != 0
    }

    /// # Safety
    /// Only on a freshly created, zero-filled segment nobody else uses.
    unsafe fn initialize(&self, settings: &Settings, generation: u64) {
        let l = &self.layout;
        let hdr = ShmemHeader {
            magic: SHMEM_MAGIC,
            layout_version: LAYOUT_VERSION,
            creator_pid: std::process::id() as i32,
            total_size: l.total as u64,
            generation,
            max_backends: l.max_backends,
            n_insert_locks: l.n_insert_locks,
            n_buffers: l.n_buffers,
            n_prevlinks: l.n_prevlinks,
            ended: AtomicU32::new(0),
            processes_cleaned: AtomicU64::new(0),
            crash_restarts: AtomicU64::new(0),
            settings: *settings,
        };
        // SAFETY: every element pointer comes from the layout, is aligned
        // for its region's type and lies inside the mapping; the caller
        // guarantees exclusive access (whole block).
        unsafe {
            self.element::<ShmemHeader>(Region::Header, 0).write(hdr);
            self.element::<ProcGlobal>(Region::ProcGlobal, 0)
                .write(ProcGlobal {
                    lock: SpinLock::new(),
                    free_head: AtomicU32::new(if l.max_backends > 0 {
                        0
                    } else {
                        INVALID_PROCNO
                    }),
                    sessions: AtomicU32::new(0),
                });
            for i in 0..NUM_NAMED_LOCKS {
                self.element::<PaddedLWLock>(Region::NamedLocks, i)
                    .write(PaddedLWLock {
                        lock: LWLock::new(i as u32),
                    });
            }
            for i in 0..l.max_procs {
                let p = Proc::new(i);
                // Backend slots form the free list in order.
                if i + 1 < l.max_backends {
                    p.free_next.store(i + 1, Ordering::Relaxed);
                }
                self.element::<Proc>(Region::Procs, i as usize).write(p);
            }
            for i in 0..l.n_insert_locks as usize {
                self.element::<WalInsertLock>(Region::InsertLocks, i)
                    .write(WalInsertLock {
                        lock: LWLock::new(TRANCHE_WAL_INSERT),
                        inserting_at: AtomicU64::new(0),
                        last_important_at: AtomicU64::new(0),
                    });
            }
            (*self.element::<crate::procarray::ProcArrayShared>(Region::ProcArray, 0))
                .group_first
                .store(INVALID_PROCNO, Ordering::Relaxed);
            // Every other region (XLogCtl, xlblocks, prev links, XID state,
            // ProcArray members, histograms, pages, test area): all-zero is
            // its valid initial state (atomics and plain integers), and the
            // segment is zero-filled by ftruncate.
        }
    }

    /// Pointer to a `T` at `off`.
    ///
    /// # Safety
    /// `off` must come from the layout and hold an initialized (or, for
    /// writing, reserved) `T`.
    unsafe fn at<T>(&self, off: usize) -> *mut T {
        debug_assert!(off + std::mem::size_of::<T>() <= self.layout.total);
        debug_assert!(off.is_multiple_of(std::mem::align_of::<T>()));
        // SAFETY: the caller guarantees `off` is inside the mapping.
        unsafe { self.base.as_ptr().add(off) as *mut T }
    }

    /// Pointer to element `i` of `region`.
    ///
    /// # Safety
    /// `T` must be the region's element type (debug builds check its size
    /// and alignment against the declaration) and `i` below its count.
    #[inline]
    unsafe fn element<T>(&self, region: Region, i: usize) -> *mut T {
        let p = self.layout.placement(region);
        debug_assert!(i < p.count, "{region:?}[{i}] of {}", p.count);
        debug_assert!(std::mem::size_of::<T>() <= p.stride, "{region:?}");
        // SAFETY: element `i < count` lies inside the region, which lies
        // inside the mapping (Layout::compute); the caller vouches for `T`.
        unsafe { self.at::<T>(p.off + i * p.stride) }
    }

    /// The whole of `region` as a slice (possibly empty).
    ///
    /// # Safety
    /// `T` must be the region's element type, and every element must be
    /// initialized (zero is a valid value for atomics).
    #[inline]
    unsafe fn slice<T>(&self, region: Region) -> &[T] {
        let p = self.layout.placement(region);
        debug_assert_eq!(p.stride, std::mem::size_of::<T>(), "{region:?}");
        debug_assert!(p.off.is_multiple_of(std::mem::align_of::<T>()));
        // SAFETY: `count` contiguous elements of `T` start at the region's
        // aligned offset inside the mapping; they live as long as `self`.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(p.off) as *const T, p.count) }
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn header(&self) -> &ShmemHeader {
        // SAFETY: offset 0 holds the header, written at creation or
        // validated at attach.
        unsafe { &*self.at::<ShmemHeader>(0) }
    }

    /// The settings this process runs with: the segment's, or, in a
    /// session forked after a reload, the segment's with the reloadable
    /// rows the postmaster handed it ([`Shmem::adopt_reloaded_settings`]).
    pub fn settings(&self) -> &Settings {
        RELOADED.get().unwrap_or(&self.header().settings)
    }

    /// In a child just forked by the postmaster: run with the reloadable
    /// rows (`Context::Session`) of `reloaded`, the postmaster's settings
    /// after its last reload; every other row stays the segment's. Only
    /// the first call in a process counts (the settings a process runs
    /// with never change under it).
    pub fn adopt_reloaded_settings(&self, reloaded: &Settings) {
        let own = &self.header().settings;
        if own != reloaded {
            let _ = RELOADED.set(own.with_reloadable_from(reloaded));
        }
    }

    pub fn proc_global(&self) -> &ProcGlobal {
        // SAFETY: initialized at creation.
        unsafe { &*self.element(Region::ProcGlobal, 0) }
    }

    pub fn procs(&self) -> &[Proc] {
        // SAFETY: `max_procs` Procs were initialized at creation.
        unsafe { self.slice(Region::Procs) }
    }

    pub fn aux_procno(&self, aux: AuxProc) -> u32 {
        self.layout.max_backends + aux as u32
    }

    /// Worker slots (`max_worker_processes`) in this segment.
    pub fn max_workers(&self) -> u32 {
        self.layout.max_workers
    }

    /// The proc number of worker slot `i` (< `max_workers`): after the
    /// backends' and the auxiliary processes' slots.
    pub fn worker_procno(&self, i: u32) -> u32 {
        assert!(i < self.layout.max_workers, "worker slot {i}");
        self.layout.first_worker_procno() + i
    }

    /// Makes worker proc slot `procno` ready for a new worker: its pid,
    /// wait state, links, XID, group-clear state and semaphore back to
    /// their initial values (counters are kept: the report sums them).
    /// The caller (the postmaster) knows the slot is unused, so plain
    /// atomic stores cannot race with an owner; the new worker receives
    /// the slot only afterwards, over a socket (a happens-before edge).
    pub fn reset_worker_slot(&self, procno: u32) {
        assert!(
            procno >= self.layout.first_worker_procno() && procno < self.layout.max_procs,
            "{procno} is not a worker slot"
        );
        let p = &self.procs()[procno as usize];
        p.pid.store(0, Ordering::Relaxed);
        p.sem.reset();
        p.lw_waiting.store(LW_WS_NOT_WAITING, Ordering::Relaxed);
        p.lw_wait_mode.store(0, Ordering::Relaxed);
        p.lw_next.store(INVALID_PROCNO, Ordering::Relaxed);
        p.lw_prev.store(INVALID_PROCNO, Ordering::Relaxed);
        p.free_next.store(INVALID_PROCNO, Ordering::Relaxed);
        p.xid.store(0, Ordering::Relaxed);
        p.group_clear_member.store(0, Ordering::Relaxed);
        p.group_clear_next.store(INVALID_PROCNO, Ordering::Relaxed);
        p.group_clear_xid.store(0, Ordering::Relaxed);
        p.cancel_key.store(0, Ordering::Relaxed);
        p.flush_wanted.store(0, Ordering::Relaxed);
        p.wait_event_info.store(0, Ordering::Relaxed);
        p.crit.reset();
    }

    pub fn named_lock(&self, which: NamedLock) -> &LWLock {
        // SAFETY: initialized at creation; `which` < NUM_NAMED_LOCKS.
        unsafe { &(*self.element::<PaddedLWLock>(Region::NamedLocks, which as usize)).lock }
    }

    pub fn n_insert_locks(&self) -> usize {
        self.layout.n_insert_locks as usize
    }

    pub fn insert_lock(&self, i: usize) -> &WalInsertLock {
        assert!(i < self.n_insert_locks());
        // SAFETY: initialized at creation (stride from the layout variant).
        unsafe { &*self.element(Region::InsertLocks, i) }
    }

    pub fn xlog(&self) -> &XLogCtl {
        // SAFETY: zero-initialized XLogCtl (atomics; facts set at creation).
        unsafe { &*self.element(Region::XLogCtl, 0) }
    }

    /// End LSN of the WAL page held in each buffer (0 = none).
    pub fn xlblocks(&self) -> &[AtomicU64] {
        // SAFETY: `n_buffers` zero-initialized AtomicU64s.
        unsafe { self.slice(Region::XlBlocks) }
    }

    /// The lock-free reservation's hand-off table (`prevlink`); empty unless
    /// `wal_reservation = atomic`.
    pub fn prev_links(&self) -> &[PrevLink] {
        // SAFETY: `n_prevlinks` zero-initialized (free) entries.
        unsafe { self.slice(Region::PrevLinks) }
    }

    pub fn xid_state(&self) -> &crate::procarray::XidState {
        // SAFETY: zero-initialized XidState.
        unsafe { &*self.element(Region::XidState, 0) }
    }

    pub fn proc_array(&self) -> &crate::procarray::ProcArrayShared {
        // SAFETY: zero-initialized, its group list head set to
        // INVALID_PROCNO at creation.
        unsafe { &*self.element(Region::ProcArray, 0) }
    }

    /// Member proc numbers of the ProcArray (first `num_members` valid).
    pub fn proc_array_members(&self) -> &[AtomicU32] {
        // SAFETY: `max_procs` zero-initialized u32 atomics.
        unsafe { self.slice(Region::ProcArrayMembers) }
    }

    /// Transaction latency histogram of proc `procno`.
    pub fn latency_histogram(&self, procno: u32) -> &crate::histogram::LatencyHistogram {
        assert!(procno < self.layout.max_procs);
        // SAFETY: zero-initialized histograms (all atomics), one per proc.
        unsafe { &*self.element(Region::Histograms, procno as usize) }
    }

    /// Walsenders, slots and the sync-rep queue (`walsnd`).
    pub fn repl(&self) -> &crate::walsnd::ReplCtl {
        // SAFETY: zero-initialized ReplCtl (atomics; all-zero is its
        // initial state).
        unsafe { &*self.element(Region::Replication, 0) }
    }

    /// `insert_concurrency_per_cpu`'s tokens and queue (`admission`).
    pub fn admission(&self) -> &crate::admission::Admission {
        // SAFETY: zero-initialized Admission (atomics; all-zero is its
        // initial state: every token free, the queue empty).
        unsafe { &*self.element(Region::Admission, 0) }
    }

    /// Each proc's place in the admission queue, indexed by proc number.
    pub fn admission_waiters(&self) -> &[crate::admission::AdmissionWaiter] {
        // SAFETY: `max_procs` zero-initialized (not queued) entries.
        unsafe { self.slice(Region::AdmissionWaiters) }
    }

    /// Each proc's sync-rep wait, indexed by proc number.
    pub fn syncrep_waiters(&self) -> &[crate::walsnd::SyncRepWaiter] {
        // SAFETY: `max_procs` zero-initialized (not waiting) entries.
        unsafe { self.slice(Region::SyncRepWaiters) }
    }

    /// Activity and mechanism counters of proc `procno` (`stats`).
    pub fn proc_stats(&self, procno: u32) -> &crate::stats::ProcStats {
        assert!(procno < self.layout.max_procs);
        // SAFETY: zero-initialized ProcStats (atomics), one per proc.
        unsafe { &*self.element(Region::ProcStats, procno as usize) }
    }

    /// The `lwlock` workload's oracle (a test-only region).
    pub fn lock_test_area(&self) -> &LockTestArea {
        // SAFETY: zero-initialized (a valid LockTestArea).
        unsafe { &*self.element(Region::LockTest, 0) }
    }

    /// Base address of WAL buffer page `i` (8 KiB; pages are contiguous).
    /// Writers must hold the right insertion lock or the page's
    /// initialization rights.
    pub fn wal_page(&self, i: usize) -> *mut u8 {
        assert!(i < self.layout.n_buffers as usize);
        // SAFETY: page `i` lies inside the mapping.
        unsafe { self.element::<crate::layout::WalPage>(Region::WalPages, i) as *mut u8 }
    }

    /// The LWLock context for proc `me`.
    pub fn lock_env(&self, me: u32) -> LockEnv<'_> {
        let s = self.settings();
        LockEnv::new(self.procs(), me, s.lwlock_queue, s.inserting_at)
            .with_counters(&self.proc_stats(me).counters)
    }

    /// Sets the constant WAL facts.
    ///
    /// # Safety
    /// Only right after `create`, before any other process attaches.
    pub unsafe fn set_wal_facts(&self, facts: crate::xlogctl::WalFacts) {
        // SAFETY: the XLogCtl lies at its layout offset; the caller
        // guarantees nobody else reads it yet. The pointer is derived from
        // the mapping's base, not from a shared reference.
        unsafe {
            let x = self.element::<XLogCtl>(Region::XLogCtl, 0);
            std::ptr::addr_of_mut!((*x).facts).write(facts);
        }
    }

    /// Keeps backend slots `0..n` out of the free list: the postmaster
    /// assigns them itself to the worker backends it forks. Call before
    /// forking.
    pub fn reserve_fixed_procs(&self, n: u32) {
        let g = self.proc_global();
        let first_free = if n < self.layout.max_backends {
            n
        } else {
            INVALID_PROCNO
        };
        g.free_head.store(first_free, Ordering::Relaxed);
    }

    /// Enters every WAL buffer page into this process's page tables now
    /// (`MADV_POPULATE_WRITE`, Linux 5.14+). A forked child inherits the
    /// mapping but not its page-table entries, so it otherwise takes one
    /// minor fault per 4 KiB page on first touch; with hundreds of backends
    /// inserting all over the buffers that is a million faults spread over
    /// the first seconds of a run. The kernel fills the entries one page at
    /// a time (about 2 us per page here), so this only pays for processes
    /// that live as long as the server (workers, walwriter), not for a
    /// connection that may run one statement. Returns false (and changes
    /// nothing) where the kernel does not support it.
    pub fn prefault_wal_buffers(&self) -> bool {
        let pages = self.layout.placement(Region::WalPages);
        // SAFETY: the range is the WAL buffer pages inside our own mapping;
        // populating it does not change their contents.
        let rc = unsafe {
            libc::madvise(
                self.base.as_ptr().add(pages.off) as *mut libc::c_void,
                pages.len,
                libc::MADV_POPULATE_WRITE,
            )
        };
        rc == 0
    }

    /// Takes a backend proc slot off the free list for process `pid`
    /// (stored with the slot under the lock: a slot off the list always
    /// names its process, even if it dies right after).
    pub fn alloc_backend_proc(&self, pid: i32) -> Option<u32> {
        let g = self.proc_global();
        g.lock.with(|| {
            let head = g.free_head.load(Ordering::Relaxed);
            if head == INVALID_PROCNO {
                return None;
            }
            let next = self.procs()[head as usize]
                .free_next
                .load(Ordering::Relaxed);
            g.free_head.store(next, Ordering::Relaxed);
            g.sessions.fetch_add(1, Ordering::Relaxed);
            self.procs()[head as usize]
                .pid
                .store(pid, Ordering::Relaxed);
            Some(head)
        })
    }

    /// Returns a backend proc slot to the free list.
    pub fn free_backend_proc(&self, procno: u32) {
        let g = self.proc_global();
        g.lock.with(|| {
            let p = &self.procs()[procno as usize];
            p.pid.store(0, Ordering::Relaxed);
            p.free_next
                .store(g.free_head.load(Ordering::Relaxed), Ordering::Relaxed);
            g.free_head.store(procno, Ordering::Relaxed);
            g.sessions.fetch_sub(1, Ordering::Relaxed);
        });
    }

    /// Connection backends now holding a proc slot (a hint: read without
    /// the lock).
    pub fn sessions(&self) -> u32 {
        self.proc_global().sessions.load(Ordering::Relaxed)
    }
}

impl Drop for Shmem {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; no reference into it outlives
        // `self` (all accessors borrow `self`).
        unsafe { libc::munmap(self.base.as_ptr() as *mut libc::c_void, self.layout.total) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A descriptor of `shm`'s memfd of our own (as a registering process
    /// receives one).
    fn dup_fd(shm: &Shmem) -> OwnedFd {
        // SAFETY: the creator's descriptor is open while `shm` lives.
        let fd = unsafe { BorrowedFd::borrow_raw(shm.raw_fd().unwrap()) };
        fd.try_clone_to_owned().unwrap()
    }

    #[test]
    fn from_fd_validates_the_header() {
        let s = Settings::default();
        let shm = Shmem::create(&s, 4, 7).unwrap();
        let other = Shmem::from_fd(dup_fd(&shm), Some(7)).unwrap();
        assert_eq!(other.layout(), shm.layout());
        assert_eq!(other.settings(), &s);
        assert!(other.raw_fd().is_none(), "an attached process keeps no fd");
        let e = Shmem::from_fd(dup_fd(&shm), Some(8))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("generation 7 (expected 8)"), "{e}");
        // A segment whose magic is wrong is refused with a clear message.
        // SAFETY: test-only write to the header of a segment we created;
        // nothing else uses it.
        unsafe { (*(shm.at::<ShmemHeader>(0))).magic = 0xdead };
        let e = Shmem::from_fd(dup_fd(&shm), None)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("bad magic"), "{e}");
        // A file too small for a header, and one that is not a segment.
        let f = std::fs::File::open("/dev/null").unwrap();
        let e = Shmem::from_fd(f.into(), None).err().unwrap().to_string();
        assert!(e.contains("smaller than a header"), "{e}");
    }

    #[test]
    fn the_segment_is_unnamed_and_the_ended_flag_is_shared() {
        let shm = Shmem::create(&Settings::default(), 2, 3).unwrap();
        let link = std::fs::read_link(format!("/proc/self/fd/{}", shm.raw_fd().unwrap())).unwrap();
        assert!(
            link.to_string_lossy().starts_with("/memfd:walshm"),
            "{link:?}"
        );
        let other = Shmem::from_fd(dup_fd(&shm), Some(3)).unwrap();
        assert!(!other.has_ended());
        shm.mark_ended();
        assert!(other.has_ended());
    }

    #[test]
    fn worker_slots_follow_the_auxiliary_slots_and_reset() {
        let s = Settings {
            max_worker_processes: 2,
            ..Settings::default()
        };
        let shm = Shmem::create(&s, 3, 1).unwrap();
        assert_eq!(shm.max_workers(), 2);
        assert_eq!(shm.worker_procno(0), 3 + NUM_AUX_PROCS);
        assert_eq!(shm.worker_procno(1), 3 + NUM_AUX_PROCS + 1);
        assert_eq!(shm.procs().len(), 3 + NUM_AUX_PROCS as usize + 2);
        let p = &shm.procs()[shm.worker_procno(1) as usize];
        p.pid.store(1234, Ordering::Relaxed);
        p.xid.store(99, Ordering::Relaxed);
        p.sem.post();
        shm.reset_worker_slot(shm.worker_procno(1));
        assert_eq!(p.pid.load(Ordering::Relaxed), 0);
        assert_eq!(p.xid.load(Ordering::Relaxed), 0);
        assert_eq!(p.sem.count(), 0);
        assert_eq!(p.procno(), shm.worker_procno(1));
    }

    #[test]
    fn accessors_find_their_regions_and_the_prev_links_follow_the_variant() {
        let s = Settings {
            wal_reservation: crate::variants::Reservation::Atomic,
            ..Settings::default()
        };
        let shm = Shmem::create(&s, 3, 1).unwrap();
        let l = *shm.layout();
        let off = |p: *const u8| p as usize - shm.base.as_ptr() as usize;
        let at = |r: Region| l.placement(r).off;
        let cases: [(Region, usize); 13] = [
            (Region::ProcGlobal, off(shm.proc_global() as *const _ as _)),
            (
                Region::NamedLocks,
                off(shm.named_lock(NamedLock::XidGen) as *const _ as _),
            ),
            (Region::Procs, off(shm.procs().as_ptr() as _)),
            (
                Region::InsertLocks,
                off(shm.insert_lock(0) as *const _ as _),
            ),
            (Region::XLogCtl, off(shm.xlog() as *const _ as _)),
            (Region::XlBlocks, off(shm.xlblocks().as_ptr() as _)),
            (Region::PrevLinks, off(shm.prev_links().as_ptr() as _)),
            (Region::XidState, off(shm.xid_state() as *const _ as _)),
            (Region::ProcArray, off(shm.proc_array() as *const _ as _)),
            (
                Region::ProcArrayMembers,
                off(shm.proc_array_members().as_ptr() as _),
            ),
            (
                Region::Histograms,
                off(shm.latency_histogram(0) as *const _ as _),
            ),
            (Region::WalPages, off(shm.wal_page(0))),
            (Region::LockTest, off(shm.lock_test_area() as *const _ as _)),
        ];
        for (region, found) in cases {
            assert_eq!(found, at(region), "{region:?}");
        }
        assert_eq!(
            off(shm.wal_page(1)) - off(shm.wal_page(0)),
            WAL_PAGE,
            "pages are contiguous"
        );
        assert_eq!(
            shm.prev_links().len(),
            crate::prevlink::slots_for(s.wal_insert_locks) as usize
        );
        assert_eq!(
            shm.procs().len(),
            3 + NUM_AUX_PROCS as usize + s.max_worker_processes as usize
        );
        assert_eq!(shm.header().n_prevlinks as usize, shm.prev_links().len());
        let spin = Shmem::create(&Settings::default(), 3, 1).unwrap();
        assert!(spin.prev_links().is_empty(), "no table with the spinlock");
        assert!(spin.layout().total <= shm.layout().total);
    }

    /// Kernel release as (major, minor), from /proc.
    fn kernel_version() -> Option<(u32, u32)> {
        let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
        let mut it = r.trim().split(['.', '-']);
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    }

    #[test]
    fn prefault_maps_the_wal_buffers_without_changing_them() {
        if kernel_version().is_some_and(|v| v < (5, 14)) {
            eprintln!("SKIPPED: MADV_POPULATE_WRITE needs Linux 5.14 or later");
            return;
        }
        let shm = Shmem::create(&Settings::default(), 3, 1).unwrap();
        let last = shm.layout().n_buffers as usize - 1;
        // SAFETY: the first and last bytes of the WAL buffers lie inside
        // the mapping; nobody else uses this fresh segment.
        unsafe {
            *shm.wal_page(0) = 0xA5;
            *shm.wal_page(last).add(WAL_PAGE - 1) = 0x5A;
        }
        assert!(
            shm.prefault_wal_buffers(),
            "madvise(MADV_POPULATE_WRITE) failed"
        );
        // SAFETY: as above.
        unsafe {
            assert_eq!(*shm.wal_page(0), 0xA5);
            assert_eq!(*shm.wal_page(last).add(WAL_PAGE - 1), 0x5A);
            assert_eq!(*shm.wal_page(last / 2), 0);
        }
    }

    #[test]
    fn free_list_hands_out_each_backend_slot_once() {
        let shm = Shmem::create(&Settings::default(), 3, 1).unwrap();
        shm.reserve_fixed_procs(1);
        let a = shm.alloc_backend_proc(1).unwrap();
        let b = shm.alloc_backend_proc(2).unwrap();
        assert_eq!((a, b), (1, 2));
        assert_eq!(shm.alloc_backend_proc(3), None);
        assert_eq!(shm.sessions(), 2);
        shm.free_backend_proc(a);
        assert_eq!(shm.sessions(), 1);
        assert_eq!(shm.alloc_backend_proc(4), Some(a));
        assert_eq!(shm.sessions(), 2);
    }
}
