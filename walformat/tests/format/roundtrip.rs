//! Encode -> decode round trips for every record kind.

use crate::common::initdb_checkpoint;
use walformat::{
    abort_record_into, checkpoint_record, commit_record, commit_record_into, decode_record_bytes,
    format_pg_timestamp, logical_message, switch_record, CheckPoint, RecordBuf, RM_XACT_ID,
    XLOG_XACT_ABORT, XLOG_XACT_COMMIT,
};

fn decode(rec: &mut RecordBuf, lsn: u64, prev: u64) -> walformat::DecodedRecord {
    rec.finish(prev);
    decode_record_bytes(lsn, rec.bytes()).expect("decodes")
}

#[test]
fn logical_message_round_trip() {
    for (transactional, prefix, payload) in [
        (false, "test", b"hello".to_vec()),
        (true, "", Vec::new()),
        (false, "p", vec![0xAB; 300]),
        (true, "a longer prefix", vec![1, 2, 3]),
    ] {
        let mut rec = logical_message(77, transactional, prefix, &payload);
        let d = decode(&mut rec, 0x0100_0028, 0x0100_0000);
        assert_eq!(
            d.as_logical_message(),
            Some((transactional, prefix, &payload[..]))
        );
        assert_eq!((d.xid, d.prev, d.lsn), (77, 0x0100_0000, 0x0100_0028));
        assert_eq!(d.tot_len, rec.total_len());
        assert_eq!(d.rec_len(), d.tot_len);
        assert_eq!(d.rmgr_name(), "LogicalMessage");
        assert!(!d.is_commit() && !d.is_switch() && d.as_checkpoint().is_none());
    }
}

#[test]
fn logical_message_description() {
    let mut rec = logical_message(0, false, "test", b"hello");
    let d = decode(&mut rec, 0x28, 0);
    assert_eq!(
        d.describe(),
        "MESSAGE non-transactional, prefix \"test\"; payload (5 bytes): 68 65 6C 6C 6F"
    );
    let mut rec = logical_message(5, true, "x", b"");
    let d = decode(&mut rec, 0x28, 0);
    assert_eq!(
        d.describe(),
        "MESSAGE transactional, prefix \"x\"; payload (0 bytes): "
    );
}

#[test]
fn switch_round_trip() {
    let mut rec = switch_record();
    let d = decode(&mut rec, 0x0200_00E8, 0x0200_00A8);
    assert!(d.is_switch());
    assert_eq!(d.describe(), "SWITCH ");
    assert_eq!((d.tot_len, d.rmgr_name(), d.xid), (24, "XLOG", 0));
    assert!(d.main_data.is_empty());
}

#[test]
fn commit_round_trip() {
    let t = 817_000_000_123_456;
    let mut rec = commit_record(1234, t);
    let d = decode(&mut rec, 0x28, 0);
    assert!(d.is_commit());
    assert_eq!(d.commit_time(), Some(t));
    assert_eq!(d.rmid, RM_XACT_ID);
    assert_eq!(d.info, XLOG_XACT_COMMIT);
    assert_eq!(d.rmgr_name(), "Transaction");
    assert_eq!(d.describe(), format!("COMMIT {}", format_pg_timestamp(t)));
    assert_eq!(d.tot_len, 24 + 2 + 8);
}

#[test]
fn abort_round_trip_reusing_the_commit_buffer() {
    let t = 817_000_000_654_321;
    let mut rec = commit_record(1234, t);
    abort_record_into(&mut rec, 1235, t);
    let d = decode(&mut rec, 0x28, 0);
    assert!(!d.is_commit());
    assert_eq!((d.xid, d.rmid, d.info), (1235, RM_XACT_ID, XLOG_XACT_ABORT));
    assert_eq!(d.describe(), format!("ABORT {}", format_pg_timestamp(t)));
    commit_record_into(&mut rec, 1236, t);
    assert_eq!(rec.bytes(), commit_record(1236, t).bytes());
}

#[test]
fn checkpoint_round_trip() {
    let cp = CheckPoint {
        redo: 0x0100_0028,
        next_xid: (1 << 32) | 740,
        next_oid: 13000,
        time: 1_700_000_000,
        oldest_active_xid: 0,
        ..initdb_checkpoint()
    };
    for shutdown in [true, false] {
        let mut rec = checkpoint_record(&cp, shutdown);
        let d = decode(&mut rec, 0x28, 0);
        assert_eq!(d.as_checkpoint(), Some((cp, shutdown)));
        assert_eq!(d.tot_len, 114);
        let kind = if shutdown { "SHUTDOWN" } else { "ONLINE" };
        let tail = if shutdown { "shutdown" } else { "online" };
        assert_eq!(
            d.describe(),
            format!(
                "CHECKPOINT_{kind} redo 0/1000028; tli 1; prev tli 1; fpw true; xid 1:740; \
                 oid 13000; multi 1; offset 0; oldest xid 716 in DB 1; oldest multi 1 in DB 1; \
                 oldest/newest commit timestamp xid: 0/0; oldest running xid 0; {tail}"
            )
        );
    }
}

#[test]
fn generic_record_round_trip_and_rebuild() {
    let mut rec = RecordBuf::new(3, 10, 0x30, &[b"abc", b"", b"def"]);
    let d = decode(&mut rec, 0x28, 0x10);
    assert_eq!(d.main_data, b"abcdef");
    assert_eq!(d.rmgr_name(), "Heap");
    rec.rebuild(4, 21, 0, &[]);
    let d = decode(&mut rec, 0x28, 0x10);
    assert!(d.main_data.is_empty());
    assert_eq!(d.tot_len, 24);
}

/// Throughput check for the insert path's record building (run with
/// `--release -- --ignored --nocapture`): reuse one RecordBuf, no allocation.
#[test]
#[ignore]
fn record_build_throughput() {
    let payload = [0x5Au8; 100];
    let mut rec = RecordBuf::default();
    let n = 5_000_000u64;
    let start = std::time::Instant::now();
    for i in 0..n {
        walformat::logical_message_into(&mut rec, 0, false, "bench", &payload);
        rec.finish(i * 160);
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "built+finished {n} 100-byte messages in {secs:.3}s: {:.1} M records/s (crc {:08X})",
        n as f64 / secs / 1e6,
        rec.crc()
    );
}
