//! The `pgoutput` output plugin (PostgreSQL's replication/pgoutput and
//! logical/proto.c), for the changes walshm's WAL holds: the logical
//! replication protocol's Begin, Message and Commit messages (integers
//! big-endian, times in microseconds since 2000-01-01):
//!
//! ```text
//! 'B' | final_lsn u64 (the COMMIT record's start) | commit_time i64 | xid u32
//! 'M' | flags u8 (1: transactional) | lsn u64 | prefix, NUL-terminated
//!     | length u32 | content bytes
//! 'C' | flags u8 = 0 | commit_lsn u64 | end_lsn u64 | commit_time i64
//! ```
//!
//! Messages are sent only with `messages 'true'`; a transaction is sent
//! (Begin before its first message, then Commit) only when it sends a
//! message, as PostgreSQL 15 skips empty transactions; a
//! non-transactional message goes out alone.
//!
//! Options, checked as PostgreSQL 15 checks them: `proto_version` (1 to 3;
//! missing means 0, refused), `publication_names` (required; a
//! comma-separated list of identifiers, unquoted ones folded to lower
//! case; each must exist: walshm refuses a missing publication at once,
//! where PostgreSQL would complain only on the first table change),
//! `binary`, `messages`, `streaming` (protocol 2 or later), `two_phase`
//! (protocol 3): booleans. A repeated option is 42601, an unknown one
//! XX000, as PostgreSQL's elog. Binary tuples, streaming and two-phase
//! change nothing here: walshm's WAL has no tuples, and its transactions
//! are decoded whole at commit.

use super::plugin::{conflicting_options, parse_bool, Output, Plugin};
use backend::reorder::{Change, Message, Transaction};
use protocol::replication::PluginOption;
use protocol::{sqlstate, SqlError};

/// Newest protocol version (PostgreSQL 15's LOGICALREP_PROTO_MAX_VERSION_NUM).
pub const MAX_PROTO_VERSION: u32 = 3;
const MESSAGE_TRANSACTIONAL: u8 = 1;

/// The started plugin.
#[derive(Debug)]
pub struct PgOutput {
    messages: bool,
}

/// The options as given (PostgreSQL's parse_output_parameters).
#[derive(Default)]
struct Options {
    proto_version: Option<u32>,
    publications: Option<Vec<String>>,
    binary: Option<bool>,
    messages: Option<bool>,
    streaming: Option<bool>,
    two_phase: Option<bool>,
}

fn boolean(name: &str, value: Option<&str>) -> Result<bool, SqlError> {
    match value {
        None => Ok(true),
        Some(v) => parse_bool(v).ok_or_else(|| {
            SqlError::error(
                sqlstate::SYNTAX_ERROR,
                format!("{name} requires a Boolean value"),
            )
        }),
    }
}

/// Sets `slot` once; a second time is "conflicting or redundant options".
fn once<T>(slot: &mut Option<T>, value: T) -> Result<(), SqlError> {
    if slot.is_some() {
        return Err(conflicting_options());
    }
    *slot = Some(value);
    Ok(())
}

fn proto_version(value: Option<&str>) -> Result<u32, SqlError> {
    let v = value.unwrap_or("");
    let n: u64 = v
        .trim()
        .parse()
        .map_err(|_| SqlError::error(sqlstate::INVALID_PARAMETER_VALUE, "invalid proto_version"))?;
    u32::try_from(n).map_err(|_| {
        SqlError::error(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("proto_version \"{v}\" out of range"),
        )
    })
}

/// PostgreSQL's SplitIdentifierString with ',': unquoted names are
/// trimmed and folded to lower case, quoted ones kept ("" is a quote).
pub fn split_identifiers(text: &str) -> Option<Vec<String>> {
    let mut names = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut name = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next()? {
                    '"' if chars.peek() == Some(&'"') => {
                        chars.next();
                        name.push('"');
                    }
                    '"' => break,
                    c => name.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' || c.is_whitespace() {
                    break;
                }
                name.push(c.to_ascii_lowercase());
                chars.next();
            }
        }
        if name.is_empty() {
            return None;
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        names.push(name);
        match chars.next() {
            None => return Some(names),
            Some(',') => {}
            Some(_) => return None,
        }
    }
}

fn parse_options(options: &[PluginOption]) -> Result<Options, SqlError> {
    let mut o = Options::default();
    for (name, value) in options {
        let value = value.as_deref();
        match name.as_str() {
            "proto_version" => once(&mut o.proto_version, proto_version(value)?)?,
            "publication_names" => {
                let names = split_identifiers(value.unwrap_or(""))
                    .ok_or_else(|| SqlError::error("42602", "invalid publication_names syntax"))?;
                once(&mut o.publications, names)?
            }
            "binary" => once(&mut o.binary, boolean(name, value)?)?,
            "messages" => once(&mut o.messages, boolean(name, value)?)?,
            "streaming" => once(&mut o.streaming, boolean(name, value)?)?,
            "two_phase" => once(&mut o.two_phase, boolean(name, value)?)?,
            _ => {
                return Err(SqlError::error(
                    sqlstate::INTERNAL_ERROR,
                    format!("unrecognized pgoutput option: {name}"),
                ))
            }
        }
    }
    Ok(o)
}

fn not_supported(message: String) -> SqlError {
    SqlError::error(sqlstate::FEATURE_NOT_SUPPORTED, message)
}

impl PgOutput {
    pub fn new(
        options: &[PluginOption],
        publication_exists: &dyn Fn(&str) -> bool,
    ) -> Result<PgOutput, SqlError> {
        let o = parse_options(options)?;
        let version = o.proto_version.unwrap_or(0);
        if version > MAX_PROTO_VERSION {
            return Err(not_supported(format!(
                "client sent proto_version={version} but server only supports protocol {MAX_PROTO_VERSION} or lower"
            )));
        }
        if version < 1 {
            return Err(not_supported(format!(
                "client sent proto_version={version} but server only supports protocol 1 or higher"
            )));
        }
        let Some(publications) = o.publications else {
            return Err(SqlError::error(
                sqlstate::INVALID_PARAMETER_VALUE,
                "publication_names parameter missing",
            ));
        };
        if o.streaming == Some(true) && version < 2 {
            return Err(not_supported(format!(
                "requested proto_version={version} does not support streaming, need 2 or higher"
            )));
        }
        if o.two_phase == Some(true) && version < 3 {
            return Err(not_supported(format!(
                "requested proto_version={version} does not support two-phase commit, need 3 or higher"
            )));
        }
        if let Some(missing) = publications.iter().find(|p| !publication_exists(p)) {
            return Err(SqlError::error(
                sqlstate::UNDEFINED_OBJECT,
                format!("publication \"{missing}\" does not exist"),
            ));
        }
        Ok(PgOutput {
            messages: o.messages.unwrap_or(false),
        })
    }

    fn transaction(&self, t: &Transaction, out: &mut Vec<Output>) {
        let Some(first) = t.messages.first() else {
            return;
        };
        let mut emit = |lsn, data| {
            out.push(Output {
                lsn,
                xid: t.xid,
                data,
            })
        };
        let lsn = t.commit_lsn.to_be_bytes();
        let time = t.commit_time.to_be_bytes();
        // Begin: final LSN, commit time, xid.
        emit(
            first.lsn,
            [&b"B"[..], &lsn, &time, &t.xid.to_be_bytes()].concat(),
        );
        for m in &t.messages {
            emit(m.lsn, message(m));
        }
        // Commit: flags (none), commit LSN, end LSN, commit time.
        emit(
            t.end_lsn,
            [&b"C\0"[..], &lsn, &t.end_lsn.to_be_bytes(), &time].concat(),
        );
    }
}

fn message(m: &Message) -> Vec<u8> {
    let mut b = Vec::with_capacity(18 + m.prefix.len() + m.content.len());
    b.push(b'M');
    b.push(if m.transactional {
        MESSAGE_TRANSACTIONAL
    } else {
        0
    });
    b.extend_from_slice(&m.lsn.to_be_bytes());
    b.extend_from_slice(m.prefix.as_bytes());
    b.push(0);
    b.extend_from_slice(&(m.content.len() as u32).to_be_bytes());
    b.extend_from_slice(&m.content);
    b
}

impl Plugin for PgOutput {
    fn binary(&self) -> bool {
        true
    }

    fn render(&mut self, change: &Change, out: &mut Vec<Output>) {
        if !self.messages {
            return;
        }
        match change {
            Change::Message(m) => out.push(Output {
                lsn: m.lsn,
                xid: 0,
                data: message(m),
            }),
            Change::Transaction(t) => self.transaction(t, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(v: &[(&str, &str)]) -> Vec<PluginOption> {
        v.iter()
            .map(|(n, v)| (n.to_string(), Some(v.to_string())))
            .collect()
    }

    fn start(v: &[(&str, &str)]) -> Result<PgOutput, SqlError> {
        PgOutput::new(&opts(v), &|p| p == "pub" || p == "Two")
    }

    #[test]
    fn options_are_checked_as_postgresql_checks_them() {
        let ok = [("proto_version", "1"), ("publication_names", "pub")];
        assert!(start(&ok).is_ok());
        let code = |v: &[(&str, &str)]| start(v).unwrap_err().code;
        assert_eq!(code(&[("publication_names", "pub")]), "0A000");
        assert_eq!(
            code(&[("proto_version", "4"), ("publication_names", "pub")]),
            "0A000"
        );
        assert_eq!(
            code(&[("proto_version", "x"), ("publication_names", "pub")]),
            "22023"
        );
        assert_eq!(code(&[("proto_version", "1")]), "22023");
        assert_eq!(
            code(&[("proto_version", "1"), ("publication_names", "nope")]),
            "42704"
        );
        assert_eq!(
            code(&[
                ("proto_version", "1"),
                ("proto_version", "1"),
                ("publication_names", "pub")
            ]),
            "42601"
        );
        assert_eq!(
            code(&[
                ("proto_version", "1"),
                ("publication_names", "pub"),
                ("streaming", "on")
            ]),
            "0A000"
        );
        assert_eq!(
            code(&[
                ("proto_version", "1"),
                ("publication_names", "pub"),
                ("messages", "x")
            ]),
            "42601"
        );
        assert_eq!(
            code(&[
                ("proto_version", "1"),
                ("publication_names", "pub"),
                ("origin", "any")
            ]),
            "XX000"
        );
        assert_eq!(
            code(&[("proto_version", "1"), ("publication_names", "a,,b")]),
            "42602"
        );
    }

    #[test]
    fn publication_names_split_as_identifiers() {
        assert_eq!(
            split_identifiers(" Pub , \"Two\",\"a\"\"b\"").unwrap(),
            ["pub", "Two", "a\"b"]
        );
        assert_eq!(split_identifiers(""), None);
        assert_eq!(split_identifiers("a b"), None);
        assert_eq!(split_identifiers("\"open"), None);
    }

    #[test]
    fn a_transaction_renders_begin_message_commit() {
        let mut p = start(&[
            ("proto_version", "2"),
            ("publication_names", "pub"),
            ("messages", "true"),
        ])
        .unwrap();
        let t = Transaction {
            xid: 7,
            first_lsn: 0x100,
            commit_lsn: 0x180,
            end_lsn: 0x1a8,
            commit_time: 99,
            messages: vec![Message {
                lsn: 0x100,
                transactional: true,
                prefix: "p".into(),
                content: b"xy".to_vec(),
            }],
        };
        let mut out = Vec::new();
        p.render(&Change::Transaction(t), &mut out);
        assert_eq!(out.len(), 3);
        let b = &out[0].data;
        assert_eq!(b[0], b'B');
        assert_eq!(&b[1..9], &0x180u64.to_be_bytes());
        assert_eq!(&b[9..17], &99i64.to_be_bytes());
        assert_eq!(&b[17..21], &7u32.to_be_bytes());
        let m = &out[1].data;
        assert_eq!(&m[..2], &[b'M', 1]);
        assert_eq!(&m[2..10], &0x100u64.to_be_bytes());
        assert_eq!(&m[10..12], b"p\0");
        assert_eq!(&m[12..16], &2u32.to_be_bytes());
        assert_eq!(&m[16..], b"xy");
        let c = &out[2].data;
        assert_eq!(&c[..2], &[b'C', 0]);
        assert_eq!(&c[2..10], &0x180u64.to_be_bytes());
        assert_eq!(&c[10..18], &0x1a8u64.to_be_bytes());
        assert_eq!(out[2].lsn, 0x1a8);
        let mut quiet = start(&[("proto_version", "1"), ("publication_names", "pub")]).unwrap();
        let mut none = Vec::new();
        quiet.render(
            &Change::Message(Message {
                lsn: 1,
                transactional: false,
                prefix: "p".into(),
                content: vec![],
            }),
            &mut none,
        );
        assert!(none.is_empty());
    }
}
