//! Test support, not part of the API: a [`Session`] with fixed, known
//! answers, shared by the unit tests and the examples.

use crate::session::{ActivityRow, ReplicationRow, ReplicationSlotRow, Session, WalStatsRow};
use crate::SqlError;

/// A Session with fixed, known answers; every call succeeds at once.
pub struct FakeSession {
    /// How many times `reset_wal_stats` was called.
    pub wal_resets: usize,
    /// What `memory_limit` reports (1 MiB by default).
    pub memory_limit: usize,
}

impl Default for FakeSession {
    fn default() -> Self {
        FakeSession {
            wal_resets: 0,
            memory_limit: 1 << 20,
        }
    }
}

impl Session for FakeSession {
    fn create_logical_replication_slot(
        &mut self,
        _: &str,
        _: &str,
        _: bool,
        _: bool,
    ) -> Result<u64, SqlError> {
        Ok(0x16B_6C50)
    }
    fn replication_slot_advance(&mut self, _: &str, upto: u64) -> Result<u64, SqlError> {
        Ok(upto)
    }
    fn logical_slot_changes(
        &mut self,
        args: &crate::ChangesArgs,
    ) -> Result<Vec<crate::ChangeRow>, SqlError> {
        Ok(vec![crate::ChangeRow {
            lsn: 0x16B_6C50,
            xid: 7,
            data: format!("from {}", args.slot).into_bytes(),
        }])
    }

    fn emit_message(&mut self, _: bool, _: &str, _: &[u8], _: bool) -> Result<u64, SqlError> {
        Ok(0x100)
    }
    fn txid_current(&mut self) -> Result<u64, SqlError> {
        Ok(740)
    }
    fn current_wal_lsn(&mut self) -> u64 {
        0x300_0000
    }
    fn current_wal_insert_lsn(&mut self) -> u64 {
        0x300_0000
    }
    fn current_wal_flush_lsn(&mut self) -> u64 {
        0x300_0000
    }
    fn switch_wal(&mut self) -> Result<u64, SqlError> {
        Ok(0x400_0000)
    }
    fn checkpoint(&mut self) -> Result<(), SqlError> {
        Ok(())
    }
    fn begin(&mut self) -> Result<(), SqlError> {
        Ok(())
    }
    fn commit(&mut self) -> Result<(), SqlError> {
        Ok(())
    }
    fn rollback(&mut self) -> Result<(), SqlError> {
        Ok(())
    }
    fn set_synchronous_commit(&mut self, _: bool) {}
    fn synchronous_commit(&self) -> bool {
        true
    }
    fn memory_limit(&self) -> usize {
        self.memory_limit
    }
    fn server_setting(&self, name: &str) -> Option<String> {
        (name == "wal_buffers").then(|| "2048".into())
    }
    fn backend_pid(&self) -> i32 {
        4242
    }
    fn activity(&mut self) -> Vec<ActivityRow> {
        let row = |pid: i32, ty: &str, state: Option<&str>, wt: Option<&str>, w: Option<&str>| {
            ActivityRow {
                pid,
                backend_type: ty.into(),
                state: state.map(Into::into),
                wait_event_type: wt.map(Into::into),
                wait_event: w.map(Into::into),
                query: state.map(|_| format!("q{pid}")),
                client_port: state.map(|_| -1),
                ..ActivityRow::default()
            }
        };
        vec![
            row(
                10,
                "walwriter",
                None,
                Some("Activity"),
                Some("WalWriterMain"),
            ),
            row(
                11,
                "checkpointer",
                None,
                Some("Activity"),
                Some("CheckpointerMain"),
            ),
            row(
                12,
                "client backend",
                Some("active"),
                Some("LWLock"),
                Some("WALInsert"),
            ),
            row(
                13,
                "client backend",
                Some("active"),
                Some("LWLock"),
                Some("WALInsert"),
            ),
            row(14, "client backend", Some("active"), None, None),
            row(4242, "client backend", Some("active"), None, None),
        ]
    }
    fn wal_stats(&mut self) -> WalStatsRow {
        WalStatsRow {
            wal_records: 7,
            wal_bytes: 560,
            wal_write_time: 1.5,
            ..WalStatsRow::default()
        }
    }
    fn reset_wal_stats(&mut self) {
        self.wal_resets += 1;
    }
    fn create_physical_replication_slot(
        &mut self,
        _: &str,
        reserve: bool,
        _: bool,
    ) -> Result<Option<u64>, SqlError> {
        Ok(reserve.then_some(0x16B_6C50))
    }
    fn drop_replication_slot(&mut self, _: &str) -> Result<(), SqlError> {
        Ok(())
    }
    fn replication_slots(&mut self) -> Vec<ReplicationSlotRow> {
        vec![
            ReplicationSlotRow {
                slot_name: "s1".into(),
                restart_lsn: Some(0x300_0000),
                wal_status: Some("reserved".into()),
                ..ReplicationSlotRow::default()
            },
            ReplicationSlotRow {
                slot_name: "s0".into(),
                active_pid: Some(77),
                ..ReplicationSlotRow::default()
            },
        ]
    }
    fn stat_replication(&mut self) -> Vec<ReplicationRow> {
        vec![ReplicationRow {
            pid: 77,
            application_name: "rx".into(),
            client_port: Some(-1),
            state: "streaming".into(),
            flush_lsn: Some(0x300_0000),
            sync_priority: 1,
            sync_state: "sync".into(),
            ..ReplicationRow::default()
        }]
    }
}
