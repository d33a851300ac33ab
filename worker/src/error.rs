//! The worker library's error type: one enum, every variant a value with a
//! clear message (`Display`), never a panic. The C ABI turns them into
//! `-1` plus the message `walshm_error` returns.

use backend::api::ApiError;
use std::fmt;

/// What went wrong in a worker call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// Attaching failed: no server in the directory, a full server, a
    /// refused registration, a stale segment... (the message says which).
    Attach(String),
    /// The server restarted (crash restart) or shut down since this process
    /// attached: nothing of the call reached the WAL; attach again.
    ServerRestarted,
    /// A supervised worker got SIGTERM: the server is shutting down; detach
    /// and exit 0.
    ShuttingDown,
    /// `emit_tx`, `commit` or `abort` with no open transaction.
    NoTransaction,
    /// `begin` inside an open transaction.
    TransactionOpen,
    /// Payload over [`crate::MAX_PAYLOAD`] bytes.
    PayloadTooLarge(usize),
    /// Prefix with a NUL byte (or, through the C ABI, not UTF-8).
    BadPrefix,
    /// A bad argument through the C ABI (null pointer, invalid handle...).
    InvalidArgument(String),
    /// Reading the WAL failed (the message names the file and LSN).
    Read(String),
    /// A call on a handle from a `fork`ed child of the process that
    /// attached it (`owner`): the slot and transaction are the parent's.
    ForkedChild { owner: u32 },
    /// Prefix over [`crate::MAX_PREFIX`] bytes.
    PrefixTooLong(usize),
    /// A slot operation was refused (the message says why, with
    /// PostgreSQL's SQLSTATE: duplicate, unknown, in use, invalidated).
    Slot(String),
    /// A write (or slot change) by a worker that attached to a standby:
    /// such an attachment may read WAL, never write it, also after the
    /// standby's promotion (attach again then).
    ReadOnly,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Attach(m) => write!(f, "could not attach to the walshm server: {m}"),
            Error::ServerRestarted => write!(
                f,
                "server restarted: the walshm server restarted or shut down since this process attached; detach and attach again"
            ),
            Error::ShuttingDown => write!(
                f,
                "server is shutting down: detach and exit"
            ),
            Error::NoTransaction => write!(f, "no transaction is open (call begin first)"),
            Error::TransactionOpen => {
                write!(f, "a transaction is already open (commit or abort it first)")
            }
            Error::PayloadTooLarge(n) => write!(
                f,
                "payload of {n} bytes is over the limit of {} bytes",
                crate::MAX_PAYLOAD
            ),
            Error::BadPrefix => write!(f, "message prefix must be UTF-8 without NUL bytes"),
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::Read(m) => write!(f, "could not read WAL: {m}"),
            Error::ForkedChild { owner } => write!(
                f,
                "this handle belongs to process {owner}, which attached it; process {} is a forked child and must attach on its own",
                std::process::id()
            ),
            Error::PrefixTooLong(n) => write!(
                f,
                "message prefix of {n} bytes is over the limit of {} bytes",
                crate::MAX_PREFIX
            ),
            Error::Slot(m) => write!(f, "{m}"),
            Error::ReadOnly => write!(
                f,
                "cannot write WAL: this worker attached to a standby (in recovery), which may be read but not written; attach again after its promotion"
            ),
        }
    }
}

impl std::error::Error for Error {}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Error {
        match e {
            ApiError::GenerationEnded => Error::ServerRestarted,
            ApiError::NoTransaction => Error::NoTransaction,
            ApiError::TransactionOpen => Error::TransactionOpen,
            ApiError::PayloadTooLarge(n) => Error::PayloadTooLarge(n),
            ApiError::BadPrefix => Error::BadPrefix,
            ApiError::PrefixTooLong(n) => Error::PrefixTooLong(n),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
