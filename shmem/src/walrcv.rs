//! A standby's shared state (PostgreSQL's WalRcvData plus the part of
//! XLogRecoveryCtl that sessions read): what the walreceiver received and
//! flushed, what the startup process replayed, and whether the server is
//! still in recovery. One [`WalRcvShared`], inside the `ReplCtl` region;
//! all-zero is its valid initial state ("not in recovery", nothing
//! received).
//!
//! Writers (no lock: each field has one writer at a time):
//! * the startup process: `recovery` (set to [`RECOVERY_STANDBY`] before it
//!   tells the postmaster it is a standby, cleared as the very last step of
//!   a promotion), `replayed_upto`, `replay_tli`, `replayed_at_us`,
//!   `start_lsn`/`start_tli` (where the walreceiver is to begin), and
//!   `received_tli` once, before the walreceiver is forked;
//! * the walreceiver: everything else (`received_tli` when it follows the
//!   primary onto a newer timeline).
//!
//! Orderings:
//! * `recovery`: the startup process stores the new timeline into the WAL
//!   facts and then `recovery = 0` with Release; a session that loads 0
//!   with Acquire ([`WalRcvShared::in_recovery`]) sees that timeline and
//!   the installed insert position before it builds its WAL handle.
//! * `flushed_upto`: the walreceiver stores it with Release after the
//!   fdatasync of the bytes below it, then sets `startup_latch`; the
//!   startup process loads it with Acquire before it reads those bytes
//!   from the files (the page cache holds them: it is one machine).
//! * `received_tli`: the walreceiver writes the new timeline's history
//!   file, then stores it with Release; the startup process loads it with
//!   Acquire before it reads that file.
//! * `replayed_upto`: the startup process stores it with Release after
//!   the restartpoint it covers is in the control file; library readers
//!   load it with Acquire (`backend::walread::flushed_upto`) before they
//!   read the WAL below it. Then it sends the walreceiver SIGURG, so the
//!   apply position is reported at once.
//! * Where streaming starts (`start_lsn`, `start_tli`): stored Relaxed by
//!   the startup process before its Release store of `recovery`; the
//!   walreceiver loads `recovery` with Acquire first.
//! * Monitoring fields (times, conninfo, host) are Relaxed: a monitor may
//!   see one update before another, as in PostgreSQL's view.

use crate::sema::Latch;
use crate::sync::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering};
use crate::walsnd::ShName;

/// `recovery` values.
pub const RECOVERY_NONE: u32 = 0;
/// The startup process follows a primary (standby.signal); sessions are
/// read-only.
pub const RECOVERY_STANDBY: u32 = 1;

/// `state` values (pg_stat_wal_receiver.status).
pub mod rcv_state {
    pub const STOPPED: u32 = 0;
    pub const STARTING: u32 = 1;
    pub const STREAMING: u32 = 2;
    pub const WAITING: u32 = 3;
    pub const STOPPING: u32 = 4;

    pub fn name(state: u32) -> &'static str {
        match state {
            STARTING => "starting",
            STREAMING => "streaming",
            WAITING => "waiting",
            STOPPING => "stopping",
            _ => "stopped",
        }
    }
}

/// The standby's shared state (see the module header).
#[repr(C)]
#[derive(Default)]
pub struct WalRcvShared {
    /// [`RECOVERY_NONE`] or [`RECOVERY_STANDBY`].
    pub recovery: AtomicU32,
    /// The startup process sleeps on it; the walreceiver sets it after
    /// each flush.
    pub startup_latch: Latch,
    /// Where streaming is to start and on which timeline (set by the
    /// startup process before the walreceiver is forked).
    pub start_lsn: AtomicU64,
    pub start_tli: AtomicU32,
    /// End of the last record the startup process validated (replayed).
    pub replayed_upto: AtomicU64,
    pub replay_tli: AtomicU32,
    /// Unix microseconds of the last replayed record's arrival at replay.
    pub replayed_at_us: AtomicI64,
    /// The walreceiver's pid (0: none) and state ([`rcv_state`]).
    pub pid: AtomicI32,
    pub state: AtomicU32,
    /// Where this connection's streaming began.
    pub receive_start_lsn: AtomicU64,
    pub receive_start_tli: AtomicU32,
    /// Written to the files / fdatasynced up to (exclusive), and the
    /// timeline of those bytes.
    pub written_upto: AtomicU64,
    pub flushed_upto: AtomicU64,
    pub received_tli: AtomicU32,
    /// Send time of the primary's last message and when it arrived (Unix
    /// microseconds; 0 = none).
    pub last_msg_send_us: AtomicI64,
    pub last_msg_receipt_us: AtomicI64,
    /// The primary's WAL end in its last message, and that message's send
    /// time.
    pub latest_end_lsn: AtomicU64,
    pub latest_end_us: AtomicI64,
    /// Slot streamed from, the primary's host and port (None: 0), the
    /// connection string without its password.
    pub slot_name: ShName,
    pub sender_host: ShName,
    pub sender_port: AtomicI32,
    pub conninfo: [ShName; CONNINFO_NAMES],
}

/// `conninfo` is kept in this many names (255 bytes of text).
pub const CONNINFO_NAMES: usize = 4;

impl WalRcvShared {
    /// Whether the server is a standby still in recovery (Acquire: see
    /// the module header).
    pub fn in_recovery(&self) -> bool {
        self.recovery.load(Ordering::Acquire) == RECOVERY_STANDBY
    }

    /// Stores the connection string shown in pg_stat_wal_receiver.
    pub fn store_conninfo(&self, text: &str) {
        let per = crate::walsnd::NAME_BYTES - 1;
        let mut from = 0;
        for name in &self.conninfo {
            let mut to = (from + per).min(text.len());
            while !text.is_char_boundary(to) {
                to -= 1;
            }
            name.store(&text[from..to]);
            from = to;
        }
    }

    pub fn load_conninfo(&self) -> String {
        self.conninfo.iter().map(ShName::load).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conninfo_round_trips_across_names() {
        let w = WalRcvShared::default();
        let text = "host=/tmp/x port=5499 user=me application_name=standby1 ".repeat(4);
        let text = &text[..200];
        w.store_conninfo(text);
        assert_eq!(w.load_conninfo(), text);
        w.store_conninfo("port=1");
        assert_eq!(w.load_conninfo(), "port=1");
    }
}
