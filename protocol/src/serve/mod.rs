//! The query phase of a connection: simple Query and the extended protocol
//! (Parse/Bind/Describe/Execute/Close/Sync/Flush), transaction-block state,
//! run-time parameters, and termination/cancel handling.
//!
//! Invariants:
//! * transaction status follows PostgreSQL: `I` idle, `T` in a block, `E`
//!   in a failed block; in a failed block only COMMIT/ROLLBACK run, every
//!   other statement gets ERROR 25P02;
//! * the Session sees the transaction contract documented in `session.rs`
//!   (each `begin()` matched by exactly one `commit()`/`rollback()`);
//! * after an error in an extended-protocol message, messages are skipped
//!   until Sync; output is flushed at ReadyForQuery, Flush, when large, and
//!   before closing;
//! * malformed messages end the connection with FATAL 08P01; nothing a
//!   client sends can panic;
//! * replies stream: output is written out whenever `FLUSH_THRESHOLD`
//!   bytes are staged, a large DataRow payload goes straight to the client
//!   (never copied into the staging buffer), and the buffer's capacity is
//!   given back after a large reply, so a session holds at most about one
//!   result row plus 64 KiB of output;
//! * a value, a result row or a client message larger than
//!   `Session::memory_limit()` is ERROR 53200 before it is built, and the
//!   session goes on (bound parameters are bounded by their Bind message,
//!   which is discarded unread when it is larger than the limit);
//! * writes are bounded in time (`send_polling`): a client that stops
//!   reading cannot keep a fast shutdown waiting; the connection is then
//!   dropped and its open transaction rolled back, as on EOF.

mod extended;
mod output;
mod params;
mod transaction;

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::rc::Rc;

use crate::codec::{decode_frontend, CodecError, FieldDescription, FrontendMessage, Out, Target};
use crate::error::{sqlstate, SqlError};
use crate::limits::{check_memory, out_of_memory};
use crate::named::Named;
use crate::plancache::PlanCache;
use crate::session::{Session, SettingRow, Termination};
use crate::settings::{self, DEFAULT_SERVER_VERSION};
use crate::sql::analyze::{analyze, Analyzed, Column, Kind};
use crate::sql::eval::{unrecognized_parameter, Env, SessionSettings};
use crate::sql::parser::{parse_statements_within, SetValue, Utility};
use crate::sql::query::run_query;
use crate::sql::value::{
    into_binary_format, into_text_format, parse_binary, parse_text, SqlType, Value,
};
use crate::wire::{is_abandoned, send_polling, Incoming, MessageReader};
use output::fields;
use transaction::{in_failed_transaction, TxState};

/// Output is written out once this much is buffered, even mid-batch.
const FLUSH_THRESHOLD: usize = 64 * 1024;

/// Serves the connection after start-up until Terminate, EOF, a FATAL error
/// or `Session::termination()`. Returns Ok(()) in all those cases; Err only
/// for I/O errors on the stream (the connection is then unusable).
///
/// Implicit transactions: outside an explicit block each simple Query
/// message runs in one transaction (`begin()` before its first statement,
/// `commit()` after its last), and in the extended protocol everything up
/// to Sync does. See `Session` for the full contract.
///
/// Blocking reads and writes that fail with EINTR, EWOULDBLOCK or
/// ETIMEDOUT (a signal without SA_RESTART, or SO_RCVTIMEO / SO_SNDTIMEO on
/// the socket) make `serve` check `Session::termination()` and then retry;
/// a write abandoned at termination ends `serve` with an error after the
/// open transaction was rolled back.
pub fn serve<S: Read + Write>(stream: &mut S, session: &mut dyn Session) -> io::Result<()> {
    let mut reader = MessageReader::new();
    let mut conn = Connection::new(session, stream);
    loop {
        if let Some(t) = conn.session.termination() {
            conn.terminate(t);
            return conn.close();
        }
        // A cancel arriving while we wait for a command is ignored, as in PostgreSQL.
        conn.session.take_cancel();
        let limit = conn.session.memory_limit();
        let incoming = {
            let session = &mut *conn.session;
            let mut poll = || session.termination().is_some();
            reader.read_message_within(&mut *conn.stream, &mut poll, limit)?
        };
        match incoming {
            Incoming::Eof => {
                conn.abort_for_exit();
                return conn.close();
            }
            Incoming::Stopped => continue,
            Incoming::BadLength(len) => {
                conn.fail(SqlError::protocol_violation(format!(
                    "invalid message length {len}"
                )));
            }
            Incoming::TooLarge { tag, len } => conn.refuse_large_message(tag, len, limit),
            Incoming::Message { tag, body } => conn.dispatch(tag, &body),
        }
        if let Some(e) = conn.broken.take() {
            return Err(conn.abandon(e));
        }
        if conn.closing {
            return conn.close();
        }
        if conn.out.len() >= FLUSH_THRESHOLD
            || (conn.wants_flush && !reader.has_buffered_input())
            || conn.wants_flush_now
        {
            if let Err(e) = conn.write_out() {
                return Err(conn.abandon(e));
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortalState {
    Ready,
    /// Stopped by Execute's row limit.
    Suspended,
    Done,
}

struct Portal {
    statement: Rc<Analyzed>,
    /// The query text (what pg_stat_activity shows while it runs).
    query: Rc<str>,
    params: Vec<Value>,
    /// One format code per result column.
    formats: Vec<i16>,
    state: PortalState,
    /// Rows produced but not yet sent (a suspended portal).
    pending: VecDeque<Vec<Value>>,
}

/// What running one statement produced.
struct Outcome {
    tag: String,
    rows: Option<Vec<Vec<Value>>>,
}

impl Outcome {
    fn tag(tag: &str) -> Self {
        Outcome {
            tag: tag.to_string(),
            rows: None,
        }
    }

    fn rows(rows: Vec<Vec<Value>>) -> Self {
        let tag = match rows.len() {
            1 => "SELECT 1".to_string(),
            n => format!("SELECT {n}"),
        };
        Outcome {
            tag,
            rows: Some(rows),
        }
    }
}

/// synchronous_commit with PostgreSQL's transactional SET semantics; other
/// parameters are remembered (non-transactionally) so SHOW can echo them.
struct Parameters {
    sync_name: String,
    sync_default: (bool, String),
    sync_committed: (bool, String),
    sync_pending: Option<(bool, String)>,
    sync_dirty: bool,
    others: HashMap<String, String>,
}

impl Parameters {
    /// `server` is the server-wide synchronous_commit as SHOW prints it
    /// (remote_write, local, ...); kept when it agrees with `sync`.
    fn new(sync: bool, server: Option<String>) -> Self {
        let agrees =
            |n: &String| settings::parse_synchronous_commit(n).is_ok_and(|(b, _)| b == sync);
        let name = server
            .filter(agrees)
            .unwrap_or_else(|| if sync { "on" } else { "off" }.to_string());
        Parameters {
            sync_name: name.clone(),
            sync_default: (sync, name.clone()),
            sync_committed: (sync, name),
            sync_pending: None,
            sync_dirty: false,
            others: HashMap::new(),
        }
    }
}

struct Connection<'s, S> {
    session: &'s mut dyn Session,
    stream: &'s mut S,
    out: Out,
    /// A write to the client failed (or was abandoned at termination):
    /// nothing more is written and `serve` returns this error.
    broken: Option<io::Error>,
    tx: TxState,
    /// When the open transaction started (now()), microseconds since the Unix epoch.
    xact_start: i64,
    statements: Named<(Rc<Analyzed>, Rc<str>)>,
    portals: Named<Portal>,
    /// Texts seen before, analyzed (see `plancache`).
    plans: PlanCache,
    /// An extended-protocol message failed: ignore messages until Sync.
    skipping: bool,
    params: Parameters,
    /// ParameterStatus messages to send before the next ReadyForQuery.
    reports: Vec<(&'static str, String)>,
    /// Write out after this message unless more input is already buffered.
    wants_flush: bool,
    /// Write out after this message unconditionally (Flush).
    wants_flush_now: bool,
    closing: bool,
}

/// Expands Bind's format list (none, one for all, or one each) to `n` codes.
fn expand_formats(formats: &[i16], n: usize, what: &str) -> Result<Vec<i16>, SqlError> {
    let expanded = match formats.len() {
        0 => vec![0; n],
        1 => vec![formats[0]; n],
        k if k == n => formats.to_vec(),
        k => {
            return Err(SqlError::error(
                sqlstate::PROTOCOL_VIOLATION,
                format!(
                    "bind message has {k} {what} formats but {n} {}",
                    if what == "result" {
                        "columns"
                    } else {
                        "parameters"
                    }
                ),
            ))
        }
    };
    if let Some(bad) = expanded.iter().find(|f| !matches!(f, 0 | 1)) {
        return Err(SqlError::error(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("unsupported format code: {bad}"),
        ));
    }
    Ok(expanded)
}

fn statement_not_found(name: &str) -> SqlError {
    if name.is_empty() {
        SqlError::error(
            sqlstate::INVALID_SQL_STATEMENT_NAME,
            "unnamed prepared statement does not exist",
        )
    } else {
        SqlError::error(
            sqlstate::INVALID_SQL_STATEMENT_NAME,
            format!("prepared statement \"{name}\" does not exist"),
        )
    }
}

fn portal_not_found(name: &str) -> SqlError {
    SqlError::error(
        sqlstate::INVALID_CURSOR_NAME,
        format!("portal \"{name}\" does not exist"),
    )
}

fn query_canceled() -> SqlError {
    SqlError::error(
        sqlstate::QUERY_CANCELED,
        "canceling statement due to user request",
    )
}

/// The reply to one simple Query message holding `sql`, as [`serve`]
/// would send it before ReadyForQuery (which is left out, as are
/// ParameterStatus reports). A walsender of a `replication=database`
/// connection answers the SQL its clients send between replication
/// commands with it (`SELECT pg_catalog.set_config(...)`, as
/// pg_recvlogical sends); each call is its own implicit transaction.
pub fn simple_query_reply(session: &mut dyn Session, sql: &str) -> Vec<u8> {
    let mut sink = Sink(Vec::new());
    let mut c = Connection::new(session, &mut sink);
    c.simple_query(sql);
    if c.write_out().is_err() {
        return Vec::new();
    }
    sink.0
}

/// A stream that only collects what is written to it.
struct Sink(Vec<u8>);

impl Read for Sink {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        Ok(0)
    }
}

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'s, S: Read + Write> Connection<'s, S> {
    fn new(session: &'s mut dyn Session, stream: &'s mut S) -> Self {
        let sync = session.synchronous_commit();
        let server_sync = session.server_setting("synchronous_commit");
        Connection {
            session,
            stream,
            out: Out::new(),
            broken: None,
            tx: TxState::Idle,
            xact_start: 0,
            statements: Named::default(),
            portals: Named::default(),
            plans: PlanCache::default(),
            skipping: false,
            params: Parameters::new(sync, server_sync),
            reports: Vec::new(),
            wants_flush: false,
            wants_flush_now: false,
            closing: false,
        }
    }

    // ---- dispatch ----

    fn dispatch(&mut self, tag: u8, body: &[u8]) {
        let msg = match decode_frontend(tag, body) {
            Ok(m) => m,
            Err(e @ CodecError::Malformed(_)) => return self.fail(e.to_sql_error()),
            Err(e @ CodecError::InvalidUtf8) => {
                if self.skipping {
                    return;
                }
                self.fail(e.to_sql_error());
                if tag == b'Q' {
                    self.ready_for_query();
                } else {
                    self.skipping = true;
                }
                return;
            }
        };
        if self.skipping && !matches!(msg, FrontendMessage::Sync | FrontendMessage::Terminate) {
            return;
        }
        let extended = match msg {
            FrontendMessage::Query(sql) => {
                self.simple_query(&sql);
                if !self.closing {
                    self.ready_for_query();
                }
                return;
            }
            FrontendMessage::Sync => {
                self.sync();
                return;
            }
            FrontendMessage::Flush => {
                self.wants_flush_now = true;
                return;
            }
            FrontendMessage::Terminate => {
                self.abort_for_exit();
                self.closing = true;
                return;
            }
            FrontendMessage::StrayCopy => return,
            FrontendMessage::FunctionCall => {
                self.fail(SqlError::not_supported(
                    "fastpath function calls are not supported by walshm",
                ));
                self.ready_for_query();
                return;
            }
            other => self.extended_message(other),
        };
        if let Err(e) = extended {
            self.fail(e);
            self.skipping = true;
        }
    }

    fn sync(&mut self) {
        self.skipping = false;
        self.commit_implicit();
        if self.tx == TxState::Idle {
            self.portals.clear();
        }
        if !self.closing {
            self.ready_for_query();
        }
    }

    // ---- simple query ----

    fn simple_query(&mut self, sql: &str) {
        self.statements.remove("");
        self.portals.remove("");
        self.session
            .report_activity(Some(sql), self.tx != TxState::Idle);
        if let Some(plans) = self.plans.simple(sql) {
            return self.run_statements(&plans, |c, a| c.cached_statement(a));
        }
        let statements = match parse_statements_within(sql, self.session.memory_limit()) {
            Ok(s) => s,
            Err(e) => return self.fail(e),
        };
        if statements.is_empty() {
            self.out.empty_query_response();
            return;
        }
        let mut analyzed = Vec::with_capacity(statements.len());
        self.run_statements(&statements, |c, stmt| {
            c.simple_statement(stmt, &mut analyzed)
        });
        if analyzed.len() == statements.len() {
            self.plans.insert_simple(sql, analyzed);
        }
    }

    /// Runs the statements of one Query message in order until the first
    /// error, then commits the implicit transaction.
    fn run_statements<T>(
        &mut self,
        items: &[T],
        mut step: impl FnMut(&mut Self, &T) -> Result<(), SqlError>,
    ) {
        for item in items {
            if self.broken.is_some() {
                return; // the client is gone: `serve` rolls back, nothing more runs
            }
            if let Some(t) = self.session.termination() {
                return self.terminate(t);
            }
            if let Err(e) = step(self, item) {
                return self.fail(e);
            }
        }
        if self.broken.is_none() {
            self.commit_implicit();
        }
    }

    /// Analyzes and runs one statement of a Query message seen for the
    /// first time, keeping its analysis in `analyzed`.
    fn simple_statement(
        &mut self,
        stmt: &crate::sql::Statement,
        analyzed: &mut Vec<Rc<Analyzed>>,
    ) -> Result<(), SqlError> {
        self.may_run(stmt.is_transaction_exit())?;
        let a = Rc::new(analyze(stmt, &[], false)?);
        analyzed.push(a.clone());
        self.run_simple(&a)
    }

    /// Runs one statement of a Query message analyzed before.
    fn cached_statement(&mut self, a: &Rc<Analyzed>) -> Result<(), SqlError> {
        self.may_run(a.is_transaction_exit())?;
        self.run_simple(a)
    }

    /// A statement about to run: cancelled, or refused in a failed block.
    fn may_run(&mut self, transaction_exit: bool) -> Result<(), SqlError> {
        if self.session.take_cancel() {
            return Err(query_canceled());
        }
        if self.tx == TxState::Failed && !transaction_exit {
            return Err(in_failed_transaction());
        }
        Ok(())
    }

    /// Runs an analyzed statement of a Query message and writes its reply.
    fn run_simple(&mut self, analyzed: &Analyzed) -> Result<(), SqlError> {
        let Outcome { tag, rows } = self.run(analyzed, &[])?;
        let columns = analyzed.columns();
        if let Some(columns) = &columns {
            self.out.row_description(&fields(columns, &[]))?;
        }
        if let (Some(rows), Some(columns)) = (rows, &columns) {
            for row in rows {
                self.send_row(row, columns, &[])?;
            }
        }
        self.out.command_complete(&tag);
        Ok(())
    }

    // ---- extended protocol ----

    fn run(&mut self, stmt: &Analyzed, params: &[Value]) -> Result<Outcome, SqlError> {
        match &stmt.kind {
            Kind::Utility(Utility::Begin) => return self.begin_block(),
            Kind::Utility(Utility::Commit) => return self.end_block(true),
            Kind::Utility(Utility::Rollback) => return self.end_block(false),
            Kind::Empty => return Ok(Outcome::tag("")),
            _ => {}
        }
        self.ensure_transaction()?;
        match &stmt.kind {
            Kind::Select(query) => {
                let mut env = Env {
                    session: &mut *self.session,
                    params,
                    now: self.xact_start,
                    settings: &self.params,
                    set_requests: Vec::new(),
                };
                let rows = run_query(query, &mut env)?;
                // set_config() calls take effect as SET would, in order.
                for (name, value, local) in std::mem::take(&mut env.set_requests) {
                    self.set(&name, &SetValue::Values(vec![value]), local)?;
                }
                Ok(Outcome::rows(rows))
            }
            Kind::ShowAll => {
                let rows = self
                    .params
                    .all(&*self.session)
                    .into_iter()
                    .map(|r| {
                        vec![
                            Value::Text(r.name),
                            Value::Text(r.shown),
                            Value::Text(r.short_desc),
                        ]
                    })
                    .collect();
                Ok(Outcome {
                    tag: "SHOW".into(),
                    rows: Some(rows),
                })
            }
            Kind::Utility(utility) => self.run_utility(utility),
            Kind::Empty => Ok(Outcome::tag("")),
        }
    }

    /// The utility statements other than transaction control, inside a transaction.
    fn run_utility(&mut self, utility: &Utility) -> Result<Outcome, SqlError> {
        match utility {
            Utility::Checkpoint => {
                self.session.checkpoint()?;
                Ok(Outcome::tag("CHECKPOINT"))
            }
            Utility::Set { name, value, local } => {
                self.set(name, value, *local)?;
                Ok(Outcome::tag("SET"))
            }
            Utility::SetIgnored => Ok(Outcome::tag("SET")),
            Utility::CreatePublication(name) => {
                self.session.create_publication(name)?;
                Ok(Outcome::tag("CREATE PUBLICATION"))
            }
            Utility::DropPublication { names, if_exists } => {
                for name in names {
                    self.session.drop_publication(name, *if_exists)?;
                }
                Ok(Outcome::tag("DROP PUBLICATION"))
            }
            Utility::Reset(name) => {
                self.reset(name.as_deref());
                Ok(Outcome::tag("RESET"))
            }
            Utility::Show(name) => {
                let value = self.params.show(&*self.session, name)?;
                Ok(Outcome {
                    tag: "SHOW".into(),
                    rows: Some(vec![vec![Value::Text(value)]]),
                })
            }
            // Run by `run` before a transaction is ensured; never here.
            Utility::Begin | Utility::Commit | Utility::Rollback => Ok(Outcome::tag("")),
        }
    }

    // ---- run-time parameters ----

    fn set(&mut self, name: &str, value: &SetValue, local: bool) -> Result<(), SqlError> {
        if local && self.tx != TxState::Block {
            self.out.error_or_notice(&SqlError::warning(
                sqlstate::NO_ACTIVE_SQL_TRANSACTION,
                "SET LOCAL can only be used in transaction blocks",
            ));
        }
        let lower = name.to_ascii_lowercase();
        let text = match value {
            SetValue::Default => None,
            SetValue::Values(v) => Some(v.join(", ")),
        };
        if lower == "synchronous_commit" {
            let (on, canonical) = match &text {
                Some(t) => {
                    let (on, c) = settings::parse_synchronous_commit(t)?;
                    (on, c.to_string())
                }
                None => self.params.sync_default.clone(),
            };
            self.session.set_synchronous_commit(on);
            self.session.set_synchronous_commit_level(&canonical);
            self.params.sync_name = canonical.clone();
            if !local {
                self.params.sync_pending = Some((on, canonical));
            }
            self.params.sync_dirty = true;
            return Ok(());
        }
        if self.session.server_setting(&lower).is_some() {
            return Err(settings::cannot_change(&lower));
        }
        let text = match (lower.as_str(), text) {
            ("client_encoding", Some(t)) => settings::parse_client_encoding(&t)?.to_string(),
            ("standard_conforming_strings", Some(t))
                if !matches!(t.to_ascii_lowercase().as_str(), "on" | "true" | "1") =>
            {
                return Err(SqlError::not_supported(
                    "walshm supports only standard_conforming_strings = on",
                ))
            }
            (_, Some(t)) => t,
            (_, None) => {
                self.params.others.remove(&lower);
                return Ok(());
            }
        };
        if let Some(reported) = settings::is_reported(&lower) {
            self.reports.push((reported, text.clone()));
        }
        self.params.others.insert(lower, text);
        Ok(())
    }

    fn reset(&mut self, name: Option<&str>) {
        let reset_sync = !matches!(name, Some(n) if !n.eq_ignore_ascii_case("synchronous_commit"));
        if reset_sync {
            let (on, canonical) = self.params.sync_default.clone();
            self.session.set_synchronous_commit(on);
            self.session.set_synchronous_commit_level(&canonical);
            self.params.sync_name = canonical.clone();
            self.params.sync_pending = Some((on, canonical));
            self.params.sync_dirty = true;
        }
        match name {
            None => self.params.others.clear(),
            Some(n) => {
                self.params.others.remove(&n.to_ascii_lowercase());
            }
        }
    }
}

/// Now, in microseconds since the Unix epoch (0 if the clock is before it).
fn unix_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Decodes one Bind parameter with its format code.
fn decode_param(
    raw: Option<&[u8]>,
    ty: SqlType,
    format: i16,
    index: usize,
) -> Result<Value, SqlError> {
    let Some(bytes) = raw else {
        return Ok(Value::Null);
    };
    if format == 1 {
        return parse_binary(ty, bytes, index);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| {
        SqlError::error(
            sqlstate::CHARACTER_NOT_IN_REPERTOIRE,
            "invalid byte sequence for encoding \"UTF8\"",
        )
    })?;
    parse_text(ty, text)
}

/// The notice PostgreSQL's quickdie sends (57P02).
pub(crate) fn crash_notice() -> SqlError {
    SqlError::warning(
        sqlstate::CRASH_SHUTDOWN,
        "terminating connection because of crash of another server process",
    )
    .with_detail(
        "The postmaster has commanded this server process to roll back the current transaction and \
         exit, because another server process exited abnormally and possibly corrupted shared memory.",
    )
    .with_hint("In a moment you should be able to reconnect to the database and repeat your command.")
}
