//! `XLogReaderValidatePageHeader` and the continuation check, in one place:
//! every WAL reader (walformat's [`crate::WalReader`] over whole segment
//! files, the runtime's incremental reader over single pages from shared
//! memory or `pread`) validates each page it reads with a [`PageCheck`].
//!
//! A page is read either to start a record on it ([`PageUse::RecordStart`]:
//! an all-zero header is a clean end of WAL) or to continue record `lsn`
//! ([`PageUse::Continuation`]: the page must carry
//! `XLP_FIRST_IS_CONTRECORD` and `xlp_rem_len` = the bytes still to come).
//! The checker remembers the system identifier (learned from the first long
//! header when not given) and the latest page timeline (timelines never go
//! backwards within one read).

use crate::consts::{
    SIZE_OF_XLOG_SHORT_PHD, XLOG_BLCKSZ, XLOG_PAGE_MAGIC, XLP_ALL_FLAGS, XLP_FIRST_IS_CONTRECORD,
    XLP_LONG_HEADER,
};
use crate::geometry::{Geometry, Lsn};
use crate::page::{read_page_header, PageHeader};
use crate::reader::{LongHeaderMismatch, WalError};

/// What a page is being read for: starting a record (an absent or zeroed
/// page is a clean end of WAL) or continuing record `lsn`, of which
/// `rem_len` bytes are still to come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageUse {
    /// A record starts on this page (or the reader looks for one).
    RecordStart,
    /// The page continues record `lsn`.
    Continuation {
        /// Start of the record being continued.
        lsn: Lsn,
        /// Bytes of the record still to come (`xlp_rem_len` expected).
        rem_len: u32,
    },
}

/// Page-header validation state of one reader (see the module header).
#[derive(Clone, Debug)]
pub struct PageCheck {
    geo: Geometry,
    /// The newest timeline the reader accepts.
    tli: u32,
    sysid: Option<u64>,
    latest_page_tli: u32,
}

impl PageCheck {
    /// A checker for timeline `tli` (pages of older timelines pass, newer
    /// ones fail); `sysid = None` learns it from the first long header.
    pub fn new(geo: Geometry, tli: u32, sysid: Option<u64>) -> PageCheck {
        PageCheck {
            geo,
            tli,
            sysid,
            latest_page_tli: 0,
        }
    }

    /// System identifier in use (given, or learned from a long header).
    pub fn sysid(&self) -> Option<u64> {
        self.sysid
    }

    /// Forgets the latest page timeline (the reader starts afresh).
    pub fn reset_timeline(&mut self) {
        self.latest_page_tli = 0;
    }

    /// Validates the header of the page at `page` (a page boundary) whose
    /// first bytes are `bytes` (at least the header; the page's segment file
    /// is `file`, for messages). `Ok(None)` only for
    /// [`PageUse::RecordStart`] when the header is all zero.
    pub fn check(
        &mut self,
        page: Lsn,
        bytes: &[u8],
        usage: PageUse,
        file: &str,
    ) -> Result<Option<PageHeader>, WalError> {
        let offset = self.geo.seg_offset(page);
        let short = &bytes[..SIZE_OF_XLOG_SHORT_PHD.min(bytes.len())];
        let zeroed = short.iter().all(|&b| b == 0);
        match (usage, zeroed, read_page_header(bytes)) {
            (PageUse::RecordStart, true, _) => Ok(None),
            (PageUse::Continuation { lsn, rem_len }, true, _) => {
                Err(self.missing_continuation(lsn, page, file, rem_len, (0, 0)))
            }
            (_, false, Some(hdr)) => {
                self.validate(page, &hdr, file)?;
                if let PageUse::Continuation { lsn, rem_len } = usage {
                    let flagged = hdr.info & XLP_FIRST_IS_CONTRECORD != 0;
                    if !flagged || hdr.rem_len != rem_len {
                        return Err(self.missing_continuation(
                            lsn,
                            page,
                            file,
                            rem_len,
                            (hdr.info, hdr.rem_len),
                        ));
                    }
                }
                Ok(Some(hdr))
            }
            // read_page_header only fails on input shorter than the header.
            (_, false, None) => Err(WalError::BadPageInfo {
                lsn: page,
                file: file.to_owned(),
                offset,
                info: 0,
            }),
        }
    }

    fn missing_continuation(
        &self,
        lsn: Lsn,
        page: Lsn,
        file: &str,
        expected_rem_len: u32,
        (found_info, found_rem_len): (u16, u32),
    ) -> WalError {
        WalError::MissingContinuation {
            lsn,
            page,
            file: file.to_owned(),
            offset: self.geo.seg_offset(page),
            expected_rem_len,
            found_info,
            found_rem_len,
        }
    }

    /// `XLogReaderValidatePageHeader`.
    fn validate(&mut self, page: Lsn, hdr: &PageHeader, file: &str) -> Result<(), WalError> {
        let offset = self.geo.seg_offset(page);
        if hdr.magic != XLOG_PAGE_MAGIC {
            return Err(WalError::BadMagic {
                lsn: page,
                file: file.to_owned(),
                offset,
                magic: hdr.magic,
            });
        }
        let is_long = hdr.info & XLP_LONG_HEADER != 0;
        if hdr.info & !XLP_ALL_FLAGS != 0 || is_long != (offset == 0) {
            return Err(WalError::BadPageInfo {
                lsn: page,
                file: file.to_owned(),
                offset,
                info: hdr.info,
            });
        }
        if let Some((sysid, seg_size, blcksz)) = hdr.long {
            self.check_long_header(page, file, sysid, seg_size, blcksz)?;
        }
        if hdr.pageaddr != page {
            return Err(WalError::BadPageAddr {
                lsn: page,
                file: file.to_owned(),
                offset,
                found: hdr.pageaddr,
            });
        }
        if hdr.tli < self.latest_page_tli || hdr.tli > self.tli {
            return Err(WalError::BadTimeline {
                lsn: page,
                file: file.to_owned(),
                tli: hdr.tli,
                previous: if hdr.tli < self.latest_page_tli {
                    self.latest_page_tli
                } else {
                    self.tli
                },
            });
        }
        self.latest_page_tli = hdr.tli;
        Ok(())
    }

    fn check_long_header(
        &mut self,
        page: Lsn,
        file: &str,
        sysid: u64,
        seg_size: u32,
        blcksz: u32,
    ) -> Result<(), WalError> {
        let mismatch = match self.sysid {
            Some(expected) if expected != sysid => Some(LongHeaderMismatch::SystemId {
                found: sysid,
                expected,
            }),
            _ if u64::from(seg_size) != self.geo.seg_size => Some(LongHeaderMismatch::SegSize {
                found: seg_size,
                expected: self.geo.seg_size,
            }),
            _ if blcksz as usize != XLOG_BLCKSZ => {
                Some(LongHeaderMismatch::BlckSz { found: blcksz })
            }
            _ => None,
        };
        if let Some(mismatch) = mismatch {
            return Err(WalError::BadLongHeader {
                lsn: page,
                file: file.to_owned(),
                mismatch,
            });
        }
        self.sysid = Some(sysid);
        Ok(())
    }
}
