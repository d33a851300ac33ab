//! The `test_decoding` output plugin (PostgreSQL's contrib/test_decoding),
//! for the changes walshm's WAL holds: text lines
//!
//! ```text
//! BEGIN 735                       (BEGIN without include-xids)
//! message: transactional: 1 prefix: orders, sz: 5 content:hello
//! COMMIT 735 (at 2026-12-06 02:08:48.123456+00)   (" (at ...)" with include-timestamp)
//! message: transactional: 0 prefix: orders, sz: 2 content:hi
//! ```
//!
//! Options, as PostgreSQL 15's plugin takes them (a missing value means
//! true; a value is parsed as PostgreSQL's booleans): `include-xids`
//! (default on), `include-timestamp` (off), `skip-empty-xacts` (off),
//! `only-local`, `force-binary`, `include-rewrites`, `stream-changes`
//! (accepted; they change nothing here: walshm has no replication
//! origins, table rewrites or streamed transactions). Anything else is
//! 22023 "option ... is unknown".
//!
//! As in PostgreSQL, a transactional message does not count as a change
//! for `skip-empty-xacts`: with it, a transaction holding only messages
//! prints its message lines without BEGIN and COMMIT.

use super::plugin::{parse_bool, Output, Plugin};
use backend::reorder::{Change, Message, Transaction};
use protocol::replication::PluginOption;
use protocol::{sqlstate, SqlError};

/// The started plugin.
#[derive(Debug)]
pub struct TestDecoding {
    include_xids: bool,
    include_timestamp: bool,
    skip_empty_xacts: bool,
}

fn bad_value(name: &str, value: &str) -> SqlError {
    SqlError::error(
        sqlstate::INVALID_PARAMETER_VALUE,
        format!("could not parse value \"{value}\" for parameter \"{name}\""),
    )
}

impl TestDecoding {
    pub fn new(options: &[PluginOption]) -> Result<TestDecoding, SqlError> {
        let mut p = TestDecoding {
            include_xids: true,
            include_timestamp: false,
            skip_empty_xacts: false,
        };
        for (name, value) in options {
            let flag = match value {
                None => true,
                Some(v) => parse_bool(v).ok_or_else(|| bad_value(name, v))?,
            };
            match name.as_str() {
                "include-xids" => p.include_xids = flag,
                "include-timestamp" => p.include_timestamp = flag,
                "skip-empty-xacts" => p.skip_empty_xacts = flag,
                "only-local" | "force-binary" | "include-rewrites" | "stream-changes" => {}
                _ => {
                    return Err(SqlError::error(
                        sqlstate::INVALID_PARAMETER_VALUE,
                        format!(
                            "option \"{name}\" = \"{}\" is unknown",
                            value.as_deref().unwrap_or("(null)")
                        ),
                    ))
                }
            }
        }
        Ok(p)
    }

    fn with_xid(&self, word: &str, xid: u32) -> Vec<u8> {
        if self.include_xids {
            format!("{word} {xid}").into_bytes()
        } else {
            word.as_bytes().to_vec()
        }
    }

    fn transaction(&self, t: &Transaction, out: &mut Vec<Output>) {
        if !self.skip_empty_xacts {
            out.push(Output {
                lsn: t.first_lsn,
                xid: t.xid,
                data: self.with_xid("BEGIN", t.xid),
            });
        }
        for m in &t.messages {
            out.push(Output {
                lsn: m.lsn,
                xid: t.xid,
                data: message_line(m),
            });
        }
        if self.skip_empty_xacts {
            return;
        }
        let mut data = self.with_xid("COMMIT", t.xid);
        if self.include_timestamp {
            data.extend_from_slice(format!(" (at {})", timestamptz_text(t.commit_time)).as_bytes());
        }
        out.push(Output {
            lsn: t.end_lsn,
            xid: t.xid,
            data,
        });
    }
}

impl Plugin for TestDecoding {
    fn binary(&self) -> bool {
        false
    }

    fn render(&mut self, change: &Change, out: &mut Vec<Output>) {
        match change {
            Change::Message(m) => out.push(Output {
                lsn: m.lsn,
                xid: 0,
                data: message_line(m),
            }),
            Change::Transaction(t) => self.transaction(t, out),
        }
    }
}

fn message_line(m: &Message) -> Vec<u8> {
    let mut line = format!(
        "message: transactional: {} prefix: {}, sz: {} content:",
        m.transactional as u8,
        m.prefix,
        m.content.len()
    )
    .into_bytes();
    line.extend_from_slice(&m.content);
    line
}

/// PostgreSQL's timestamptz_to_str in UTC (`us` counts from
/// 2000-01-01); a time outside what timestamptz shows prints as PostgreSQL
/// prints an infinite one.
fn timestamptz_text(us: i64) -> String {
    match walformat::pg_timestamp_to_unix_us(us) {
        Some(unix_us) => protocol::sql::value::format_timestamp(unix_us),
        None => "infinity".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn() -> Transaction {
        Transaction {
            xid: 735,
            first_lsn: 0x100,
            commit_lsn: 0x180,
            end_lsn: 0x1a8,
            commit_time: 1_500_000,
            messages: vec![Message {
                lsn: 0x100,
                transactional: true,
                prefix: "orders".into(),
                content: b"hello".to_vec(),
            }],
        }
    }

    fn lines(p: &mut TestDecoding, c: &Change) -> Vec<String> {
        let mut out = Vec::new();
        p.render(c, &mut out);
        out.iter()
            .map(|o| String::from_utf8(o.data.clone()).unwrap())
            .collect()
    }

    #[test]
    fn default_options_print_xids() {
        let mut p = TestDecoding::new(&[]).unwrap();
        assert_eq!(
            lines(&mut p, &Change::Transaction(txn())),
            [
                "BEGIN 735",
                "message: transactional: 1 prefix: orders, sz: 5 content:hello",
                "COMMIT 735"
            ]
        );
    }

    #[test]
    fn options_change_the_lines() {
        let opts = |v: &[(&str, Option<&str>)]| -> Vec<PluginOption> {
            v.iter()
                .map(|(n, v)| (n.to_string(), v.map(str::to_string)))
                .collect()
        };
        let mut p = TestDecoding::new(&opts(&[
            ("include-xids", Some("0")),
            ("include-timestamp", None),
        ]))
        .unwrap();
        assert_eq!(
            lines(&mut p, &Change::Transaction(txn())),
            [
                "BEGIN",
                "message: transactional: 1 prefix: orders, sz: 5 content:hello",
                "COMMIT (at 2000-01-01 00:00:01.5+00)"
            ]
        );
        let mut p = TestDecoding::new(&opts(&[("skip-empty-xacts", Some("1"))])).unwrap();
        assert_eq!(
            lines(&mut p, &Change::Transaction(txn())),
            ["message: transactional: 1 prefix: orders, sz: 5 content:hello"]
        );
        let e = TestDecoding::new(&opts(&[("include-xids", Some("maybe"))])).unwrap_err();
        assert_eq!(e.code, "22023");
        let e = TestDecoding::new(&opts(&[("nope", None)])).unwrap_err();
        assert_eq!(e.message, "option \"nope\" = \"(null)\" is unknown");
    }
}
