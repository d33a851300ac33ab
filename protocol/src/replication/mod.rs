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

use crate::error::{sqlstate, SqlError};

mod replies;
mod stream;

pub use replies::{
    command_complete, copy_both_response, copy_done, copy_out_response, empty_query_response,
    error_response, format_interval, next_timeline_result, ready_for_query, result_set,
    timeline_history_head, typed_copy_data, ColumnType,
};
pub use stream::{
    keepalive, parse_stream_message, query_text, take_message, xlog_data_header, StandbyStatus,
    StreamMessage, MAX_CLIENT_MESSAGE, XLOG_DATA_HEADER,
};

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
    match name {
        "label" => o.label = value.unwrap_or("").to_string(),
        "progress" => o.progress = parse_bool_option(name, value)?,
        "checkpoint" => match value.unwrap_or("") {
            "fast" => o.fast_checkpoint = true,
            "spread" => o.fast_checkpoint = false,
            v => {
                return Err(invalid_value(format!(
                    "unrecognized checkpoint type: \"{v}\""
                )))
            }
        },
        "wait" => o.wait = parse_bool_option(name, value)?,
        "wal" => o.include_wal = parse_bool_option(name, value)?,
        "max_rate" => o.max_rate_kb = Some(max_rate(name, value)?),
        // Accepted and without effect: walshm has no tablespaces and no
        // data pages with checksums.
        "tablespace_map" | "verify_checksums" => {
            parse_bool_option(name, value)?;
        }
        "manifest" => manifest_option(o, name, value)?,
        "manifest_checksums" => {
            let v = value.unwrap_or("");
            o.manifest_checksums = ManifestChecksum::parse(v).ok_or_else(|| {
                invalid_value(format!("unrecognized checksum algorithm: \"{v}\""))
            })?;
        }
        "target" | "compression" => client_side_only(name, value)?,
        "target_detail" | "compression_detail" => {}
        _ => {
            return Err(SqlError::error(
                sqlstate::SYNTAX_ERROR,
                format!("unrecognized base backup option: \"{name}\""),
            ))
        }
    }
    Ok(())
}

/// 22023 for an option value BASE_BACKUP does not take.
fn invalid_value(msg: String) -> SqlError {
    SqlError::error(sqlstate::INVALID_PARAMETER_VALUE, msg)
}

/// MAX_RATE: kilobytes per second, 32 to 1048576.
fn max_rate(name: &str, value: Option<&str>) -> Result<u32, SqlError> {
    let v: i64 = value
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| invalid_value(format!("{name} requires a numeric value")))?;
    if !(32..=1_048_576).contains(&v) {
        return Err(invalid_value(format!(
            "{v} is outside the valid range for parameter \"{name}\" (32 .. 1048576)"
        )));
    }
    Ok(v as u32)
}

/// MANIFEST: a boolean (absent: true), or 'force-encode'.
fn manifest_option(
    o: &mut BaseBackupOptions,
    name: &str,
    value: Option<&str>,
) -> Result<(), SqlError> {
    let v = value.unwrap_or("true");
    if v.eq_ignore_ascii_case("force-encode") {
        o.manifest = true;
        o.manifest_force_encode = true;
    } else {
        o.manifest = parse_bool_option(name, Some(&v.to_ascii_lowercase()))
            .map_err(|_| invalid_value(format!("unrecognized manifest option: \"{v}\"")))?;
    }
    Ok(())
}

/// TARGET and COMPRESSION: only what the client receives, uncompressed
/// (TARGET 'client', COMPRESSION 'none'); server-side targets and
/// compression are 0A000, anything else 22023.
fn client_side_only(name: &str, value: Option<&str>) -> Result<(), SqlError> {
    if name == "target" {
        return match value.unwrap_or("") {
            "client" => Ok(()),
            "server" | "blackhole" => Err(SqlError::not_supported(format!(
                "backup target \"{}\" is not supported by walshm",
                value.unwrap_or("")
            ))),
            v => Err(invalid_value(format!("unrecognized target: \"{v}\""))),
        };
    }
    match value.unwrap_or("none") {
        "none" => Ok(()),
        v => Err(SqlError::not_supported(format!(
            "server-side compression \"{v}\" is not supported by walshm"
        ))),
    }
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

#[cfg(test)]
mod tests;
