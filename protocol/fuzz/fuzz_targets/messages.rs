//! Fuzz target: arbitrary client bytes through the protocol crate's
//! `startup` and then `serve`, over an in-memory duplex stream (reads come
//! from the fuzz input, writes go to a buffer) with a fake `Session`.
//!
//! Checks: nothing panics (the crate's invariant "no client input can panic
//! this crate"), `serve` returns (EOF at the end of the input), the
//! Session transaction contract holds (begin/commit/rollback strictly
//! paired, statements only inside a transaction, nothing open at the end),
//! and everything written to the client is a well-framed sequence of
//! backend messages.
//!
//! The first input byte picks the transport: even = trusted Unix socket,
//! odd = TCP with SCRAM-SHA-256 (password "secret"); the rest is the
//! client's byte stream, delivered in chunks whose sizes come from that
//! same byte so that short reads are exercised too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use protocol::{serve, startup, ServerParams, Session, SqlError, Startup, Transport};
use std::io::{self, Read, Write};

struct Duplex<'a> {
    input: &'a [u8],
    chunk: usize,
    output: Vec<u8>,
}

impl Read for Duplex<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.input.len()).min(self.chunk);
        buf[..n].copy_from_slice(&self.input[..n]);
        self.input = &self.input[n..];
        Ok(n)
    }
}

impl Write for Duplex<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Hands out increasing LSNs and xids; panics when the transaction
/// contract of `protocol::Session` is broken.
#[derive(Default)]
struct FakeSession {
    in_txn: bool,
    xid: Option<u64>,
    next: u64,
    sync: bool,
}

impl FakeSession {
    fn need_txn(&self, what: &str) {
        assert!(self.in_txn, "{what} outside a transaction");
    }
    fn lsn(&mut self, by: u64) -> u64 {
        self.next += by;
        0x0100_0000 + self.next
    }
}

impl Session for FakeSession {
    fn emit_message(
        &mut self,
        _t: bool,
        _prefix: &str,
        payload: &[u8],
        _flush: bool,
    ) -> Result<u64, SqlError> {
        self.need_txn("emit_message");
        Ok(self.lsn(64 + payload.len() as u64))
    }
    fn txid_current(&mut self) -> Result<u64, SqlError> {
        self.need_txn("txid_current");
        let n = self.next;
        Ok(*self.xid.get_or_insert(1000 + n))
    }
    fn current_wal_lsn(&mut self) -> u64 {
        self.lsn(0)
    }
    fn current_wal_insert_lsn(&mut self) -> u64 {
        self.lsn(0)
    }
    fn current_wal_flush_lsn(&mut self) -> u64 {
        self.lsn(0)
    }
    fn switch_wal(&mut self) -> Result<u64, SqlError> {
        Ok(self.lsn(24))
    }
    fn checkpoint(&mut self) -> Result<(), SqlError> {
        Ok(())
    }
    fn begin(&mut self) -> Result<(), SqlError> {
        assert!(!self.in_txn, "begin inside a transaction");
        self.in_txn = true;
        Ok(())
    }
    fn commit(&mut self) -> Result<(), SqlError> {
        self.need_txn("commit");
        self.in_txn = false;
        self.xid = None;
        Ok(())
    }
    fn rollback(&mut self) -> Result<(), SqlError> {
        self.need_txn("rollback");
        self.in_txn = false;
        self.xid = None;
        Ok(())
    }
    fn set_synchronous_commit(&mut self, on: bool) {
        self.sync = on;
    }
    fn synchronous_commit(&self) -> bool {
        self.sync
    }
    fn memory_limit(&self) -> usize {
        64 << 20
    }
}

/// Backend output: optional 'N' bytes (SSL/GSS refusals) at message
/// boundaries, otherwise tag + length >= 4 + body, ending exactly.
fn assert_well_framed(out: &[u8]) {
    let mut i = 0;
    while i < out.len() {
        if out[i] == b'N' && (i + 5 > out.len() || matches!(out[i + 1], b'N' | b'R' | b'E' | b'v')) {
            // A refusal byte before the next message (or a NoticeResponse
            // whose length starts with 'N'/'R'/'E'/'v': impossible, lengths are
            // below 2^24 so their first byte is 0).
            i += 1;
            continue;
        }
        assert!(i + 5 <= out.len(), "truncated message header at {i}");
        let len = i32::from_be_bytes([out[i + 1], out[i + 2], out[i + 3], out[i + 4]]);
        assert!(len >= 4, "message length {len} at {i}");
        i += 1 + len as usize;
        assert!(i <= out.len(), "message body runs past the output");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, input)) = data.split_first() else { return };
    let chunk = match sel >> 1 {
        0..=63 => usize::MAX,
        n => (n as usize % 7) + 1,
    };
    let mut stream = Duplex { input, chunk, output: Vec::new() };
    let transport = if sel & 1 == 0 {
        Transport::Unix { peer_uid: Some(1), server_uid: 1 }
    } else {
        Transport::Tcp
    };
    let params = ServerParams::new(4242, 777, Some("secret".to_string()));
    if let Ok(Startup::Ready(info)) = startup(&mut stream, &transport, &params) {
        let mut session = FakeSession::default();
        if let Some(on) = info.synchronous_commit {
            session.set_synchronous_commit(on);
        }
        let _ = serve(&mut stream, &mut session);
        assert!(!session.in_txn, "connection ended inside a transaction");
    }
    assert_well_framed(&stream.output);
});
