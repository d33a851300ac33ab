//! Property tests: SegmentWriter output reads back identically with
//! WalReader; byte-position conversions round-trip.

use crate::common::TempDir;
use proptest::prelude::*;
use walformat::{
    checkpoint_record, commit_record, logical_message, switch_record, CheckPoint, DecodedRecord,
    Geometry, RecordBuf, SegmentWriter, WalReader,
};

#[derive(Clone, Debug)]
enum Kind {
    Message {
        transactional: bool,
        prefix: String,
        size: usize,
    },
    Commit(u32, i64),
    Checkpoint(bool, u64),
    Switch,
}

fn kind() -> impl Strategy<Value = Kind> {
    let message = |sizes: BoxedStrategy<usize>| {
        (any::<bool>(), "[a-z]{0,12}", sizes).prop_map(|(transactional, prefix, size)| {
            Kind::Message {
                transactional,
                prefix,
                size,
            }
        })
    };
    prop_oneof![
        40 => message((0usize..=20_000).boxed()),
        10 => message((0usize..=300).boxed()),
        1 => message((20_001usize..=(1 << 20)).boxed()),
        3 => (any::<u32>(), any::<i64>()).prop_map(|(x, t)| Kind::Commit(x, t)),
        2 => (any::<bool>(), any::<u64>()).prop_map(|(s, r)| Kind::Checkpoint(s, r)),
        2 => Just(Kind::Switch),
    ]
}

fn build(kind: &Kind, seed: usize) -> RecordBuf {
    match kind {
        Kind::Message {
            transactional,
            prefix,
            size,
        } => {
            let payload: Vec<u8> = (0..*size).map(|i| (i * 31 + seed) as u8).collect();
            logical_message(seed as u32, *transactional, prefix, &payload)
        }
        Kind::Commit(xid, t) => commit_record(*xid, *t),
        Kind::Checkpoint(shutdown, redo) => {
            let cp = CheckPoint {
                redo: *redo,
                next_xid: *redo ^ 0x5555,
                time: seed as i64,
                ..CheckPoint::default()
            };
            checkpoint_record(&cp, *shutdown)
        }
        Kind::Switch => switch_record(),
    }
}

fn check_matches(kind: &Kind, rec: &DecodedRecord, built: &RecordBuf, seed: usize) {
    assert_eq!(rec.tot_len, built.total_len());
    assert_eq!(rec.xid, built.xid());
    match kind {
        Kind::Message {
            transactional,
            prefix,
            size,
        } => {
            let (t, p, payload) = rec.as_logical_message().expect("message");
            assert_eq!(
                (t, p, payload.len()),
                (*transactional, prefix.as_str(), *size)
            );
            assert!(payload
                .iter()
                .enumerate()
                .all(|(i, b)| *b == (i * 31 + seed) as u8));
        }
        Kind::Commit(_, t) => assert_eq!(rec.commit_time(), Some(*t)),
        Kind::Checkpoint(shutdown, redo) => {
            let (cp, s) = rec.as_checkpoint().expect("checkpoint");
            assert_eq!((cp.redo, s), (*redo, *shutdown));
        }
        Kind::Switch => assert!(rec.is_switch()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn written_records_read_back(kinds in prop::collection::vec(kind(), 1..40),
                                 start_page in 0u64..128, start_slot in 0u64..1000) {
        let geo = Geometry::new(1 << 20).unwrap();
        let dir = TempDir::new("prop");
        // Start somewhere in segment 1: a page start or a valid record slot.
        let start = geo.seg_start(1) + start_page * 8192;
        let start = geo.bytepos_to_recptr(geo.recptr_to_bytepos(start) + start_slot * 8);
        let mut writer = SegmentWriter::new(geo, 1, 4242, start, 0x77);
        let mut written = Vec::new();
        for (seed, kind) in kinds.iter().enumerate() {
            let mut rec = build(kind, seed);
            let at_seg_start = geo.seg_offset(writer.end_pos()) == 0;
            if rec.is_switch() && at_seg_start {
                continue; // no-op switch, nothing written
            }
            let lsn = writer.append(&mut rec);
            written.push((kind.clone(), rec, lsn, seed));
        }
        writer.write_to_dir(dir.path()).unwrap();

        let mut reader = WalReader::open(dir.path(), geo, 1, Some(4242), start).unwrap();
        reader.set_expected_prev(0x77);
        let mut prev = 0x77;
        for (kind, built, lsn, seed) in &written {
            let rec = reader.next_record().unwrap().expect("record");
            prop_assert_eq!(rec.lsn, *lsn);
            prop_assert_eq!(rec.prev, prev);
            check_matches(kind, &rec, built, *seed);
            let aligned_end =
                geo.recptr_to_bytepos(rec.lsn) + walformat::maxalign(u64::from(rec.tot_len));
            if rec.is_switch() {
                prop_assert_eq!(geo.seg_offset(rec.next), 0);
                prop_assert!(geo.recptr_to_bytepos(rec.next) >= aligned_end);
            } else {
                prop_assert_eq!(geo.recptr_to_bytepos(rec.next), aligned_end);
            }
            prop_assert_eq!(geo.recptr_to_bytepos(rec.end), geo.recptr_to_bytepos(rec.lsn) + u64::from(rec.tot_len));
            prev = *lsn;
        }
        prop_assert!(reader.next_record().unwrap().is_none());
        prop_assert_eq!(
            geo.recptr_to_bytepos(reader.end_of_valid()),
            writer.insert_bytepos()
        );
        if !written.is_empty() {
            prop_assert_eq!(reader.end_of_valid(), writer.end_pos());
        }
    }

    #[test]
    fn bytepos_round_trips(pos in 0u64..(1u64 << 44), shift in 20u32..=30) {
        let geo = Geometry::new(1u64 << shift).unwrap();
        let lsn = geo.bytepos_to_recptr(pos);
        prop_assert_eq!(geo.recptr_to_bytepos(lsn), pos);
        let end = geo.bytepos_to_end_recptr(pos);
        prop_assert_eq!(geo.recptr_to_bytepos(end), pos);
        // The stored position is never inside a page header.
        let hdr = geo.page_header_size_at(lsn) as u64;
        prop_assert!(lsn % 8192 >= hdr);
        // End form differs only at page boundaries.
        if end != lsn {
            prop_assert_eq!(end % 8192, 0);
            prop_assert_eq!(lsn, end + hdr);
        }
        let segno = geo.seg_no(lsn);
        prop_assert_eq!(geo.parse_file_name(&geo.file_name(3, segno)), Some((3, segno)));
    }
}

#[test]
fn start_at_page_boundary_skips_continuation() {
    let geo = Geometry::new(1 << 20).unwrap();
    let dir = TempDir::new("skip");
    let mut writer = SegmentWriter::new(geo, 1, 1, geo.seg_start(1), 0);
    let big = logical_message(0, false, "big", &[9u8; 30_000]);
    let lsn_big = writer.append(&mut big.clone());
    let lsn_small = writer.append(&mut logical_message(0, false, "small", b"s"));
    writer.write_to_dir(dir.path()).unwrap();
    // Page 2 of the segment starts inside the big record.
    let page = geo.seg_start(1) + 2 * 8192;
    assert!(lsn_big < page && page < lsn_small);
    let mut reader = WalReader::open(dir.path(), geo, 1, None, page).unwrap();
    let rec = reader.next_record().unwrap().unwrap();
    assert_eq!(rec.lsn, lsn_small);
    // Starting right after the header of such a page is an error.
    let mut reader = WalReader::open(dir.path(), geo, 1, None, page + 24).unwrap();
    assert!(matches!(
        reader.next_record(),
        Err(walformat::WalError::UnexpectedContinuation { .. })
    ));
}
