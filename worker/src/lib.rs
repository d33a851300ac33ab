//! `walshm`: attach a process to a running walshm server and write, commit
//! and read WAL through its shared memory, from Rust or, through
//! the C ABI of `ffi` (`include/walshm.h`), from any language.
//!
//! ```no_run
//! let mut w = walshm::Worker::attach(Some(std::path::Path::new("/tmp/data")))?;
//! let lsn = w.emit("app", b"not transactional")?;
//! w.begin()?;
//! w.emit_tx("app", b"part of a transaction")?;
//! let commit_lsn = w.commit()?; // durable as synchronous_commit says
//! w.detach()?;
//! # let _ = (lsn, commit_lsn);
//! # Ok::<(), walshm::Error>(())
//! ```
//!
//! Design and invariants:
//! - attaching registers with the postmaster over its Unix socket (or, for
//!   a supervised worker, the inherited registration descriptor), maps the
//!   segment it passes, writes our pid into the proc slot it assigned and
//!   builds a no-I/O `ProcContext`: this process never writes or syncs a
//!   WAL file; flushes are done for it by the walwriter (see
//!   `backend/src/xlog/via_walwriter.rs`);
//! - every operation goes through `backend::api::Session`, the same
//!   insertion API the built-in workloads use;
//! - once the server generation ends (crash restart, shutdown), every call
//!   returns [`Error::ServerRestarted`] and nothing of that generation's
//!   locks is touched any more; the program detaches and attaches again;
//! - a supervised worker (started by `postmaster start --worker`) gets a
//!   SIGTERM handler (if SIGTERM was left at its default) that only sets a
//!   flag: calls then return [`Error::ShuttingDown`], the program detaches
//!   and exits 0;
//! - detach aborts an open transaction, leaves the ProcArray, frees the
//!   slot and tells the postmaster; dropping a `Worker` detaches too;
//! - a `Worker` belongs to the process that attached it: in a `fork`ed
//!   child every call that would act on the slot, the transaction or the
//!   registration returns [`Error::ForkedChild`], and detach or drop there
//!   releases only the child's copies (the parent's attachment goes on
//!   untouched; the child attaches on its own if it needs the server).

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod attach;
mod error;
pub mod ffi;
mod reader;
mod slot;

pub use error::{Error, Result};
pub use reader::{Committed, Message, ReadMode, Reader, Record, RecordKind};
pub use slot::SlotReader;
pub use walformat::{format_lsn, parse_lsn, Lsn};

use backend::api::Session;
use backend::context::ProcContext;
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};

/// Largest message payload (64 MiB).
pub const MAX_PAYLOAD: usize = backend::api::MAX_PAYLOAD;
/// Longest message prefix (64 KiB).
pub const MAX_PREFIX: usize = backend::api::MAX_PREFIX;

/// A process attached to a walshm server (see the crate header).
pub struct Worker {
    // `session` borrows `*ctx`, `ctx` borrows the mapping owned by
    // `*link`; both are boxed so their addresses do not move with the
    // `Worker`. They are dropped explicitly, in that order, by
    // `detach_inner` (the only place that drops them), before the link
    // unmaps the segment.
    session: ManuallyDrop<Session<'static>>,
    ctx: ManuallyDrop<Box<ProcContext<'static>>>,
    link: ManuallyDrop<Box<attach::Link>>,
    data_dir: PathBuf,
    detached: bool,
    /// Attached while the server was a standby: reads only (its WAL
    /// handle names the standby's timeline, see [`Error::ReadOnly`]).
    read_only: bool,
}

impl Worker {
    /// Attaches to the server running in `data_dir`; `None`: the server
    /// that started this process (`postmaster start --worker`, through the
    /// `WALSHM_WORKER_FD` environment variable).
    pub fn attach(data_dir: Option<&Path>) -> Result<Worker> {
        let link = Box::new(attach::Link::connect(data_dir)?);
        let data_dir = link.data_dir().to_path_buf();
        // SAFETY: the mapping lives in `*link`, a box the `Worker` owns and
        // drops only after `ctx` and `session` (`detach_inner`), and never
        // moves or replaces while they exist; the 'static lifetime never leaves
        // this struct (no method hands out a reference with it).
        let shm: &'static shmem::Shmem = unsafe { &*(link.shm() as *const shmem::Shmem) };
        // SAFETY: as for `shm`: `*link` is boxed and outlives `ctx`.
        let watch: &'static attach::Link = unsafe { &*(&*link as *const attach::Link) };
        let ctx = Box::new(ProcContext::without_io(
            shm,
            link.procno(),
            &data_dir,
            watch,
        ));
        ctx.me
            .pid
            .store(std::process::id() as i32, shmem::sync::Ordering::Relaxed);
        // SAFETY: as above: `*ctx` is boxed, owned by the `Worker` and
        // dropped after `session`.
        let ctx_ref: &'static ProcContext<'static> =
            unsafe { &*(&*ctx as *const ProcContext<'static>) };
        let read_only = shm.repl().walrcv.in_recovery();
        let session = Session::new(ctx_ref);
        Ok(Worker {
            read_only,
            session: ManuallyDrop::new(session),
            ctx: ManuallyDrop::new(ctx),
            link: ManuallyDrop::new(link),
            data_dir,
            detached: false,
        })
    }

    /// Writes a non-transactional logical message; returns its LSN. Not
    /// flushed (see [`Worker::flush`]).
    #[inline]
    pub fn emit(&mut self, prefix: &str, payload: &[u8]) -> Result<Lsn> {
        self.check_writable()?;
        Ok(self.session.emit(prefix, payload)?.start)
    }

    /// Starts a transaction.
    pub fn begin(&mut self) -> Result<()> {
        self.check_writable()?;
        Ok(self.session.begin()?)
    }

    /// Writes a transactional logical message in the open transaction
    /// (its first one assigns the XID); returns its LSN.
    #[inline]
    pub fn emit_tx(&mut self, prefix: &str, payload: &[u8]) -> Result<Lsn> {
        self.check_writable()?;
        Ok(self.session.emit_tx(prefix, payload)?.start)
    }

    /// Commits; returns the start of the COMMIT record (0 if the
    /// transaction wrote nothing: then there is no record). With
    /// `synchronous_commit = on` the commit is on disk when this returns.
    pub fn commit(&mut self) -> Result<Lsn> {
        self.check_writable()?;
        Ok(self.session.commit()?.map_or(0, |at| at.start))
    }

    /// Aborts the open transaction (an ABORT record if it wrote anything).
    pub fn abort(&mut self) -> Result<()> {
        self.check_writable()?;
        self.session.abort()?;
        Ok(())
    }

    /// Makes WAL up to `lsn` durable (capped at the insert position).
    pub fn flush(&mut self, lsn: Lsn) -> Result<()> {
        self.check_writable()?;
        Ok(self.session.flush(lsn)?)
    }

    /// End of reserved WAL.
    pub fn insert_lsn(&self) -> Lsn {
        self.session.insert_lsn()
    }

    /// End of flushed WAL.
    pub fn flush_lsn(&self) -> Lsn {
        self.session.flush_lsn()
    }

    /// Whether a transaction is open.
    pub fn in_transaction(&self) -> bool {
        self.session.in_transaction()
    }

    /// Whether the server asked this supervised worker to stop (SIGTERM).
    pub fn shutdown_requested(&self) -> bool {
        attach::shutdown_requested()
    }

    /// Whether the server generation we attached to has ended.
    pub fn server_restarted(&self) -> bool {
        self.session.generation_ended()
    }

    /// The data directory of the server.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The proc slot number assigned to us.
    pub fn procno(&self) -> u32 {
        self.ctx.procno
    }

    /// A reader of the WAL from `from` (0: the oldest segment) up to the
    /// server's flush position; it reports [`Error::ServerRestarted`] once
    /// this generation ends.
    pub fn reader(&self, from: Lsn) -> Result<Reader<'_>> {
        self.reader_in(from, ReadMode::Flushed)
    }

    /// A reader of the WAL from `from` (0: the oldest segment) that
    /// returns records as soon as they are completely inserted, before they
    /// are durable (a crash may take them back: it reports
    /// [`Error::ServerRestarted`] once this generation ends).
    pub fn reader_inserted(&self, from: Lsn) -> Result<Reader<'_>> {
        self.reader_in(from, ReadMode::Inserted)
    }

    /// A reader bounded as `mode` says ([`Worker::reader`],
    /// [`Worker::reader_inserted`]).
    pub fn reader_in(&self, from: Lsn, mode: ReadMode) -> Result<Reader<'_>> {
        self.link.check_owner()?;
        Reader::attached(&self.data_dir, from, self.link.shm(), &**self.link, mode)
    }

    /// Detaches: aborts an open transaction, leaves the ProcArray, frees
    /// the proc slot and tells the postmaster. After a server restart this
    /// only closes the connection (nothing of the old generation is
    /// touched). In a forked child it releases only the child's copies
    /// (see the crate header).
    pub fn detach(mut self) -> Result<()> {
        self.detach_inner()
    }

    fn detach_inner(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.detached, true) {
            return Ok(());
        }
        if !self.link.owned_here_strictly() {
            self.release_in_child();
            return Ok(());
        }
        self.session.shutdown();
        if !self.session.generation_ended() {
            self.ctx.me.pid.store(0, shmem::sync::Ordering::Relaxed);
        }
        // SAFETY: `detached` was false, so these were never dropped, and
        // nothing uses them after this (every later call of detach_inner
        // returns above; `detach` and `drop` are the only callers and end
        // the Worker). Order: the borrowers first, then the mapping.
        let link = unsafe {
            ManuallyDrop::drop(&mut self.session);
            ManuallyDrop::drop(&mut self.ctx);
            ManuallyDrop::take(&mut self.link)
        };
        link.detach()
    }

    /// Detach in a forked child: the session and context (whose drops
    /// would touch the parent's slot, admission token and statistics) are
    /// leaked, and the link releases only the child's copies.
    fn release_in_child(&mut self) {
        // SAFETY: `detached` was false, so `link` was never taken; the
        // session and context that borrow it are never dropped or used
        // again (`detached` is now true), so they cannot outlive it in
        // any use.
        let link = unsafe { ManuallyDrop::take(&mut self.link) };
        link.release_local();
    }

    #[inline]
    /// [`Self::check_running`], and not attached to a standby.
    fn check_writable(&self) -> Result<()> {
        self.check_running()?;
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        Ok(())
    }

    fn check_running(&self) -> Result<()> {
        self.link.check_owner()?;
        if attach::shutdown_requested() {
            return Err(Error::ShuttingDown);
        }
        Ok(())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.detach_inner();
    }
}
