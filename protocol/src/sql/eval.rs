//! Evaluation of analyzed expressions over a row, against a [`Session`]:
//! the only place where SQL turns into WAL-writing calls and into the
//! values of walshm's functions.
//!
//! Invariants: function calls are strict (a NULL argument yields NULL
//! without calling the session); AND, OR, IS NULL and IN follow SQL's
//! three-valued logic; arguments are evaluated left to right; values
//! returned carry the type the analyzer assigned; integer arithmetic is
//! checked against its type's range (22003) and division by zero is 22012.
//!
//! Bounds: evaluation recurses once per tree level and refuses to go
//! deeper than `MAX_TREE_HEIGHT` (54001); no value it builds is larger than
//! the session's memory limit (53200): a function checks the size of its
//! result before allocating it, a cast checks what it produced.

use super::analyze::{Func, Op, TExpr};
use super::functions::{like, size_pretty_int, size_pretty_numeric, walfile_name};
use super::numeric::Numeric;
use super::parser::BinOp;
use super::value::{cast, compare_values, SqlType, Value, F64};
use crate::error::{sqlstate, SqlError};
use crate::limits::{check_memory, too_deep, MAX_TREE_HEIGHT};
use crate::session::{Session, SettingRow};
use crate::settings::DEFAULT_SERVER_VERSION;
use std::cmp::Ordering;

/// Largest value PostgreSQL can build (MaxAllocSize - 1).
const MAX_VALUE_LEN: usize = (1 << 30) - 1;

/// The session's own parameters (what SHOW answers beyond the server's
/// settings): implemented by the connection's state in `serve`.
pub trait SessionSettings {
    /// SHOW name / current_setting(name); 42704 for an unknown name.
    fn show(&self, session: &dyn Session, name: &str) -> Result<String, SqlError>;
    /// Every setting, for pg_settings and SHOW ALL, sorted by name.
    fn all(&self, session: &dyn Session) -> Vec<SettingRow>;
}

/// Settings of a bare Session (tests): the server's only.
struct ServerOnly;

impl SessionSettings for ServerOnly {
    fn show(&self, session: &dyn Session, name: &str) -> Result<String, SqlError> {
        session
            .server_setting(name)
            .ok_or_else(|| unrecognized_parameter(name))
    }
    fn all(&self, session: &dyn Session) -> Vec<SettingRow> {
        session.server_settings()
    }
}

/// 42704, as PostgreSQL's SHOW and current_setting report an unknown name.
pub fn unrecognized_parameter(name: &str) -> SqlError {
    SqlError::error(
        sqlstate::UNDEFINED_OBJECT,
        format!("unrecognized configuration parameter \"{name}\""),
    )
}

/// Everything an expression can reach while it is evaluated.
pub struct Env<'a> {
    pub session: &'a mut dyn Session,
    /// The Bind parameters.
    pub params: &'a [Value],
    /// now(): the transaction's start, microseconds since the Unix epoch.
    pub now: i64,
    pub settings: &'a dyn SessionSettings,
    /// set_config(name, value, is_local) calls of the statement, applied
    /// as SET after it ran (by `serve`, which owns the session's
    /// parameters).
    pub set_requests: Vec<(String, String, bool)>,
}

impl<'a> Env<'a> {
    /// An environment over `session` alone (no parameters, now = the Unix epoch).
    pub fn with<T>(session: &mut dyn Session, f: impl FnOnce(&mut Env) -> T) -> T {
        let mut env = Env {
            session,
            params: &[],
            now: 0,
            settings: &ServerOnly,
            set_requests: Vec::new(),
        };
        f(&mut env)
    }

    pub fn all_settings(&self) -> Vec<SettingRow> {
        self.settings.all(&*self.session)
    }
}

/// Evaluates `expr` over `row` (the values its `Column`s refer to).
pub fn eval(expr: &TExpr, row: &[Value], env: &mut Env) -> Result<Value, SqlError> {
    eval_at(expr, row, env, 0)
}

/// The size in memory of a value's payload (what the memory limit counts).
pub fn value_size(v: &Value) -> usize {
    match v {
        Value::Text(s) => s.len(),
        Value::Bytea(b) => b.len(),
        Value::Record(fields) => fields.iter().map(|(v, _)| value_size(v)).sum(),
        _ => std::mem::size_of::<Value>(),
    }
}

fn eval_at(expr: &TExpr, row: &[Value], env: &mut Env, depth: usize) -> Result<Value, SqlError> {
    if depth >= MAX_TREE_HEIGHT {
        return Err(too_deep());
    }
    let sub = |e: &TExpr, env: &mut Env| eval_at(e, row, env, depth + 1);
    match expr {
        TExpr::Const(v, _) => Ok(v.clone()),
        TExpr::Param(i, _) => Ok(env.params.get(*i).cloned().unwrap_or(Value::Null)),
        TExpr::Column(i, _) => Ok(row.get(*i).cloned().unwrap_or(Value::Null)),
        TExpr::Agg(..) => Err(SqlError::error(
            sqlstate::GROUPING_ERROR,
            "aggregate function calls are not allowed here",
        )),
        TExpr::Cast(inner, target) => {
            let v = cast(sub(inner, env)?, inner.ty(), *target)?;
            check_memory("a value", value_size(&v), env.session.memory_limit())?;
            Ok(v)
        }
        TExpr::Call(func, args, _) => {
            let mut values = Vec::with_capacity(args.len());
            for a in args {
                values.push(sub(a, env)?);
            }
            if values.contains(&Value::Null) {
                return Ok(Value::Null);
            }
            call(*func, &values, env)
        }
        TExpr::Binary(Op::And, l, r, _) => and_or(false, l, r, row, env, depth),
        TExpr::Binary(Op::Or, l, r, _) => and_or(true, l, r, row, env, depth),
        TExpr::Binary(op, l, r, ty) => {
            let l = sub(l, env)?;
            let r = sub(r, env)?;
            if l == Value::Null || r == Value::Null {
                return Ok(Value::Null);
            }
            let v = operator(*op, l, r, *ty)?;
            check_memory("a value", value_size(&v), env.session.memory_limit())?;
            Ok(v)
        }
        TExpr::Negate(inner, ty) => negate(sub(inner, env)?, *ty),
        TExpr::Not(inner) => Ok(match truth(sub(inner, env)?) {
            Some(b) => Value::Bool(!b),
            None => Value::Null,
        }),
        TExpr::IsNull(inner, negated) => {
            let is_null = sub(inner, env)? == Value::Null;
            Ok(Value::Bool(is_null != *negated))
        }
        TExpr::Like {
            expr,
            pattern,
            negated,
            insensitive,
        } => {
            let (v, p) = (sub(expr, env)?, sub(pattern, env)?);
            Ok(match (v, p) {
                (Value::Text(v), Value::Text(p)) => {
                    Value::Bool(like(&v, &p, *insensitive) != *negated)
                }
                _ => Value::Null,
            })
        }
        TExpr::InList(e, list, negated) => in_list(e, list, *negated, row, env, depth),
    }
}

/// AND (`decisive` false) or OR (`decisive` true) in SQL's three-valued
/// logic: a left side equal to `decisive` decides without the right one.
fn and_or(
    decisive: bool,
    l: &TExpr,
    r: &TExpr,
    row: &[Value],
    env: &mut Env,
    depth: usize,
) -> Result<Value, SqlError> {
    let l = truth(eval_at(l, row, env, depth + 1)?);
    if l == Some(decisive) {
        return Ok(Value::Bool(decisive));
    }
    Ok(match (l, truth(eval_at(r, row, env, depth + 1)?)) {
        (_, Some(b)) if b == decisive => Value::Bool(decisive),
        (Some(a), Some(b)) if a != decisive && b != decisive => Value::Bool(!decisive),
        _ => Value::Null,
    })
}

/// [NOT] IN (list): true at the first equal item (items after it are not
/// evaluated), else NULL if the value or an item was NULL, else false.
fn in_list(
    e: &TExpr,
    list: &[TExpr],
    negated: bool,
    row: &[Value],
    env: &mut Env,
    depth: usize,
) -> Result<Value, SqlError> {
    let v = eval_at(e, row, env, depth + 1)?;
    if v == Value::Null {
        return Ok(Value::Null);
    }
    let mut saw_null = false;
    for item in list {
        match compare_values(&v, &eval_at(item, row, env, depth + 1)?) {
            Some(Ordering::Equal) => return Ok(Value::Bool(!negated)),
            None => saw_null = true,
            Some(_) => {}
        }
    }
    Ok(if saw_null {
        Value::Null
    } else {
        Value::Bool(negated)
    })
}

/// A boolean's truth value; None for NULL.
pub fn truth(v: Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(b),
        _ => None,
    }
}

fn out_of_range(ty: SqlType) -> SqlError {
    let what = match ty {
        SqlType::Int2 => "smallint",
        SqlType::Int4 => "integer",
        _ => "bigint",
    };
    SqlError::error(
        sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
        format!("{what} out of range"),
    )
}

fn division_by_zero() -> SqlError {
    SqlError::error(sqlstate::DIVISION_BY_ZERO, "division by zero")
}

/// An integer result checked against its type's range.
fn int_in_range(v: Option<i64>, ty: SqlType) -> Result<Value, SqlError> {
    let (min, max) = match ty {
        SqlType::Int2 => (i64::from(i16::MIN), i64::from(i16::MAX)),
        SqlType::Int4 => (i64::from(i32::MIN), i64::from(i32::MAX)),
        _ => (i64::MIN, i64::MAX),
    };
    match v {
        Some(v) if (min..=max).contains(&v) => Ok(Value::Int(v)),
        _ => Err(out_of_range(ty)),
    }
}

fn as_numeric(v: &Value) -> Numeric {
    match v {
        Value::Numeric(n) => **n,
        Value::Int(i) => Numeric::from_int(*i),
        Value::U64(u) => Numeric::from_u64(*u),
        _ => Numeric::from_int(0),
    }
}

/// A non-NULL binary operator (operands already in the operator's type).
fn operator(op: Op, l: Value, r: Value, ty: SqlType) -> Result<Value, SqlError> {
    if let Op::Compare(cmp) = op {
        let ord = compare_values(&l, &r).unwrap_or(Ordering::Equal);
        return Ok(Value::Bool(match cmp {
            BinOp::Eq => ord == Ordering::Equal,
            BinOp::Ne => ord != Ordering::Equal,
            BinOp::Lt => ord == Ordering::Less,
            BinOp::Le => ord != Ordering::Greater,
            BinOp::Gt => ord == Ordering::Greater,
            _ => ord != Ordering::Less,
        }));
    }
    Ok(match (op, l, r) {
        (Op::Concat, Value::Text(a), Value::Text(b)) => Value::Text(a + &b),
        (Op::LsnDiff, Value::U64(a), Value::U64(b)) => {
            Value::numeric(Numeric::from_u64(a).checked_sub(Numeric::from_u64(b))?)
        }
        (op, Value::Int(a), Value::Int(b)) => {
            let v = match op {
                Op::Add => a.checked_add(b),
                Op::Sub => a.checked_sub(b),
                Op::Mul => a.checked_mul(b),
                Op::Div | Op::Mod if b == 0 => return Err(division_by_zero()),
                Op::Div => a.checked_div(b),
                _ => Some(a.checked_rem(b).unwrap_or(0)),
            };
            int_in_range(v, ty)?
        }
        (op, Value::Float(a), Value::Float(b)) => {
            let (a, b) = (a.0, b.0);
            Value::Float(F64(match op {
                Op::Add => a + b,
                Op::Sub => a - b,
                Op::Mul => a * b,
                _ if b == 0.0 => return Err(division_by_zero()),
                _ => a / b,
            }))
        }
        (op, a, b) => {
            let (a, b) = (as_numeric(&a), as_numeric(&b));
            Value::numeric(match op {
                Op::Add => a.checked_add(b)?,
                Op::Sub => a.checked_sub(b)?,
                Op::Mul => a.checked_mul(b)?,
                Op::Div => a.checked_div(b)?,
                _ => numeric_mod(a, b)?,
            })
        }
    })
}

fn numeric_mod(a: Numeric, b: Numeric) -> Result<Numeric, SqlError> {
    if b.mantissa == 0 {
        return Err(division_by_zero());
    }
    let scale = a.scale.max(b.scale);
    let (x, y) = (a.rescale(scale)?.mantissa, b.rescale(scale)?.mantissa);
    Ok(Numeric {
        mantissa: x % y,
        scale,
    })
}

fn negate(v: Value, ty: SqlType) -> Result<Value, SqlError> {
    Ok(match v {
        Value::Int(i) => int_in_range(i.checked_neg(), ty)?,
        Value::Float(f) => Value::Float(F64(-f.0)),
        Value::Numeric(n) => Value::numeric(Numeric::from_int(0).checked_sub(*n)?),
        other => other,
    })
}

fn text(v: &Value) -> &str {
    match v {
        Value::Text(s) => s,
        _ => "",
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        _ => 0,
    }
}

fn lsn(v: &Value) -> u64 {
    match v {
        Value::U64(u) => *u,
        _ => 0,
    }
}

/// pg_stat_reset_shared(target): 'wal' resets pg_stat_wal; the other
/// targets PostgreSQL 15 knows have no counters in walshm.
fn reset_shared(target: &str, session: &mut dyn Session) -> Result<Value, SqlError> {
    match target {
        "wal" => session.reset_wal_stats(),
        "archiver" | "bgwriter" | "recovery_prefetch" => {}
        other => {
            return Err(SqlError::error(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("unrecognized reset target: \"{other}\""),
            )
            .with_hint(
                "Target must be \"archiver\", \"bgwriter\", \"recovery_prefetch\", or \"wal\".",
            ))
        }
    }
    Ok(Value::Void)
}

/// The (slot_name, lsn) record the slot functions return.
fn slot_record(name: &str, lsn: u64) -> Value {
    Value::Record(vec![
        (Value::Text(name.to_string()), SqlType::Name),
        (Value::U64(lsn), SqlType::Lsn),
    ])
}

fn call(func: Func, args: &[Value], env: &mut Env) -> Result<Value, SqlError> {
    let arg = |i: usize| args.get(i).unwrap_or(&Value::Null);
    Ok(match func {
        Func::EmitMessageText
        | Func::EmitMessageBytea
        | Func::TxidCurrent
        | Func::CurrentXactId
        | Func::CurrentWalLsn
        | Func::CurrentWalInsertLsn
        | Func::CurrentWalFlushLsn
        | Func::SwitchWal
        | Func::CreateRestorePoint => return call_wal(func, args, env.session),
        Func::CreatePhysicalSlot | Func::CreateLogicalSlot | Func::SlotAdvance | Func::DropSlot => {
            return call_slot(func, args, env.session)
        }
        Func::Repeat => repeat(text(arg(0)), int(arg(1)), env.session.memory_limit())?,
        Func::Version => Value::Text(format!(
            "PostgreSQL {DEFAULT_SERVER_VERSION} on {}-linux, compiled by rustc, 64-bit",
            std::env::consts::ARCH
        )),
        Func::Now => Value::Timestamp(env.now),
        Func::WalfileName => Value::Text(walfile_name(
            lsn(arg(0)),
            env.session.timeline(),
            env.session.wal_segment_size(),
        )),
        Func::WalfileNameOffset => walfile_name_offset(lsn(arg(0)), &*env.session),
        Func::WalLsnDiff => Value::numeric(
            Numeric::from_u64(lsn(arg(0))).checked_sub(Numeric::from_u64(lsn(arg(1))))?,
        ),
        Func::IsInRecovery => Value::Bool(env.session.in_recovery()),
        Func::LastWalReceiveLsn => env
            .session
            .last_wal_receive_lsn()
            .map_or(Value::Null, Value::U64),
        Func::LastWalReplayLsn => env
            .session
            .last_wal_replay_lsn()
            .map_or(Value::Null, Value::U64),
        Func::Promote => promote(args, env.session)?,
        Func::BackendPid => Value::Int(i64::from(env.session.backend_pid())),
        Func::PostmasterStartTime => env
            .session
            .postmaster_start_time()
            .map_or(Value::Null, Value::Timestamp),
        Func::CurrentSetting => Value::Text(env.settings.show(&*env.session, text(arg(0)))?),
        Func::CurrentSettingMissingOk => match env.settings.show(&*env.session, text(arg(0))) {
            Ok(v) => Value::Text(v),
            Err(_) if arg(1) == &Value::Bool(true) => Value::Null,
            Err(e) => return Err(e),
        },
        Func::SetConfig => {
            let value = text(arg(1)).to_string();
            let local = arg(2) == &Value::Bool(true);
            env.set_requests
                .push((text(arg(0)).to_string(), value.clone(), local));
            Value::Text(value)
        }
        Func::SizePrettyInt => Value::Text(size_pretty_int(int(arg(0)))),
        Func::SizePrettyNumeric => Value::Text(size_pretty_numeric(as_numeric(arg(0)))),
        Func::StatResetShared => reset_shared(text(arg(0)), env.session)?,
        Func::Upper => Value::Text(text(arg(0)).to_uppercase()),
        Func::Lower => Value::Text(text(arg(0)).to_lowercase()),
        Func::Length => Value::Int(text(arg(0)).chars().count() as i64),
    })
}

/// The functions that write WAL or read its positions: pg_logical_emit_message,
/// the transaction ID functions, the WAL location functions (which check
/// the session may control WAL first), pg_switch_wal, pg_create_restore_point.
fn call_wal(func: Func, args: &[Value], session: &mut dyn Session) -> Result<Value, SqlError> {
    let arg = |i: usize| args.get(i).unwrap_or(&Value::Null);
    Ok(match func {
        Func::TxidCurrent => {
            let xid = session.txid_current()?;
            Value::Int(i64::try_from(xid).map_err(|_| {
                SqlError::error(sqlstate::NUMERIC_VALUE_OUT_OF_RANGE, "bigint out of range")
            })?)
        }
        Func::CurrentXactId => Value::U64(session.txid_current()?),
        Func::CurrentWalLsn => wal_position(session, |s| s.current_wal_lsn())?,
        Func::CurrentWalInsertLsn => wal_position(session, |s| s.current_wal_insert_lsn())?,
        Func::CurrentWalFlushLsn => wal_position(session, |s| s.current_wal_flush_lsn())?,
        Func::SwitchWal => {
            session.check_wal_control()?;
            Value::U64(session.switch_wal()?)
        }
        Func::CreateRestorePoint => {
            session.check_wal_control()?;
            Value::U64(session.create_restore_point(text(arg(0)))?)
        }
        // pg_logical_emit_message, text or bytea payload.
        _ => {
            let transactional = matches!(args.first(), Some(Value::Bool(true)));
            let prefix = text(arg(1));
            let payload: &[u8] = match arg(2) {
                Value::Bytea(b) => b,
                Value::Text(s) => s.as_bytes(),
                _ => &[],
            };
            let flush = arg(3) == &Value::Bool(true);
            Value::U64(session.emit_message(transactional, prefix, payload, flush)?)
        }
    })
}

/// A WAL location function: the session must be allowed to control WAL.
fn wal_position(
    session: &mut dyn Session,
    at: fn(&mut dyn Session) -> u64,
) -> Result<Value, SqlError> {
    session.check_wal_control()?;
    Ok(Value::U64(at(session)))
}

/// The replication slot functions: creation (physical, logical), advance, drop.
fn call_slot(func: Func, args: &[Value], session: &mut dyn Session) -> Result<Value, SqlError> {
    let arg = |i: usize| args.get(i).unwrap_or(&Value::Null);
    let name = text(arg(0));
    Ok(match func {
        Func::CreatePhysicalSlot => {
            let reserve = arg(1) == &Value::Bool(true);
            let temporary = arg(2) == &Value::Bool(true);
            let lsn = session.create_physical_replication_slot(name, reserve, temporary)?;
            Value::Record(vec![
                (Value::Text(name.to_string()), SqlType::Name),
                (lsn.map_or(Value::Null, Value::U64), SqlType::Lsn),
            ])
        }
        Func::CreateLogicalSlot => {
            let temporary = arg(2) == &Value::Bool(true);
            let two_phase = arg(3) == &Value::Bool(true);
            let lsn = session.create_logical_replication_slot(
                name,
                text(arg(1)),
                temporary,
                two_phase,
            )?;
            slot_record(name, lsn)
        }
        Func::SlotAdvance => {
            let end = session.replication_slot_advance(name, lsn(arg(1)))?;
            slot_record(name, end)
        }
        // pg_drop_replication_slot.
        _ => {
            session.drop_replication_slot(name)?;
            Value::Void
        }
    })
}

/// pg_walfile_name_offset(lsn): the segment file name and the offset in it.
fn walfile_name_offset(at: u64, session: &dyn Session) -> Value {
    let seg = session.wal_segment_size().max(1);
    let name = walfile_name(at, session.timeline(), seg);
    Value::Record(vec![
        (Value::Text(name), SqlType::Text),
        (Value::Int((at % seg) as i64), SqlType::Int4),
    ])
}

/// pg_promote([wait [, wait_seconds]]): wait defaults to true, wait_seconds
/// to 60 and must be positive (22023).
fn promote(args: &[Value], session: &mut dyn Session) -> Result<Value, SqlError> {
    let wait = !matches!(args.first(), Some(Value::Bool(false)));
    let seconds = match args.get(1) {
        Some(v @ Value::Int(_)) => int(v),
        _ => 60,
    };
    if seconds <= 0 {
        return Err(SqlError::error(
            sqlstate::INVALID_PARAMETER_VALUE,
            "\"wait_seconds\" must not be negative or zero",
        ));
    }
    Ok(Value::Bool(session.promote(wait, seconds)?))
}

/// repeat(s, count): 54000 beyond PostgreSQL's 1 GB, 53200 beyond `memory_limit`,
/// both checked before anything is allocated.
fn repeat(s: &str, count: i64, memory_limit: usize) -> Result<Value, SqlError> {
    let Ok(count) = usize::try_from(count) else {
        return Ok(Value::Text(String::new())); // negative: empty, as in PostgreSQL
    };
    let total = s.len().checked_mul(count).filter(|&n| n <= MAX_VALUE_LEN);
    let Some(total) = total else {
        return Err(SqlError::error(
            sqlstate::PROGRAM_LIMIT_EXCEEDED,
            "requested length too large",
        ));
    };
    check_memory("repeat()'s result", total, memory_limit)?;
    Ok(Value::Text(s.repeat(count)))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::sql::analyze::{analyze, Kind};
    use crate::sql::parser::parse_statements;
    use crate::sql::query::run_query;
    use crate::sql::value::format_text;
    pub(crate) use crate::testing::FakeSession;

    /// Runs `sql` (one SELECT) against a FakeSession: rows in text form.
    pub(crate) fn rows(sql: &str) -> Result<Vec<Vec<Option<String>>>, SqlError> {
        let stmt = parse_statements(sql)?.remove(0);
        let a = analyze(&stmt, &[], false)?;
        let Kind::Select(q) = &a.kind else {
            panic!("not a query: {sql}")
        };
        let mut session = FakeSession::default();
        let out = Env::with(&mut session, |env| run_query(q, env))?;
        Ok(out
            .into_iter()
            .map(|r| {
                r.iter()
                    .zip(&q.columns)
                    .map(|(v, c)| format_text(v, c.ty).map(|b| String::from_utf8(b).unwrap()))
                    .collect()
            })
            .collect())
    }

    fn one(sql: &str) -> String {
        rows(sql).unwrap()[0][0]
            .clone()
            .unwrap_or_else(|| "NULL".into())
    }

    /// For each `(sql, want)`: `one(sql)` is `want`.
    fn assert_first_values(cases: &[(&str, &str)]) {
        for (sql, want) in cases {
            assert_eq!(one(sql), *want, "{sql}");
        }
    }

    #[test]
    fn functions_match_postgres_outputs() {
        assert_first_values(&[
            (
                "SELECT pg_walfile_name('0/16B6C50')",
                "000000010000000000000001",
            ),
            (
                "SELECT pg_walfile_name('0/1000000')",
                "000000010000000000000000",
            ),
            (
                "SELECT pg_walfile_name_offset('0/16B6C50')",
                "(000000010000000000000001,7040080)",
            ),
            ("SELECT pg_size_pretty(10485760)", "10 MB"),
            ("SELECT pg_size_pretty(10485760::bigint)", "10 MB"),
            ("SELECT pg_size_pretty(1535999::numeric)", "1500 kB"),
            (
                "SELECT pg_wal_lsn_diff('0/2000000','0/1000000')",
                "16777216",
            ),
            ("SELECT '0/2000000'::pg_lsn - '0/1000000'", "16777216"),
            (
                "SELECT '0/1000000'::pg_lsn - '0/2000000'::pg_lsn",
                "-16777216",
            ),
            (
                "SELECT pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0'))",
                "48 MB",
            ),
            ("SELECT pg_is_in_recovery()", "f"),
            ("SELECT pg_backend_pid()", "4242"),
            ("SELECT current_setting('wal_buffers')", "2048"),
            ("SELECT current_setting('nope', true)", "NULL"),
            ("SELECT now()", "1970-01-01 00:00:00+00"),
            ("SELECT current_timestamp", "1970-01-01 00:00:00+00"),
            ("SELECT 7 / 2, 7 % 2", "3"),
            ("SELECT 7::numeric / 2", "3.5000000000000000"),
            ("SELECT 1.5 + 1", "2.5"),
            ("SELECT 'a' || 'b' || 1", "ab1"),
        ]);
        let code = |sql| rows(sql).unwrap_err().code;
        assert_eq!(code("SELECT current_setting('nope')"), "42704");
        assert_eq!(code("SELECT 2147483647 + 1"), "22003");
        assert_eq!(code("SELECT 1 / 0"), "22012");
        assert_eq!(code("SELECT pg_stat_reset_shared('nope')"), "22023");
    }

    #[test]
    fn replication_slot_functions_return_records() {
        assert_first_values(&[
            (
                "SELECT pg_create_physical_replication_slot('s2', true)",
                "(s2,0/16B6C50)",
            ),
            ("SELECT pg_create_physical_replication_slot('s2')", "(s2,)"),
            (
                "SELECT pg_create_physical_replication_slot('s2', false, false)",
                "(s2,)",
            ),
            ("SELECT pg_drop_replication_slot('s2')", ""),
        ]);
    }

    #[test]
    fn three_valued_logic() {
        assert_first_values(&[
            ("SELECT NULL AND false", "f"),
            ("SELECT NULL AND true", "NULL"),
            ("SELECT NULL OR true", "t"),
            ("SELECT NOT (NULL::bool)", "NULL"),
            ("SELECT 1 IN (2, NULL)", "NULL"),
            ("SELECT 1 IN (2, 1)", "t"),
            ("SELECT 1 NOT IN (2, 3)", "t"),
            ("SELECT NULL IS NULL", "t"),
            ("SELECT 'abc' NOT LIKE 'a%'", "f"),
            ("SELECT 'ABC' ILIKE 'a%'", "t"),
            ("SELECT 1 < 2 AND 2 <= 2 AND 3 <> 4 AND NOT 1 > 2", "t"),
        ]);
    }

    #[test]
    fn repeat_behaves_like_postgres() {
        let unlimited = usize::MAX;
        assert_eq!(
            repeat("ab", 3, unlimited).unwrap(),
            Value::Text("ababab".into())
        );
        assert_eq!(
            repeat("ab", -1, unlimited).unwrap(),
            Value::Text(String::new())
        );
        assert_eq!(
            repeat("ab", i64::from(i32::MAX), unlimited)
                .unwrap_err()
                .code,
            "54000"
        );
        assert_eq!(
            repeat("x", 1 << 20, 1 << 20).unwrap(),
            Value::Text("x".repeat(1 << 20))
        );
        assert_eq!(
            repeat("x", (1 << 20) + 1, 1 << 20).unwrap_err().code,
            "53200"
        );
    }
}
