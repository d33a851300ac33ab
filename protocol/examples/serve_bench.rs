//! CPU cost of one simple-protocol Query through `protocol::serve` (read,
//! parse, analyze, evaluate, encode the reply) over an in-memory stream
//! and a Session that does nothing: what the SQL layer adds to a round
//! trip, without the network or the scheduler. A command, not a timed
//! test: `cargo run --release -p protocol --example serve_bench`. Prints
//! the best of 7 runs of 200k queries, in ns per query, for the simple
//! protocol and for the extended one as `pgbench -M extended` sends it.

use protocol::serve;
use protocol::testing::FakeSession;
use std::io::{self, Read, Write};
use std::time::Instant;

/// Yields the prepared client bytes, then EOF; swallows the replies.
struct Feed {
    input: Vec<u8>,
    at: usize,
}

impl Read for Feed {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.input.len() - self.at);
        buf[..n].copy_from_slice(&self.input[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl Write for Feed {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn query_message(sql: &str) -> Vec<u8> {
    let mut m = vec![b'Q'];
    m.extend(((sql.len() + 5) as i32).to_be_bytes());
    m.extend(sql.as_bytes());
    m.push(0);
    m
}

/// One frontend message: tag, length, body.
fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend(((body.len() + 4) as i32).to_be_bytes());
    m.extend(body);
    m
}

/// What `pgbench -M extended` sends per transaction (libpq's
/// PQsendQueryParams): Parse, Bind, Describe portal, Execute, Sync, all
/// unnamed, no parameters.
fn extended_messages(sql: &str) -> Vec<u8> {
    let mut parse = vec![0u8];
    parse.extend(sql.as_bytes());
    parse.extend([0, 0, 0]);
    let mut m = message(b'P', &parse);
    m.extend(message(b'B', &[0; 8]));
    m.extend(message(b'D', b"P\0"));
    m.extend(message(b'E', &[0, 0, 0, 0, 0]));
    m.extend(message(b'S', &[]));
    m
}

fn main() {
    const N: usize = 200_000;
    let sqls = [
        "SELECT 1",
        "SELECT pg_logical_emit_message(false, 'test', repeat('x', 16))",
    ];
    let simple = sqls.map(|sql| ("simple  ", sql, query_message(sql)));
    let extended = sqls.map(|sql| ("extended", sql, extended_messages(sql)));
    for (mode, sql, one) in simple.into_iter().chain(extended) {
        let input = one.repeat(N);
        let best = (0..7)
            .map(|_| {
                let mut feed = Feed {
                    input: input.clone(),
                    at: 0,
                };
                let mut session = FakeSession {
                    memory_limit: 256 << 20,
                    ..FakeSession::default()
                };
                let t = Instant::now();
                let _ = serve(&mut feed, &mut session);
                t.elapsed().as_nanos() as f64 / N as f64
            })
            .fold(f64::MAX, f64::min);
        println!("{best:8.0} ns per query  {mode} {sql}");
    }
}
