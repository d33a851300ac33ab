//! `walformat`: the PostgreSQL 15 write-ahead-log byte format, for walshm.
//!
//! This crate is the single source of truth for every byte that walshm puts
//! into (or reads back from) a WAL segment. Its output must be readable by
//! PostgreSQL 15's own `pg_waldump`, so every constant and layout here mirrors
//! PostgreSQL 15 (`xlogrecord.h`, `xlog_internal.h`, `xlog.c`, `xloginsert.c`,
//! `xlogreader.c`, `pg_control.h`, `xact.h`, `message.h`).
//!
//! # Invariants
//!
//! * All multi-byte integers are little-endian and are encoded/decoded with
//!   explicit byte writes; the crate's only `unsafe` is the call of the
//!   SSE 4.2 CRC-32C after its runtime detection (`record::crc32c_append`,
//!   `record::header_crc`, `LogicalMessage::body_crc`).
//! * Pages are [`XLOG_BLCKSZ`] (8 KiB) bytes. The first page of a segment has a
//!   40-byte long header ([`SIZE_OF_XLOG_LONG_PHD`]), every other page a 24-byte
//!   short header ([`SIZE_OF_XLOG_SHORT_PHD`]).
//! * Records start at MAXALIGNed (8-byte) positions and never at a page
//!   boundary (they start right after the page header instead). A record may
//!   be split across pages and segments at any byte, including inside its
//!   24-byte header; each continuation page carries `XLP_FIRST_IS_CONTRECORD`
//!   and `xlp_rem_len` = bytes of the record still to come.
//! * "Byte positions" (see [`Geometry`]) count only usable bytes, i.e. they
//!   skip page headers, exactly like PostgreSQL's `CurrBytePos`.
//! * A record's CRC-32C covers the record body (everything after the 24-byte
//!   header) followed by the header up to, not including, `xl_crc`.
//! * An XLOG SWITCH record consumes the rest of its segment; the pages after
//!   it are left all-zero (PostgreSQL 14+ zeroes their headers too).
//! * Decoding never panics on bad input: every malformed byte sequence yields
//!   a typed [`WalError`].

mod consts;
mod decode;
mod geometry;
mod lookahead;
mod page;
mod pagecheck;
mod reader;
mod record;
mod time;
mod writer;

pub use consts::*;
pub use decode::{decode_record_bytes, DecodedRecord};
pub use geometry::{
    format_lsn, maxalign, parse_lsn, FormatError, Geometry, Lsn, PageMap, DEFAULT_SEG_SIZE,
    MAX_SEG_SIZE, MIN_SEG_SIZE,
};
pub use lookahead::{
    look_ahead, look_ahead_from, unsynced_window_end, Lookahead, ValidWalAfter, Verdict, WalSystem,
};
pub use page::{page_header_size, read_page_header, write_page_header, PageHeader};
pub use pagecheck::{PageCheck, PageUse};
pub use reader::{LongHeaderMismatch, StdWalFiles, WalError, WalFiles, WalReader};
pub use record::{
    abort_record_into, checkpoint_record, commit_record, commit_record_into, filler_record_into,
    logical_message, logical_message_into, restore_point_record, switch_record,
    try_logical_message_into, CheckPoint, LogicalMessage, RecordBuf, DEFAULT_MESSAGE_DB_OID,
    FILLER_PREFIX, MAXFNAMELEN, SIZE_OF_CHECKPOINT, SIZE_OF_LOGICAL_MESSAGE, SIZE_OF_RESTORE_POINT,
    SIZE_OF_XACT_COMMIT,
};
pub use time::{
    civil_from_days, format_pg_timestamp, format_unix_secs, parse_pg_timestamp, pg_now_us,
    pg_timestamp_to_unix_us, PG_END_TIMESTAMP, PG_EPOCH_UNIX_SECS, PG_FIRST_AD_TIMESTAMP,
};
pub use writer::SegmentWriter;
