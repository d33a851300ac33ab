//! Whole-WAL verification: walformat's reader, `postmaster waldump` and
//! pg_waldump must read the same records to the same end of WAL.

use super::{
    own_waldump, own_waldump_lines, own_waldump_raw, parse_dump_line, parse_own_end, pg_normal_end,
    pg_waldump, pg_waldump_raw, pg_waldump_stats, record_lines, DataDir,
};

/// What the WAL of a data directory holds.
#[derive(Debug)]
pub struct WalFacts {
    pub records: u64,
    pub logical_messages: u64,
    pub end_lsn: u64,
    pub lsns: Vec<u64>,
    /// For each record of `lsns`: is it a logical message?
    pub is_message: Vec<bool>,
    /// Whether pg_waldump took part.
    pub pg_checked: bool,
}

pub fn payload_of(size: usize) -> Vec<u8> {
    (0..size).map(|i| b'a' + (i % 26) as u8).collect()
}

/// Every byte of the WAL files in `gaps` (record padding, the rest of a
/// segment after a switch record, the rest of the last page after the end
/// of WAL) is zero, as PostgreSQL leaves it: the WAL buffers are not zeroed
/// when initialized, so whatever an inserter or a partial-page write does
/// not overwrite would show stale WAL here.
fn assert_gaps_are_zero(d: &DataDir, geo: &walformat::Geometry, gaps: &[(u64, u64)]) {
    let mut segment: Option<(u64, Vec<u8>)> = None;
    for &(from, to) in gaps {
        for lsn in from..to {
            let segno = geo.seg_no(lsn);
            if segment.as_ref().map(|s| s.0) != Some(segno) {
                let path = d.path.join("pg_wal").join(geo.file_name(1, segno));
                let Ok(bytes) = std::fs::read(&path) else {
                    return; // the end of WAL's page was never written
                };
                segment = Some((segno, bytes));
            }
            let bytes = &segment.as_ref().unwrap().1;
            let b = bytes[geo.seg_offset(lsn) as usize];
            assert_eq!(
                b,
                0,
                "non-zero byte {b:#04x} at {} in the gap {}..{} (padding, switch fill or the end of WAL's page)",
                walformat::format_lsn(lsn),
                walformat::format_lsn(from),
                walformat::format_lsn(to)
            );
        }
    }
}

/// Reads all WAL of `d` with walformat's reader (checking every logical
/// message's prefix and payload: SIZE bytes of a..z for a size in `sizes`),
/// then with `postmaster waldump` and pg_waldump, and compares record by
/// record in windows at the start, middle and end. Asserts that the number
/// of logical messages is `expected_messages` when that is given.
pub fn verify_wal(d: &DataDir, expected_messages: Option<u64>, sizes: &[usize]) -> WalFacts {
    let geo = walformat::Geometry::new(d.seg_size).unwrap();
    let mut reader = walformat::WalReader::open(&d.path.join("pg_wal"), geo, 1, None, d.first_lsn)
        .unwrap_or_else(|e| panic!("open WAL: {e}"));
    let max = sizes.iter().copied().max().unwrap_or(0);
    let pattern = payload_of(max);
    let mut lsns = Vec::new();
    let mut is_message = Vec::new();
    let mut logical = 0u64;
    let mut bytes = 0u64;
    let mut prev_lsn = 0u64;
    let mut gaps = Vec::new();
    loop {
        match reader.next_record() {
            Ok(Some(r)) => {
                assert_eq!(r.prev, prev_lsn, "xl_prev chain broken at {}", r.lsn);
                if r.next > r.end {
                    gaps.push((r.end, r.next));
                }
                prev_lsn = r.lsn;
                lsns.push(r.lsn);
                is_message.push(r.rmgr_name() == "LogicalMessage");
                bytes += r.tot_len as u64;
                if r.rmgr_name() == "LogicalMessage" {
                    let (tx, prefix, payload) = r
                        .as_logical_message()
                        .unwrap_or_else(|| panic!("malformed message at {}", r.lsn));
                    assert!(!tx, "transactional message at {}", r.lsn);
                    assert_eq!(prefix, "walshm", "prefix at {}", r.lsn);
                    assert!(
                        sizes.contains(&payload.len()),
                        "payload of {} bytes at {} (expected one of {sizes:?})",
                        payload.len(),
                        walformat::format_lsn(r.lsn)
                    );
                    assert!(
                        payload == &pattern[..payload.len()],
                        "payload bytes differ at {}",
                        walformat::format_lsn(r.lsn)
                    );
                    logical += 1;
                }
            }
            Ok(None) => break,
            Err(e) => panic!("walformat reader: invalid record: {e}"),
        }
    }
    let end_lsn = reader.end_of_valid();
    let records = lsns.len() as u64;
    if !end_lsn.is_multiple_of(walformat::XLOG_BLCKSZ as u64) {
        gaps.push((
            end_lsn,
            end_lsn.next_multiple_of(walformat::XLOG_BLCKSZ as u64),
        ));
    }
    assert_gaps_are_zero(d, &geo, &gaps);

    let own = own_waldump(&d.path);
    assert_eq!(
        own.reason, "clean end of WAL",
        "postmaster waldump: {own:?}"
    );
    assert_eq!(own.records, records, "postmaster waldump record count");
    assert_eq!(own.bytes, bytes, "postmaster waldump byte count");
    assert_eq!(own.end_lsn, end_lsn, "postmaster waldump end of WAL");

    if let Some(expected) = expected_messages {
        assert_eq!(
            logical, expected,
            "logical messages on disk != records the backends inserted (summary)"
        );
    }

    let mut pg_checked = false;
    if let Some(st) = pg_waldump_stats(d, end_lsn) {
        pg_checked = true;
        if let Some(e) = &st.end {
            assert_eq!(
                walformat::format_lsn(e.end_lsn),
                walformat::format_lsn(end_lsn),
                "pg_waldump's end of WAL differs from walshm's"
            );
        }
        assert_eq!(
            st.logical_messages, logical,
            "pg_waldump LogicalMessage count"
        );
        assert_eq!(st.total_records, records, "pg_waldump total records");
        assert_eq!(st.total_bytes, bytes, "pg_waldump total bytes");

        // Record-by-record windows: about 4 MB of WAL each, so that a window
        // crosses pages and (with 1 MB segments) segment boundaries.
        let per = (4u64 << 20) / (max as u64 + 80);
        let n = per.clamp(50, 20_000) as usize;
        let mut starts = vec![0usize];
        if lsns.len() > 2 * n {
            starts.push(lsns.len() / 2);
        }
        if lsns.len() > n {
            starts.push(lsns.len() - n);
        }
        for i in starts {
            let start = lsns[i];
            let want = n.min(lsns.len() - i);
            let pg = pg_waldump(d, start, Some(want as u64)).unwrap();
            let mine = own_waldump_lines(&d.path, start, want);
            assert_eq!(
                pg.len(),
                want,
                "pg_waldump window at {}",
                walformat::format_lsn(start)
            );
            assert_eq!(
                mine.len(),
                want,
                "own waldump window at {}",
                walformat::format_lsn(start)
            );
            for (k, (a, b)) in pg.iter().zip(&mine).enumerate() {
                if a != b {
                    panic!(
                        "record {} of window at {}: pg_waldump and postmaster waldump differ\npg:   {}\nmine: {}",
                        k,
                        walformat::format_lsn(start),
                        &a[..a.len().min(300)],
                        &b[..b.len().min(300)]
                    );
                }
            }
        }
    }
    WalFacts {
        records,
        logical_messages: logical,
        end_lsn,
        lsns,
        is_message,
        pg_checked,
    }
}

/// A record as walformat's reader sees it.
#[derive(Debug, Clone, Copy)]
pub struct RecInfo {
    pub lsn: u64,
    /// End of the record's bytes.
    pub end: u64,
    /// Where the next record starts.
    pub next: u64,
    pub xid: u32,
    pub is_commit: bool,
    /// Commit timestamp (µs since 2000-01-01) of a COMMIT record.
    pub commit_time: Option<i64>,
}

/// Reads WAL of `d` from its first record with walformat's reader: every
/// valid record, and the error that ended reading (None: clean end).
pub fn scan_records(d: &DataDir) -> (Vec<RecInfo>, Option<String>) {
    let geo = walformat::Geometry::new(d.seg_size).unwrap();
    let mut reader = walformat::WalReader::open(&d.path.join("pg_wal"), geo, 1, None, d.first_lsn)
        .unwrap_or_else(|e| panic!("open WAL: {e}"));
    let mut v = Vec::new();
    loop {
        match reader.next_record() {
            Ok(Some(r)) => v.push(RecInfo {
                lsn: r.lsn,
                end: r.end,
                next: r.next,
                xid: r.xid,
                is_commit: r.is_commit(),
                commit_time: r.commit_time(),
            }),
            Ok(None) => return (v, None),
            Err(e) => return (v, Some(e.to_string())),
        }
    }
}

/// What the WAL of a transactional run holds.
#[derive(Debug, Default)]
pub struct TxWal {
    /// (LSN, xid) of every COMMIT record, in WAL order.
    pub commits: Vec<(u64, u32)>,
    /// (LSN, xid) of every transactional logical message.
    pub tx_messages: Vec<(u64, u32)>,
    pub records: usize,
    /// LSN of the last record.
    pub last_lsn: u64,
    /// Whether pg_waldump took part.
    pub pg_checked: bool,
}

impl TxWal {
    pub fn commit_lsns(&self) -> std::collections::HashSet<u64> {
        self.commits.iter().map(|c| c.0).collect()
    }
}

/// Reads all WAL of `d` from its first record with `postmaster waldump`
/// and pg_waldump: both must read to a clean end and print identical
/// record lines. Panics if an XID has two COMMIT records.
pub fn tx_wal_check(d: &DataDir) -> TxWal {
    let own = own_waldump_raw(&d.path, d.first_lsn);
    assert!(
        own.status.success(),
        "postmaster waldump\n{}",
        own.describe()
    );
    let end = parse_own_end(&own.stdout)
        .unwrap_or_else(|| panic!("no end line in postmaster waldump output\n{}", own.stderr));
    assert_eq!(
        end.reason, "clean end of WAL",
        "postmaster waldump: {end:?}"
    );
    let mine = record_lines(&own.stdout);
    assert_eq!(end.records as usize, mine.len(), "own waldump record count");
    let mut pg_checked = false;
    if let Some(pg) = pg_waldump_raw(d, d.first_lsn) {
        pg_checked = true;
        match pg_normal_end(&pg) {
            Ok(e) => assert_eq!(
                walformat::format_lsn(e.end_lsn),
                walformat::format_lsn(end.end_lsn),
                "pg_waldump's end of WAL differs from walshm's"
            ),
            Err(e) if e.starts_with("PAGE-BOUNDARY:") && end.end_lsn.is_multiple_of(8192) => {}
            Err(e) => panic!("pg_waldump did not read to a normal end: {e}"),
        }
        let theirs = record_lines(&pg.stdout);
        assert_eq!(
            theirs.len(),
            mine.len(),
            "pg_waldump and postmaster waldump decode different numbers of records"
        );
        for (a, b) in theirs.iter().zip(&mine) {
            assert_eq!(a, b, "pg_waldump and postmaster waldump differ");
        }
    }
    let mut w = TxWal {
        pg_checked,
        records: mine.len(),
        ..TxWal::default()
    };
    let mut seen = std::collections::HashMap::new();
    for l in &mine {
        let r = parse_dump_line(l).unwrap_or_else(|| panic!("cannot parse dump line {l:?}"));
        w.last_lsn = r.lsn;
        if r.rmgr == "Transaction" && r.kind == "COMMIT" {
            assert_ne!(r.xid, 0, "COMMIT without xid: {l}");
            if let Some(first) = seen.insert(r.xid, r.lsn) {
                panic!(
                    "xid {} committed twice: at {} and at {}",
                    r.xid,
                    walformat::format_lsn(first),
                    walformat::format_lsn(r.lsn)
                );
            }
            w.commits.push((r.lsn, r.xid));
        } else if r.rmgr == "LogicalMessage" && r.transactional {
            w.tx_messages.push((r.lsn, r.xid));
        }
    }
    w
}
