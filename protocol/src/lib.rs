//! walshm's server side of the PostgreSQL frontend/backend protocol v3, so
//! that psql, pgbench and libpq programs can talk to walshm.
//!
//! The postmaster accepts a connection, forks, and the backend calls
//! [`startup`] (negotiation and authentication) and then [`serve`] (simple
//! and extended query protocol) with its [`Session`], the object that really
//! writes WAL. [`reject_with`] is the postmaster's refusal of a client it
//! will not fork a backend for (max_connections, recovery running).
//!
//! Invariants: no client input can panic this crate; malformed messages end
//! the connection with FATAL 08P01; SQL errors keep it usable. The
//! transaction contract between `serve` and a `Session` is documented in
//! [`Session`]'s module.
#![forbid(unsafe_code)]

mod codec;
mod error;
pub mod limits;
mod named;
mod plancache;
pub mod replication;
mod scram;
mod serve;
mod session;
mod settings;
pub mod sql;
mod startup;
#[doc(hidden)]
pub mod testing;
mod wire;

pub use error::{sqlstate, SqlError};
pub use scram::{constant_time_eq, verifier_for_password, ClientExchange, Verifier};
pub use serve::{serve, simple_query_reply};
pub use session::{
    ActivityRow, ChangeRow, ChangesArgs, ControlRow, LogicalSlotColumns, ReplicationRow,
    ReplicationSlotRow, Session, SettingRow, Termination, WalFileRow, WalReceiverRow, WalStatsRow,
};
pub use settings::DEFAULT_SERVER_VERSION;
pub use startup::{
    crash_notice_bytes, error_response_bytes, random_bytes, reject_with, send_error_after_startup,
    startup, startup_with, ReplicationMode, ServerParams, Startup, StartupInfo, Transport,
};
