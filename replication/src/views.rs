//! The replication views as rows for the SQL layer: `pg_stat_replication`
//! (one row per walsender, from its entry in shared memory),
//! `pg_replication_slots` (from the slot table) and a standby's
//! `pg_stat_wal_receiver` (from `shmem::walrcv`). The WAL engine keeps the
//! state (`backend::syncrep`, `backend::slots`); this file only reads it
//! into `protocol`'s row types, so that the engine never links the SQL
//! layer.

use backend::slots;
use protocol::{LogicalSlotColumns, ReplicationRow, ReplicationSlotRow};
use shmem::sync::Ordering;
use shmem::Shmem;
use std::path::Path;

/// The rows of `pg_replication_slots`. wal_status: 'lost' for an
/// invalidated slot, 'extended' when it holds more than max_wal_size, else
/// 'reserved'; safe_wal_size: bytes it may still fall behind before
/// max_slot_wal_keep_size invalidates it (None: no limit).
pub fn pg_replication_slots(shm: &Shmem, datadir: &Path) -> Vec<ReplicationSlotRow> {
    let insert = shm.xlog().write.flush_result.load(Ordering::Relaxed);
    let s = shm.settings();
    let max_wal = (s.max_wal_size_mb as u64) << 20;
    let limit = shmem::settings::parse_keep_size_mb(s.max_slot_wal_keep_size.as_str())
        .flatten()
        .map(|mb| mb << 20);
    slots::rows(shm, datadir)
        .into_iter()
        .map(|r| {
            let reserved = r.restart_lsn != 0;
            let behind = insert.saturating_sub(r.restart_lsn);
            let status = match (r.lost, reserved) {
                (true, _) => Some("lost"),
                (false, false) => None,
                (false, true) if behind > max_wal => Some("extended"),
                (false, true) => Some("reserved"),
            };
            let safe = limit
                .filter(|_| reserved && !r.lost)
                .map(|l| l as i64 - behind as i64);
            ReplicationSlotRow {
                logical: r.logical.map(|l| LogicalSlotColumns {
                    plugin: l.plugin,
                    database: l.database,
                    confirmed_flush_lsn: l.confirmed_flush,
                    two_phase: l.two_phase,
                }),
                slot_name: r.name,
                temporary: r.temporary,
                active_pid: (r.active_pid != 0).then_some(r.active_pid),
                restart_lsn: reserved.then_some(r.restart_lsn),
                wal_status: status.map(str::to_string),
                safe_wal_size: safe,
            }
        })
        .collect()
}

/// The rows of `pg_stat_replication`, one per walsender. Unix-socket
/// clients have no address and port -1, as in PostgreSQL; the lag columns
/// are what the walsender's lag tracker measured (`lagtracker`), NULL
/// before the first measurement and for a position the receiver does not
/// report (pg_receivewal's apply). `reply_time` is the standby's own clock
/// as its last status update gave it: NULL before the first one (0, as
/// PostgreSQL keeps it) and for a time outside what timestamptz shows
/// (`walformat::pg_timestamp_to_unix_us`), never a wrapped date.
pub fn pg_stat_replication(shm: &Shmem) -> Vec<ReplicationRow> {
    let lsn = |v: u64| (v != 0).then_some(v);
    let lag = |us: i64| (us >= 0).then_some(us);
    // Stored in PostgreSQL's epoch; the row wants the Unix epoch.
    let time = |us: i64| {
        if us == 0 {
            return None;
        }
        walformat::pg_timestamp_to_unix_us(us)
    };
    shm.repl()
        .senders
        .iter()
        .filter_map(|s| {
            // Acquire pairs with the Release store of pid when the entry
            // was claimed: the fields below are its walsender's.
            let pid = s.pid.load(Ordering::Acquire);
            (pid > 0).then(|| ReplicationRow {
                pid,
                usename: Some(s.usename.load()).filter(|n| !n.is_empty()),
                application_name: s.application_name.load(),
                client_addr: None,
                client_port: Some(-1),
                backend_start: time(s.backend_start.load(Ordering::Relaxed)),
                state: shmem::walsnd::sender_state::name(s.state.load(Ordering::Relaxed)).into(),
                sent_lsn: lsn(s.sent.load(Ordering::Relaxed)),
                write_lsn: lsn(s.write.load(Ordering::Relaxed)),
                flush_lsn: lsn(s.flush.load(Ordering::Relaxed)),
                replay_lsn: lsn(s.apply.load(Ordering::Relaxed)),
                sync_priority: s.sync_priority.load(Ordering::Relaxed) as i32,
                sync_state: shmem::walsnd::sync_state::name(s.sync_state.load(Ordering::Relaxed))
                    .into(),
                reply_time: time(s.reply_time.load(Ordering::Relaxed)),
                write_lag: lag(s.write_lag.load(Ordering::Relaxed)),
                flush_lag: lag(s.flush_lag.load(Ordering::Relaxed)),
                replay_lag: lag(s.replay_lag.load(Ordering::Relaxed)),
            })
        })
        .collect()
}

/// The row of `pg_stat_wal_receiver`: one while a standby's walreceiver
/// runs (its pid is set), none otherwise, as in PostgreSQL. Times are
/// Unix microseconds in shared memory (0: NULL).
pub fn wal_receiver(shm: &Shmem) -> Option<protocol::WalReceiverRow> {
    let w = &shm.repl().walrcv;
    let pid = w.pid.load(Ordering::Relaxed);
    if pid <= 0 {
        return None;
    }
    let lsn = |v: u64| (v != 0).then_some(v);
    let time = |us: i64| (us != 0).then_some(us);
    let tli = |t: u32| (t != 0).then_some(t as i32);
    let name = |n: String| (!n.is_empty()).then_some(n);
    let port = w.sender_port.load(Ordering::Relaxed);
    Some(protocol::WalReceiverRow {
        pid,
        status: shmem::walrcv::rcv_state::name(w.state.load(Ordering::Relaxed)).into(),
        receive_start_lsn: lsn(w.receive_start_lsn.load(Ordering::Relaxed)),
        receive_start_tli: tli(w.receive_start_tli.load(Ordering::Relaxed)),
        written_lsn: lsn(w.written_upto.load(Ordering::Relaxed)),
        flushed_lsn: lsn(w.flushed_upto.load(Ordering::Relaxed)),
        received_tli: tli(w.received_tli.load(Ordering::Relaxed)),
        last_msg_send_time: time(w.last_msg_send_us.load(Ordering::Relaxed)),
        last_msg_receipt_time: time(w.last_msg_receipt_us.load(Ordering::Relaxed)),
        latest_end_lsn: lsn(w.latest_end_lsn.load(Ordering::Relaxed)),
        latest_end_time: time(w.latest_end_us.load(Ordering::Relaxed)),
        slot_name: name(w.slot_name.load()),
        sender_host: name(w.sender_host.load()),
        sender_port: (port != 0).then_some(port),
        conninfo: name(w.load_conninfo()),
    })
}
