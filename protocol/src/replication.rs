//! The physical streaming replication protocol, server side: the commands
//! a replication connection (`replication=true` in the StartupMessage)
//! sends as simple Query messages, and the messages of the CopyBoth stream
//! (PostgreSQL's repl_gram.y, walsender.c and the frontend's receivelog.c).
//!
//! Commands understood (keywords in any case, identifiers unquoted — folded
//! to lower case — or double-quoted, an optional trailing `;`):
//!
//! ```text
//! IDENTIFY_SYSTEM
//! SHOW name
//! READ_REPLICATION_SLOT slot
//! TIMELINE_HISTORY tli
//! CREATE_REPLICATION_SLOT slot [TEMPORARY] PHYSICAL [RESERVE_WAL ...]
//! CREATE_REPLICATION_SLOT slot [TEMPORARY] PHYSICAL (RESERVE_WAL [bool] [, ...])
//! CREATE_REPLICATION_SLOT slot [TEMPORARY] LOGICAL plugin [EXPORT_SNAPSHOT | NOEXPORT_SNAPSHOT | USE_SNAPSHOT | TWO_PHASE ...]
//! CREATE_REPLICATION_SLOT slot [TEMPORARY] LOGICAL plugin (SNAPSHOT 'export'|'use'|'nothing', TWO_PHASE [bool])
//! DROP_REPLICATION_SLOT slot [WAIT]
//! START_REPLICATION [SLOT slot] [PHYSICAL] X/Y [TIMELINE tli]
//! START_REPLICATION SLOT slot LOGICAL X/Y [(name ['value'] [, ...])]
//! BASE_BACKUP [( LABEL 'x', PROGRESS, CHECKPOINT 'fast'|'spread', WAIT b, WAL, MAX_RATE n,
//!               MANIFEST 'yes'|'no'|'force-encode', MANIFEST_CHECKSUMS 'alg', TARGET 'client', ... )]
//! ```
//!
//! Anything else is ERROR 42601 "syntax error", as PostgreSQL's replication
//! grammar answers (a walsender of a `replication=database` connection
//! hands such text to the SQL engine instead, as PostgreSQL does: see
//! [`is_replication_command`]); ALTER_REPLICATION_SLOT and UPLOAD_MANIFEST
//! are 0A000, as are BASE_BACKUP's server-side targets and compression. Checks made here as
//! PostgreSQL's grammar and option parser make them: a timeline of 0 is
//! 42601 "invalid timeline 0"; a slot option given twice, or one that the
//! slot's kind does not take (RESERVE_WAL for logical slots, the snapshot
//! options and TWO_PHASE for physical ones), is 42601 "conflicting or
//! redundant options"; an unknown parenthesized option is XX000
//! "unrecognized option: NAME" (PostgreSQL's elog); a SNAPSHOT value other
//! than export, use or nothing is 22023. Output plugin options are kept as
//! written (names folded as identifiers, values exactly) for the plugin to
//! check.
//!
//! Replies keep PostgreSQL's shapes: TIMELINE_HISTORY's `content` column
//! is labelled bytea and carries the file's bytes as they are (sent in
//! pieces by the caller behind [`timeline_history_head`]); a stream of a
//! timeline older than the server's ends with [`next_timeline_result`].
//!
//! Stream messages (all inside CopyData, integers big-endian, times in
//! microseconds since 2000-01-01):
//!
//! ```text
//! server: 'w' | dataStart u64 | walEnd u64 | sendTime i64 | WAL bytes...
//! server: 'k' | walEnd u64 | sendTime i64 | replyRequested u8
//! client: 'r' | write u64 | flush u64 | apply u64 | sendTime i64 | replyRequested u8
//! client: 'h' | sendTime i64 | xmin u32 | epoch u32 | catalog_xmin u32 | epoch u32
//! ```
//!
//! Invariants: nothing a client sends can panic this module; every
//! malformed stream message is a [`SqlError`] with SQLSTATE 08P01 (FATAL,
//! as PostgreSQL ends the walsender), never a guess.

use crate::codec::{FieldDescription, Out};
use crate::error::{sqlstate, SqlError};

/// Type OIDs of the result columns replication commands send.
const TEXT_OID: u32 = 25;
const INT4_OID: u32 = 23;
const INT8_OID: u32 = 20;
const BYTEA_OID: u32 = 17;
const OID_OID: u32 = 26;

/// A parsed replication command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// An empty query string (EmptyQueryResponse).
    Empty,
    IdentifySystem,
    Show(String),
    ReadReplicationSlot(String),
    TimelineHistory(u32),
    CreatePhysicalSlot {
        name: String,
        temporary: bool,
        reserve_wal: bool,
    },
    CreateLogicalSlot {
        name: String,
        temporary: bool,
        plugin: String,
        two_phase: bool,
    },
    DropSlot {
        name: String,
        wait: bool,
    },
    StartReplication {
        slot: Option<String>,
        start: u64,
        timeline: Option<u32>,
    },
    StartLogical {
        slot: String,
        start: u64,
        options: Vec<PluginOption>,
    },
    BaseBackup(BaseBackupOptions),
}

/// BASE_BACKUP's options (PostgreSQL 15's parse_basebackup_options).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseBackupOptions {
    /// LABEL (default "base backup").
    pub label: String,
    /// PROGRESS: send the estimated size in the tablespace list.
    pub progress: bool,
    /// CHECKPOINT 'fast' (true) or 'spread' (false, the default).
    pub fast_checkpoint: bool,
    /// WAIT (default true): wait for the WAL to be archived.
    pub wait: bool,
    /// WAL: include the WAL from start to end in the archive.
    pub include_wal: bool,
    /// MAX_RATE in kB/s (32 .. 1048576), None for no limit.
    pub max_rate_kb: Option<u32>,
    /// MANIFEST 'yes' or 'force-encode' (default no manifest).
    pub manifest: bool,
    /// MANIFEST 'force-encode': every path hex-encoded.
    pub manifest_force_encode: bool,
    /// MANIFEST_CHECKSUMS (default CRC32C).
    pub manifest_checksums: ManifestChecksum,
}

/// The per-file checksum of a backup manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManifestChecksum {
    None,
    Crc32c,
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

impl ManifestChecksum {
    /// The name the manifest gives it (pg_checksum_type_name).
    pub fn name(self) -> &'static str {
        match self {
            ManifestChecksum::None => "NONE",
            ManifestChecksum::Crc32c => "CRC32C",
            ManifestChecksum::Sha224 => "SHA224",
            ManifestChecksum::Sha256 => "SHA256",
            ManifestChecksum::Sha384 => "SHA384",
            ManifestChecksum::Sha512 => "SHA512",
        }
    }

    fn parse(s: &str) -> Option<ManifestChecksum> {
        Some(match s.to_ascii_lowercase().as_str() {
            "none" => ManifestChecksum::None,
            "crc32c" => ManifestChecksum::Crc32c,
            "sha224" => ManifestChecksum::Sha224,
            "sha256" => ManifestChecksum::Sha256,
            "sha384" => ManifestChecksum::Sha384,
            "sha512" => ManifestChecksum::Sha512,
            _ => return None,
        })
    }
}

impl Default for BaseBackupOptions {
    fn default() -> Self {
        BaseBackupOptions {
            label: "base backup".to_string(),
            progress: false,
            fast_checkpoint: false,
            wait: true,
            include_wal: false,
            max_rate_kb: None,
            manifest: false,
            manifest_force_encode: false,
            manifest_checksums: ManifestChecksum::Crc32c,
        }
    }
}

/// One output plugin option of START_REPLICATION ... LOGICAL:
/// (name, value), a missing value is None.
pub type PluginOption = (String, Option<String>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A keyword or an unquoted identifier, folded to lower case.
    Word(String),
    /// A double-quoted identifier, exactly as written.
    Quoted(String),
    /// A string literal ('...').
    Str(String),
    Number(u64),
    Lsn(u64),
    Punct(char),
}

fn syntax_error() -> SqlError {
    SqlError::error(sqlstate::SYNTAX_ERROR, "syntax error")
}

/// Parses `X/Y` (both hexadecimal, as `%X/%X`).
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (hi, lo) = text.split_once('/')?;
    let valid = |s: &str| !s.is_empty() && s.len() <= 8 && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !valid(hi) || !valid(lo) {
        return None;
    }
    let hi = u64::from_str_radix(hi, 16).ok()?;
    let lo = u64::from_str_radix(lo, 16).ok()?;
    Some((hi << 32) | lo)
}

/// PostgreSQL's `%X/%X` form of an LSN.
pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn as u32)
}

fn tokenize(text: &str) -> Result<Vec<Token>, SqlError> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'"' || c == b'\'' {
            let (s, next) = quoted(text, i, c).ok_or_else(syntax_error)?;
            out.push(if c == b'"' {
                Token::Quoted(s)
            } else {
                Token::Str(s)
            });
            i = next;
        } else if matches!(c, b'(' | b')' | b',' | b';') {
            out.push(Token::Punct(c as char));
            i += 1;
        } else if c.is_ascii_alphanumeric() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'/') {
                i += 1;
            }
            out.push(word_token(&text[start..i])?);
        } else {
            return Err(syntax_error());
        }
    }
    Ok(out)
}

/// A bare word: an LSN (`X/Y`), a decimal number, or a keyword/identifier.
fn word_token(w: &str) -> Result<Token, SqlError> {
    if w.contains('/') {
        return parse_lsn(w).map(Token::Lsn).ok_or_else(syntax_error);
    }
    if w.bytes().all(|b| b.is_ascii_digit()) {
        return w.parse().map(Token::Number).map_err(|_| syntax_error());
    }
    Ok(Token::Word(w.to_ascii_lowercase()))
}

/// The quoted text starting at `at` (a `q` quote; a doubled quote is one
/// quote character) and the index after its closing quote.
fn quoted(text: &str, at: usize, q: u8) -> Option<(String, usize)> {
    let b = text.as_bytes();
    let mut s = Vec::new();
    let mut i = at + 1;
    while i < b.len() {
        if b[i] == q {
            if b.get(i + 1) == Some(&q) {
                s.push(q);
                i += 2;
                continue;
            }
            return Some((String::from_utf8(s).ok()?, i + 1));
        }
        s.push(b[i]);
        i += 1;
    }
    None
}

/// A cursor over the tokens of one command.
struct Tokens {
    toks: Vec<Token>,
    at: usize,
}

impl Tokens {
    fn peek(&self) -> Option<&Token> {
        self.toks.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.toks.get(self.at).cloned();
        self.at += 1;
        t
    }

    /// Consumes keyword `kw` if it comes next.
    fn keyword(&mut self, kw: &str) -> bool {
        if matches!(self.peek(), Some(Token::Word(w)) if w == kw) {
            self.at += 1;
            return true;
        }
        false
    }

    fn punct(&mut self, p: char) -> bool {
        if self.peek() == Some(&Token::Punct(p)) {
            self.at += 1;
            return true;
        }
        false
    }

    fn ident(&mut self) -> Result<String, SqlError> {
        match self.next() {
            Some(Token::Word(w)) | Some(Token::Quoted(w)) => Ok(w),
            _ => Err(syntax_error()),
        }
    }

    fn number(&mut self) -> Result<u64, SqlError> {
        match self.next() {
            Some(Token::Number(n)) => Ok(n),
            _ => Err(syntax_error()),
        }
    }

    /// The end of the command (an optional `;`, then nothing).
    fn end(&mut self) -> Result<(), SqlError> {
        self.punct(';');
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(syntax_error()),
        }
    }
}

/// Parses one replication command.
pub fn parse_command(text: &str) -> Result<Command, SqlError> {
    let mut t = Tokens {
        toks: tokenize(text)?,
        at: 0,
    };
    let Some(first) = t.next() else {
        return Ok(Command::Empty);
    };
    let Token::Word(first) = first else {
        return Err(syntax_error());
    };
    let cmd = match first.as_str() {
        "identify_system" => Command::IdentifySystem,
        "show" => Command::Show(show_name(&mut t)?),
        "read_replication_slot" => Command::ReadReplicationSlot(t.ident()?),
        "timeline_history" => Command::TimelineHistory(timeline_id(&mut t)?),
        "create_replication_slot" => create_slot(&mut t)?,
        "drop_replication_slot" => {
            let name = t.ident()?;
            let wait = t.keyword("wait");
            Command::DropSlot { name, wait }
        }
        "start_replication" => start_replication(&mut t)?,
        "base_backup" => base_backup(&mut t)?,
        "alter_replication_slot" | "upload_manifest" => {
            return Err(SqlError::not_supported(format!(
                "{} is not supported by walshm",
                first.to_ascii_uppercase()
            )))
        }
        _ => return Err(syntax_error()),
    };
    t.end()?;
    Ok(cmd)
}

/// `SHOW name` (a dotted name is one word here too).
fn show_name(t: &mut Tokens) -> Result<String, SqlError> {
    t.ident()
}

/// A timeline ID (PostgreSQL's UCONST): 0 is "invalid timeline 0", as
/// repl_gram.y says for TIMELINE_HISTORY and START_REPLICATION.
fn timeline_id(t: &mut Tokens) -> Result<u32, SqlError> {
    let n = u32::try_from(t.number()?).map_err(|_| syntax_error())?;
    if n == 0 {
        return Err(SqlError::error(
            sqlstate::SYNTAX_ERROR,
            format!("invalid timeline {n}"),
        ));
    }
    Ok(n)
}

fn create_slot(t: &mut Tokens) -> Result<Command, SqlError> {
    let name = t.ident()?;
    let temporary = t.keyword("temporary");
    let kind = if t.keyword("logical") {
        SlotKind::Logical(t.ident()?)
    } else if t.keyword("physical") {
        SlotKind::Physical
    } else {
        return Err(syntax_error());
    };
    let logical = matches!(kind, SlotKind::Logical(_));
    let options = if t.punct('(') {
        slot_options(t, logical)?
    } else {
        legacy_slot_options(t, logical)?
    };
    Ok(match kind {
        SlotKind::Physical => Command::CreatePhysicalSlot {
            name,
            temporary,
            reserve_wal: options.reserve_wal,
        },
        SlotKind::Logical(plugin) => Command::CreateLogicalSlot {
            name,
            temporary,
            plugin,
            two_phase: options.two_phase,
        },
    })
}

enum SlotKind {
    Physical,
    /// With the output plugin's name.
    Logical(String),
}

/// PostgreSQL 15's parenthesized options after `(`: RESERVE_WAL [bool]
/// (physical), SNAPSHOT 'value' and TWO_PHASE [bool] (logical).
fn slot_options(t: &mut Tokens, logical: bool) -> Result<SlotOptions, SqlError> {
    let mut options = SlotOptions {
        logical,
        ..SlotOptions::default()
    };
    loop {
        let option = t.ident()?;
        let value = option_value(t);
        options.take(&option, value.as_deref())?;
        if t.punct(')') {
            return Ok(options);
        }
        if !t.punct(',') {
            return Err(syntax_error());
        }
    }
}

/// The unparenthesized options (PostgreSQL's create_slot_legacy_opt list:
/// any number of RESERVE_WAL, EXPORT_SNAPSHOT, NOEXPORT_SNAPSHOT,
/// USE_SNAPSHOT, TWO_PHASE).
fn legacy_slot_options(t: &mut Tokens, logical: bool) -> Result<SlotOptions, SqlError> {
    let mut options = SlotOptions {
        logical,
        ..SlotOptions::default()
    };
    loop {
        let (option, value) = match t.peek() {
            Some(Token::Word(w)) => match w.as_str() {
                "reserve_wal" | "two_phase" => (w.clone(), None),
                "export_snapshot" => ("snapshot".to_string(), Some("export")),
                "noexport_snapshot" => ("snapshot".to_string(), Some("nothing")),
                "use_snapshot" => ("snapshot".to_string(), Some("use")),
                _ => return Ok(options),
            },
            _ => return Ok(options),
        };
        t.at += 1;
        options.take(&option, value)?;
    }
}

/// An option's value, if one follows its name (a word, a string or a
/// number), lower-cased.
fn option_value(t: &mut Tokens) -> Option<String> {
    let value = match t.peek()? {
        Token::Word(w) => w.clone(),
        Token::Str(s) => s.to_ascii_lowercase(),
        Token::Number(n) => n.to_string(),
        _ => return None,
    };
    t.at += 1;
    Some(value)
}

/// The options of a slot seen so far (PostgreSQL's
/// parseCreateReplSlotOptions).
#[derive(Default)]
struct SlotOptions {
    logical: bool,
    reserve_wal: bool,
    reserve_wal_given: bool,
    snapshot_given: bool,
    two_phase: bool,
    two_phase_given: bool,
}

impl SlotOptions {
    /// Takes one option: one given twice, or one the slot's kind does not
    /// take, is "conflicting or redundant options".
    fn take(&mut self, option: &str, value: Option<&str>) -> Result<(), SqlError> {
        let conflicting =
            || SqlError::error(sqlstate::SYNTAX_ERROR, "conflicting or redundant options");
        match option {
            "reserve_wal" if self.reserve_wal_given || self.logical => Err(conflicting()),
            "reserve_wal" => {
                self.reserve_wal = parse_bool_option(option, value)?;
                self.reserve_wal_given = true;
                Ok(())
            }
            "snapshot" if self.snapshot_given || !self.logical => Err(conflicting()),
            "snapshot" => {
                self.snapshot_given = true;
                match value {
                    Some("export" | "use" | "nothing") => Ok(()),
                    other => Err(SqlError::error(
                        sqlstate::INVALID_PARAMETER_VALUE,
                        format!(
                            "unrecognized value for CREATE_REPLICATION_SLOT option \"snapshot\": \"{}\"",
                            other.unwrap_or("")
                        ),
                    )),
                }
            }
            "two_phase" if self.two_phase_given || !self.logical => Err(conflicting()),
            "two_phase" => {
                self.two_phase = parse_bool_option(option, value)?;
                self.two_phase_given = true;
                Ok(())
            }
            _ => Err(SqlError::error(
                sqlstate::INTERNAL_ERROR,
                format!("unrecognized option: {option}"),
            )),
        }
    }
}

fn parse_bool_option(option: &str, value: Option<&str>) -> Result<bool, SqlError> {
    match value {
        None | Some("true" | "on" | "1" | "yes") => Ok(true),
        Some("false" | "off" | "0" | "no") => Ok(false),
        Some(v) => Err(SqlError::error(
            sqlstate::SYNTAX_ERROR,
            format!("{option} requires a Boolean value, not \"{v}\""),
        )),
    }
}

fn start_replication(t: &mut Tokens) -> Result<Command, SqlError> {
    let slot = if t.keyword("slot") {
        Some(t.ident()?)
    } else {
        None
    };
    if t.keyword("logical") {
        let slot = slot.ok_or_else(syntax_error)?;
        let start = lsn(t)?;
        let options = if t.punct('(') {
            plugin_options(t)?
        } else {
            Vec::new()
        };
        return Ok(Command::StartLogical {
            slot,
            start,
            options,
        });
    }
    t.keyword("physical");
    let start = lsn(t)?;
    let timeline = if t.keyword("timeline") {
        Some(timeline_id(t)?)
    } else {
        None
    };
    Ok(Command::StartReplication {
        slot,
        start,
        timeline,
    })
}

/// BASE_BACKUP's options: PostgreSQL 15's parenthesized generic list
/// (`( NAME [value], ... )`, what pg_basebackup 15 sends) or the older
/// unparenthesized keywords (LABEL 'x', PROGRESS, FAST, WAL, NOWAIT,
/// MAX_RATE n, TABLESPACE_MAP, NOVERIFY_CHECKSUMS, MANIFEST 'x',
/// MANIFEST_CHECKSUMS 'x'). An option given twice or unknown is an error,
/// as in PostgreSQL.
fn base_backup(t: &mut Tokens) -> Result<Command, SqlError> {
    let mut given: Vec<String> = Vec::new();
    let mut o = BaseBackupOptions::default();
    if t.punct('(') {
        if t.punct(')') {
            return Ok(Command::BaseBackup(o));
        }
        loop {
            let name = t.ident()?;
            let value = match t.peek() {
                Some(Token::Word(w)) => Some(w.clone()),
                Some(Token::Quoted(w)) | Some(Token::Str(w)) => Some(w.clone()),
                Some(Token::Number(n)) => Some(n.to_string()),
                _ => None,
            };
            if value.is_some() {
                t.at += 1;
            }
            take_backup_option(&mut o, &mut given, &name, value.as_deref())?;
            if t.punct(')') {
                return Ok(Command::BaseBackup(o));
            }
            if !t.punct(',') {
                return Err(syntax_error());
            }
        }
    }
    loop {
        let Some(Token::Word(w)) = t.peek().cloned() else {
            return Ok(Command::BaseBackup(o));
        };
        t.at += 1;
        let (name, value) = match w.as_str() {
            "label" | "manifest" | "manifest_checksums" => match t.next() {
                Some(Token::Str(s)) => (w.clone(), Some(s)),
                _ => return Err(syntax_error()),
            },
            "max_rate" => (w.clone(), Some(t.number()?.to_string())),
            "fast" => ("checkpoint".to_string(), Some("fast".to_string())),
            "nowait" => ("wait".to_string(), Some("false".to_string())),
            "noverify_checksums" => ("verify_checksums".to_string(), Some("false".to_string())),
            "progress" | "wal" | "tablespace_map" => (w.clone(), None),
            _ => return Err(syntax_error()),
        };
        take_backup_option(&mut o, &mut given, &name, value.as_deref())?;
    }
}

/// Takes one BASE_BACKUP option (parse_basebackup_options' checks and
/// messages).
fn take_backup_option(
    o: &mut BaseBackupOptions,
    given: &mut Vec<String>,
    name: &str,
    value: Option<&str>,
) -> Result<(), SqlError> {
    if given.iter().any(|g| g == name) {
        return Err(SqlError::error(
            sqlstate::SYNTAX_ERROR,
            format!("duplicate option \"{name}\""),
        ));
    }
    given.push(name.to_string());
    let invalid = |msg: String| SqlError::error(sqlstate::INVALID_PARAMETER_VALUE, msg);
    match name {
        "label" => o.label = value.unwrap_or("").to_string(),
        "progress" => o.progress = parse_bool_option(name, value)?,
        "checkpoint" => match value.unwrap_or("") {
            "fast" => o.fast_checkpoint = true,
            "spread" => o.fast_checkpoint = false,
            v => return Err(invalid(format!("unrecognized checkpoint type: \"{v}\""))),
        },
        "wait" => o.wait = parse_bool_option(name, value)?,
        "wal" => o.include_wal = parse_bool_option(name, value)?,
        "max_rate" => {
            let v: i64 = value
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| invalid(format!("{name} requires a numeric value")))?;
            if !(32..=1_048_576).contains(&v) {
                return Err(invalid(format!(
                    "{v} is outside the valid range for parameter \"{name}\" (32 .. 1048576)"
                )));
            }
            o.max_rate_kb = Some(v as u32);
        }
        // Accepted and without effect: walshm has no tablespaces and no
        // data pages with checksums.
        "tablespace_map" | "verify_checksums" => {
            parse_bool_option(name, value)?;
        }
        "manifest" => {
            let v = value.unwrap_or("true");
            if v.eq_ignore_ascii_case("force-encode") {
                o.manifest = true;
                o.manifest_force_encode = true;
            } else {
                o.manifest = parse_bool_option(name, Some(&v.to_ascii_lowercase()))
                    .map_err(|_| invalid(format!("unrecognized manifest option: \"{v}\"")))?;
            }
        }
        "manifest_checksums" => {
            let v = value.unwrap_or("");
            o.manifest_checksums = ManifestChecksum::parse(v)
                .ok_or_else(|| invalid(format!("unrecognized checksum algorithm: \"{v}\"")))?;
        }
        "target" => match value.unwrap_or("") {
            "client" => {}
            "server" | "blackhole" => {
                return Err(SqlError::not_supported(format!(
                    "backup target \"{}\" is not supported by walshm",
                    value.unwrap_or("")
                )))
            }
            v => return Err(invalid(format!("unrecognized target: \"{v}\""))),
        },
        "target_detail" => {}
        "compression" => match value.unwrap_or("none") {
            "none" => {}
            v => {
                return Err(SqlError::not_supported(format!(
                    "server-side compression \"{v}\" is not supported by walshm"
                )))
            }
        },
        "compression_detail" => {}
        _ => {
            return Err(SqlError::error(
                sqlstate::SYNTAX_ERROR,
                format!("unrecognized base backup option: \"{name}\""),
            ))
        }
    }
    Ok(())
}

fn lsn(t: &mut Tokens) -> Result<u64, SqlError> {
    match t.next() {
        Some(Token::Lsn(l)) => Ok(l),
        _ => Err(syntax_error()),
    }
}

/// The output plugin options after `(`: `name ['value']`, comma-separated
/// (repl_gram.y's plugin_opt_elem: an identifier, then a string or
/// nothing).
fn plugin_options(t: &mut Tokens) -> Result<Vec<PluginOption>, SqlError> {
    let mut options = Vec::new();
    loop {
        let name = t.ident()?;
        let value = match t.peek() {
            Some(Token::Str(s)) => {
                let v = s.clone();
                t.at += 1;
                Some(v)
            }
            _ => None,
        };
        options.push((name, value));
        if t.punct(')') {
            return Ok(options);
        }
        if !t.punct(',') {
            return Err(syntax_error());
        }
    }
}

/// Whether `text` starts with a replication command's keyword. On a
/// `replication=database` connection anything else is SQL (PostgreSQL's
/// walsender hands it to the executor).
pub fn is_replication_command(text: &str) -> bool {
    const KEYWORDS: [&str; 10] = [
        "identify_system",
        "show",
        "read_replication_slot",
        "timeline_history",
        "create_replication_slot",
        "drop_replication_slot",
        "start_replication",
        "base_backup",
        "alter_replication_slot",
        "upload_manifest",
    ];
    let text = text.trim_start();
    let word_len = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    let word = text[..word_len].to_ascii_lowercase();
    if word.is_empty() {
        return matches!(text.trim(), "" | ";");
    }
    KEYWORDS.contains(&word.as_str())
}

// ---- replies ----

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
    fn oid_len(self) -> (u32, i16) {
        match self {
            ColumnType::Text => (TEXT_OID, -1),
            ColumnType::Int4 => (INT4_OID, 4),
            ColumnType::Int8 => (INT8_OID, 8),
            ColumnType::Bytea => (BYTEA_OID, -1),
            ColumnType::Oid => (OID_OID, 4),
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
        .map(|(name, ty)| {
            let (type_oid, type_len) = ty.oid_len();
            FieldDescription {
                name: name.to_string(),
                type_oid,
                type_len,
                format: 0,
            }
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

#[cfg(test)]
mod tests {
    #[test]
    fn intervals_print_as_postgresql_does() {
        use super::format_interval;
        assert_eq!(format_interval(1_234), "00:00:00.001234");
        assert_eq!(format_interval(1_500_000), "00:00:01.5");
        assert_eq!(format_interval(3_723_000_000), "01:02:03");
        assert_eq!(format_interval(90_000_000_000), "1 day 01:00:00");
    }

    use super::*;

    #[test]
    fn base_backup_options_as_pg_basebackup_15_sends_them() {
        let c = parse_command(
            "BASE_BACKUP ( LABEL 'pg_basebackup base backup',  PROGRESS,  CHECKPOINT 'fast',  WAIT 0,  MANIFEST 'yes',  TARGET 'client')",
        )
        .unwrap();
        let Command::BaseBackup(o) = c else {
            panic!("{c:?}")
        };
        assert_eq!(o.label, "pg_basebackup base backup");
        assert!(o.progress && o.fast_checkpoint && !o.wait && o.manifest && !o.include_wal);
        assert_eq!(o.manifest_checksums, ManifestChecksum::Crc32c);
        let Command::BaseBackup(o) =
            parse_command("BASE_BACKUP (WAL, MAX_RATE 64, MANIFEST_CHECKSUMS 'SHA256')").unwrap()
        else {
            panic!()
        };
        assert!(o.include_wal && o.wait);
        assert_eq!(o.max_rate_kb, Some(64));
        assert_eq!(o.manifest_checksums, ManifestChecksum::Sha256);
        assert_eq!(
            parse_command("BASE_BACKUP LABEL 'x' FAST WAL NOWAIT").unwrap(),
            Command::BaseBackup(BaseBackupOptions {
                label: "x".into(),
                fast_checkpoint: true,
                include_wal: true,
                wait: false,
                ..BaseBackupOptions::default()
            })
        );
        for (bad, code) in [
            ("BASE_BACKUP (BOGUS)", "42601"),
            ("BASE_BACKUP (WAL, WAL)", "42601"),
            ("BASE_BACKUP (CHECKPOINT 'slow')", "22023"),
            ("BASE_BACKUP (MAX_RATE 1)", "22023"),
            ("BASE_BACKUP (MANIFEST 'maybe')", "22023"),
            ("BASE_BACKUP (TARGET 'server')", "0A000"),
            ("BASE_BACKUP (COMPRESSION 'gzip')", "0A000"),
        ] {
            assert_eq!(parse_command(bad).unwrap_err().code, code, "{bad}");
        }
    }

    #[test]
    fn commands_pg_receivewal_sends() {
        assert_eq!(
            parse_command("IDENTIFY_SYSTEM").unwrap(),
            Command::IdentifySystem
        );
        assert_eq!(
            parse_command("SHOW wal_segment_size").unwrap(),
            Command::Show("wal_segment_size".into())
        );
        assert_eq!(
            parse_command("READ_REPLICATION_SLOT \"s1\"").unwrap(),
            Command::ReadReplicationSlot("s1".into())
        );
        assert_eq!(
            parse_command("START_REPLICATION SLOT \"s1\" 0/3000000 TIMELINE 1").unwrap(),
            Command::StartReplication {
                slot: Some("s1".into()),
                start: 0x300_0000,
                timeline: Some(1)
            }
        );
        assert_eq!(
            parse_command("start_replication physical 1A/FF000000;").unwrap(),
            Command::StartReplication {
                slot: None,
                start: (0x1a << 32) | 0xff00_0000,
                timeline: None
            }
        );
        assert_eq!(parse_command("  ").unwrap(), Command::Empty);
    }

    #[test]
    fn slot_commands_in_both_syntaxes() {
        let reserve = |r| Command::CreatePhysicalSlot {
            name: "s".into(),
            temporary: false,
            reserve_wal: r,
        };
        assert_eq!(
            parse_command("CREATE_REPLICATION_SLOT \"s\" PHYSICAL RESERVE_WAL").unwrap(),
            reserve(true)
        );
        assert_eq!(
            parse_command("CREATE_REPLICATION_SLOT s PHYSICAL (RESERVE_WAL)").unwrap(),
            reserve(true)
        );
        assert_eq!(
            parse_command("CREATE_REPLICATION_SLOT s PHYSICAL (RESERVE_WAL false)").unwrap(),
            reserve(false)
        );
        assert_eq!(
            parse_command("CREATE_REPLICATION_SLOT s PHYSICAL").unwrap(),
            reserve(false)
        );
        assert_eq!(
            parse_command("DROP_REPLICATION_SLOT \"S\" WAIT").unwrap(),
            Command::DropSlot {
                name: "S".into(),
                wait: true
            }
        );
    }

    #[test]
    fn logical_commands_pg_recvlogical_and_psycopg2_send() {
        let logical = |temporary, plugin: &str, two_phase| Command::CreateLogicalSlot {
            name: "s".into(),
            temporary,
            plugin: plugin.into(),
            two_phase,
        };
        assert_eq!(
            parse_command(
                "CREATE_REPLICATION_SLOT \"s\" LOGICAL \"test_decoding\" (SNAPSHOT 'nothing')"
            )
            .unwrap(),
            logical(false, "test_decoding", false)
        );
        assert_eq!(
            parse_command("CREATE_REPLICATION_SLOT \"s\" TEMPORARY LOGICAL \"pgoutput\"").unwrap(),
            logical(true, "pgoutput", false)
        );
        assert_eq!(
            parse_command("CREATE_REPLICATION_SLOT s LOGICAL pgoutput NOEXPORT_SNAPSHOT TWO_PHASE")
                .unwrap(),
            logical(false, "pgoutput", true)
        );
        let code = |text: &str| parse_command(text).unwrap_err().code;
        assert_eq!(
            code("CREATE_REPLICATION_SLOT s LOGICAL p (RESERVE_WAL)"),
            "42601"
        );
        assert_eq!(
            code("CREATE_REPLICATION_SLOT s PHYSICAL (SNAPSHOT 'use')"),
            "42601"
        );
        assert_eq!(
            code("CREATE_REPLICATION_SLOT s LOGICAL p (SNAPSHOT 'x')"),
            "22023"
        );
        assert_eq!(
            code("CREATE_REPLICATION_SLOT s LOGICAL p (SNAPSHOT 'use', SNAPSHOT 'use')"),
            "42601"
        );
        assert_eq!(
            parse_command(
                "START_REPLICATION SLOT \"s\" LOGICAL 0/1A (\"include-xids\" '0', \"publication_names\" 'Pub', skip)"
            )
            .unwrap(),
            Command::StartLogical {
                slot: "s".into(),
                start: 0x1a,
                options: vec![
                    ("include-xids".into(), Some("0".into())),
                    ("publication_names".into(), Some("Pub".into())),
                    ("skip".into(), None),
                ],
            }
        );
        assert_eq!(
            parse_command("START_REPLICATION SLOT s LOGICAL 0/0").unwrap(),
            Command::StartLogical {
                slot: "s".into(),
                start: 0,
                options: vec![],
            }
        );
        assert_eq!(code("START_REPLICATION LOGICAL 0/0"), "42601");
        assert_eq!(code("START_REPLICATION SLOT s LOGICAL 0/0 (a 'b'"), "42601");
    }

    #[test]
    fn sql_is_told_apart_from_replication_commands() {
        assert!(is_replication_command("IDENTIFY_SYSTEM"));
        assert!(is_replication_command(
            "  start_replication SLOT s LOGICAL 0/0"
        ));
        assert!(is_replication_command(""));
        assert!(is_replication_command(" ; "));
        assert!(!is_replication_command(
            "SELECT pg_catalog.set_config('search_path', '', false);"
        ));
        assert!(!is_replication_command("CREATE PUBLICATION p"));
        assert!(!is_replication_command("showx"));
    }

    #[test]
    fn timeline_zero_is_invalid_as_postgresql_says() {
        for cmd in [
            "TIMELINE_HISTORY 0",
            "START_REPLICATION 0/1000000 TIMELINE 0",
        ] {
            let e = parse_command(cmd).unwrap_err();
            assert_eq!(
                (e.code, e.message.as_str()),
                ("42601", "invalid timeline 0"),
                "{cmd}"
            );
        }
        assert_eq!(
            parse_command("TIMELINE_HISTORY 2").unwrap(),
            Command::TimelineHistory(2)
        );
    }

    #[test]
    fn redundant_or_logical_only_slot_options_conflict() {
        for cmd in [
            "CREATE_REPLICATION_SLOT s PHYSICAL (RESERVE_WAL, RESERVE_WAL)",
            "CREATE_REPLICATION_SLOT s PHYSICAL (RESERVE_WAL false, reserve_wal 'true')",
            "CREATE_REPLICATION_SLOT s PHYSICAL RESERVE_WAL RESERVE_WAL",
            "CREATE_REPLICATION_SLOT s PHYSICAL (SNAPSHOT 'export')",
            "CREATE_REPLICATION_SLOT s PHYSICAL (TWO_PHASE)",
            "CREATE_REPLICATION_SLOT s PHYSICAL EXPORT_SNAPSHOT",
        ] {
            let e = parse_command(cmd).unwrap_err();
            assert_eq!(
                (e.code, e.message.as_str()),
                ("42601", "conflicting or redundant options"),
                "{cmd}"
            );
        }
        let e = parse_command("CREATE_REPLICATION_SLOT s PHYSICAL (WAIT)").unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            ("XX000", "unrecognized option: wait")
        );
        let e =
            parse_command("CREATE_REPLICATION_SLOT s PHYSICAL (RESERVE_WAL maybe)").unwrap_err();
        assert_eq!(e.code, "42601");
    }

    #[test]
    fn unknown_or_malformed_commands_are_syntax_errors() {
        for bad in [
            "SELECT 1",
            "START_REPLICATION",
            "START_REPLICATION 0/ZZ",
            "START_REPLICATION 0/1 TIMELINE x",
            "IDENTIFY_SYSTEM extra",
            "TIMELINE_HISTORY 99999999999",
            "CREATE_REPLICATION_SLOT \"unterminated",
            "DROP_REPLICATION_SLOT",
            "\u{1}",
        ] {
            assert_eq!(parse_command(bad).unwrap_err().code, "42601", "{bad}");
        }
    }

    #[test]
    fn lsn_text_round_trips() {
        for lsn in [0u64, 0x1_0000_0000, 0xDEAD_BEEF_0000_0001] {
            assert_eq!(parse_lsn(&format_lsn(lsn)), Some(lsn));
        }
        assert_eq!(parse_lsn("1/"), None);
        assert_eq!(parse_lsn("123456789/0"), None);
    }

    #[test]
    fn standby_status_decodes_and_rejects_malformed() {
        let mut m = vec![b'r'];
        for v in [10u64, 9, 0, 77] {
            m.extend_from_slice(&v.to_be_bytes());
        }
        m.push(1);
        assert_eq!(
            parse_stream_message(&m).unwrap(),
            StreamMessage::Status(StandbyStatus {
                write: 10,
                flush: 9,
                apply: 0,
                send_time: 77,
                reply_requested: true
            })
        );
        assert_eq!(parse_stream_message(&m[..20]).unwrap_err().code, "08P01");
        assert_eq!(parse_stream_message(b"zzz").unwrap_err().code, "08P01");
        assert_eq!(parse_stream_message(b"").unwrap_err().code, "08P01");
    }

    #[test]
    fn framing_takes_whole_messages_only() {
        let mut buf = vec![b'Q', 0, 0, 0, 6, b'x'];
        assert_eq!(take_message(&mut buf).unwrap(), None);
        buf.push(0);
        buf.push(b'X');
        assert_eq!(take_message(&mut buf).unwrap(), Some((b'Q', vec![b'x', 0])));
        assert_eq!(buf, vec![b'X']);
        let mut bad = vec![b'Q', 0xff, 0, 0, 0];
        assert_eq!(take_message(&mut bad).unwrap_err().code, "08P01");
        assert_eq!(query_text(b"IDENTIFY_SYSTEM\0").unwrap(), "IDENTIFY_SYSTEM");
    }
}
