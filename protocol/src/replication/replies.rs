//! The replies of a replication connection outside the stream: result
//! sets in text format (IDENTIFY_SYSTEM, slots, TIMELINE_HISTORY, the end
//! of a timeline), CommandComplete, ReadyForQuery, errors, the Copy
//! responses and BASE_BACKUP's typed CopyData, and intervals as PostgreSQL
//! prints them.
//!
//! Invariants: every message is built whole in memory (`Out`) except
//! TIMELINE_HISTORY's content, which the caller sends after
//! `timeline_history_head`; a message that would not fit the protocol is
//! an error or None, never a truncated message.

use super::format_lsn;
use crate::codec::{FieldDescription, Out};
use crate::error::SqlError;
use crate::sql::value::SqlType;

/// The type of a result column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    Text,
    Int4,
    Int8,
    Bytea,
    Oid,
}

impl ColumnType {
    /// The SQL type whose OID and length the RowDescription names.
    fn sql_type(self) -> SqlType {
        match self {
            ColumnType::Text => SqlType::Text,
            ColumnType::Int4 => SqlType::Int4,
            ColumnType::Int8 => SqlType::Int8,
            ColumnType::Bytea => SqlType::Bytea,
            ColumnType::Oid => SqlType::Oid,
        }
    }
}

/// A whole result set in text format: RowDescription, DataRows and
/// CommandComplete `tag` (no ReadyForQuery).
pub fn result_set(
    columns: &[(&str, ColumnType)],
    rows: &[Vec<Option<String>>],
    tag: &str,
) -> Result<Vec<u8>, SqlError> {
    let mut out = Out::new();
    out.row_description(&field_descriptions(columns))?;
    for row in rows {
        let lens: Vec<Option<usize>> = row.iter().map(|c| c.as_ref().map(String::len)).collect();
        out.data_row_header(&lens)?;
        for c in row {
            out.column_len(c.as_ref().map(String::len));
            if let Some(v) = c {
                out.raw(v.as_bytes());
            }
        }
    }
    out.command_complete(tag);
    Ok(out.bytes().to_vec())
}

fn field_descriptions(columns: &[(&str, ColumnType)]) -> Vec<FieldDescription> {
    columns
        .iter()
        .map(|(name, ty)| FieldDescription {
            name: name.to_string(),
            type_oid: ty.sql_type().oid(),
            type_len: ty.sql_type().typlen(),
            format: 0,
        })
        .collect()
}

/// The start of TIMELINE_HISTORY's answer for history file `file` of
/// `len` bytes: RowDescription (`filename` text, `content` labelled bytea
/// as PostgreSQL labels it, the file's bytes as they are) and the DataRow
/// up to the content. The caller sends the `len` content bytes, then
/// CommandComplete "TIMELINE_HISTORY": the file is never held whole.
pub fn timeline_history_head(file: &str, len: usize) -> Result<Vec<u8>, SqlError> {
    let mut out = Out::new();
    out.row_description(&field_descriptions(&[
        ("filename", ColumnType::Text),
        ("content", ColumnType::Bytea),
    ]))?;
    out.data_row_header(&[Some(file.len()), Some(len)])?;
    out.column_len(Some(file.len()));
    out.raw(file.as_bytes());
    out.column_len(Some(len));
    Ok(out.bytes().to_vec())
}

/// What ends START_REPLICATION on a timeline older than the server's
/// (after the CopyDones, or at once when it asked to start at the switch
/// point): the timeline that followed and where it began, then
/// CommandComplete "START_STREAMING" (walsender.c's StartReplication; the
/// caller adds the command's own CommandComplete).
pub fn next_timeline_result(next_tli: u32, next_tli_start: u64) -> Result<Vec<u8>, SqlError> {
    result_set(
        &[
            ("next_tli", ColumnType::Int8),
            ("next_tli_startpos", ColumnType::Text),
        ],
        &[vec![
            Some(next_tli.to_string()),
            Some(format_lsn(next_tli_start)),
        ]],
        "START_STREAMING",
    )
}

/// CommandComplete `tag`.
pub fn command_complete(tag: &str) -> Vec<u8> {
    let mut out = Out::new();
    out.command_complete(tag);
    out.bytes().to_vec()
}

/// EmptyQueryResponse.
pub fn empty_query_response() -> Vec<u8> {
    let mut out = Out::new();
    out.empty_query_response();
    out.bytes().to_vec()
}

/// ReadyForQuery, idle.
pub fn ready_for_query() -> Vec<u8> {
    let mut out = Out::new();
    out.ready_for_query(b'I');
    out.bytes().to_vec()
}

/// ErrorResponse (or NoticeResponse) for `e`.
pub fn error_response(e: &SqlError) -> Vec<u8> {
    let mut out = Out::new();
    out.error_or_notice(e);
    out.bytes().to_vec()
}

/// CopyBothResponse: binary, no columns (what START_REPLICATION answers).
pub fn copy_both_response() -> Vec<u8> {
    let mut v = vec![b'W'];
    v.extend_from_slice(&7i32.to_be_bytes());
    v.push(0); // overall format: text (as PostgreSQL's walsender sends)
    v.extend_from_slice(&0i16.to_be_bytes());
    v
}

/// CopyOutResponse: text format, no columns (what BASE_BACKUP's COPY
/// stream begins with).
pub fn copy_out_response() -> Vec<u8> {
    let mut v = vec![b'H'];
    v.extend_from_slice(&7i32.to_be_bytes());
    v.push(0);
    v.extend_from_slice(&0i16.to_be_bytes());
    v
}

/// Appends a CopyData message whose payload is `kind` then `payload`
/// (BASE_BACKUP's stream: 'n' new archive, 'd' data, 'p' progress, 'm'
/// manifest). None if it does not fit a message.
pub fn typed_copy_data(out: &mut Vec<u8>, kind: u8, payload: &[u8]) -> Option<()> {
    let len = i32::try_from(4 + 1 + payload.len()).ok()?;
    out.push(b'd');
    out.extend_from_slice(&len.to_be_bytes());
    out.push(kind);
    out.extend_from_slice(payload);
    Some(())
}

/// CopyDone.
pub fn copy_done() -> Vec<u8> {
    vec![b'c', 0, 0, 0, 4]
}

/// A lag in microseconds as PostgreSQL prints an interval under its
/// default IntervalStyle (postgres): `HH:MM:SS.ffffff`, the fraction
/// without trailing zeros, and a leading day count past 24 hours.
pub fn format_interval(us: i64) -> String {
    let us = us.max(0);
    let days = us / 86_400_000_000;
    let rest = us % 86_400_000_000;
    let (h, m) = (rest / 3_600_000_000, rest / 60_000_000 % 60);
    let (s, frac) = (rest / 1_000_000 % 60, rest % 1_000_000);
    let mut out = match days {
        0 => String::new(),
        1 => "1 day ".to_string(),
        d => format!("{d} days "),
    };
    out.push_str(&format!("{h:02}:{m:02}:{s:02}"));
    if frac != 0 {
        let f = format!("{frac:06}");
        out.push('.');
        out.push_str(f.trim_end_matches('0'));
    }
    out
}
