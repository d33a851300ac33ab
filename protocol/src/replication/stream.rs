//! The CopyBoth stream of START_REPLICATION (see the diagram in the module
//! header of `replication`): the server's XLogData headers and keepalives,
//! the client's standby status updates and hot-standby feedback, and the
//! framing of client messages on a replication connection.
//!
//! Invariants: nothing a client sends can panic here; a malformed message
//! is 08P01 (`SqlError::protocol_violation`), and so is a length beyond
//! `MAX_CLIENT_MESSAGE`, as soon as the header is read.

use crate::error::SqlError;

/// Bytes of the CopyData + 'w' header before the WAL bytes of an XLogData
/// message.
pub const XLOG_DATA_HEADER: usize = 1 + 4 + 1 + 8 + 8 + 8;

/// Appends the header of a CopyData XLogData message carrying `len` WAL
/// bytes from `start`; the caller appends the bytes. None if `len` does not
/// fit a message.
pub fn xlog_data_header(
    out: &mut Vec<u8>,
    start: u64,
    wal_end: u64,
    send_time: i64,
    len: usize,
) -> Option<()> {
    let total = i32::try_from(4 + 1 + 8 + 8 + 8 + len).ok()?;
    out.push(b'd');
    out.extend_from_slice(&total.to_be_bytes());
    out.push(b'w');
    out.extend_from_slice(&start.to_be_bytes());
    out.extend_from_slice(&wal_end.to_be_bytes());
    out.extend_from_slice(&send_time.to_be_bytes());
    Some(())
}

/// A CopyData primary keepalive message.
pub fn keepalive(wal_end: u64, send_time: i64, reply_requested: bool) -> Vec<u8> {
    let mut v = Vec::with_capacity(23);
    v.push(b'd');
    v.extend_from_slice(&(4i32 + 18).to_be_bytes());
    v.push(b'k');
    v.extend_from_slice(&wal_end.to_be_bytes());
    v.extend_from_slice(&send_time.to_be_bytes());
    v.push(reply_requested as u8);
    v
}

/// A standby status update ('r'): what the receiver wrote, flushed and
/// applied (0 = not reported).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StandbyStatus {
    pub write: u64,
    pub flush: u64,
    pub apply: u64,
    pub send_time: i64,
    pub reply_requested: bool,
}

/// A message the client sent inside the CopyBoth stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamMessage {
    Status(StandbyStatus),
    /// Hot-standby feedback ('h'): accepted, nothing to hold back here.
    HotStandbyFeedback,
}

fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Decodes the body of a CopyData message from the client.
pub fn parse_stream_message(body: &[u8]) -> Result<StreamMessage, SqlError> {
    let insufficient = || SqlError::protocol_violation("insufficient data left in message");
    match body.first() {
        Some(b'r') => {
            if body.len() != 34 {
                return Err(if body.len() < 34 {
                    insufficient()
                } else {
                    SqlError::protocol_violation("invalid message format")
                });
            }
            Ok(StreamMessage::Status(StandbyStatus {
                write: be_u64(&body[1..]),
                flush: be_u64(&body[9..]),
                apply: be_u64(&body[17..]),
                send_time: be_u64(&body[25..]) as i64,
                reply_requested: body[33] != 0,
            }))
        }
        Some(b'h') if body.len() >= 9 => Ok(StreamMessage::HotStandbyFeedback),
        Some(b'h') => Err(insufficient()),
        Some(&t) => Err(SqlError::protocol_violation(format!(
            "unexpected message type \"{}\"",
            t as char
        ))),
        None => Err(insufficient()),
    }
}

/// Largest frontend message a replication connection accepts.
pub const MAX_CLIENT_MESSAGE: usize = 1 << 20;

/// Takes one complete frontend message (tag, body) from the front of
/// `buf`, if there is one; a bad length is a protocol violation.
pub fn take_message(buf: &mut Vec<u8>) -> Result<Option<(u8, Vec<u8>)>, SqlError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let len = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
    if len < 4 || len as usize > MAX_CLIENT_MESSAGE {
        return Err(SqlError::protocol_violation(format!(
            "invalid message length {len}"
        )));
    }
    let total = 1 + len as usize;
    if buf.len() < total {
        return Ok(None);
    }
    let tag = buf[0];
    let body = buf[5..total].to_vec();
    buf.drain(..total);
    Ok(Some((tag, body)))
}

/// The text of a simple Query message body.
pub fn query_text(body: &[u8]) -> Result<String, SqlError> {
    let text = match body.split_last() {
        Some((0, text)) => text,
        _ => return Err(SqlError::protocol_violation("invalid string in message")),
    };
    String::from_utf8(text.to_vec())
        .map_err(|_| SqlError::protocol_violation("invalid byte sequence for encoding \"UTF8\""))
}
