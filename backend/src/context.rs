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
}

impl<'a> ProcContext<'a> {
    /// The context of proc `procno` (a slot this process owns).
    pub fn new(shm: &'a Shmem, procno: u32, datadir: &Path) -> ProcContext<'a> {
        ProcContext {
            shm,
            procno,
            me: &shm.procs()[procno as usize],
            env: shm.lock_env(procno),
            settings: *shm.settings(),
            datadir: datadir.to_path_buf(),
            stats: stats::enter_proc(shm, procno, stats::slot_backend_type(shm, procno)),
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
