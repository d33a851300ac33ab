//! Record assembly (`XLogRecordAssemble` + the CRC part of `XLogInsertRecord`).
//!
//! A record as built here (only main data, no block references):
//!
//! ```text
//! XLogRecord, 24 bytes:
//! { xl_tot_len: u32 | xl_xid: u32 | xl_prev: u64 | xl_info: u8 | xl_rmid: u8 | pad: 2 | xl_crc: u32 }
//!   0                 4             8              16            17            18        20..24
//! main data header, only if there is main data:
//! { XLR_BLOCK_ID_DATA_SHORT (255) | len: u8 }          if len <= 255
//! { XLR_BLOCK_ID_DATA_LONG (254)  | len: u32 }         otherwise
//! { main data: len bytes }
//! ```
//!
//! `xl_tot_len` is the unaligned total; the next record starts MAXALIGNed.
//! `xl_crc` = CRC-32C(body after the header, then header bytes 0..20).
//!
//! The CRC is fed from the values being written (header fields as words,
//! the caller's prefix and payload slices), never by reading back bytes just
//! stored into a WAL buffer: such loads wait for the stores' cache misses.
//! The bytes are the same either way (tests below check both
//! against the `crc32c` crate over the written bytes).

use crate::consts::{
    MAX_RECORD_LEN, RM_LOGICALMSG_ID, RM_XACT_ID, RM_XLOG_ID, SIZE_OF_XLOG_RECORD,
    XLOG_CHECKPOINT_ONLINE, XLOG_CHECKPOINT_SHUTDOWN, XLOG_LOGICAL_MESSAGE, XLOG_RESTORE_POINT,
    XLOG_SWITCH, XLOG_XACT_ABORT, XLOG_XACT_COMMIT, XLR_BLOCK_ID_DATA_LONG,
    XLR_BLOCK_ID_DATA_SHORT, XLR_RMGR_INFO_MASK, XL_CRC_OFFSET,
};
use crate::geometry::{FormatError, Lsn};
use crate::page::{get_u32, get_u64, put_u32, put_u64};

/// Offsets inside `XLogRecord`.
pub(crate) const OFF_TOT_LEN: usize = 0;
pub(crate) const OFF_XID: usize = 4;
pub(crate) const OFF_PREV: usize = 8;
pub(crate) const OFF_INFO: usize = 16;
pub(crate) const OFF_RMID: usize = 17;

/// `dbId` written into logical messages: OID 5 is the `postgres` database in
/// PostgreSQL 15, which is where `pg_logical_emit_message` usually runs (the
/// fixture has it). Logical decoding only shows messages whose dbId matches
/// the slot's database.
pub const DEFAULT_MESSAGE_DB_OID: u32 = 5;
/// `SizeOfLogicalMessage` = `offsetof(xl_logical_message, message)`.
pub const SIZE_OF_LOGICAL_MESSAGE: usize = 24;
/// `sizeof(CheckPoint)` on 64-bit platforms (84 bytes of fields, padded to 88).
pub const SIZE_OF_CHECKPOINT: usize = 88;
/// Size of `xl_xact_commit` (just `xact_time`).
pub const SIZE_OF_XACT_COMMIT: usize = 8;
/// PostgreSQL's MAXFNAMELEN: the size of `xl_restore_point.rp_name`, NUL
/// included (a restore point name has at most 63 bytes).
pub const MAXFNAMELEN: usize = 64;
/// `sizeof(xl_restore_point)`: `rp_time` (8) and `rp_name` (64).
pub const SIZE_OF_RESTORE_POINT: usize = 8 + MAXFNAMELEN;

/// A record assembled in local memory before insertion: 24-byte header,
/// main-data block header, main data. The CRC of everything after the header
/// is computed at build time; [`RecordBuf::finish`] sets `xl_prev` and
/// completes `xl_crc`. Reuse one `RecordBuf` with [`RecordBuf::rebuild`] (or
/// [`logical_message_into`]) to build records without allocating.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordBuf {
    bytes: Vec<u8>,
    data_crc: u32,
}

impl RecordBuf {
    /// Builds a record whose main data is the concatenation of `main_data`.
    ///
    /// # Panics
    /// If the record would exceed [`MAX_RECORD_LEN`]; use
    /// [`RecordBuf::try_new`] for untrusted sizes.
    pub fn new(xid: u32, rmid: u8, info: u8, main_data: &[&[u8]]) -> RecordBuf {
        let mut buf = RecordBuf::default();
        buf.rebuild(xid, rmid, info, main_data);
        buf
    }

    /// Like [`RecordBuf::new`] but reports an oversized record as an error.
    pub fn try_new(
        xid: u32,
        rmid: u8,
        info: u8,
        main_data: &[&[u8]],
    ) -> Result<RecordBuf, FormatError> {
        let mut buf = RecordBuf::default();
        buf.try_rebuild(xid, rmid, info, main_data)?;
        Ok(buf)
    }

    /// Rebuilds this record in place, reusing its allocation.
    ///
    /// # Panics
    /// If the record would exceed [`MAX_RECORD_LEN`].
    pub fn rebuild(&mut self, xid: u32, rmid: u8, info: u8, main_data: &[&[u8]]) {
        if let Err(e) = self.try_rebuild(xid, rmid, info, main_data) {
            panic!("{e}");
        }
    }

    /// Rebuilds this record in place; errors if it would be too long.
    pub fn try_rebuild(
        &mut self,
        xid: u32,
        rmid: u8,
        info: u8,
        main_data: &[&[u8]],
    ) -> Result<(), FormatError> {
        let main_len: usize = main_data.iter().map(|piece| piece.len()).sum();
        let tot_len = SIZE_OF_XLOG_RECORD + main_data_header_len(main_len) + main_len;
        if tot_len > MAX_RECORD_LEN {
            return Err(FormatError::RecordTooLong(tot_len as u64));
        }
        self.bytes.clear();
        self.bytes.reserve(tot_len);
        self.bytes
            .extend_from_slice(&record_header(tot_len as u32, xid, rmid, info));
        push_main_data_header(&mut self.bytes, main_len);
        for piece in main_data {
            self.bytes.extend_from_slice(piece);
        }
        self.data_crc = crc32c_append(0, &self.bytes[SIZE_OF_XLOG_RECORD..]);
        Ok(())
    }

    /// `xl_tot_len` (not MAXALIGNed).
    pub fn total_len(&self) -> u32 {
        self.bytes.len() as u32
    }

    /// Sets `xl_prev` and completes `xl_crc` over the header.
    pub fn finish(&mut self, prev: Lsn) {
        seal_header(&mut self.bytes, prev, self.data_crc);
    }

    /// The record bytes (`total_len()` of them).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// `xl_xid`.
    pub fn xid(&self) -> u32 {
        get_u32(&self.bytes, OFF_XID)
    }

    /// `xl_prev` (0 until [`RecordBuf::finish`]).
    pub fn prev(&self) -> Lsn {
        get_u64(&self.bytes, OFF_PREV)
    }

    /// `xl_rmid`.
    pub fn rmid(&self) -> u8 {
        self.bytes[OFF_RMID]
    }

    /// `xl_info`.
    pub fn info(&self) -> u8 {
        self.bytes[OFF_INFO]
    }

    /// `xl_crc` (valid after [`RecordBuf::finish`]).
    pub fn crc(&self) -> u32 {
        get_u32(&self.bytes, XL_CRC_OFFSET)
    }

    /// Whether this is an XLOG SWITCH record (consumes the rest of the segment).
    pub fn is_switch(&self) -> bool {
        self.rmid() == RM_XLOG_ID && self.info() & XLR_RMGR_INFO_MASK == XLOG_SWITCH
    }
}

/// Longest input [`crc32c_append`] hashes itself: below three of the `crc32c`
/// crate's short blocks (3 x 256 bytes) that crate runs the same one-lane
/// loop, only after more set-up and a byte-at-a-time head and tail.
const SHORT_CRC_MAX: usize = 768;

/// CRC-32C of `data` continuing from `crc` (the same function as
/// `crc32c::crc32c_append`). Most records are a few dozen bytes,
/// where that crate's set-up (alignment split, chunking into three lanes,
/// bytewise head and tail) was most of the cost; short inputs here take
/// eight bytes per instruction from any alignment, then four, then bytes.
#[inline]
pub(crate) fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() <= SHORT_CRC_MAX && std::is_x86_feature_detected!("sse4.2") {
        // SAFETY: `crc32c_short_sse42` needs SSE 4.2, which the CPU has
        // (detected just above; the detection is cached by std).
        return unsafe { crc32c_short_sse42(crc, data) };
    }
    crc32c::crc32c_append(crc, data)
}

/// The short-input CRC-32C with the SSE 4.2 `crc32` instruction.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn crc32c_short_sse42(crc: u32, data: &[u8]) -> u32 {
    !crc_state_bytes_sse42(!crc, data)
}

/// Feeds `data` into a raw (not inverted) CRC-32C `state`: eight bytes per
/// instruction from any alignment, then four, then bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
#[inline]
fn crc_state_bytes_sse42(state: u32, data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
    let mut state = u64::from(state);
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        state = _mm_crc32_u64(state, get_u64(w, 0));
    }
    let mut state = state as u32;
    let mut tail = words.remainder();
    if tail.len() >= 4 {
        state = _mm_crc32_u32(state, get_u32(tail, 0));
        tail = &tail[4..];
    }
    for &b in tail {
        state = _mm_crc32_u8(state, b);
    }
    state
}

/// Feeds a caller's slice into a raw CRC state: short ones with
/// [`crc_state_bytes_sse42`], longer ones with the `crc32c` crate, whose
/// three-lane loop is faster there (as in [`crc32c_append`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
#[inline]
fn crc_state_slice_sse42(state: u32, data: &[u8]) -> u32 {
    if data.len() > SHORT_CRC_MAX {
        return !crc32c::crc32c_append(!state, data);
    }
    crc_state_bytes_sse42(state, data)
}

/// The little-endian words of a record header's first 20 bytes (the part
/// `xl_crc` covers), as the CRC consumes them: `xl_tot_len | xl_xid`,
/// `xl_prev`, `xl_info | xl_rmid | pad`.
fn header_crc_words(tot_len: u32, xid: u32, prev: Lsn, rmid: u8, info: u8) -> (u64, u64, u32) {
    (
        u64::from(tot_len) | u64::from(xid) << 32,
        prev,
        u32::from(info) | u32::from(rmid) << 8,
    )
}

/// `xl_crc` of a record whose body has CRC `data_crc`, from the header's
/// field values (never from header bytes just stored: a profile
/// showed the `crc32` loads of freshly written bytes waiting on the
/// stores, 87 % of the CRC's samples on one load).
fn header_crc(data_crc: u32, tot_len: u32, xid: u32, prev: Lsn, rmid: u8, info: u8) -> u32 {
    let words = header_crc_words(tot_len, xid, prev, rmid, info);
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("sse4.2") {
        // SAFETY: `header_crc_sse42` needs SSE 4.2, which the CPU has
        // (detected just above; the detection is cached by std).
        return unsafe { !header_crc_state_sse42(!data_crc, words) };
    }
    let crc = crc32c::crc32c_append(data_crc, &words.0.to_le_bytes());
    let crc = crc32c::crc32c_append(crc, &words.1.to_le_bytes());
    crc32c::crc32c_append(crc, &words.2.to_le_bytes())
}

/// Feeds the header words of [`header_crc_words`] into a raw CRC state.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
#[inline]
fn header_crc_state_sse42(state: u32, words: (u64, u64, u32)) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u32, _mm_crc32_u64};
    let state = _mm_crc32_u64(u64::from(state), words.0);
    let state = _mm_crc32_u64(state, words.1) as u32;
    _mm_crc32_u32(state, words.2)
}

/// Bytes of the main-data block header for `main_len` bytes of main data.
fn main_data_header_len(main_len: usize) -> usize {
    match main_len {
        0 => 0,
        1..=255 => 2,
        _ => 5,
    }
}

/// An `XLogRecord` header with `xl_prev` and `xl_crc` still zero.
fn record_header(tot_len: u32, xid: u32, rmid: u8, info: u8) -> [u8; SIZE_OF_XLOG_RECORD] {
    let mut h = [0u8; SIZE_OF_XLOG_RECORD];
    put_u32(&mut h, OFF_TOT_LEN, tot_len);
    put_u32(&mut h, OFF_XID, xid);
    h[OFF_INFO] = info;
    h[OFF_RMID] = rmid;
    h
}

/// Sets `xl_prev` in a record's `header` and completes `xl_crc` from the
/// CRC of its data (`data_crc`) and the header's fields.
fn seal_header(header: &mut [u8], prev: Lsn, data_crc: u32) {
    put_u64(header, OFF_PREV, prev);
    let crc = header_crc(
        data_crc,
        get_u32(header, OFF_TOT_LEN),
        get_u32(header, OFF_XID),
        prev,
        header[OFF_RMID],
        header[OFF_INFO],
    );
    put_u32(header, XL_CRC_OFFSET, crc);
}

/// Writes the `XLR_BLOCK_ID_DATA_SHORT`/`LONG` header, if any main data,
/// at the start of `dst`; returns its length.
fn write_main_data_header(dst: &mut [u8], main_len: usize) -> usize {
    let n = main_data_header_len(main_len);
    match n {
        0 => {}
        2 => dst[..2].copy_from_slice(&[XLR_BLOCK_ID_DATA_SHORT, main_len as u8]),
        _ => {
            dst[0] = XLR_BLOCK_ID_DATA_LONG;
            put_u32(dst, 1, main_len as u32);
        }
    }
    n
}

/// Appends the main-data header, if any main data.
fn push_main_data_header(out: &mut Vec<u8>, main_len: usize) {
    let mut h = [0u8; 5];
    let n = write_main_data_header(&mut h, main_len);
    out.extend_from_slice(&h[..n]);
}

/// Encodes the fixed part of `xl_logical_message`:
///
/// ```text
/// { dbId: u32 | transactional: u8 | pad: 3 (zeroed) | prefix_size: u64 | message_size: u64 }
///   0           4                   5                 8                   16..24
/// ```
/// followed in the record by the prefix with its NUL (`prefix_size` counts
/// the NUL) and the payload. PostgreSQL leaves the 3 pad bytes uninitialised;
/// we zero them.
fn logical_message_header(
    db_oid: u32,
    transactional: bool,
    prefix_size: usize,
    payload_size: usize,
) -> [u8; SIZE_OF_LOGICAL_MESSAGE] {
    let mut h = [0u8; SIZE_OF_LOGICAL_MESSAGE];
    put_u32(&mut h, 0, db_oid);
    h[4] = u8::from(transactional);
    put_u64(&mut h, 8, prefix_size as u64);
    put_u64(&mut h, 16, payload_size as u64);
    h
}

/// A LogicalMessage record (`pg_logical_emit_message`), dbId
/// [`DEFAULT_MESSAGE_DB_OID`].
///
/// # Panics
/// If the record would exceed [`MAX_RECORD_LEN`].
pub fn logical_message(xid: u32, transactional: bool, prefix: &str, payload: &[u8]) -> RecordBuf {
    let mut buf = RecordBuf::default();
    logical_message_into(&mut buf, xid, transactional, prefix, payload);
    buf
}

/// Rebuilds `buf` as a LogicalMessage record, reusing its allocation.
///
/// # Panics
/// If the record would exceed [`MAX_RECORD_LEN`].
pub fn logical_message_into(
    buf: &mut RecordBuf,
    xid: u32,
    transactional: bool,
    prefix: &str,
    payload: &[u8],
) {
    if let Err(e) = try_logical_message_into(buf, xid, transactional, prefix, payload) {
        panic!("{e}");
    }
}

/// Fallible [`logical_message_into`].
pub fn try_logical_message_into(
    buf: &mut RecordBuf,
    xid: u32,
    transactional: bool,
    prefix: &str,
    payload: &[u8],
) -> Result<(), FormatError> {
    let prefix_size = prefix.len() + 1;
    let header = logical_message_header(
        DEFAULT_MESSAGE_DB_OID,
        transactional,
        prefix_size,
        payload.len(),
    );
    let pieces: [&[u8]; 4] = [&header, prefix.as_bytes(), &[0], payload];
    buf.try_rebuild(xid, RM_LOGICALMSG_ID, XLOG_LOGICAL_MESSAGE, &pieces)
}

/// The prefix of filler messages: a range of WAL reserved by a process
/// that died before it finished copying its record into it is filled
/// with one such non-transactional message of exactly the reserved size,
/// so that the WAL stays readable through it. Readers skip it; the
/// `walshm.` prefix is reserved for walshm's own messages.
pub const FILLER_PREFIX: &str = "walshm.filler";

/// Rebuilds `buf` as a filler record whose MAXALIGNed size is exactly
/// `size` bytes (a multiple of 8, at least [`SIZE_OF_XLOG_RECORD`]): a
/// non-transactional logical message with prefix [`FILLER_PREFIX`] and a
/// zero payload when that fits, else (below 64 bytes) an XLOG NOOP record
/// with zero main data, which pg_waldump shows as `NOOP`.
///
/// Sizes: a record of main data `m` takes 24 + m (m = 0), 24 + 2 + m
/// (m < 256) or 24 + 5 + m bytes; every multiple of 8 from 24 up is hit
/// exactly (m = size - 26 while that is below 256, else size - 29, which
/// is then at least 259).
///
/// # Panics
/// If `size` is not such a size or exceeds [`MAX_RECORD_LEN`].
pub fn filler_record_into(buf: &mut RecordBuf, size: usize) {
    assert!(
        size % 8 == 0 && (SIZE_OF_XLOG_RECORD..=MAX_RECORD_LEN).contains(&size),
        "no filler record has {size} bytes"
    );
    let main_len = match size - SIZE_OF_XLOG_RECORD {
        0 => 0,
        n if n - 2 < 256 => n - 2,
        n => n - 5,
    };
    let message_fixed = SIZE_OF_LOGICAL_MESSAGE + FILLER_PREFIX.len() + 1;
    let zeros = vec![0u8; main_len];
    if main_len >= message_fixed {
        let payload = &zeros[..main_len - message_fixed];
        logical_message_into(buf, 0, false, FILLER_PREFIX, payload);
    } else {
        buf.rebuild(
            0,
            RM_XLOG_ID,
            crate::consts::XLOG_NOOP,
            &[&zeros[..main_len]],
        );
    }
    debug_assert_eq!(buf.total_len() as usize, size);
}

/// A LogicalMessage record given by its parts, assembled straight into
/// its destination (the WAL buffer page it is reserved in)
/// instead of into a [`RecordBuf`] that is then copied there. The bytes
/// [`LogicalMessage::write_into`] produces are exactly those of
/// [`logical_message_into`] followed by [`RecordBuf::finish`].
#[derive(Clone, Copy, Debug)]
pub struct LogicalMessage<'a> {
    xid: u32,
    transactional: bool,
    prefix: &'a str,
    payload: &'a [u8],
    /// Bytes of main data (the `xl_logical_message` header, prefix, NUL,
    /// payload).
    main_len: usize,
    tot_len: u32,
}

impl<'a> LogicalMessage<'a> {
    /// The message's parts; errors if the record would be too long.
    pub fn try_new(
        xid: u32,
        transactional: bool,
        prefix: &'a str,
        payload: &'a [u8],
    ) -> Result<LogicalMessage<'a>, FormatError> {
        let main_len = SIZE_OF_LOGICAL_MESSAGE + prefix.len() + 1 + payload.len();
        let tot_len = SIZE_OF_XLOG_RECORD + main_data_header_len(main_len) + main_len;
        if tot_len > MAX_RECORD_LEN {
            return Err(FormatError::RecordTooLong(tot_len as u64));
        }
        Ok(LogicalMessage {
            xid,
            transactional,
            prefix,
            payload,
            main_len,
            tot_len: tot_len as u32,
        })
    }

    /// `xl_tot_len` (not MAXALIGNed).
    pub fn total_len(&self) -> u32 {
        self.tot_len
    }

    /// Builds the record in `buf` (for a record that does not fit where
    /// it is reserved in one piece); [`RecordBuf::finish`] completes it.
    pub fn build_into(&self, buf: &mut RecordBuf) {
        logical_message_into(buf, self.xid, self.transactional, self.prefix, self.payload);
    }

    /// Writes the whole record, `xl_prev` = `prev` and `xl_crc` included,
    /// into `dst` (exactly `total_len()` bytes). Only stores touch `dst`:
    /// the CRC is computed from the parts ([`LogicalMessage::record_crc`]),
    /// not by reading back the written bytes (`dst` is a WAL
    /// buffer line another core just zeroed, and the loads waited for the
    /// stores' cache misses).
    ///
    /// # Panics
    /// If `dst` is not `total_len()` bytes long.
    pub fn write_into(&self, dst: &mut [u8], prev: Lsn) {
        assert_eq!(dst.len(), self.tot_len as usize, "destination size");
        let body = &mut dst[SIZE_OF_XLOG_RECORD..];
        let n = write_main_data_header(body, self.main_len);
        let [w0, w1, w2] = self.message_header_words();
        let rest = &mut body[n..];
        put_u64(rest, 0, w0);
        put_u64(rest, 8, w1);
        put_u64(rest, 16, w2);
        let rest = &mut rest[SIZE_OF_LOGICAL_MESSAGE..];
        let (prefix, rest) = rest.split_at_mut(self.prefix.len());
        prefix.copy_from_slice(self.prefix.as_bytes());
        rest[0] = 0;
        rest[1..].copy_from_slice(self.payload);
        let (h0, h1, h2) = header_crc_words(
            self.tot_len,
            self.xid,
            prev,
            RM_LOGICALMSG_ID,
            XLOG_LOGICAL_MESSAGE,
        );
        put_u64(dst, OFF_TOT_LEN, h0);
        put_u64(dst, OFF_PREV, h1);
        put_u32(dst, OFF_INFO, h2);
        put_u32(dst, XL_CRC_OFFSET, self.record_crc(prev));
    }

    /// The `xl_logical_message` header as the three little-endian words
    /// [`logical_message_header`] lays out: `dbId | transactional | pad`,
    /// `prefix_size`, `message_size`.
    fn message_header_words(&self) -> [u64; 3] {
        [
            u64::from(DEFAULT_MESSAGE_DB_OID) | u64::from(self.transactional) << 32,
            (self.prefix.len() + 1) as u64,
            self.payload.len() as u64,
        ]
    }

    /// `xl_crc` of this record with `xl_prev` = `prev`, from the parts
    /// (the same value [`RecordBuf::finish`] computes over the bytes).
    pub fn record_crc(&self, prev: Lsn) -> u32 {
        header_crc(
            self.body_crc(),
            self.tot_len,
            self.xid,
            prev,
            RM_LOGICALMSG_ID,
            XLOG_LOGICAL_MESSAGE,
        )
    }

    /// CRC-32C of the record's body (main-data block header, message
    /// header, prefix, NUL, payload) from the parts.
    fn body_crc(&self) -> u32 {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("sse4.2") {
            // SAFETY: `body_crc_state_sse42` needs SSE 4.2, which the CPU
            // has (detected just above; the detection is cached by std).
            return unsafe { !self.body_crc_state_sse42(!0) };
        }
        self.body_crc_portable()
    }

    /// [`LogicalMessage::body_crc`] without SSE 4.2, piece by piece.
    fn body_crc_portable(&self) -> u32 {
        let mut mdh = [0u8; 5];
        let n = write_main_data_header(&mut mdh, self.main_len);
        let mut crc = crc32c::crc32c_append(0, &mdh[..n]);
        for w in self.message_header_words() {
            crc = crc32c::crc32c_append(crc, &w.to_le_bytes());
        }
        crc = crc32c::crc32c_append(crc, self.prefix.as_bytes());
        crc = crc32c::crc32c_append(crc, &[0]);
        crc32c::crc32c_append(crc, self.payload)
    }

    /// [`LogicalMessage::body_crc`] fed into a raw CRC state with SSE 4.2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "sse4.2")]
    fn body_crc_state_sse42(&self, state: u32) -> u32 {
        use std::arch::x86_64::{_mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
        let state = match main_data_header_len(self.main_len) {
            0 => state,
            2 => _mm_crc32_u16(
                state,
                u16::from(XLR_BLOCK_ID_DATA_SHORT) | (self.main_len as u16) << 8,
            ),
            _ => _mm_crc32_u32(
                _mm_crc32_u8(state, XLR_BLOCK_ID_DATA_LONG),
                self.main_len as u32,
            ),
        };
        let [w0, w1, w2] = self.message_header_words();
        let state = _mm_crc32_u64(u64::from(state), w0);
        let state = _mm_crc32_u64(state, w1);
        let state = _mm_crc32_u64(state, w2) as u32;
        let state = crc_state_slice_sse42(state, self.prefix.as_bytes());
        let state = _mm_crc32_u8(state, 0);
        crc_state_slice_sse42(state, self.payload)
    }
}

/// An XLOG SWITCH record: no main data, xid 0 (24 bytes).
pub fn switch_record() -> RecordBuf {
    RecordBuf::new(0, RM_XLOG_ID, XLOG_SWITCH, &[])
}

/// A Transaction COMMIT record whose `xl_xact_commit` holds only `xact_time`
/// (no `XLOG_XACT_HAS_INFO`), so `pg_waldump` prints `COMMIT <timestamp>`.
pub fn commit_record(xid: u32, commit_time_us_since_pg_epoch: i64) -> RecordBuf {
    let mut buf = RecordBuf::default();
    commit_record_into(&mut buf, xid, commit_time_us_since_pg_epoch);
    buf
}

/// [`commit_record`] into an existing buffer (no allocation once warm).
pub fn commit_record_into(buf: &mut RecordBuf, xid: u32, commit_time_us_since_pg_epoch: i64) {
    xact_end_record_into(buf, xid, XLOG_XACT_COMMIT, commit_time_us_since_pg_epoch);
}

/// Transaction ABORT (`xl_xact_abort` with just `xact_time`, no xinfo), as
/// pg_waldump decodes it: "ABORT <timestamp>".
pub fn abort_record_into(buf: &mut RecordBuf, xid: u32, abort_time_us_since_pg_epoch: i64) {
    xact_end_record_into(buf, xid, XLOG_XACT_ABORT, abort_time_us_since_pg_epoch);
}

/// COMMIT and ABORT share the layout: `{ xact_time: i64 }`.
fn xact_end_record_into(buf: &mut RecordBuf, xid: u32, info: u8, time_us: i64) {
    buf.rebuild(xid, RM_XACT_ID, info, &[&time_us.to_le_bytes()]);
}

/// An XLOG RESTORE_POINT record (`pg_create_restore_point`, PostgreSQL's
/// XLogRestorePoint), xid 0, whose main data is `xl_restore_point`:
///
/// ```text
/// { rp_time: i64 (us since 2000-01-01) | rp_name: [u8; 64], NUL-terminated, zero-padded }
///   0                                    8..72
/// ```
///
/// `name` must be shorter than [`MAXFNAMELEN`] bytes and hold no NUL
/// (`None` otherwise): recovery compares the name up to its NUL.
pub fn restore_point_record(rp_time_us_since_pg_epoch: i64, name: &str) -> Option<RecordBuf> {
    if name.len() >= MAXFNAMELEN || name.as_bytes().contains(&0) {
        return None;
    }
    let mut rp_name = [0u8; MAXFNAMELEN];
    rp_name[..name.len()].copy_from_slice(name.as_bytes());
    let time = rp_time_us_since_pg_epoch.to_le_bytes();
    Some(RecordBuf::new(
        0,
        RM_XLOG_ID,
        XLOG_RESTORE_POINT,
        &[&time, &rp_name],
    ))
}

/// PostgreSQL 15's `CheckPoint` (pg_control.h), 88 bytes on 64-bit:
///
/// ```text
/// { redo: u64 | ThisTimeLineID: u32 | PrevTimeLineID: u32 | fullPageWrites: u8 | pad: 7 |
///   0           8                     12                    16                   17
///   nextXid: u64 | nextOid: u32 | nextMulti: u32 | nextMultiOffset: u32 | oldestXid: u32 |
///   24             32             36               40                     44
///   oldestXidDB: u32 | oldestMulti: u32 | oldestMultiDB: u32 | pad: 4 | time: i64 |
///   48                 52                 56                   60       64
///   oldestCommitTsXid: u32 | newestCommitTsXid: u32 | oldestActiveXid: u32 | pad: 4 }
///   72                       76                       80                     84..88
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckPoint {
    /// Redo pointer.
    pub redo: Lsn,
    /// `ThisTimeLineID`.
    pub tli: u32,
    /// `PrevTimeLineID`.
    pub prev_tli: u32,
    /// `fullPageWrites`.
    pub full_page_writes: bool,
    /// `nextXid` as a `FullTransactionId` (epoch in the high 32 bits).
    pub next_xid: u64,
    /// `nextOid`.
    pub next_oid: u32,
    /// `nextMulti`.
    pub next_multi: u32,
    /// `nextMultiOffset`.
    pub next_multi_offset: u32,
    /// `oldestXid`.
    pub oldest_xid: u32,
    /// `oldestXidDB`.
    pub oldest_xid_db: u32,
    /// `oldestMulti`.
    pub oldest_multi: u32,
    /// `oldestMultiDB`.
    pub oldest_multi_db: u32,
    /// `time` (`pg_time_t`, Unix seconds).
    pub time: i64,
    /// `oldestCommitTsXid`.
    pub oldest_commit_ts_xid: u32,
    /// `newestCommitTsXid`.
    pub newest_commit_ts_xid: u32,
    /// `oldestActiveXid`.
    pub oldest_active_xid: u32,
}

impl CheckPoint {
    /// Encodes the exact 88-byte struct image, padding zeroed.
    pub fn to_bytes(&self) -> [u8; SIZE_OF_CHECKPOINT] {
        let mut b = [0u8; SIZE_OF_CHECKPOINT];
        put_u64(&mut b, 0, self.redo);
        put_u32(&mut b, 8, self.tli);
        put_u32(&mut b, 12, self.prev_tli);
        b[16] = u8::from(self.full_page_writes);
        put_u64(&mut b, 24, self.next_xid);
        put_u32(&mut b, 32, self.next_oid);
        put_u32(&mut b, 36, self.next_multi);
        put_u32(&mut b, 40, self.next_multi_offset);
        put_u32(&mut b, 44, self.oldest_xid);
        put_u32(&mut b, 48, self.oldest_xid_db);
        put_u32(&mut b, 52, self.oldest_multi);
        put_u32(&mut b, 56, self.oldest_multi_db);
        put_u64(&mut b, 64, self.time as u64);
        put_u32(&mut b, 72, self.oldest_commit_ts_xid);
        put_u32(&mut b, 76, self.newest_commit_ts_xid);
        put_u32(&mut b, 80, self.oldest_active_xid);
        b
    }

    /// Decodes the struct image; `None` if `b` is shorter than 84 bytes (the
    /// trailing struct padding is not required).
    pub fn from_bytes(b: &[u8]) -> Option<CheckPoint> {
        if b.len() < 84 {
            return None;
        }
        Some(CheckPoint {
            redo: get_u64(b, 0),
            tli: get_u32(b, 8),
            prev_tli: get_u32(b, 12),
            full_page_writes: b[16] != 0,
            next_xid: get_u64(b, 24),
            next_oid: get_u32(b, 32),
            next_multi: get_u32(b, 36),
            next_multi_offset: get_u32(b, 40),
            oldest_xid: get_u32(b, 44),
            oldest_xid_db: get_u32(b, 48),
            oldest_multi: get_u32(b, 52),
            oldest_multi_db: get_u32(b, 56),
            time: get_u64(b, 64) as i64,
            oldest_commit_ts_xid: get_u32(b, 72),
            newest_commit_ts_xid: get_u32(b, 76),
            oldest_active_xid: get_u32(b, 80),
        })
    }
}

/// An XLOG CHECKPOINT_SHUTDOWN (or CHECKPOINT_ONLINE) record, xid 0.
pub fn checkpoint_record(cp: &CheckPoint, shutdown: bool) -> RecordBuf {
    let info = if shutdown {
        XLOG_CHECKPOINT_SHUTDOWN
    } else {
        XLOG_CHECKPOINT_ONLINE
    };
    RecordBuf::new(0, RM_XLOG_ID, info, &[&cp.to_bytes()])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reservable size gets a filler of exactly that size, which
    /// decodes with its CRC: a NOOP below 64 bytes, a message from there.
    #[test]
    fn a_filler_record_fills_every_reservable_size_exactly() {
        let mut buf = RecordBuf::default();
        for size in (SIZE_OF_XLOG_RECORD..4096)
            .step_by(8)
            .chain([MAX_RECORD_LEN & !7])
        {
            filler_record_into(&mut buf, size);
            assert_eq!(buf.total_len() as usize, size, "size {size}");
            buf.finish(0x1000);
            let rec = crate::decode_record_bytes(0x2000, buf.bytes()).expect("decodes");
            match rec.as_logical_message() {
                Some((transactional, prefix, _)) => {
                    assert!(size >= 64 && !transactional && prefix == FILLER_PREFIX);
                }
                None => assert!(
                    size < 64
                        && rec.rmid == RM_XLOG_ID
                        && rec.info & 0xF0 == crate::consts::XLOG_NOOP
                ),
            }
        }
    }

    /// The short-input CRC agrees with the `crc32c` crate at every length
    /// around the cut-over, from every alignment, continuing any CRC.
    #[test]
    fn short_crc_matches_the_crate() {
        let data: Vec<u8> = (0..2000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for start in 0..9 {
            for len in (0..100).chain(SHORT_CRC_MAX - 9..SHORT_CRC_MAX + 9) {
                let piece = &data[start..start + len];
                for seed in [0u32, 0xDEAD_BEEF] {
                    assert_eq!(
                        crc32c_append(seed, piece),
                        crc32c::crc32c_append(seed, piece),
                        "start {start} len {len} seed {seed:#x}"
                    );
                }
            }
        }
    }

    /// The first record of the PG15 fixture, with the pad bytes PostgreSQL
    /// left as garbage (0x56 0x00 0x00) zeroed and the CRC recomputed.
    #[test]
    fn logical_message_layout_matches_pg() {
        let mut rec = logical_message(0, false, "test", b"hello");
        rec.finish(0x0151_1B38);
        let b = rec.bytes();
        assert_eq!(rec.total_len(), 60);
        assert_eq!(&b[0..4], &60u32.to_le_bytes());
        assert_eq!(b[17], RM_LOGICALMSG_ID);
        assert_eq!(&b[24..26], &[0xFF, 0x22]);
        assert_eq!(&b[26..34], &[5, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[34..42], &5u64.to_le_bytes());
        assert_eq!(&b[42..50], &5u64.to_le_bytes());
        assert_eq!(&b[50..60], b"test\0hello");
    }

    /// Assembled in place, a message is byte for byte what the RecordBuf
    /// path builds and finishes, short and long main-data forms and the
    /// edges between them, transactional or not.
    #[test]
    fn logical_message_in_place_matches_record_buf() {
        let payload: Vec<u8> = (0..2000u32).map(|i| (i * 7 + 3) as u8).collect();
        let prefix_for = |n: usize| "walshm-prefix".get(..n % 14).unwrap_or("");
        for len in (0..300).chain([1000, 1999]) {
            for (pn, transactional, xid) in [(6, false, 0), (0, true, 77), (13, true, 9)] {
                let prefix = prefix_for(pn);
                let prev = 0x0151_1B38 + len as u64;
                let mut buf = logical_message(xid, transactional, prefix, &payload[..len]);
                buf.finish(prev);
                let msg =
                    LogicalMessage::try_new(xid, transactional, prefix, &payload[..len]).unwrap();
                assert_eq!(
                    msg.total_len(),
                    buf.total_len(),
                    "len {len} prefix {prefix:?}"
                );
                let mut dst = vec![0xAAu8; msg.total_len() as usize];
                msg.write_into(&mut dst, prev);
                assert_eq!(dst, buf.bytes(), "len {len} prefix {prefix:?} xid {xid}");
                // The CRC from the parts, either way, is the crate's over
                // the written bytes.
                let body = crc32c::crc32c(&dst[SIZE_OF_XLOG_RECORD..]);
                assert_eq!(msg.body_crc(), body, "len {len}");
                assert_eq!(msg.body_crc_portable(), body, "len {len}");
                let whole = crc32c::crc32c_append(body, &dst[..XL_CRC_OFFSET]);
                assert_eq!(get_u32(&dst, XL_CRC_OFFSET), whole, "len {len}");
                assert_eq!(msg.record_crc(prev), whole, "len {len}");
                let mut again = RecordBuf::default();
                msg.build_into(&mut again);
                again.finish(prev);
                assert_eq!(again, buf);
            }
        }
        assert!(LogicalMessage::try_new(0, false, "p", &vec![0u8; MAX_RECORD_LEN]).is_err());
    }

    #[test]
    fn crc_matches_fixture_record() {
        // Recreate the fixture's first record including PG's garbage pad bytes.
        let mut header = logical_message_header(5, false, 5, 5);
        header[5] = 0x56;
        let mut rec = RecordBuf::new(0, RM_LOGICALMSG_ID, 0, &[&header, b"test\0", b"hello"]);
        rec.finish(0x0151_1B38);
        assert_eq!(rec.crc(), u32::from_le_bytes([0xf3, 0x4c, 0xc2, 0xf6]));
    }

    #[test]
    fn long_main_data_header() {
        let data = vec![7u8; 300];
        let rec = RecordBuf::new(9, RM_XACT_ID, 0, &[&data]);
        assert_eq!(rec.total_len(), 24 + 5 + 300);
        assert_eq!(&rec.bytes()[24..29], &[254, 0x2C, 0x01, 0, 0]);
        let edge = RecordBuf::new(9, RM_XACT_ID, 0, &[&data[..255]]);
        assert_eq!(edge.total_len(), 24 + 2 + 255);
    }

    #[test]
    fn rebuild_reuses_allocation() {
        let mut rec = logical_message(1, true, "p", &[1u8; 1000]);
        let ptr = rec.bytes().as_ptr();
        logical_message_into(&mut rec, 2, false, "q", &[2u8; 10]);
        assert_eq!(rec.bytes().as_ptr(), ptr);
        assert_eq!(rec.xid(), 2);
    }

    #[test]
    fn switch_and_checkpoint_sizes() {
        assert_eq!(switch_record().total_len(), 24);
        assert!(switch_record().is_switch());
        let cp = CheckPoint {
            redo: 0x0100_0028,
            time: -5,
            ..CheckPoint::default()
        };
        assert_eq!(checkpoint_record(&cp, true).total_len(), 114);
        assert_eq!(CheckPoint::from_bytes(&cp.to_bytes()), Some(cp));
        assert!(RecordBuf::try_new(0, 0, 0, &[&vec![0u8; MAX_RECORD_LEN]]).is_err());
    }

    /// xl_restore_point: 72 bytes of main data behind a short data header,
    /// read back by the decoder as pg_waldump prints it.
    #[test]
    fn restore_point_layout_and_description() {
        let mut rec = restore_point_record(123_456, "before-upgrade").unwrap();
        rec.finish(0x0100_0028);
        assert_eq!(rec.total_len(), 24 + 2 + 72);
        assert_eq!((rec.rmid(), rec.info(), rec.xid()), (RM_XLOG_ID, 0x70, 0));
        let d = crate::decode_record_bytes(0x0100_0060, rec.bytes()).unwrap();
        let (time, name) = d.as_restore_point().unwrap();
        assert_eq!((time, name), (123_456, &b"before-upgrade"[..]));
        assert_eq!(d.describe(), "RESTORE_POINT before-upgrade");
        assert!(restore_point_record(0, &"n".repeat(MAXFNAMELEN - 1)).is_some());
        assert!(restore_point_record(0, &"n".repeat(MAXFNAMELEN)).is_none());
        assert!(restore_point_record(0, "a\0b").is_none());
    }
}
