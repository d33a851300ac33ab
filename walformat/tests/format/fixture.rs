//! Decodes a real PostgreSQL 15 segment and matches pg_waldump's output.

use crate::common::{parse_dump_line, TempDir};
use std::io::Read;
use walformat::{Geometry, WalReader};

const FIXTURE_SYSID: u64 = 7713694972811727722;
const FIXTURE_START: u64 = 0x0200_0028;

/// Unpacks the fixture as `000000010000000000000002` into a fresh pg_wal dir.
fn unpack_fixture() -> TempDir {
    let dir = TempDir::new("fixture");
    let gz = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/pg15-segment.gz"
    ))
    .expect("read fixture");
    let mut data = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut data)
        .expect("gunzip fixture");
    assert_eq!(data.len(), 16 << 20);
    std::fs::write(dir.path().join("000000010000000000000002"), data).expect("write segment");
    dir
}

fn expected_lines() -> Vec<crate::common::DumpLine> {
    include_str!("../fixtures/pg15-segment.pg_waldump.txt")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| parse_dump_line(l).expect("parse pg_waldump line"))
        .collect()
}

#[test]
fn pg15_fixture_matches_pg_waldump() {
    let dir = unpack_fixture();
    let geo = Geometry::new(16 << 20).unwrap();
    let mut reader = WalReader::open(dir.path(), geo, 1, None, FIXTURE_START).unwrap();
    reader.set_expected_prev(0x0151_1B38);
    let expected = expected_lines();
    assert_eq!(expected.len(), 4);
    for want in &expected {
        let rec = reader.next_record().unwrap().expect("record present");
        assert_eq!(rec.lsn, want.lsn);
        assert_eq!(rec.prev, want.prev);
        assert_eq!(rec.xid, want.xid);
        assert_eq!(rec.rmgr_name(), want.rmgr);
        assert_eq!(rec.rec_len(), want.rec_len);
        assert_eq!(rec.tot_len, want.tot_len);
        assert_eq!(rec.describe(), want.desc);
    }
    assert_eq!(reader.sysid(), Some(FIXTURE_SYSID));
    // After the SWITCH the next segment is absent: clean end of WAL.
    assert!(reader.next_record().unwrap().is_none());
    assert_eq!(reader.end_of_valid(), 0x0300_0000);
}

#[test]
fn pg15_fixture_logical_message_fields() {
    let dir = unpack_fixture();
    let geo = Geometry::new(16 << 20).unwrap();
    let mut reader =
        WalReader::open(dir.path(), geo, 1, Some(FIXTURE_SYSID), FIXTURE_START).unwrap();
    let rec = reader.next_record().unwrap().unwrap();
    assert_eq!(
        rec.as_logical_message(),
        Some((false, "test", &b"hello"[..]))
    );
    assert_eq!(rec.end, FIXTURE_START + 60);
    assert_eq!(rec.next, FIXTURE_START + 64);
}

#[test]
fn pg15_fixture_read_from_segment_start() {
    let dir = unpack_fixture();
    let geo = Geometry::new(16 << 20).unwrap();
    let mut reader = WalReader::open(dir.path(), geo, 1, None, 0x0200_0000).unwrap();
    let rec = reader.next_record().unwrap().unwrap();
    assert_eq!(rec.lsn, FIXTURE_START);
}

#[test]
fn pg15_fixture_wrong_sysid_is_rejected() {
    let dir = unpack_fixture();
    let geo = Geometry::new(16 << 20).unwrap();
    let mut reader = WalReader::open(dir.path(), geo, 1, Some(42), FIXTURE_START).unwrap();
    let err = reader.next_record().unwrap_err();
    assert!(
        matches!(err, walformat::WalError::BadLongHeader { .. }),
        "{err}"
    );
}
