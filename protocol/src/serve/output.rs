//! Writing to the client from a [`Connection`]: the staging buffer
//! (`Out`) written out at ReadyForQuery, Flush, when it holds
//! `FLUSH_THRESHOLD` bytes, and before closing; result rows encoded as they
//! are produced, large DataRow payloads sent straight to the client.
//!
//! Invariants: after a failed write (`mark_broken`) nothing more is
//! written and the connection closes; a session holds at most about one
//! result row plus `FLUSH_THRESHOLD` bytes of output; a row larger than
//! the memory limit is 53200 before it is encoded whole.

use super::*;

impl<S: Read + Write> Connection<'_, S> {
    pub(super) fn close(&mut self) -> io::Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        match self.write_out() {
            Err(e)
                if is_abandoned(&e)
                    || matches!(
                        e.kind(),
                        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                    ) =>
            {
                Ok(())
            }
            other => other,
        }
    }

    /// Writes `bytes` to the client, giving up when the session must end.
    pub(super) fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        let session = &*self.session;
        send_polling(&mut *self.stream, bytes, &mut || {
            session.termination().is_some()
        })
    }

    /// Writes out (and empties) the staging buffer.
    pub(super) fn write_out(&mut self) -> io::Result<()> {
        let out = std::mem::take(&mut self.out);
        let result = self.send(out.bytes());
        self.out = out;
        self.out.clear();
        self.wants_flush = false;
        self.wants_flush_now = false;
        result
    }

    /// Records a failed write: the connection is over.
    pub(super) fn mark_broken(&mut self, e: io::Error) {
        self.broken.get_or_insert(e);
        self.closing = true;
    }

    /// Writes out the staging buffer once it holds FLUSH_THRESHOLD bytes.
    pub(super) fn write_out_if_large(&mut self) {
        if self.broken.is_none() && self.out.len() >= FLUSH_THRESHOLD {
            if let Err(e) = self.write_out() {
                self.mark_broken(e);
            }
        }
    }

    /// A DataRow payload: small ones are staged, large ones go straight to the client.
    pub(super) fn write_payload(&mut self, bytes: &[u8]) {
        if self.broken.is_some() {
            return;
        }
        if bytes.len() < FLUSH_THRESHOLD {
            self.out.raw(bytes);
            return self.write_out_if_large();
        }
        if let Err(e) = self.write_out().and_then(|()| self.send(bytes)) {
            self.mark_broken(e);
        }
    }

    /// Encodes and sends one result row as it is produced.
    pub(super) fn send_row(
        &mut self,
        row: Vec<Value>,
        columns: &[Column],
        formats: &[i16],
    ) -> Result<(), SqlError> {
        let encoded = encode_row(row, columns, formats, self.session.memory_limit())?;
        let lens: Vec<Option<usize>> = encoded.iter().map(|c| c.as_ref().map(Vec::len)).collect();
        self.out.data_row_header(&lens)?;
        for (column, len) in encoded.into_iter().zip(lens) {
            self.out.column_len(len);
            if let Some(bytes) = column {
                self.write_payload(&bytes);
            }
        }
        self.write_out_if_large();
        Ok(())
    }

    pub(super) fn ready_for_query(&mut self) {
        let in_transaction = matches!(self.tx, TxState::Block | TxState::Failed);
        self.session.report_activity(None, in_transaction);
        for (name, value) in std::mem::take(&mut self.reports) {
            self.out.parameter_status(name, &value);
        }
        self.out.ready_for_query(self.tx.status_byte());
        self.wants_flush = true;
    }
}

pub(super) fn fields(columns: &[Column], formats: &[i16]) -> Vec<FieldDescription> {
    columns
        .iter()
        .enumerate()
        .map(|(i, c)| FieldDescription {
            name: c.name.clone(),
            type_oid: c.ty.oid(),
            type_len: c.ty.typlen(),
            format: formats.get(i).copied().unwrap_or(0),
        })
        .collect()
}

/// Encodes a result row (moving text payloads); 53200 as soon as the
/// DataRow would be larger than `limit`.
fn encode_row(
    row: Vec<Value>,
    columns: &[Column],
    formats: &[i16],
    limit: usize,
) -> Result<Vec<Option<Vec<u8>>>, SqlError> {
    let mut size = 0usize;
    let mut encoded = Vec::with_capacity(row.len());
    for (i, (v, c)) in row.into_iter().zip(columns).enumerate() {
        let e = match formats.get(i).copied().unwrap_or(0) {
            1 => into_binary_format(v, c.ty),
            _ => into_text_format(v, c.ty),
        };
        size = size.saturating_add(4 + e.as_ref().map_or(0, Vec::len));
        check_memory("a result row", size, limit)?;
        encoded.push(e);
    }
    Ok(encoded)
}
