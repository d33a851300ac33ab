//! Record decoding (`DecodeXLogRecord`) and `pg_waldump`-style descriptions
//! (`xlogdesc.c`, `xactdesc.c`, `logicalmsgdesc.c`).

use crate::consts::{
    BKPBLOCK_HAS_DATA, BKPBLOCK_HAS_IMAGE, BKPBLOCK_SAME_REL, BKPIMAGE_COMPRESS_LZ4,
    BKPIMAGE_COMPRESS_PGLZ, BKPIMAGE_COMPRESS_ZSTD, BKPIMAGE_HAS_HOLE, MAX_RECORD_LEN, RMGR_NAMES,
    RM_LOGICALMSG_ID, RM_MAX_BUILTIN_ID, RM_MIN_CUSTOM_ID, RM_XACT_ID, RM_XLOG_ID,
    SIZE_OF_REL_FILE_NODE, SIZE_OF_XLOG_RECORD, XLOG_BACKUP_END, XLOG_CHECKPOINT_ONLINE,
    XLOG_CHECKPOINT_SHUTDOWN, XLOG_END_OF_RECOVERY, XLOG_FPI, XLOG_FPI_FOR_HINT, XLOG_FPW_CHANGE,
    XLOG_LOGICAL_MESSAGE, XLOG_NEXTOID, XLOG_NOOP, XLOG_OVERWRITE_CONTRECORD,
    XLOG_PARAMETER_CHANGE, XLOG_RESTORE_POINT, XLOG_SWITCH, XLOG_XACT_ABORT,
    XLOG_XACT_ABORT_PREPARED, XLOG_XACT_ASSIGNMENT, XLOG_XACT_COMMIT, XLOG_XACT_COMMIT_PREPARED,
    XLOG_XACT_INVALIDATIONS, XLOG_XACT_OPMASK, XLOG_XACT_PREPARE, XLR_BLOCK_ID_DATA_LONG,
    XLR_BLOCK_ID_DATA_SHORT, XLR_BLOCK_ID_ORIGIN, XLR_BLOCK_ID_TOPLEVEL_XID, XLR_INFO_MASK,
    XLR_MAX_BLOCK_ID, XLR_RMGR_INFO_MASK, XL_CRC_OFFSET,
};
use crate::geometry::{format_lsn, maxalign, Lsn};
use crate::page::{get_u16, get_u32, get_u64};
use crate::reader::WalError;
use crate::record::{CheckPoint, OFF_INFO, OFF_PREV, OFF_RMID, OFF_TOT_LEN, OFF_XID};
use crate::record::{SIZE_OF_LOGICAL_MESSAGE, SIZE_OF_RESTORE_POINT, SIZE_OF_XACT_COMMIT};
use crate::time::format_pg_timestamp;
use std::fmt::Write as _;

/// One decoded WAL record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedRecord {
    /// Start of the record.
    pub lsn: Lsn,
    /// End of the record's last byte (unaligned; a page boundary if the record
    /// ends exactly at the end of a page).
    pub end: Lsn,
    /// PostgreSQL's `EndRecPtr`: the MAXALIGNed end, where the next record
    /// goes (a page boundary is not skipped: `Geometry::recptr_to_bytepos`
    /// treats it as the position after that page's header). For SWITCH: the
    /// start of the next segment.
    pub next: Lsn,
    /// `xl_prev`.
    pub prev: Lsn,
    /// `xl_xid`.
    pub xid: u32,
    /// `xl_rmid`.
    pub rmid: u8,
    /// `xl_info` (rmgr bits and XLR flag bits).
    pub info: u8,
    /// `xl_tot_len`.
    pub tot_len: u32,
    /// Main data (after all block references).
    pub main_data: Vec<u8>,
    /// Sum of full-page-image lengths (`bimg_len`) of the block references.
    pub fpi_len: u32,
}

/// Fields of the fixed record header.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecordHeader {
    pub tot_len: u32,
    pub xid: u32,
    pub prev: Lsn,
    pub info: u8,
    pub rmid: u8,
}

/// Whether `rmid` is a PostgreSQL 15 resource manager id (`RmgrIdIsValid`).
pub(crate) fn rmgr_id_is_valid(rmid: u8) -> bool {
    rmid <= RM_MAX_BUILTIN_ID || rmid >= RM_MIN_CUSTOM_ID
}

/// Parses and sanity-checks the 24-byte header (length and rmgr id, like
/// `ValidXLogRecordHeader`; `xl_prev` is the caller's business).
pub(crate) fn parse_record_header(lsn: Lsn, hdr: &[u8]) -> Result<RecordHeader, WalError> {
    let h = RecordHeader {
        tot_len: get_u32(hdr, OFF_TOT_LEN),
        xid: get_u32(hdr, OFF_XID),
        prev: get_u64(hdr, OFF_PREV),
        info: hdr[OFF_INFO],
        rmid: hdr[OFF_RMID],
    };
    let len = h.tot_len as usize;
    if !(SIZE_OF_XLOG_RECORD..=MAX_RECORD_LEN).contains(&len) {
        return Err(WalError::BadLength {
            lsn,
            len: h.tot_len,
        });
    }
    if !rmgr_id_is_valid(h.rmid) {
        return Err(WalError::BadRmgr { lsn, rmid: h.rmid });
    }
    Ok(h)
}

/// Verifies `xl_crc` of a complete record.
pub(crate) fn check_crc(lsn: Lsn, rec: &[u8]) -> Result<(), WalError> {
    let stored = get_u32(rec, XL_CRC_OFFSET);
    let body_crc = crc32c::crc32c(&rec[SIZE_OF_XLOG_RECORD..]);
    let computed = crc32c::crc32c_append(body_crc, &rec[..XL_CRC_OFFSET]);
    if stored != computed {
        return Err(WalError::BadCrc {
            lsn,
            stored,
            computed,
        });
    }
    Ok(())
}

/// A bounds-checked cursor over the block-header area of a record.
struct Cursor<'a> {
    lsn: Lsn,
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], WalError> {
        let end = self.pos + n;
        if end > self.buf.len() {
            return Err(body_error(
                self.lsn,
                "block header runs past the record end",
            ));
        }
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, WalError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, WalError> {
        Ok(get_u16(self.take(2)?, 0))
    }

    fn u32(&mut self) -> Result<u32, WalError> {
        Ok(get_u32(self.take(4)?, 0))
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
}

fn body_error(lsn: Lsn, reason: &'static str) -> WalError {
    WalError::BadRecordBody { lsn, reason }
}

/// Result of walking the block headers of a record.
struct Body {
    main_len: usize,
    fpi_len: u32,
}

/// Walks the block-reference headers (`DecodeXLogRecord`), returning the
/// main-data length and the full-page-image bytes. Block data is skipped.
fn parse_body(lsn: Lsn, rec: &[u8]) -> Result<Body, WalError> {
    let mut cur = Cursor {
        lsn,
        buf: rec,
        pos: SIZE_OF_XLOG_RECORD,
    };
    let mut datatotal: u64 = 0;
    let mut main_len = 0usize;
    let mut fpi_len: u32 = 0;
    let mut max_block_id: Option<u8> = None;
    let mut have_rel = false;
    while cur.remaining() as u64 > datatotal {
        let block_id = cur.u8()?;
        match block_id {
            XLR_BLOCK_ID_DATA_SHORT => {
                main_len = usize::from(cur.u8()?);
                datatotal += main_len as u64;
                break;
            }
            XLR_BLOCK_ID_DATA_LONG => {
                main_len = cur.u32()? as usize;
                datatotal += main_len as u64;
                break;
            }
            XLR_BLOCK_ID_ORIGIN => {
                cur.u16()?;
            }
            XLR_BLOCK_ID_TOPLEVEL_XID => {
                cur.u32()?;
            }
            id if id <= XLR_MAX_BLOCK_ID => {
                if max_block_id.is_some_and(|max| id <= max) {
                    return Err(body_error(lsn, "out-of-order block_id"));
                }
                max_block_id = Some(id);
                let block = parse_block_header(&mut cur, &mut have_rel)?;
                datatotal += u64::from(block.data_len) + u64::from(block.image_len);
                fpi_len += u32::from(block.image_len);
            }
            _ => return Err(body_error(lsn, "invalid block_id")),
        }
    }
    if cur.remaining() as u64 != datatotal {
        return Err(body_error(
            lsn,
            "record length does not match its block headers",
        ));
    }
    Ok(Body { main_len, fpi_len })
}

struct BlockLens {
    data_len: u16,
    image_len: u16,
}

/// Parses one block-reference header after its id byte.
fn parse_block_header(cur: &mut Cursor<'_>, have_rel: &mut bool) -> Result<BlockLens, WalError> {
    let lsn = cur.lsn;
    let fork_flags = cur.u8()?;
    let data_len = cur.u16()?;
    let has_data = fork_flags & BKPBLOCK_HAS_DATA != 0;
    if has_data != (data_len != 0) {
        return Err(body_error(
            lsn,
            "BKPBLOCK_HAS_DATA inconsistent with data length",
        ));
    }
    let mut image_len = 0;
    if fork_flags & BKPBLOCK_HAS_IMAGE != 0 {
        image_len = cur.u16()?;
        let _hole_offset = cur.u16()?;
        let bimg_info = cur.u8()?;
        let compressed = bimg_info
            & (BKPIMAGE_COMPRESS_PGLZ | BKPIMAGE_COMPRESS_LZ4 | BKPIMAGE_COMPRESS_ZSTD)
            != 0;
        if bimg_info & BKPIMAGE_HAS_HOLE != 0 && compressed {
            let _hole_length = cur.u16()?;
        }
    }
    if fork_flags & BKPBLOCK_SAME_REL == 0 {
        cur.take(SIZE_OF_REL_FILE_NODE)?;
        *have_rel = true;
    } else if !*have_rel {
        return Err(body_error(lsn, "BKPBLOCK_SAME_REL set but no previous rel"));
    }
    let _block_number = cur.u32()?;
    Ok(BlockLens {
        data_len,
        image_len,
    })
}

/// Decodes a complete, contiguous record whose header is already validated.
pub(crate) fn decode_complete(
    lsn: Lsn,
    end: Lsn,
    next: Lsn,
    hdr: &RecordHeader,
    rec: &[u8],
) -> Result<DecodedRecord, WalError> {
    check_crc(lsn, rec)?;
    let body = parse_body(lsn, rec)?;
    Ok(DecodedRecord {
        lsn,
        end,
        next,
        prev: hdr.prev,
        xid: hdr.xid,
        rmid: hdr.rmid,
        info: hdr.info,
        tot_len: hdr.tot_len,
        main_data: rec[rec.len() - body.main_len..].to_vec(),
        fpi_len: body.fpi_len,
    })
}

/// Decodes one record from contiguous bytes (no page headers inside) that
/// start at `lsn`. Checks length, rmgr id, CRC and block headers, not
/// `xl_prev`. `end` = `lsn + tot_len` and `next` = `lsn + MAXALIGN(tot_len)`
/// (no page-boundary adjustment: there is no geometry here).
pub fn decode_record_bytes(lsn: Lsn, bytes: &[u8]) -> Result<DecodedRecord, WalError> {
    if bytes.len() < SIZE_OF_XLOG_RECORD {
        return Err(WalError::Truncated {
            lsn,
            needed: SIZE_OF_XLOG_RECORD as u64,
            got: bytes.len() as u64,
        });
    }
    let hdr = parse_record_header(lsn, bytes)?;
    let tot = hdr.tot_len as usize;
    if bytes.len() < tot {
        return Err(WalError::Truncated {
            lsn,
            needed: tot as u64,
            got: bytes.len() as u64,
        });
    }
    let end = lsn + tot as u64;
    let next = lsn + maxalign(tot as u64);
    decode_complete(lsn, end, next, &hdr, &bytes[..tot])
}

impl DecodedRecord {
    /// Resource manager name as `pg_waldump` prints it.
    pub fn rmgr_name(&self) -> &'static str {
        match RMGR_NAMES.get(usize::from(self.rmid)) {
            Some(name) => name,
            None if self.rmid >= RM_MIN_CUSTOM_ID => "custom",
            None => "unknown",
        }
    }

    /// The rmgr part of `xl_info`.
    fn rmgr_info(&self) -> u8 {
        self.info & XLR_RMGR_INFO_MASK
    }

    /// `rm_identify` text, `None` when PostgreSQL's would return NULL.
    fn identify(&self) -> Option<&'static str> {
        match self.rmid {
            RM_XLOG_ID => xlog_identify(self.rmgr_info()),
            RM_XACT_ID => xact_identify(self.info & XLOG_XACT_OPMASK),
            RM_LOGICALMSG_ID if self.rmgr_info() == XLOG_LOGICAL_MESSAGE => Some("MESSAGE"),
            _ => None,
        }
    }

    /// The text `pg_waldump` prints after `desc: ` for the record kinds this
    /// crate writes (XLOG checkpoints/SWITCH/NEXTOID, Transaction COMMIT
    /// without xinfo, LogicalMessage); other kinds get just their identity.
    /// Timestamps are rendered in UTC (pg_waldump uses the local zone: run it
    /// with `TZ=UTC` to compare).
    pub fn describe(&self) -> String {
        let mut s = match self.identify() {
            Some(id) => format!("{id} "),
            None => format!("UNKNOWN ({:x}) ", self.info & !XLR_INFO_MASK),
        };
        self.append_desc(&mut s);
        s
    }

    /// `rm_desc` part of the description.
    fn append_desc(&self, s: &mut String) {
        if let Some((cp, shutdown)) = self.as_checkpoint() {
            append_checkpoint_desc(s, &cp, shutdown);
        } else if self.rmid == RM_XLOG_ID && self.rmgr_info() == XLOG_NEXTOID {
            if self.main_data.len() >= 4 {
                let _ = write!(s, "{}", get_u32(&self.main_data, 0));
            }
        } else if let Some(time) = self.commit_time().or_else(|| self.abort_time()) {
            s.push_str(&format_pg_timestamp(time));
        } else if let Some((_, name)) = self.as_restore_point() {
            s.push_str(&String::from_utf8_lossy(name));
        } else if self.rmid == RM_LOGICALMSG_ID {
            self.append_message_desc(s);
        }
    }

    fn append_message_desc(&self, s: &mut String) {
        let Some(msg) = parse_logical_message(&self.main_data) else {
            return;
        };
        let _ = write!(
            s,
            "{}, prefix \"{}\"; payload ({} bytes): ",
            if msg.transactional {
                "transactional"
            } else {
                "non-transactional"
            },
            String::from_utf8_lossy(msg.prefix),
            msg.payload.len()
        );
        append_hex_bytes(s, msg.payload);
    }

    /// The "rec" part of `len (rec/tot)`: total length minus full-page images.
    pub fn rec_len(&self) -> u32 {
        self.tot_len.saturating_sub(self.fpi_len)
    }

    /// Whether this is a Transaction COMMIT record.
    pub fn is_commit(&self) -> bool {
        self.is_xact(XLOG_XACT_COMMIT)
    }

    /// `xact_time` of a COMMIT record.
    pub fn commit_time(&self) -> Option<i64> {
        self.xact_time(XLOG_XACT_COMMIT)
    }

    /// Whether this is a Transaction ABORT record.
    pub fn is_abort(&self) -> bool {
        self.is_xact(XLOG_XACT_ABORT)
    }

    /// `xact_time` of an ABORT record (`xl_xact_abort` has the same leading
    /// field as `xl_xact_commit`).
    pub fn abort_time(&self) -> Option<i64> {
        self.xact_time(XLOG_XACT_ABORT)
    }

    /// Whether this is a Transaction record of kind `op` (`XLOG_XACT_*`).
    fn is_xact(&self, op: u8) -> bool {
        self.rmid == RM_XACT_ID && self.info & XLOG_XACT_OPMASK == op
    }

    /// `xact_time` of a Transaction record of kind `op` whose main data
    /// starts as `xl_xact_commit` does.
    fn xact_time(&self, op: u8) -> Option<i64> {
        if !self.is_xact(op) || self.main_data.len() < SIZE_OF_XACT_COMMIT {
            return None;
        }
        Some(get_u64(&self.main_data, 0) as i64)
    }

    /// `(rp_time, rp_name)` of an XLOG RESTORE_POINT record (see
    /// `record::restore_point_record`); the name's bytes up to its first
    /// NUL, as PostgreSQL compares and prints it.
    pub fn as_restore_point(&self) -> Option<(i64, &[u8])> {
        let d = &self.main_data;
        if self.rmid != RM_XLOG_ID
            || self.rmgr_info() != XLOG_RESTORE_POINT
            || d.len() < SIZE_OF_RESTORE_POINT
        {
            return None;
        }
        let name = &d[8..SIZE_OF_RESTORE_POINT];
        let nul = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        Some((get_u64(d, 0) as i64, &name[..nul]))
    }

    /// Whether this is an XLOG SWITCH record.
    pub fn is_switch(&self) -> bool {
        self.rmid == RM_XLOG_ID && self.rmgr_info() == XLOG_SWITCH
    }

    /// The checkpoint of a CHECKPOINT_SHUTDOWN/ONLINE record and whether it
    /// is a shutdown checkpoint.
    pub fn as_checkpoint(&self) -> Option<(CheckPoint, bool)> {
        if self.rmid != RM_XLOG_ID {
            return None;
        }
        let shutdown = match self.rmgr_info() {
            XLOG_CHECKPOINT_SHUTDOWN => true,
            XLOG_CHECKPOINT_ONLINE => false,
            _ => return None,
        };
        Some((CheckPoint::from_bytes(&self.main_data)?, shutdown))
    }

    /// `(transactional, prefix, payload)` of a LogicalMessage record; `None`
    /// for other records, malformed messages or a non-UTF-8 prefix.
    pub fn as_logical_message(&self) -> Option<(bool, &str, &[u8])> {
        if self.rmid != RM_LOGICALMSG_ID || self.rmgr_info() != XLOG_LOGICAL_MESSAGE {
            return None;
        }
        let msg = parse_logical_message(&self.main_data)?;
        let prefix = std::str::from_utf8(msg.prefix).ok()?;
        Some((msg.transactional, prefix, msg.payload))
    }
}

/// A parsed `xl_logical_message` (see `record.rs` for the layout).
struct LogicalMessage<'a> {
    transactional: bool,
    /// Prefix up to its first NUL (as `%s` prints it).
    prefix: &'a [u8],
    payload: &'a [u8],
}

fn parse_logical_message(data: &[u8]) -> Option<LogicalMessage<'_>> {
    if data.len() < SIZE_OF_LOGICAL_MESSAGE {
        return None;
    }
    let prefix_size = usize::try_from(get_u64(data, 8)).ok()?;
    let payload_size = usize::try_from(get_u64(data, 16)).ok()?;
    let prefix_end = SIZE_OF_LOGICAL_MESSAGE.checked_add(prefix_size)?;
    let payload_end = prefix_end.checked_add(payload_size)?;
    if payload_end > data.len() {
        return None;
    }
    let raw_prefix = &data[SIZE_OF_LOGICAL_MESSAGE..prefix_end];
    let nul = raw_prefix
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(raw_prefix.len());
    Some(LogicalMessage {
        transactional: data[4] != 0,
        prefix: &raw_prefix[..nul],
        payload: &data[prefix_end..payload_end],
    })
}

/// Appends bytes as upper-case hex pairs separated by single spaces.
fn append_hex_bytes(s: &mut String, bytes: &[u8]) {
    for (i, b) in bytes.iter().enumerate() {
        let sep = if i == 0 { "" } else { " " };
        let _ = write!(s, "{sep}{b:02X}");
    }
}

/// `xlog_desc` for checkpoints (PostgreSQL 15 wording).
fn append_checkpoint_desc(s: &mut String, cp: &CheckPoint, shutdown: bool) {
    let _ = write!(
        s,
        "redo {:X}/{:X}; tli {}; prev tli {}; fpw {}; xid {}:{}; oid {}; multi {}; offset {}; \
         oldest xid {} in DB {}; oldest multi {} in DB {}; \
         oldest/newest commit timestamp xid: {}/{}; oldest running xid {}; {}",
        cp.redo >> 32,
        cp.redo & 0xFFFF_FFFF,
        cp.tli,
        cp.prev_tli,
        cp.full_page_writes,
        cp.next_xid >> 32,
        cp.next_xid & 0xFFFF_FFFF,
        cp.next_oid,
        cp.next_multi,
        cp.next_multi_offset,
        cp.oldest_xid,
        cp.oldest_xid_db,
        cp.oldest_multi,
        cp.oldest_multi_db,
        cp.oldest_commit_ts_xid,
        cp.newest_commit_ts_xid,
        cp.oldest_active_xid,
        if shutdown { "shutdown" } else { "online" }
    );
}

fn xlog_identify(info: u8) -> Option<&'static str> {
    Some(match info {
        XLOG_CHECKPOINT_SHUTDOWN => "CHECKPOINT_SHUTDOWN",
        XLOG_CHECKPOINT_ONLINE => "CHECKPOINT_ONLINE",
        XLOG_NOOP => "NOOP",
        XLOG_NEXTOID => "NEXTOID",
        XLOG_SWITCH => "SWITCH",
        XLOG_BACKUP_END => "BACKUP_END",
        XLOG_PARAMETER_CHANGE => "PARAMETER_CHANGE",
        XLOG_RESTORE_POINT => "RESTORE_POINT",
        XLOG_FPW_CHANGE => "FPW_CHANGE",
        XLOG_END_OF_RECOVERY => "END_OF_RECOVERY",
        XLOG_OVERWRITE_CONTRECORD => "OVERWRITE_CONTRECORD",
        XLOG_FPI => "FPI",
        XLOG_FPI_FOR_HINT => "FPI_FOR_HINT",
        _ => return None,
    })
}

fn xact_identify(op: u8) -> Option<&'static str> {
    Some(match op {
        XLOG_XACT_COMMIT => "COMMIT",
        XLOG_XACT_PREPARE => "PREPARE",
        XLOG_XACT_ABORT => "ABORT",
        XLOG_XACT_COMMIT_PREPARED => "COMMIT_PREPARED",
        XLOG_XACT_ABORT_PREPARED => "ABORT_PREPARED",
        XLOG_XACT_ASSIGNMENT => "ASSIGNMENT",
        XLOG_XACT_INVALIDATIONS => "INVALIDATION",
        _ => return None,
    })
}

/// Formats `lsn` for error messages.
pub(crate) fn lsn_text(lsn: Lsn) -> String {
    format_lsn(lsn)
}
