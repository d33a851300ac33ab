//! Every kind of corruption yields its typed error, never a panic.

use crate::common::TempDir;
use std::path::PathBuf;
use walformat::{
    decode_record_bytes, logical_message, Geometry, Lsn, SegmentWriter, WalError, WalReader,
};

const SYSID: u64 = 99;

/// Asserts that `value` matches the pattern; shows the value otherwise.
macro_rules! assert_matches {
    ($value:expr, $($pattern:tt)+) => {
        assert!(matches!($value, $($pattern)+), "{:?}", $value)
    };
}

/// A 1 MiB-segment pg_wal with small records, a 20000-byte record spanning
/// pages, a record spanning into segment 2, and a tail record.
struct Wal {
    dir: TempDir,
    geo: Geometry,
    lsns: Vec<Lsn>,
    start: Lsn,
}

impl Wal {
    fn new() -> Wal {
        let geo = Geometry::new(1 << 20).unwrap();
        let dir = TempDir::new("corrupt");
        let mut w = SegmentWriter::new(geo, 1, SYSID, geo.seg_start(1), 0);
        let mut lsns = Vec::new();
        let sizes = [5usize, 20_000, 7, 1_100_000, 9];
        for (i, size) in sizes.into_iter().enumerate() {
            let payload = vec![i as u8 + 1; size];
            lsns.push(w.append(&mut logical_message(0, false, "c", &payload)));
        }
        w.write_to_dir(dir.path()).unwrap();
        Wal {
            dir,
            geo,
            lsns,
            start: geo.seg_start(1) + 40,
        }
    }

    fn file_of(&self, lsn: Lsn) -> PathBuf {
        self.dir
            .path()
            .join(self.geo.file_name(1, self.geo.seg_no(lsn)))
    }

    /// Applies `f` to the bytes of the segment holding `lsn` at its offset.
    fn patch(&self, lsn: Lsn, f: impl FnOnce(&mut [u8])) {
        let path = self.file_of(lsn);
        let mut data = std::fs::read(&path).unwrap();
        f(&mut data[self.geo.seg_offset(lsn) as usize..]);
        std::fs::write(&path, data).unwrap();
    }

    /// `patch`, then `read_all`.
    fn patch_and_read(&self, lsn: Lsn, f: impl FnOnce(&mut [u8])) -> (usize, Result<(), WalError>) {
        self.patch(lsn, f);
        self.read_all()
    }

    /// Reads all records; returns how many were good and the final result.
    fn read_all(&self) -> (usize, Result<(), WalError>) {
        let mut r = match WalReader::open(self.dir.path(), self.geo, 1, Some(SYSID), self.start) {
            Ok(r) => r,
            Err(e) => return (0, Err(e)),
        };
        let mut n = 0;
        loop {
            match r.next_record() {
                Ok(Some(_)) => n += 1,
                Ok(None) => return (n, Ok(())),
                Err(e) => return (n, Err(e)),
            }
        }
    }
}

fn page_of(lsn: Lsn) -> Lsn {
    lsn - lsn % 8192
}

#[test]
fn intact_wal_reads_fully() {
    let wal = Wal::new();
    let (n, res) = wal.read_all();
    assert!(res.is_ok());
    assert_eq!(n, 5);
}

#[test]
fn flipped_payload_byte_is_bad_crc() {
    let wal = Wal::new();
    let (n, res) = wal.patch_and_read(wal.lsns[2] + 30, |b| b[0] ^= 0x40);
    assert_eq!(n, 2);
    match res {
        Err(WalError::BadCrc { lsn, .. }) => assert_eq!(lsn, wal.lsns[2]),
        other => panic!("expected BadCrc, got {other:?}"),
    }
}

#[test]
fn wrong_pageaddr_is_bad_page_addr() {
    let wal = Wal::new();
    // A page in the middle of the 20000-byte record.
    let page = page_of(wal.lsns[1]) + 8192;
    let (n, res) = wal.patch_and_read(page + 8, |b| b[0] ^= 0x01);
    assert_eq!(n, 1);
    assert_matches!(res, Err(WalError::BadPageAddr { lsn, .. }) if lsn == page);
}

#[test]
fn zeroed_continuation_page_is_missing_continuation() {
    let wal = Wal::new();
    let page = page_of(wal.lsns[1]) + 8192;
    let (n, res) = wal.patch_and_read(page, |b| b[..8192].fill(0));
    assert_eq!(n, 1);
    let err = res.unwrap_err();
    assert_matches!(err, WalError::MissingContinuation { lsn, page: p, .. } if lsn == wal.lsns[1] && p == page);
    assert!(err.to_string().contains("is not continued"));
}

#[test]
fn bad_magic_is_reported() {
    let wal = Wal::new();
    let page = page_of(wal.lsns[1]) + 8192;
    let (_, res) = wal.patch_and_read(page, |b| b[0] = 0x11);
    assert_matches!(res, Err(WalError::BadMagic { magic: 0xD111, .. }));
}

#[test]
fn truncated_segment_is_wrong_segment_size() {
    let wal = Wal::new();
    let path = wal.file_of(wal.lsns[4]);
    let data = std::fs::read(&path).unwrap();
    std::fs::write(&path, &data[..data.len() / 2]).unwrap();
    let (n, res) = wal.read_all();
    assert_eq!(n, 3);
    assert_matches!(res, Err(WalError::WrongSegmentSize { .. }));
}

#[test]
fn missing_segment_mid_record_is_missing_segment() {
    let wal = Wal::new();
    std::fs::remove_file(wal.file_of(wal.lsns[4])).unwrap();
    let (n, res) = wal.read_all();
    assert_eq!(n, 3);
    let err = res.unwrap_err();
    assert_matches!(err, WalError::MissingSegment { lsn, .. } if lsn == wal.lsns[3]);
    assert!(err.to_string().contains("does not exist"));
}

#[test]
fn wrong_prev_is_bad_prev() {
    let wal = Wal::new();
    let (n, res) = wal.patch_and_read(wal.lsns[2] + 8, |b| b[0] ^= 0x08);
    assert_eq!(n, 2);
    assert_matches!(res, Err(WalError::BadPrev { expected, .. }) if expected == wal.lsns[1]);
}

#[test]
fn expected_prev_of_first_record_is_checked() {
    let wal = Wal::new();
    let mut r = WalReader::open(wal.dir.path(), wal.geo, 1, None, wal.start).unwrap();
    r.set_expected_prev(0x1234);
    assert!(matches!(
        r.next_record(),
        Err(WalError::BadPrev { found: 0, .. })
    ));
}

#[test]
fn bad_length_and_bad_rmgr() {
    let wal = Wal::new();
    let (n, res) = wal.patch_and_read(wal.lsns[2], |b| b[..4].copy_from_slice(&5u32.to_le_bytes()));
    assert_eq!(n, 2);
    assert_matches!(res, Err(WalError::BadLength { len: 5, .. }));

    let wal = Wal::new();
    let (_, res) = wal.patch_and_read(wal.lsns[0] + 17, |b| b[0] = 60);
    assert_matches!(res, Err(WalError::BadRmgr { rmid: 60, .. }));
}

#[test]
fn wrong_sysid_and_seg_size_are_bad_long_header() {
    let wal = Wal::new();
    let r = WalReader::open(wal.dir.path(), wal.geo, 1, Some(SYSID + 1), wal.start);
    let err = r.and_then(|mut r| r.next_record()).unwrap_err();
    assert_matches!(err, WalError::BadLongHeader { .. });
    assert!(err.to_string().contains("different database system"));
}

#[test]
fn start_segment_absent_is_missing_segment() {
    let wal = Wal::new();
    let r = WalReader::open(wal.dir.path(), wal.geo, 1, None, wal.geo.seg_start(7));
    assert!(matches!(r, Err(WalError::MissingSegment { .. })));
}

#[test]
fn in_memory_decoder_rejects_garbage() {
    assert!(matches!(
        decode_record_bytes(0, &[1, 2, 3]),
        Err(WalError::Truncated { .. })
    ));
    let mut rec = logical_message(0, false, "x", b"y");
    rec.finish(0);
    let bytes = rec.bytes().to_vec();
    assert!(matches!(
        decode_record_bytes(0, &bytes[..bytes.len() - 1]),
        Err(WalError::Truncated { .. })
    ));
    let mut bad = bytes.clone();
    bad[24] = 200; // invalid block id; CRC is checked first
    assert!(matches!(
        decode_record_bytes(0, &bad),
        Err(WalError::BadCrc { .. })
    ));
}

/// Flipping any single byte of a short WAL never panics the reader.
#[test]
fn single_byte_flips_never_panic() {
    let wal = Wal::new();
    let seg1 = wal.file_of(wal.start);
    let pristine = std::fs::read(&seg1).unwrap();
    let first_page_end = 8192 * 4;
    for off in (0..first_page_end).step_by(61) {
        let mut data = pristine.clone();
        data[off] ^= 0xFF;
        std::fs::write(&seg1, &data).unwrap();
        let (_, _res) = wal.read_all();
    }
}
