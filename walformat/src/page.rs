//! WAL page headers (`XLogPageHeaderData`, `XLogLongPageHeaderData`).
//!
//! Short header, at the start of every page (24 bytes, MAXALIGNed):
//!
//! ```text
//! { xlp_magic: u16 | xlp_info: u16 | xlp_tli: u32 | xlp_pageaddr: u64 | xlp_rem_len: u32 | pad: 4 }
//!   0                2               4             8                   16                 20..24
//! ```
//!
//! Long header, at the start of the first page of a segment (40 bytes):
//!
//! ```text
//! { short header fields (0..20) | pad: 4 | xlp_sysid: u64 | xlp_seg_size: u32 | xlp_xlog_blcksz: u32 }
//!                                  20      24               32                  36..40
//! ```

use crate::consts::{
    SIZE_OF_XLOG_LONG_PHD, SIZE_OF_XLOG_SHORT_PHD, XLOG_BLCKSZ, XLOG_PAGE_MAGIC, XLP_BKP_REMOVABLE,
    XLP_FIRST_IS_CONTRECORD, XLP_LONG_HEADER,
};
use crate::geometry::{Geometry, Lsn};

/// Byte offsets of the header fields.
const OFF_MAGIC: usize = 0;
const OFF_INFO: usize = 2;
const OFF_TLI: usize = 4;
const OFF_PAGEADDR: usize = 8;
const OFF_REM_LEN: usize = 16;
const OFF_SYSID: usize = 24;
const OFF_SEG_SIZE: usize = 32;
const OFF_XLOG_BLCKSZ: usize = 36;

/// A decoded page header (long fields are `None` for a short header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageHeader {
    /// `xlp_magic`.
    pub magic: u16,
    /// `xlp_info` flag bits (`XLP_*`).
    pub info: u16,
    /// `xlp_tli`: timeline of the first record on the page.
    pub tli: u32,
    /// `xlp_pageaddr`: LSN of the page start.
    pub pageaddr: Lsn,
    /// `xlp_rem_len`: bytes of a continued record remaining at page start.
    pub rem_len: u32,
    /// `xlp_sysid`, `xlp_seg_size`, `xlp_xlog_blcksz` when `XLP_LONG_HEADER`.
    pub long: Option<(u64, u32, u32)>,
}

/// Size of the page header of the page starting at `pageaddr`
/// (long iff `pageaddr` is a segment start).
pub fn page_header_size(geo: &Geometry, pageaddr: Lsn) -> usize {
    if geo.seg_offset(pageaddr) == 0 {
        SIZE_OF_XLOG_LONG_PHD
    } else {
        SIZE_OF_XLOG_SHORT_PHD
    }
}

/// Writes the page header at the start of `page` for the page starting at
/// `pageaddr`: a long header (with `sysid`, `seg_size`, `XLOG_BLCKSZ` and
/// `XLP_LONG_HEADER`) iff `pageaddr` is a segment start. `rem_len > 0` sets
/// `XLP_FIRST_IS_CONTRECORD`. `XLP_BKP_REMOVABLE` is always set, as
/// PostgreSQL 15 does while no online backup runs. Zeroes the rest of the
/// header area (padding) and returns the header size.
///
/// # Panics
/// If `page` is shorter than the header (a caller bug, not bad input).
pub fn write_page_header(
    page: &mut [u8],
    geo: &Geometry,
    pageaddr: Lsn,
    tli: u32,
    sysid: u64,
    rem_len: u32,
) -> usize {
    let size = page_header_size(geo, pageaddr);
    let header = &mut page[..size];
    header.fill(0);
    let mut info = XLP_BKP_REMOVABLE;
    if rem_len > 0 {
        info |= XLP_FIRST_IS_CONTRECORD;
    }
    if size == SIZE_OF_XLOG_LONG_PHD {
        info |= XLP_LONG_HEADER;
        put_u64(header, OFF_SYSID, sysid);
        // Both fit in u32: seg_size <= 1 GiB and XLOG_BLCKSZ = 8192.
        put_u32(header, OFF_SEG_SIZE, geo.seg_size as u32);
        put_u32(header, OFF_XLOG_BLCKSZ, XLOG_BLCKSZ as u32);
    }
    put_u16(header, OFF_MAGIC, XLOG_PAGE_MAGIC);
    put_u16(header, OFF_INFO, info);
    put_u32(header, OFF_TLI, tli);
    put_u64(header, OFF_PAGEADDR, pageaddr);
    put_u32(header, OFF_REM_LEN, rem_len);
    size
}

/// Decodes the header at the start of `page`. Returns `None` if `page` is too
/// short for the header its `xlp_info` announces. Performs no validation.
pub fn read_page_header(page: &[u8]) -> Option<PageHeader> {
    if page.len() < SIZE_OF_XLOG_SHORT_PHD {
        return None;
    }
    let info = get_u16(page, OFF_INFO);
    let long = if info & XLP_LONG_HEADER != 0 {
        if page.len() < SIZE_OF_XLOG_LONG_PHD {
            return None;
        }
        Some((
            get_u64(page, OFF_SYSID),
            get_u32(page, OFF_SEG_SIZE),
            get_u32(page, OFF_XLOG_BLCKSZ),
        ))
    } else {
        None
    };
    Some(PageHeader {
        magic: get_u16(page, OFF_MAGIC),
        info,
        tli: get_u32(page, OFF_TLI),
        pageaddr: get_u64(page, OFF_PAGEADDR),
        rem_len: get_u32(page, OFF_REM_LEN),
        long,
    })
}

pub(crate) fn put_u16(buf: &mut [u8], off: usize, v: u16) {
    buf[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u32(buf: &mut [u8], off: usize, v: u32) {
    buf[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(buf: &mut [u8], off: usize, v: u64) {
    buf[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Little-endian reads; callers guarantee `off + N <= buf.len()`.
pub(crate) fn get_u16(buf: &[u8], off: usize) -> u16 {
    let mut b = [0u8; 2];
    b.copy_from_slice(&buf[off..off + 2]);
    u16::from_le_bytes(b)
}

pub(crate) fn get_u32(buf: &[u8], off: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[off..off + 4]);
    u32::from_le_bytes(b)
}

pub(crate) fn get_u64(buf: &[u8], off: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[off..off + 8]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_header_matches_fixture_bytes() {
        // First 40 bytes of the PG15 fixture segment 000000010000000000000002.
        let expected: [u8; 40] = [
            0x10, 0xd1, 0x06, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x6a, 0xd3, 0x28, 0x78,
            0xb5, 0x8c, 0x0c, 0x6b, 0x00, 0x00, 0x00, 0x01, 0x00, 0x20, 0x00, 0x00,
        ];
        let geo = Geometry::new(16 << 20).unwrap();
        let mut page = vec![0xAAu8; XLOG_BLCKSZ];
        let n = write_page_header(&mut page, &geo, 0x0200_0000, 1, 7713694972811727722, 0);
        assert_eq!(n, 40);
        assert_eq!(&page[..40], &expected[..]);
        assert_eq!(page[40], 0xAA);
        let h = read_page_header(&page).unwrap();
        assert_eq!(h.long, Some((7713694972811727722, 16 << 20, 8192)));
    }

    #[test]
    fn short_header_with_continuation() {
        let geo = Geometry::new(1 << 20).unwrap();
        let mut page = vec![0xFFu8; 64];
        assert_eq!(write_page_header(&mut page, &geo, 0x2000, 7, 1, 1234), 24);
        let h = read_page_header(&page).unwrap();
        assert_eq!(h.info, XLP_FIRST_IS_CONTRECORD | XLP_BKP_REMOVABLE);
        assert_eq!(
            (h.tli, h.pageaddr, h.rem_len, h.long),
            (7, 0x2000, 1234, None)
        );
        assert_eq!(&page[20..24], &[0, 0, 0, 0]);
        assert_eq!(page_header_size(&geo, 0x10_0000), 40);
        assert!(read_page_header(&page[..10]).is_none());
    }
}
