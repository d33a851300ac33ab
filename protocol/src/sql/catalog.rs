//! The virtual relations a FROM clause can name: views (`pg_stat_activity`,
//! `pg_stat_wal`, `pg_settings`, `pg_replication_slots`,
//! `pg_stat_replication`) and set-returning functions
//! (`pg_ls_waldir()`, `pg_control_checkpoint()`, `pg_control_system()`,
//! `pg_walfile_name_offset(lsn)`), each one row of [`RELATIONS`]: its
//! name, its argument types (None for a view), its columns with
//! PostgreSQL's names and types, and the function producing its rows from
//! the [`Session`]'s plain row data.
//!
//! Adding a view: one row here plus one row-producing function (and, if it
//! needs new data, a `Session` method with a default).
//!
//! Invariants: every producer returns rows of exactly its relation's column
//! count, each value of its column's type (`relations_produce_their_columns`
//! checks each against a fake session); unknown names are 42P01 with
//! PostgreSQL's message.

use super::eval::Env;
use super::functions::walfile_name;
use super::numeric::Numeric;
use super::value::{SqlType, Value, F64};
use crate::error::{sqlstate, SqlError};
use crate::session::{ActivityRow, ChangesArgs, ReplicationRow, ReplicationSlotRow, SettingRow};

use SqlType::{Bool, Float8, Inet, Int4, Int8, Interval, Lsn, Name, Oid, Text, Timestamptz, Xid};

/// Rows of a relation, given its (already typed) arguments.
pub type Producer = fn(&mut Env, &[Value]) -> Result<Vec<Vec<Value>>, SqlError>;

pub struct Relation {
    pub name: &'static str,
    /// Argument types of a set-returning function; None for a view.
    pub args: Option<&'static [SqlType]>,
    /// What may follow `args`.
    pub extra: Extra,
    pub columns: &'static [(&'static str, SqlType)],
    pub rows: Producer,
}

/// Arguments a set-returning function takes after its fixed ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extra {
    Nothing,
    /// These, in order, each optional (a default applies).
    Optional(&'static [SqlType]),
    /// Any number of text arguments (VARIADIC text[]).
    VariadicText,
}

impl Extra {
    /// The types of `n` arguments after the fixed ones; None if not taken.
    pub fn types(self, n: usize) -> Option<Vec<SqlType>> {
        match self {
            Extra::Nothing => (n == 0).then(Vec::new),
            Extra::Optional(types) => types.get(..n).map(<[SqlType]>::to_vec),
            Extra::VariadicText => Some(vec![Text; n]),
        }
    }
}

impl std::fmt::Debug for Relation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for Relation {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Relation {}

pub static RELATIONS: &[Relation] = &[
    Relation {
        name: "pg_stat_activity",
        args: None,
        extra: Extra::Nothing,
        columns: &[
            ("datid", Oid),
            ("datname", Name),
            ("pid", Int4),
            ("leader_pid", Int4),
            ("usesysid", Oid),
            ("usename", Name),
            ("application_name", Text),
            ("client_addr", Inet),
            ("client_hostname", Text),
            ("client_port", Int4),
            ("backend_start", Timestamptz),
            ("xact_start", Timestamptz),
            ("query_start", Timestamptz),
            ("state_change", Timestamptz),
            ("wait_event_type", Text),
            ("wait_event", Text),
            ("state", Text),
            ("backend_xid", Xid),
            ("backend_xmin", Xid),
            ("query_id", Int8),
            ("query", Text),
            ("backend_type", Text),
        ],
        rows: stat_activity,
    },
    Relation {
        name: "pg_stat_wal",
        args: None,
        extra: Extra::Nothing,
        columns: &[
            ("wal_records", Int8),
            ("wal_fpi", Int8),
            ("wal_bytes", SqlType::Numeric),
            ("wal_buffers_full", Int8),
            ("wal_write", Int8),
            ("wal_sync", Int8),
            ("wal_write_time", Float8),
            ("wal_sync_time", Float8),
            ("stats_reset", Timestamptz),
        ],
        rows: stat_wal,
    },
    Relation {
        name: "pg_settings",
        args: None,
        extra: Extra::Nothing,
        columns: &[
            ("name", Text),
            ("setting", Text),
            ("unit", Text),
            ("category", Text),
            ("short_desc", Text),
            ("extra_desc", Text),
            ("context", Text),
            ("vartype", Text),
            ("source", Text),
            ("min_val", Text),
            ("max_val", Text),
            ("enumvals", Text),
            ("boot_val", Text),
            ("reset_val", Text),
            ("sourcefile", Text),
            ("sourceline", Int4),
            ("pending_restart", Bool),
        ],
        rows: settings,
    },
    Relation {
        name: "pg_replication_slots",
        args: None,
        extra: Extra::Nothing,
        columns: &[
            ("slot_name", Name),
            ("plugin", Name),
            ("slot_type", Text),
            ("datoid", Oid),
            ("database", Name),
            ("temporary", Bool),
            ("active", Bool),
            ("active_pid", Int4),
            ("xmin", Xid),
            ("catalog_xmin", Xid),
            ("restart_lsn", Lsn),
            ("confirmed_flush_lsn", Lsn),
            ("wal_status", Text),
            ("safe_wal_size", Int8),
            ("two_phase", Bool),
        ],
        rows: replication_slots,
    },
    Relation {
        name: "pg_stat_replication",
        args: None,
        extra: Extra::Nothing,
        columns: &[
            ("pid", Int4),
            ("usesysid", Oid),
            ("usename", Name),
            ("application_name", Text),
            ("client_addr", Inet),
            ("client_hostname", Text),
            ("client_port", Int4),
            ("backend_start", Timestamptz),
            ("backend_xmin", Xid),
            ("state", Text),
            ("sent_lsn", Lsn),
            ("write_lsn", Lsn),
            ("flush_lsn", Lsn),
            ("replay_lsn", Lsn),
            ("write_lag", Interval),
            ("flush_lag", Interval),
            ("replay_lag", Interval),
            ("sync_priority", Int4),
            ("sync_state", Text),
            ("reply_time", Timestamptz),
        ],
        rows: stat_replication,
    },
    Relation {
        name: "pg_stat_wal_receiver",
        args: None,
        extra: Extra::Nothing,
        columns: &[
            ("pid", Int4),
            ("status", Text),
            ("receive_start_lsn", Lsn),
            ("receive_start_tli", Int4),
            ("written_lsn", Lsn),
            ("flushed_lsn", Lsn),
            ("received_tli", Int4),
            ("last_msg_send_time", Timestamptz),
            ("last_msg_receipt_time", Timestamptz),
            ("latest_end_lsn", Lsn),
            ("latest_end_time", Timestamptz),
            ("slot_name", Text),
            ("sender_host", Text),
            ("sender_port", Int4),
            ("conninfo", Text),
        ],
        rows: stat_wal_receiver,
    },
    Relation {
        name: "pg_ls_waldir",
        args: Some(&[]),
        extra: Extra::Nothing,
        columns: &[
            ("name", Text),
            ("size", Int8),
            ("modification", Timestamptz),
        ],
        rows: ls_waldir,
    },
    Relation {
        name: "pg_control_checkpoint",
        args: Some(&[]),
        extra: Extra::Nothing,
        columns: &[
            ("checkpoint_lsn", Lsn),
            ("redo_lsn", Lsn),
            ("redo_wal_file", Text),
            ("timeline_id", Int4),
            ("prev_timeline_id", Int4),
            ("full_page_writes", Bool),
            ("next_xid", Text),
            ("next_oid", Oid),
            ("next_multixact_id", Xid),
            ("next_multi_offset", Xid),
            ("oldest_xid", Xid),
            ("oldest_xid_dbid", Oid),
            ("oldest_active_xid", Xid),
            ("oldest_multi_xid", Xid),
            ("oldest_multi_dbid", Oid),
            ("oldest_commit_ts_xid", Xid),
            ("newest_commit_ts_xid", Xid),
            ("checkpoint_time", Timestamptz),
        ],
        rows: control_checkpoint,
    },
    Relation {
        name: "pg_control_system",
        args: Some(&[]),
        extra: Extra::Nothing,
        columns: &[
            ("pg_control_version", Int4),
            ("catalog_version_no", Int4),
            ("system_identifier", Int8),
            ("pg_control_last_modified", Timestamptz),
        ],
        rows: control_system,
    },
    Relation {
        name: "pg_logical_slot_get_changes",
        args: Some(CHANGES_ARGS),
        extra: Extra::VariadicText,
        columns: &[("lsn", Lsn), ("xid", Xid), ("data", Text)],
        rows: get_changes,
    },
    Relation {
        name: "pg_logical_slot_peek_changes",
        args: Some(CHANGES_ARGS),
        extra: Extra::VariadicText,
        columns: &[("lsn", Lsn), ("xid", Xid), ("data", Text)],
        rows: peek_changes,
    },
    Relation {
        name: "pg_logical_slot_get_binary_changes",
        args: Some(CHANGES_ARGS),
        extra: Extra::VariadicText,
        columns: &[("lsn", Lsn), ("xid", Xid), ("data", SqlType::Bytea)],
        rows: get_binary_changes,
    },
    Relation {
        name: "pg_logical_slot_peek_binary_changes",
        args: Some(CHANGES_ARGS),
        extra: Extra::VariadicText,
        columns: &[("lsn", Lsn), ("xid", Xid), ("data", SqlType::Bytea)],
        rows: peek_binary_changes,
    },
    Relation {
        name: "pg_create_logical_replication_slot",
        args: Some(&[Text, Text]),
        extra: Extra::Optional(&[Bool, Bool]),
        columns: &[("slot_name", Name), ("lsn", Lsn)],
        rows: create_logical_slot,
    },
    Relation {
        name: "pg_replication_slot_advance",
        args: Some(&[Text, Lsn]),
        extra: Extra::Nothing,
        columns: &[("slot_name", Name), ("end_lsn", Lsn)],
        rows: slot_advance,
    },
    Relation {
        name: "pg_walfile_name_offset",
        args: Some(&[Lsn]),
        extra: Extra::Nothing,
        columns: &[("file_name", Text), ("file_offset", Int4)],
        rows: walfile_name_offset,
    },
];

/// slot_name, upto_lsn, upto_nchanges (then the options, variadic).
const CHANGES_ARGS: &[SqlType] = &[Text, Lsn, Int4];

/// The arguments of the changes functions: the plugin options come in
/// (name, value) pairs.
fn changes_args(args: &[Value], peek: bool, binary: bool) -> Result<ChangesArgs, SqlError> {
    let slot = match args.first() {
        Some(Value::Text(s)) => s.clone(),
        _ => {
            return Err(SqlError::error(
                sqlstate::NULL_VALUE_NOT_ALLOWED,
                "slot name must not be null",
            ))
        }
    };
    let extra = &args[CHANGES_ARGS.len().min(args.len())..];
    if !extra.len().is_multiple_of(2) {
        return Err(SqlError::error(
            "2202E",
            "array must have even number of elements",
        ));
    }
    let as_text = |v: &Value| match v {
        Value::Text(s) => Some(s.clone()),
        _ => None,
    };
    let mut options = Vec::with_capacity(extra.len() / 2);
    for pair in extra.chunks(2) {
        let Some(name) = as_text(&pair[0]) else {
            return Err(SqlError::error(
                sqlstate::NULL_VALUE_NOT_ALLOWED,
                "option name must not be null",
            ));
        };
        options.push((name, as_text(&pair[1])));
    }
    Ok(ChangesArgs {
        slot,
        upto_lsn: match args.get(1) {
            Some(Value::U64(l)) => Some(*l),
            _ => None,
        },
        upto_nchanges: match args.get(2) {
            Some(Value::Int(n)) => Some(*n),
            _ => None,
        },
        options,
        peek,
        binary,
    })
}

fn changes(
    env: &mut Env,
    args: &[Value],
    peek: bool,
    binary: bool,
) -> Result<Vec<Vec<Value>>, SqlError> {
    let request = changes_args(args, peek, binary)?;
    let rows = env.session.logical_slot_changes(&request)?;
    rows.into_iter()
        .map(|r| {
            let data = if binary {
                Value::Bytea(r.data)
            } else {
                Value::Text(String::from_utf8(r.data).map_err(|_| {
                    SqlError::error(
                        sqlstate::CHARACTER_NOT_IN_REPERTOIRE,
                        "invalid byte sequence for encoding \"UTF8\" in decoded output",
                    )
                })?)
            };
            Ok(vec![Value::U64(r.lsn), Value::Int(i64::from(r.xid)), data])
        })
        .collect()
}

fn create_logical_slot(env: &mut Env, args: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
    let (Some(Value::Text(name)), Some(Value::Text(plugin))) = (args.first(), args.get(1)) else {
        return Ok(Vec::new());
    };
    let flag = |i: usize| args.get(i) == Some(&Value::Bool(true));
    let lsn = env
        .session
        .create_logical_replication_slot(name, plugin, flag(2), flag(3))?;
    Ok(vec![vec![text(name.as_str()), Value::U64(lsn)]])
}

fn slot_advance(env: &mut Env, args: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
    let (Some(Value::Text(name)), Some(Value::U64(upto))) = (args.first(), args.get(1)) else {
        return Ok(Vec::new());
    };
    let end = env.session.replication_slot_advance(name, *upto)?;
    Ok(vec![vec![text(name.as_str()), Value::U64(end)]])
}

fn get_changes(env: &mut Env, args: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
    changes(env, args, false, false)
}

fn peek_changes(env: &mut Env, args: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
    changes(env, args, true, false)
}

fn get_binary_changes(env: &mut Env, args: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
    changes(env, args, false, true)
}

fn peek_binary_changes(env: &mut Env, args: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
    changes(env, args, true, true)
}

/// The relation named `name`, or 42P01 at `pos` (a function in FROM that
/// is not one: 42883, as PostgreSQL).
pub fn lookup(name: &str, is_call: bool, pos: usize) -> Result<&'static Relation, SqlError> {
    let found = RELATIONS
        .iter()
        .find(|r| r.name == name && r.args.is_some() == is_call);
    found.ok_or_else(|| {
        let e = if is_call {
            SqlError::error(
                sqlstate::UNDEFINED_FUNCTION,
                format!("function {name} does not exist"),
            )
        } else {
            SqlError::error(
                sqlstate::UNDEFINED_TABLE,
                format!("relation \"{name}\" does not exist"),
            )
        };
        e.with_position(pos)
    })
}

fn text(s: impl Into<String>) -> Value {
    Value::Text(s.into())
}

fn opt_text(s: Option<String>) -> Value {
    s.map_or(Value::Null, Value::Text)
}

fn opt_time(t: Option<i64>) -> Value {
    t.map_or(Value::Null, Value::Timestamp)
}

fn activity_row(a: ActivityRow) -> Vec<Value> {
    let client = a.client_port.is_some();
    vec![
        if client { Value::Int(5) } else { Value::Null },
        opt_text(a.datname),
        Value::Int(i64::from(a.pid)),
        Value::Null,
        if client { Value::Int(10) } else { Value::Null },
        opt_text(a.usename),
        text(a.application_name.unwrap_or_default()),
        opt_text(a.client_addr),
        Value::Null,
        a.client_port
            .map_or(Value::Null, |p| Value::Int(i64::from(p))),
        opt_time(a.backend_start),
        opt_time(a.xact_start),
        opt_time(a.query_start),
        opt_time(a.state_change),
        opt_text(a.wait_event_type),
        opt_text(a.wait_event),
        opt_text(a.state),
        a.backend_xid
            .map_or(Value::Null, |x| Value::U64(u64::from(x))),
        Value::Null,
        Value::Null,
        text(a.query.unwrap_or_default()),
        text(a.backend_type),
    ]
}

fn stat_activity(env: &mut Env, _: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
    Ok(env
        .session
        .activity()
        .into_iter()
        .map(activity_row)
        .collect())
}

fn stat_wal(env: &mut Env, _: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
    let w = env.session.wal_stats();
    Ok(vec![vec![
        Value::Int(w.wal_records),
        Value::Int(w.wal_fpi),
        Value::numeric(Numeric::from_u64(w.wal_bytes)),
        Value::Int(w.wal_buffers_full),
        Value::Int(w.wal_write),
        Value::Int(w.wal_sync),
        Value::Float(F64(w.wal_write_time)),
        Value::Float(F64(w.wal_sync_time)),
        opt_time(w.stats_reset),
    ]])
}

/// Settings PostgreSQL declares as enums whose walshm row is text (it
/// accepts spellings PostgreSQL hides from `enumvals`, like `true` for
/// synchronous_commit), with the values pg_settings lists, in PostgreSQL
/// 15's order.
const TEXT_ROWS_SHOWN_AS_ENUM: &[(&str, &[&str])] = &[(
    "synchronous_commit",
    &["local", "remote_write", "remote_apply", "on", "off"],
)];

/// Gives a row of [`TEXT_ROWS_SHOWN_AS_ENUM`] PostgreSQL's vartype and enumvals.
fn as_postgres_declares(mut s: SettingRow) -> SettingRow {
    if let Some((_, values)) = TEXT_ROWS_SHOWN_AS_ENUM.iter().find(|e| e.0 == s.name) {
        s.vartype = "enum".to_string();
        s.enumvals = Some(values.iter().map(|v| v.to_string()).collect());
    }
    s
}

fn setting_row(s: SettingRow) -> Vec<Value> {
    let s = as_postgres_declares(s);
    vec![
        text(s.name),
        text(s.setting),
        opt_text(s.unit),
        text(s.category),
        text(s.short_desc),
        Value::Null,
        text(s.context),
        text(s.vartype),
        text(s.source),
        opt_text(s.min_val),
        opt_text(s.max_val),
        opt_text(s.enumvals.map(|v| format!("{{{}}}", v.join(",")))),
        text(s.boot_val),
        text(s.reset_val),
        Value::Null,
        Value::Null,
        Value::Bool(false),
    ]
}

fn settings(env: &mut Env, _: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
    Ok(env.all_settings().into_iter().map(setting_row).collect())
}

fn opt_lsn(l: Option<u64>) -> Value {
    l.map_or(Value::Null, Value::U64)
}

fn opt_int(i: Option<i32>) -> Value {
    i.map_or(Value::Null, |i| Value::Int(i64::from(i)))
}

/// The database OID a logical slot shows (walshm has one database).
const DATABASE_OID: i64 = 5;

fn replication_slot_row(r: ReplicationSlotRow) -> Vec<Value> {
    let l = r.logical.as_ref();
    vec![
        text(r.slot_name),
        l.map_or(Value::Null, |l| text(&l.plugin)),
        text(if l.is_some() { "logical" } else { "physical" }),
        l.map_or(Value::Null, |_| Value::Int(DATABASE_OID)),
        l.map_or(Value::Null, |l| text(&l.database)),
        Value::Bool(r.temporary),
        Value::Bool(r.active_pid.is_some()),
        opt_int(r.active_pid),
        Value::Null,
        Value::Null,
        opt_lsn(r.restart_lsn),
        l.map_or(Value::Null, |l| {
            opt_lsn(Some(l.confirmed_flush_lsn).filter(|&x| x != 0))
        }),
        opt_text(r.wal_status),
        r.safe_wal_size.map_or(Value::Null, Value::Int),
        Value::Bool(l.is_some_and(|l| l.two_phase)),
    ]
}

fn replication_slots(env: &mut Env, _: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
    Ok(env
        .session
        .replication_slots()
        .into_iter()
        .map(replication_slot_row)
        .collect())
}

/// A lag in microseconds, typed interval by its column.
fn opt_interval(us: Option<i64>) -> Value {
    us.map_or(Value::Null, Value::Int)
}

fn replication_row(r: ReplicationRow) -> Vec<Value> {
    vec![
        Value::Int(i64::from(r.pid)),
        Value::Int(10),
        opt_text(r.usename),
        text(r.application_name),
        opt_text(r.client_addr),
        Value::Null,
        opt_int(r.client_port),
        opt_time(r.backend_start),
        Value::Null,
        text(r.state),
        opt_lsn(r.sent_lsn),
        opt_lsn(r.write_lsn),
        opt_lsn(r.flush_lsn),
        opt_lsn(r.replay_lsn),
        opt_interval(r.write_lag),
        opt_interval(r.flush_lag),
        opt_interval(r.replay_lag),
        Value::Int(i64::from(r.sync_priority)),
        text(r.sync_state),
        opt_time(r.reply_time),
    ]
}

fn stat_replication(env: &mut Env, _: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
    Ok(env
        .session
        .stat_replication()
        .into_iter()
        .map(replication_row)
        .collect())
}

fn stat_wal_receiver(env: &mut Env, _: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
    Ok(env
        .session
        .stat_wal_receiver()
        .into_iter()
        .map(|r| {
            vec![
                Value::Int(i64::from(r.pid)),
                text(r.status),
                opt_lsn(r.receive_start_lsn),
                opt_int(r.receive_start_tli),
                opt_lsn(r.written_lsn),
                opt_lsn(r.flushed_lsn),
                opt_int(r.received_tli),
                opt_time(r.last_msg_send_time),
                opt_time(r.last_msg_receipt_time),
                opt_lsn(r.latest_end_lsn),
                opt_time(r.latest_end_time),
                opt_text(r.slot_name),
                opt_text(r.sender_host),
                opt_int(r.sender_port),
                opt_text(r.conninfo),
            ]
        })
        .collect())
}

fn ls_waldir(env: &mut Env, _: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
    Ok(env
        .session
        .wal_files()?
        .into_iter()
        .map(|f| {
            vec![
                text(f.name),
                Value::Int(f.size),
                Value::Timestamp(f.modification),
            ]
        })
        .collect())
}

fn control_checkpoint(env: &mut Env, _: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
    let c = env.session.control()?;
    let xid = |x: i64| Value::U64(x as u64);
    Ok(vec![vec![
        Value::U64(c.checkpoint_lsn),
        Value::U64(c.redo_lsn),
        text(c.redo_wal_file),
        Value::Int(i64::from(c.timeline_id)),
        Value::Int(i64::from(c.prev_timeline_id)),
        Value::Bool(c.full_page_writes),
        text(c.next_xid),
        Value::Int(c.next_oid),
        xid(c.next_multixact_id),
        xid(c.next_multi_offset),
        xid(c.oldest_xid),
        Value::Int(c.oldest_xid_dbid),
        xid(c.oldest_active_xid),
        xid(c.oldest_multi_xid),
        Value::Int(c.oldest_multi_dbid),
        xid(c.oldest_commit_ts_xid),
        xid(c.newest_commit_ts_xid),
        Value::Timestamp(c.checkpoint_time),
    ]])
}

fn control_system(env: &mut Env, _: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
    let c = env.session.control()?;
    Ok(vec![vec![
        Value::Int(i64::from(c.pg_control_version)),
        Value::Int(i64::from(c.catalog_version_no)),
        Value::Int(c.system_identifier),
        Value::Timestamp(c.pg_control_last_modified),
    ]])
}

/// pg_walfile_name_offset(lsn): the segment's name (as pg_walfile_name)
/// and the offset of `lsn` in its own segment.
fn walfile_name_offset(env: &mut Env, args: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
    let Some(Value::U64(lsn)) = args.first() else {
        return Ok(vec![vec![Value::Null, Value::Null]]);
    };
    let seg = env.session.wal_segment_size().max(1);
    let name = walfile_name(*lsn, env.session.timeline(), seg);
    Ok(vec![vec![text(name), Value::Int((*lsn % seg) as i64)]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::eval::tests::FakeSession;

    #[test]
    fn relations_produce_their_columns() {
        let mut session = FakeSession::default();
        for rel in RELATIONS {
            let args: Vec<Value> = rel
                .args
                .unwrap_or(&[])
                .iter()
                .map(|t| match t {
                    Text => Value::Text("s".into()),
                    Int4 => Value::Int(1),
                    _ => Value::U64(0x16B_6C50),
                })
                .collect();
            let rows = Env::with(&mut session, |env| (rel.rows)(env, &args)).unwrap();
            for row in rows {
                assert_eq!(row.len(), rel.columns.len(), "{}", rel.name);
            }
        }
    }

    #[test]
    fn synchronous_commit_is_an_enum_in_pg_settings() {
        let text_row = |name: &str| SettingRow {
            name: name.to_string(),
            vartype: "string".to_string(),
            ..SettingRow::default()
        };
        let row = setting_row(text_row("synchronous_commit"));
        assert_eq!(row[7], text("enum"));
        assert_eq!(
            row[11],
            text("{local,remote_write,remote_apply,on,off}".to_string())
        );
        let other = setting_row(text_row("archive_command"));
        assert_eq!((&other[7], &other[11]), (&text("string"), &Value::Null));
    }

    #[test]
    fn unknown_relations_are_42p01_with_position() {
        let e = lookup("nosuch", false, 15).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str(), e.position),
            ("42P01", "relation \"nosuch\" does not exist", Some(15))
        );
        assert_eq!(lookup("pg_ls_waldir", false, 1).unwrap_err().code, "42P01");
        assert_eq!(lookup("pg_settings", true, 1).unwrap_err().code, "42883");
        assert!(lookup("pg_stat_wal", false, 1).is_ok());
    }
}
