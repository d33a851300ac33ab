//! The per-process context: who this process is (its proc number and proc
//! slot), its LWLock context, the settings it runs with and the data
//! directory. Each process body (`procs/`, the walwriter) builds one and
//! lends it to the library parts: the WAL (`Xlog`), the ProcArray and the
//! transaction code borrow it, so none of them owns what the others need.
//!
//! Invariants: one context per process, alive as long as everything that
//! borrows it; its lock context is the process's own (it records the
//! LWLocks this process holds), so it is never shared between processes
//! or threads; `settings` is the copy of the shared settings taken when
//! the context was built (they do not change while a process runs).
//!
//! I/O mode: a process forked by the postmaster writes and
//! fsyncs WAL itself ([`IoMode::Direct`]). A library worker runs in
//! [`IoMode::ViaWalwriter`]: it never opens a WAL file; a flush, or a
//! buffer page whose old content is not yet written, is asked of the
//! walwriter (`Proc::flush_wanted` + the walwriter latch) and waited for on
//! the proc's semaphore, with bounded waits that re-check whether the
//! server generation it mapped has ended, and — after each timeout —
//! whether the server is gone altogether ([`ServerWatch`]). Reason: after a crash restart an
//! external process may still map the old segment; it must not be able to
//! write that generation's stale pages into pg_wal.
//!
//! Lock waits of a library worker end with the generation too: its lock
//! context carries the segment header's `ended` flag (and this thread's
//! spinlock waits watch it, through `shmem::spin::install_generation_flag`),
//! so a wait on a lock whose holder was killed stops at the crash restart
//! instead of hanging or panicking (`shmem::lwlock`, "Ended generations").
//! A forked process gets no flag: it dies with its generation.

use shmem::lwlock::LockEnv;
use shmem::proc::Proc;
use shmem::segment::AuxProc;
use shmem::settings::Settings;
use shmem::stats::{self, ProcEntry};
use shmem::Shmem;
use std::path::{Path, PathBuf};

/// What every module of a process borrows (see the module header).
pub struct ProcContext<'a> {
    pub shm: &'a Shmem,
    /// Our proc number: the index of our proc slot.
    pub procno: u32,
    /// Our proc slot (PGPROC).
    pub me: &'a Proc,
    /// Our LWLock context.
    pub env: LockEnv<'a>,
    pub settings: Settings,
    pub datadir: PathBuf,
    /// Our statistics slot: our wait events and counters go there while
    /// the context lives (`shmem::stats`).
    pub stats: ProcEntry<'a>,
    /// Who writes WAL for this process (see the module header).
    pub io: IoMode<'a>,
    /// A library worker's spinlock waits watch the generation flag while
    /// this lives (on the thread that built the context).
    _spin_watch: Option<shmem::spin::InstalledFlag<'a>>,
    /// This thread's spinlocks are counted in our proc slot's
    /// critical-section record while this lives (`shmem::crit`).
    _crit: shmem::waitevent::Installed<'a, shmem::crit::CritSlot>,
}

/// Who writes and flushes WAL for a process (see the module header).
#[derive(Clone, Copy)]
pub enum IoMode<'a> {
    /// The process writes and fsyncs WAL files itself.
    Direct,
    /// The walwriter writes for it; the watch tells when the server
    /// generation of the mapped segment is over, which ends every wait
    /// with an error.
    ViaWalwriter(&'a dyn ServerWatch),
}

/// How a no-I/O process learns that its server generation is over.
pub trait ServerWatch {
    /// The generation ended (crash restart or shutdown): cheap, checked on
    /// every call.
    fn generation_ended(&self) -> bool;
    /// The server is gone (its postmaster died, or dropped us): may cost a
    /// system call, checked only after a wait timed out; when true, the
    /// generation counts as ended from then on.
    fn server_gone(&self) -> bool;
}

impl<'a> ProcContext<'a> {
    /// The context of proc `procno` (a slot this process owns).
    pub fn new(shm: &'a Shmem, procno: u32, datadir: &Path) -> ProcContext<'a> {
        let me = &shm.procs()[procno as usize];
        ProcContext {
            shm,
            procno,
            me,
            env: shm.lock_env(procno),
            settings: *shm.settings(),
            datadir: datadir.to_path_buf(),
            stats: stats::enter_proc(shm, procno, stats::slot_backend_type(shm, procno)),
            io: IoMode::Direct,
            _spin_watch: None,
            _crit: shmem::crit::install(&me.crit),
        }
    }

    /// The context of a library worker on proc `procno`: no WAL file I/O
    /// (see the module header).
    pub fn without_io(
        shm: &'a Shmem,
        procno: u32,
        datadir: &Path,
        watch: &'a dyn ServerWatch,
    ) -> ProcContext<'a> {
        let ended = &shm.header().ended;
        let mut ctx = ProcContext {
            io: IoMode::ViaWalwriter(watch),
            _spin_watch: Some(shmem::spin::install_generation_flag(ended)),
            ..ProcContext::new(shm, procno, datadir)
        };
        ctx.env.set_generation_flag(ended);
        ctx
    }

    /// Whether the server generation this process mapped has ended (always
    /// false for a process the postmaster forked: it dies with it).
    pub fn generation_ended(&self) -> bool {
        match self.io {
            IoMode::Direct => false,
            IoMode::ViaWalwriter(w) => w.generation_ended(),
        }
    }

    /// Whether the server is gone (see [`ServerWatch::server_gone`]).
    pub fn server_gone(&self) -> bool {
        match self.io {
            IoMode::Direct => false,
            IoMode::ViaWalwriter(w) => w.server_gone(),
        }
    }

    /// The context of auxiliary process `which` (walwriter, checkpointer).
    pub fn aux(shm: &'a Shmem, which: AuxProc, datadir: &Path) -> ProcContext<'a> {
        ProcContext::new(shm, shm.aux_procno(which), datadir)
    }

    /// `DATADIR/pg_wal`.
    pub fn pg_wal(&self) -> PathBuf {
        self.datadir.join("pg_wal")
    }
}
