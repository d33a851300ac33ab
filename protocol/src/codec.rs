//! Wire codec of protocol v3: encoding of backend messages into an output
//! buffer, and decoding of frontend message bodies into typed messages.
//!
//! Invariants: every encoded message is `type byte, int32 length (including
//! itself), body`, big-endian; decoding never panics and never reads past the
//! body: a malformed body is a `CodecError`, which the caller turns into
//! FATAL 08P01 (or, for text that is not UTF-8, into ERROR 22021).
//!
//! Integer fields: every count and length is converted with a checked
//! conversion (`crate::limits::wire_*`); a message whose count or length
//! does not fit is not written at all and its encoder returns 54000, so no
//! wrapped number ever reaches a client. Counts are read as PostgreSQL's
//! `pq_getmsgint(.., 2)` reads them, unsigned (up to 65535 parameters). OIDs
//! are unsigned 32-bit values sent as their bits.
//!
//! Memory: `Out` is a staging buffer that the caller writes out once it
//! holds `FLUSH_THRESHOLD`-ish bytes; large DataRow payloads bypass it
//! (`data_row_header` + `column_len`, the payload written by the caller),
//! and `clear` gives back the capacity of a large reply.

use crate::error::{sqlstate, SqlError};
use crate::limits::{wire_i16, wire_i32, wire_u16};

/// Why a frontend message body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// Structurally invalid: protocol violation.
    Malformed(String),
    /// A string field is not valid UTF-8.
    InvalidUtf8,
}

impl CodecError {
    /// The error to report for this decoding failure.
    pub fn to_sql_error(&self) -> SqlError {
        match self {
            CodecError::Malformed(what) => SqlError::protocol_violation(what.clone()),
            CodecError::InvalidUtf8 => SqlError::error(
                sqlstate::CHARACTER_NOT_IN_REPERTOIRE,
                "invalid byte sequence for encoding \"UTF8\"",
            ),
        }
    }
}

/// Reads fields from one message body.
pub struct BodyReader<'a> {
    body: &'a [u8],
    pos: usize,
}

impl<'a> BodyReader<'a> {
    pub fn new(body: &'a [u8]) -> Self {
        BodyReader { body, pos: 0 }
    }

    fn short(&self) -> CodecError {
        CodecError::Malformed("insufficient data left in message".into())
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        let end = self.pos.checked_add(n).ok_or_else(|| self.short())?;
        let slice = self.body.get(self.pos..end).ok_or_else(|| self.short())?;
        self.pos = end;
        Ok(slice)
    }

    pub fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.bytes(1)?[0])
    }

    pub fn i16(&mut self) -> Result<i16, CodecError> {
        let b = self.bytes(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    pub fn i32(&mut self) -> Result<i32, CodecError> {
        let b = self.bytes(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// An Int32 field holding an unsigned value (an OID).
    pub fn u32(&mut self) -> Result<u32, CodecError> {
        let b = self.bytes(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A NUL-terminated string, as raw bytes (without the NUL).
    pub fn cstr_bytes(&mut self) -> Result<&'a [u8], CodecError> {
        let rest = &self.body[self.pos..];
        let nul = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| CodecError::Malformed("invalid string in message".into()))?;
        self.pos += nul + 1;
        Ok(&rest[..nul])
    }

    /// A NUL-terminated UTF-8 string.
    pub fn cstr(&mut self) -> Result<String, CodecError> {
        let raw = self.cstr_bytes()?;
        String::from_utf8(raw.to_vec()).map_err(|_| CodecError::InvalidUtf8)
    }

    /// A count in an Int16 field, read unsigned as PostgreSQL does (0..=65535).
    pub fn count16(&mut self) -> Result<usize, CodecError> {
        let b = self.bytes(2)?;
        Ok(usize::from(u16::from_be_bytes([b[0], b[1]])))
    }

    pub fn remaining(&self) -> usize {
        self.body.len() - self.pos
    }

    /// Asserts the body was consumed entirely.
    pub fn finish(&self) -> Result<(), CodecError> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(CodecError::Malformed("invalid message format".into()))
        }
    }
}

/// Whether Describe/Close targets a prepared statement or a portal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Statement,
    Portal,
}

/// A decoded frontend message (after start-up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrontendMessage {
    Query(String),
    Parse {
        name: String,
        query: String,
        param_types: Vec<u32>,
    },
    Bind {
        portal: String,
        statement: String,
        param_formats: Vec<i16>,
        params: Vec<Option<Vec<u8>>>,
        result_formats: Vec<i16>,
    },
    Describe {
        target: Target,
        name: String,
    },
    Execute {
        portal: String,
        max_rows: i32,
    },
    Close {
        target: Target,
        name: String,
    },
    Sync,
    Flush,
    Terminate,
    /// CopyData / CopyDone / CopyFail outside COPY: ignored, as PostgreSQL does.
    StrayCopy,
    /// FunctionCall ('F'): not supported.
    FunctionCall,
}

/// Decodes a message of type `tag` with body `body`.
pub fn decode_frontend(tag: u8, body: &[u8]) -> Result<FrontendMessage, CodecError> {
    let mut r = BodyReader::new(body);
    let msg = match tag {
        b'Q' => FrontendMessage::Query(r.cstr()?),
        b'P' => decode_parse(&mut r)?,
        b'B' => decode_bind(&mut r)?,
        b'D' => {
            let target = decode_target(r.u8()?)?;
            FrontendMessage::Describe {
                target,
                name: r.cstr()?,
            }
        }
        b'E' => FrontendMessage::Execute {
            portal: r.cstr()?,
            max_rows: r.i32()?,
        },
        b'C' => {
            let target = decode_target(r.u8()?)?;
            FrontendMessage::Close {
                target,
                name: r.cstr()?,
            }
        }
        b'S' => FrontendMessage::Sync,
        b'H' => FrontendMessage::Flush,
        b'X' => FrontendMessage::Terminate,
        b'd' | b'c' | b'f' => return Ok(FrontendMessage::StrayCopy),
        b'F' => return Ok(FrontendMessage::FunctionCall),
        other => {
            return Err(CodecError::Malformed(format!(
                "invalid frontend message type {other}"
            )))
        }
    };
    r.finish()?;
    Ok(msg)
}

fn decode_target(byte: u8) -> Result<Target, CodecError> {
    match byte {
        b'S' => Ok(Target::Statement),
        b'P' => Ok(Target::Portal),
        other => Err(CodecError::Malformed(format!(
            "invalid DESCRIBE/CLOSE message subtype {other}"
        ))),
    }
}

fn decode_parse(r: &mut BodyReader<'_>) -> Result<FrontendMessage, CodecError> {
    let name = r.cstr()?;
    let query = r.cstr()?;
    let n = r.count16()?;
    let mut param_types = Vec::with_capacity(n);
    for _ in 0..n {
        param_types.push(r.u32()?);
    }
    Ok(FrontendMessage::Parse {
        name,
        query,
        param_types,
    })
}

fn decode_bind(r: &mut BodyReader<'_>) -> Result<FrontendMessage, CodecError> {
    let portal = r.cstr()?;
    let statement = r.cstr()?;
    let param_formats = decode_formats(r)?;
    let n = r.count16()?;
    let mut params = Vec::with_capacity(n);
    for _ in 0..n {
        let len = r.i32()?;
        if len == -1 {
            params.push(None);
        } else {
            let len = usize::try_from(len)
                .map_err(|_| CodecError::Malformed(format!("invalid parameter length {len}")))?;
            params.push(Some(r.bytes(len)?.to_vec()));
        }
    }
    let result_formats = decode_formats(r)?;
    Ok(FrontendMessage::Bind {
        portal,
        statement,
        param_formats,
        params,
        result_formats,
    })
}

fn decode_formats(r: &mut BodyReader<'_>) -> Result<Vec<i16>, CodecError> {
    let n = r.count16()?;
    (0..n).map(|_| r.i16()).collect()
}

/// A column of a RowDescription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDescription {
    pub name: String,
    pub type_oid: u32,
    pub type_len: i16,
    pub format: i16,
}

/// Capacity `Out` starts with and returns to.
const INITIAL_CAPACITY: usize = 8192;

/// `clear` gives back capacity above this.
const SHRINK_ABOVE: usize = 256 * 1024;

/// Accumulates backend messages; the caller writes `bytes()` out.
#[derive(Debug, Default)]
pub struct Out {
    buf: Vec<u8>,
}

impl Out {
    pub fn new() -> Self {
        Out {
            buf: Vec::with_capacity(INITIAL_CAPACITY),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Empties the buffer; a large one is given back to the allocator.
    pub fn clear(&mut self) {
        self.buf.clear();
        if self.buf.capacity() > SHRINK_ABOVE {
            self.buf = Vec::with_capacity(INITIAL_CAPACITY);
        }
    }

    /// Appends bytes that belong to the message being written (a DataRow payload).
    pub fn raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Starts a message; returns the offset of its length field.
    fn begin(&mut self, tag: u8) -> usize {
        self.buf.push(tag);
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
        at
    }

    /// Patches the length of the message started at `at`; if it does not
    /// fit in an Int32, removes the whole message and returns 54000.
    fn end_checked(&mut self, at: usize) -> Result<(), SqlError> {
        match wire_i32(self.buf.len() - at, "message length") {
            Ok(len) => {
                self.buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
                Ok(())
            }
            Err(e) => {
                self.buf.truncate(at - 1);
                Err(e)
            }
        }
    }

    /// `end_checked` for messages whose size is bounded by a client message
    /// (at most 1 GB) plus a few fields, so it always fits; were it ever not
    /// to, the message is left out rather than sent with a wrong length.
    fn end(&mut self, at: usize) {
        let _ = self.end_checked(at);
    }

    fn i16(&mut self, v: i16) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    fn cstr(&mut self, s: &str) {
        // A NUL inside a string would end it early on the client: drop them.
        self.buf.extend(s.bytes().filter(|&b| b != 0));
        self.buf.push(0);
    }

    fn authentication(&mut self, code: i32, data: &[u8]) {
        let at = self.begin(b'R');
        self.i32(code);
        self.buf.extend_from_slice(data);
        self.end(at);
    }

    pub fn authentication_ok(&mut self) {
        self.authentication(0, &[]);
    }

    /// AuthenticationSASL with the list of mechanisms.
    pub fn authentication_sasl(&mut self, mechanisms: &[&str]) {
        let mut data = Vec::new();
        for m in mechanisms {
            data.extend_from_slice(m.as_bytes());
            data.push(0);
        }
        data.push(0);
        self.authentication(10, &data);
    }

    pub fn authentication_sasl_continue(&mut self, data: &[u8]) {
        self.authentication(11, data);
    }

    pub fn authentication_sasl_final(&mut self, data: &[u8]) {
        self.authentication(12, data);
    }

    pub fn parameter_status(&mut self, name: &str, value: &str) {
        let at = self.begin(b'S');
        self.cstr(name);
        self.cstr(value);
        self.end(at);
    }

    pub fn backend_key_data(&mut self, pid: i32, key: i32) {
        let at = self.begin(b'K');
        self.i32(pid);
        self.i32(key);
        self.end(at);
    }

    pub fn negotiate_protocol_version(&mut self, newest_minor: i32, unrecognized: &[String]) {
        let at = self.begin(b'v');
        self.i32(newest_minor);
        // The start-up packet is at most 10,000 bytes, so this never clamps;
        // the count sent is always the number of options that follow.
        let n = unrecognized.len().min(i32::MAX as usize);
        self.i32(wire_i32(n, "option count").unwrap_or(0));
        for option in unrecognized.iter().take(n) {
            self.cstr(option);
        }
        self.end(at);
    }

    pub fn ready_for_query(&mut self, status: u8) {
        let at = self.begin(b'Z');
        self.buf.push(status);
        self.end(at);
    }

    /// RowDescription; 54000 (nothing written) if the field count does not fit.
    pub fn row_description(&mut self, fields: &[FieldDescription]) -> Result<(), SqlError> {
        let count = wire_i16(fields.len(), "number of columns")?;
        let at = self.begin(b'T');
        self.i16(count);
        for f in fields {
            self.cstr(&f.name);
            self.i32(0); // table OID
            self.i16(0); // column attribute number
            self.buf.extend_from_slice(&f.type_oid.to_be_bytes());
            self.i16(f.type_len);
            self.i32(-1); // type modifier
            self.i16(f.format);
        }
        self.end_checked(at)
    }

    /// Starts a DataRow whose columns have the payload lengths `lens` (None:
    /// NULL): writes its header only, after checking every count and length
    /// fits (54000 otherwise, nothing written). The caller then writes each
    /// column with `column_len` followed by its payload (into `raw`, or
    /// straight to the client after writing out this buffer).
    pub fn data_row_header(&mut self, lens: &[Option<usize>]) -> Result<(), SqlError> {
        let count = wire_i16(lens.len(), "number of columns")?;
        let mut body: usize = 4 + 2;
        for len in lens {
            let payload = len.unwrap_or(0);
            wire_i32(payload, "column length")?;
            // Saturates far above i32::MAX, which the check below refuses.
            body = body.saturating_add(4).saturating_add(payload);
        }
        let length = wire_i32(body, "message length")?;
        self.buf.push(b'D');
        self.i32(length);
        self.i16(count);
        Ok(())
    }

    /// A DataRow column's length field (-1 for NULL); `data_row_header` checked it fits.
    pub fn column_len(&mut self, len: Option<usize>) {
        match len {
            None => self.i32(-1),
            Some(n) => self.i32(wire_i32(n, "column length").unwrap_or(-1)),
        }
    }

    #[cfg(test)]
    /// A whole DataRow from encoded columns.
    pub fn data_row(&mut self, columns: &[Option<Vec<u8>>]) -> Result<(), SqlError> {
        let lens: Vec<Option<usize>> = columns.iter().map(|c| c.as_ref().map(Vec::len)).collect();
        self.data_row_header(&lens)?;
        for c in columns {
            self.column_len(c.as_ref().map(Vec::len));
            if let Some(v) = c {
                self.raw(v);
            }
        }
        Ok(())
    }

    pub fn command_complete(&mut self, tag: &str) {
        let at = self.begin(b'C');
        self.cstr(tag);
        self.end(at);
    }

    pub fn empty_query_response(&mut self) {
        let at = self.begin(b'I');
        self.end(at);
    }

    fn empty_message(&mut self, tag: u8) {
        let at = self.begin(tag);
        self.end(at);
    }

    pub fn parse_complete(&mut self) {
        self.empty_message(b'1');
    }

    pub fn bind_complete(&mut self) {
        self.empty_message(b'2');
    }

    pub fn close_complete(&mut self) {
        self.empty_message(b'3');
    }

    pub fn no_data(&mut self) {
        self.empty_message(b'n');
    }

    pub fn portal_suspended(&mut self) {
        self.empty_message(b's');
    }

    /// ParameterDescription; the count is unsigned on the wire (up to 65535), else 54000.
    pub fn parameter_description(&mut self, oids: &[u32]) -> Result<(), SqlError> {
        let count = wire_u16(oids.len(), "number of parameters")?;
        let at = self.begin(b't');
        self.buf.extend_from_slice(&count.to_be_bytes());
        for &oid in oids {
            self.buf.extend_from_slice(&oid.to_be_bytes());
        }
        self.end_checked(at)
    }

    /// ErrorResponse, or NoticeResponse for notice severities.
    pub fn error_or_notice(&mut self, e: &SqlError) {
        let at = self.begin(if e.is_notice() { b'N' } else { b'E' });
        self.field(b'S', e.severity);
        self.field(b'V', e.severity);
        self.field(b'C', e.code);
        self.field(b'M', &e.message);
        if let Some(detail) = &e.detail {
            self.field(b'D', detail);
        }
        if let Some(hint) = &e.hint {
            self.field(b'H', hint);
        }
        if let Some(position) = e.position {
            self.field(b'P', &position.to_string());
        }
        self.buf.push(0);
        self.end(at);
    }

    fn field(&mut self, code: u8, value: &str) {
        self.buf.push(code);
        self.cstr(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    /// `parts`, concatenated, decode as `tag` to `want`.
    #[track_caller]
    fn assert_decodes(tag: u8, parts: &[&[u8]], want: FrontendMessage) {
        assert_eq!(decode_frontend(tag, &body(parts)).unwrap(), want);
    }

    #[track_caller]
    fn assert_malformed(tag: u8, body: &[u8]) {
        let r = decode_frontend(tag, body);
        assert!(matches!(r, Err(CodecError::Malformed(_))), "{r:?}");
    }

    #[test]
    fn decodes_query() {
        assert_decodes(
            b'Q',
            &[b"SELECT 1\0"],
            FrontendMessage::Query("SELECT 1".into()),
        );
    }

    #[test]
    fn rejects_query_without_terminator() {
        assert_malformed(b'Q', b"SELECT 1");
    }

    #[test]
    fn rejects_trailing_garbage() {
        assert_malformed(b'S', b"x");
    }

    #[test]
    fn invalid_utf8_is_its_own_error() {
        assert_eq!(
            decode_frontend(b'Q', b"\xff\0"),
            Err(CodecError::InvalidUtf8)
        );
    }

    #[test]
    fn decodes_parse_with_types() {
        assert_decodes(
            b'P',
            &[
                b"s1\0",
                b"SELECT $1\0",
                &1i16.to_be_bytes(),
                &25i32.to_be_bytes(),
            ],
            FrontendMessage::Parse {
                name: "s1".into(),
                query: "SELECT $1".into(),
                param_types: vec![25],
            },
        );
    }

    #[test]
    fn decodes_bind_with_null_and_value() {
        assert_decodes(
            b'B',
            &[
                b"p\0s\0",
                &1i16.to_be_bytes(),
                &1i16.to_be_bytes(),
                &2i16.to_be_bytes(),
                &(-1i32).to_be_bytes(),
                &3i32.to_be_bytes(),
                b"abc",
                &0i16.to_be_bytes(),
            ],
            FrontendMessage::Bind {
                portal: "p".into(),
                statement: "s".into(),
                param_formats: vec![1],
                params: vec![None, Some(b"abc".to_vec())],
                result_formats: vec![],
            },
        );
    }

    #[test]
    fn bind_with_oversized_length_is_malformed() {
        let b = body(&[
            b"\0\0",
            &0i16.to_be_bytes(),
            &1i16.to_be_bytes(),
            &100i32.to_be_bytes(),
            b"ab",
        ]);
        assert_malformed(b'B', &b);
        let b = body(&[b"\0\0", &0i16.to_be_bytes(), &(-5i16).to_be_bytes()]);
        assert_malformed(b'B', &b);
    }

    #[test]
    fn unknown_type_is_malformed() {
        assert_malformed(b'z', b"");
    }

    #[test]
    fn encodes_lengths_including_self() {
        let mut out = Out::new();
        out.ready_for_query(b'I');
        assert_eq!(out.bytes(), b"Z\0\0\0\x05I");
        out.clear();
        out.command_complete("SELECT 1");
        assert_eq!(out.bytes(), b"C\0\0\0\x0dSELECT 1\0");
    }

    #[test]
    fn encodes_error_fields() {
        let mut out = Out::new();
        out.error_or_notice(&SqlError::error("42601", "bad").with_hint("h"));
        let bytes = out.bytes();
        assert_eq!(bytes[0], b'E');
        assert_eq!(&bytes[5..], b"SERROR\0VERROR\0C42601\0Mbad\0Hh\0\0");
        out.clear();
        out.error_or_notice(&SqlError::warning("01000", "w"));
        assert_eq!(out.bytes()[0], b'N');
    }

    #[test]
    fn encodes_data_row_with_null() {
        let mut out = Out::new();
        out.data_row(&[None, Some(b"ab".to_vec())]).unwrap();
        assert_eq!(
            out.bytes(),
            b"D\0\0\0\x10\0\x02\xff\xff\xff\xff\0\0\0\x02ab"
        );
    }

    fn field(name: &str) -> FieldDescription {
        FieldDescription {
            name: name.into(),
            type_oid: 25,
            type_len: -1,
            format: 0,
        }
    }

    #[test]
    fn counts_that_do_not_fit_are_errors_not_wrapped() {
        let mut out = Out::new();
        let many: Vec<FieldDescription> = (0..40_000).map(|_| field("c")).collect();
        assert_eq!(out.row_description(&many).unwrap_err().code, "54000");
        assert!(out.is_empty(), "nothing of the refused message was written");
        let cols: Vec<Option<usize>> = vec![None; 40_000];
        assert_eq!(out.data_row_header(&cols).unwrap_err().code, "54000");
        let huge = [Some(1usize << 31)];
        assert_eq!(out.data_row_header(&huge).unwrap_err().code, "54000");
        let two = [Some((1usize << 30) + 1), Some(1 << 30)];
        assert_eq!(out.data_row_header(&two).unwrap_err().code, "54000");
        assert!(out.is_empty());
        let oids = vec![25u32; 65_536];
        assert_eq!(out.parameter_description(&oids).unwrap_err().code, "54000");
        out.parameter_description(&oids[..40_000]).unwrap();
        assert_eq!(&out.bytes()[5..7], &40_000u16.to_be_bytes());
        out.clear();
        out.row_description(&[field("a"), field("b")]).unwrap();
        assert_eq!(&out.bytes()[5..7], &2i16.to_be_bytes());
    }

    #[test]
    fn oids_and_unsigned_counts_round_trip() {
        let mut b = body(&[b"\0\0", &40_000u16.to_be_bytes()]);
        for _ in 0..40_000 {
            b.extend_from_slice(&0xffff_fff0u32.to_be_bytes());
        }
        match decode_frontend(b'P', &b).unwrap() {
            FrontendMessage::Parse { param_types, .. } => {
                assert_eq!(param_types.len(), 40_000);
                assert_eq!(param_types[0], 0xffff_fff0);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn clear_gives_back_a_large_capacity() {
        let mut out = Out::new();
        out.raw(&vec![0u8; 1 << 20]);
        assert!(out.capacity() >= 1 << 20);
        out.clear();
        assert!(out.capacity() <= SHRINK_ABOVE);
    }
}
