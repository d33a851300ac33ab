//! The one insertion API: what a process that writes WAL records
//! calls, whether it is a built-in workload (`procs/worker.rs`) or a user's
//! program through the `worker/` library. A [`Session`] wraps the process's
//! [`Xact`] (and through it its `Xlog` and `ProcArray`) and offers
//! non-transactional messages, transactions (begin, transactional messages,
//! commit, abort), flushes and the insert and flush positions.
//!
//! Invariants:
//! - a transaction is open between `begin` and `commit`/`abort`; its XID is
//!   assigned by its first transactional message (or `xid`), so a
//!   transaction that wrote nothing writes no COMMIT or ABORT record;
//! - `commit` returns once the commit is as durable as `synchronous_commit`
//!   says (with `on`: flushed), and only then clears the XID;
//! - in no-I/O mode (`IoMode::ViaWalwriter`), once the server generation
//!   ended every call fails with [`ApiError::GenerationEnded`], and the
//!   session touches no lock of that generation any more: a lock may have
//!   been held by a process that died;
//! - the hot path allocates nothing: the record buffer is reused.

use crate::admission::Turn;
use crate::context::ProcContext;
use crate::xact::Xact;
use crate::xlog::{Inserted, Xlog};
use std::fmt;
use walformat::{Lsn, RecordBuf};

/// Largest message payload accepted (64 MiB; a record may be up to about
/// 1 GiB, but a message that large would hold an insertion lock across
/// thousands of buffer pages).
pub const MAX_PAYLOAD: usize = 64 << 20;

/// Longest message prefix accepted (64 KiB: a prefix names a channel or a
/// topic; PostgreSQL sets no limit below a record's 1 GiB, but consumers
/// copy the prefix of every message they skip).
pub const MAX_PREFIX: usize = 64 << 10;

/// Why a call did not do what it was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiError {
    /// The server generation this process attached to ended (crash restart
    /// or shutdown): nothing of this call reached the WAL durably.
    GenerationEnded,
    /// `emit_tx`, `commit` or `abort` without `begin`.
    NoTransaction,
    /// `begin` inside an open transaction.
    TransactionOpen,
    /// Payload larger than [`MAX_PAYLOAD`].
    PayloadTooLarge(usize),
    /// A prefix holding a NUL byte (the record stores it NUL-terminated).
    BadPrefix,
    /// A prefix longer than [`MAX_PREFIX`].
    PrefixTooLong(usize),
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::GenerationEnded => write!(
                f,
                "the server restarted or shut down since this process attached; attach again"
            ),
            ApiError::NoTransaction => write!(f, "no transaction is open (call begin first)"),
            ApiError::TransactionOpen => {
                write!(
                    f,
                    "a transaction is already open (commit or abort it first)"
                )
            }
            ApiError::PayloadTooLarge(n) => write!(
                f,
                "payload of {n} bytes is over the limit of {MAX_PAYLOAD} bytes"
            ),
            ApiError::BadPrefix => write!(f, "message prefix contains a NUL byte"),
            ApiError::PrefixTooLong(n) => write!(
                f,
                "message prefix of {n} bytes is over the limit of {MAX_PREFIX} bytes"
            ),
        }
    }
}

impl std::error::Error for ApiError {}

/// One process's writing session (see the module header).
pub struct Session<'a> {
    ctx: &'a ProcContext<'a>,
    xact: Xact<'a>,
    /// Where a message that continues onto another WAL page is built
    /// (`Xlog::insert_message`); reused, so it allocates once.
    rec: RecordBuf,
    in_transaction: bool,
    /// Our turn at inserting (`insert_concurrency_per_cpu`).
    turn: Turn<'a>,
    /// No-I/O mode: the generation ended; every call fails.
    ended: bool,
    no_io: bool,
}

impl<'a> Session<'a> {
    /// Joins the ProcArray through a new `Xact`.
    pub fn new(ctx: &'a ProcContext<'a>) -> Session<'a> {
        Session {
            ctx,
            xact: Xact::new(ctx),
            rec: RecordBuf::default(),
            in_transaction: false,
            turn: Turn::new(ctx),
            ended: false,
            no_io: matches!(ctx.io, crate::context::IoMode::ViaWalwriter(_)),
        }
    }

    /// Writes a non-transactional logical message
    /// (`pg_logical_emit_message(false, prefix, payload)`); no flush.
    #[inline]
    pub fn emit(&mut self, prefix: &str, payload: &[u8]) -> Result<Inserted, ApiError> {
        self.check_alive()?;
        check_message(prefix, payload)?;
        let msg = message(0, false, prefix, payload)?;
        self.turn.before_insert();
        let at = self.xact.xlog.insert_message(&msg, &mut self.rec);
        self.check_not_stale()?;
        Ok(at)
    }

    /// Starts a transaction (takes its snapshot).
    pub fn begin(&mut self) -> Result<(), ApiError> {
        self.check_alive()?;
        if self.in_transaction {
            return Err(ApiError::TransactionOpen);
        }
        self.xact.begin();
        self.in_transaction = true;
        Ok(())
    }

    /// Writes a transactional logical message in the open transaction,
    /// assigning its XID on first use.
    #[inline]
    pub fn emit_tx(&mut self, prefix: &str, payload: &[u8]) -> Result<Inserted, ApiError> {
        self.check_alive()?;
        if !self.in_transaction {
            return Err(ApiError::NoTransaction);
        }
        check_message(prefix, payload)?;
        let xid = self.xact.xid();
        let msg = message(xid, true, prefix, payload)?;
        self.turn.before_insert();
        let at = self.xact.insert_message(&msg, &mut self.rec);
        self.check_not_stale()?;
        Ok(at)
    }

    /// The open transaction's XID, assigning one (`txid_current()`).
    pub fn xid(&mut self) -> Result<u64, ApiError> {
        self.check_alive()?;
        if !self.in_transaction {
            return Err(ApiError::NoTransaction);
        }
        Ok(self.xact.full_xid())
    }

    /// Commits the open transaction; returns where its COMMIT record
    /// landed, or None if it had no XID (then no record is written). Durable
    /// as `synchronous_commit` says when this returns.
    pub fn commit(&mut self) -> Result<Option<Inserted>, ApiError> {
        self.check_alive()?;
        if !self.in_transaction {
            return Err(ApiError::NoTransaction);
        }
        self.in_transaction = false;
        if self.xact.commit_waits() {
            // No token across the flush wait: a group flush's commits
            // would wait for each other's tokens.
            self.turn.pause();
        }
        // A commit record alone needs no token: a loop of commits that
        // wrote nothing else (txid) lives on ProcArrayLock, whose group
        // clear gathers the more commits the more processes run (txid at
        // 256 clients: 0.94x when admitted).
        let at = self.xact.commit();
        self.check_not_stale()?;
        Ok(at)
    }

    /// Aborts the open transaction; writes an ABORT record if it had an XID.
    pub fn abort(&mut self) -> Result<Option<Inserted>, ApiError> {
        self.check_alive()?;
        if !self.in_transaction {
            return Err(ApiError::NoTransaction);
        }
        self.in_transaction = false;
        let at = self.xact.abort();
        self.check_not_stale()?;
        Ok(at)
    }

    /// Makes WAL up to `lsn` durable (at most up to the insert position).
    pub fn flush(&mut self, lsn: Lsn) -> Result<(), ApiError> {
        self.check_alive()?;
        self.turn.pause();
        let upto = lsn.min(self.xact.xlog.insert_lsn());
        self.xact.xlog.flush(upto);
        self.check_not_stale()
    }

    /// End of reserved WAL.
    pub fn insert_lsn(&self) -> Lsn {
        self.xact.xlog.insert_lsn()
    }

    /// End of flushed WAL.
    pub fn flush_lsn(&self) -> Lsn {
        self.xact.xlog.flush_lsn()
    }

    pub fn in_transaction(&self) -> bool {
        self.in_transaction
    }

    /// Whether the server generation ended (no-I/O mode; always false for
    /// a forked backend).
    pub fn generation_ended(&self) -> bool {
        self.ended || self.ctx.generation_ended()
    }

    /// Sets `synchronous_commit` for this session.
    pub fn set_synchronous(&mut self, on: bool) {
        self.xact.set_synchronous(on);
    }

    /// Ends the session: aborts an open transaction and leaves the
    /// ProcArray — unless the generation ended, when nothing of it may be
    /// touched any more.
    pub fn shutdown(&mut self) {
        if self.generation_ended() {
            return;
        }
        if self.in_transaction {
            let _ = self.abort();
        }
        self.turn.pause();
        self.xact.shutdown();
    }

    #[inline]
    fn check_alive(&mut self) -> Result<(), ApiError> {
        if self.no_io && (self.ended || self.ctx.generation_ended()) {
            self.ended = true;
            return Err(ApiError::GenerationEnded);
        }
        Ok(())
    }

    /// After a call: a wait for the walwriter, or a lock wait, that the
    /// end of the generation cut short means the call did not happen.
    #[inline]
    fn check_not_stale(&mut self) -> Result<(), ApiError> {
        if self.no_io && (self.xact.xlog.take_stale() | self.ctx.env.take_cut_short()) {
            self.ended = true;
            return Err(ApiError::GenerationEnded);
        }
        Ok(())
    }
}

/// Writes PostgreSQL's XLOG RESTORE_POINT record named `name`, stamped
/// now (`pg_create_restore_point`, PostgreSQL's XLogRestorePoint); no
/// flush, as there. Archive recovery can stop after it
/// (`recovery_target_name`, see `crate::recovery_target`). The error is
/// PostgreSQL's message for a name of `walformat::MAXFNAMELEN` bytes or
/// more (or holding a NUL byte, which a PostgreSQL text cannot).
pub fn create_restore_point(xlog: &mut Xlog, name: &str) -> Result<Inserted, String> {
    let Some(mut rec) = walformat::restore_point_record(walformat::pg_now_us(), name) else {
        return Err(match name.len() < walformat::MAXFNAMELEN {
            true => "restore point name contains a NUL byte".to_string(),
            false => format!(
                "value too long for restore point (maximum {} characters)",
                walformat::MAXFNAMELEN - 1
            ),
        });
    };
    Ok(xlog.insert(&mut rec))
}

/// A logical message's parts (`Xlog::insert_message` assembles it in the
/// WAL buffer); errors if the record would be too long.
fn message<'p>(
    xid: u32,
    transactional: bool,
    prefix: &'p str,
    payload: &'p [u8],
) -> Result<walformat::LogicalMessage<'p>, ApiError> {
    walformat::LogicalMessage::try_new(xid, transactional, prefix, payload)
        .map_err(|_| ApiError::PayloadTooLarge(payload.len()))
}

/// Validates a message before anything is written.
#[inline]
fn check_message(prefix: &str, payload: &[u8]) -> Result<(), ApiError> {
    if payload.len() > MAX_PAYLOAD {
        return Err(ApiError::PayloadTooLarge(payload.len()));
    }
    if prefix.len() > MAX_PREFIX {
        return Err(ApiError::PrefixTooLong(prefix.len()));
    }
    if prefix.as_bytes().contains(&0) {
        return Err(ApiError::BadPrefix);
    }
    Ok(())
}
