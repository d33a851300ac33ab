//! Writes segments with SegmentWriter and checks them with PostgreSQL 15's
//! own pg_waldump (skipped loudly when it is not installed).

use crate::common::{
    initdb_checkpoint, normal_end_message, pg_waldump_or_skip, run_pg_waldump, DumpRun, TempDir,
};
use std::path::Path;
use walformat::{
    checkpoint_record, commit_record, logical_message, switch_record, CheckPoint, DecodedRecord,
    Geometry, Lsn, RecordBuf, SegmentWriter, WalReader,
};

const SYSID: u64 = 7_400_000_000_000_000_123;

/// The record mix of the conformance test.
fn records() -> Vec<RecordBuf> {
    let mut recs = Vec::new();
    for (i, size) in [0usize, 16, 100, 1024, 8000, 20000].into_iter().enumerate() {
        let payload: Vec<u8> = (0..size).map(|b| (b * 7 + i) as u8).collect();
        recs.push(logical_message(0, i % 2 == 1, "walshm", &payload));
    }
    recs.push(commit_record(742, 817_000_000_123_456));
    let cp = CheckPoint {
        redo: 0x0010_0028,
        next_xid: (2u64 << 32) | 743,
        next_oid: 24576,
        time: 1_764_000_000,
        oldest_active_xid: 743,
        ..initdb_checkpoint()
    };
    recs.push(checkpoint_record(&cp, true));
    recs.push(checkpoint_record(&cp, false));
    recs.push(logical_message(0, false, "", b""));
    recs.push(switch_record());
    // One record in the next segment so that pg_waldump ends normally.
    recs.push(logical_message(0, false, "after-switch", b"x"));
    recs
}

/// Writes the records from `start` and returns (dir, writer). With
/// `straddle`, small filler messages first move the insert position to the
/// last 64 bytes of a page, so the test records straddle page boundaries.
fn write_records(
    geo: Geometry,
    start: Lsn,
    straddle: bool,
    recs: &mut Vec<RecordBuf>,
) -> (TempDir, SegmentWriter) {
    let dir = TempDir::new("conformance");
    let mut writer = SegmentWriter::new(geo, 1, SYSID, start, 0);
    let mut fillers = Vec::new();
    while straddle
        && (writer.insert_pos() % 8192 <= 8192 - 64 || writer.insert_pos() % (5 * 8192) < 8192)
    {
        let mut filler = logical_message(0, false, "fill", b"abc");
        writer.append(&mut filler);
        fillers.push(filler);
    }
    for rec in recs.iter_mut() {
        writer.append(rec);
    }
    // `recs` becomes every record written, in order (fillers first).
    fillers.append(recs);
    *recs = fillers;
    writer.write_to_dir(dir.path()).unwrap();
    (dir, writer)
}

/// The LSN of the first record written from `start` (past the page
/// header there).
fn first_record(geo: Geometry, start: Lsn) -> Lsn {
    geo.bytepos_to_recptr(geo.recptr_to_bytepos(start))
}

/// A writer of 1 MiB segments from the start of segment `segno`, the
/// directory (named after `tag`) for its segments, and the LSN of its
/// first record.
fn new_wal(tag: &str, segno: u64) -> (Geometry, TempDir, SegmentWriter, Lsn) {
    let geo = Geometry::new(1 << 20).unwrap();
    let start = geo.seg_start(segno);
    let writer = SegmentWriter::new(geo, 1, SYSID, start, 0);
    (geo, TempDir::new(tag), writer, first_record(geo, start))
}

/// Every record our own reader finds from `first`, and where it stopped.
fn read_all(dir: &Path, geo: Geometry, first: Lsn) -> (Vec<DecodedRecord>, Lsn) {
    let mut reader = WalReader::open(dir, geo, 1, Some(SYSID), first).unwrap();
    let mut ours = Vec::new();
    while let Some(rec) = reader.next_record().unwrap() {
        ours.push(rec);
    }
    (ours, reader.end_of_valid())
}

/// pg_waldump stopped at the zeroed bytes after the writer's last record
/// (its normal end of WAL).
fn assert_ends_normally(run: &DumpRun, writer: &SegmentWriter) {
    assert!(
        run.stderr
            .contains(&normal_end_message(writer.insert_pos())),
        "stderr: {}",
        run.stderr
    );
}

fn check_with_pg_waldump(geo: Geometry, start: Lsn, straddle: bool) {
    let mut recs = records();
    let (dir, writer) = write_records(geo, start, straddle, &mut recs);
    let first = first_record(geo, start);

    // Our own reader first.
    let (ours, end_of_valid) = read_all(dir.path(), geo, first);
    assert_eq!(ours.len(), recs.len());
    assert_eq!(end_of_valid, writer.end_pos());

    let Some(bin) = pg_waldump_or_skip("pg_waldump_conformance") else {
        return;
    };
    let run = run_pg_waldump(&bin, dir.path(), first);
    let end_ok = run
        .stderr
        .contains(&normal_end_message(writer.insert_pos()));
    assert!(
        run.success || end_ok,
        "pg_waldump failed:\nstdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    assert!(
        !run.stderr.contains("error") || end_ok,
        "unexpected pg_waldump error: {}",
        run.stderr
    );
    assert_eq!(run.lines.len(), ours.len(), "stdout:\n{}", run.stdout);
    for (line, rec) in run.lines.iter().zip(&ours) {
        assert_eq!(line.lsn, rec.lsn);
        assert_eq!(line.prev, rec.prev);
        assert_eq!(line.xid, rec.xid);
        assert_eq!(line.rmgr, rec.rmgr_name());
        assert_eq!(line.rec_len, rec.rec_len());
        assert_eq!(line.tot_len, rec.tot_len);
        assert_eq!(line.desc, rec.describe(), "record at {:X}", rec.lsn);
    }
}

#[test]
fn pg_waldump_reads_segment_writer_output_1mib() {
    let geo = Geometry::new(1 << 20).unwrap();
    check_with_pg_waldump(geo, geo.seg_start(1), false);
}

#[test]
fn pg_waldump_reads_segment_writer_output_16mib_straddling_pages() {
    let geo = Geometry::new(16 << 20).unwrap();
    check_with_pg_waldump(geo, geo.seg_start(3), true);
}

#[test]
fn pg_waldump_reads_records_spanning_segments() {
    let (_, dir, mut writer, first) = new_wal("span", 1);
    let big: Vec<u8> = (0..1_500_000u32).map(|i| (i % 251) as u8).collect();
    let mut recs = vec![
        logical_message(0, false, "big", &big),
        logical_message(0, false, "tail", b"tail"),
    ];
    for rec in &mut recs {
        writer.append(rec);
    }
    writer.write_to_dir(dir.path()).unwrap();
    let Some(bin) = pg_waldump_or_skip("pg_waldump_reads_records_spanning_segments") else {
        return;
    };
    let run = run_pg_waldump(&bin, dir.path(), first);
    assert_ends_normally(&run, &writer);
    assert_eq!(run.lines.len(), 2, "stdout: {}", run.stdout);
    assert_eq!(
        run.lines[1].desc,
        "MESSAGE non-transactional, prefix \"tail\"; payload (4 bytes): 74 61 69 6C"
    );
}

#[test]
fn pg_waldump_agrees_on_many_split_positions() {
    let (geo, dir, mut writer, first) = new_wal("splits", 2);
    // Deterministic pseudo-random sizes so records start at every 8-byte
    // slot near page ends and split inside their headers.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut count = 0;
    while geo.seg_no(writer.insert_pos()) < 4 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let size = (x % 9000) as usize;
        let mut rec = if x % 13 < 1 {
            commit_record((x >> 32) as u32, (x >> 8) as i64)
        } else {
            logical_message(0, x & 1 != 0, "m", &vec![(x >> 24) as u8; size])
        };
        writer.append(&mut rec);
        count += 1;
    }
    writer.write_to_dir(dir.path()).unwrap();
    let (ours, _) = read_all(dir.path(), geo, first);
    assert_eq!(ours.len(), count);
    let Some(bin) = pg_waldump_or_skip("pg_waldump_agrees_on_many_split_positions") else {
        return;
    };
    let run = run_pg_waldump(&bin, dir.path(), first);
    assert_ends_normally(&run, &writer);
    assert_eq!(run.lines.len(), count);
    for (line, rec) in run.lines.iter().zip(&ours) {
        assert_eq!(
            (line.lsn, line.prev, line.tot_len),
            (rec.lsn, rec.prev, rec.tot_len)
        );
        assert_eq!(line.desc, rec.describe());
    }
}
