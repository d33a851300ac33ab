//! Evaluation of analyzed expressions against a [`Session`]: the only place
//! where SQL turns into WAL-writing calls.
//!
//! Invariants: all functions are strict (a NULL argument yields NULL
//! without calling the session), arguments are evaluated left to right, and
//! values returned carry the type the analyzer assigned.
//!
//! Bounds: evaluation recurses once per tree level and refuses to go
//! deeper than `MAX_TREE_HEIGHT` (54001); no value it builds is larger than
//! the session's memory limit (53200): a function checks the size of its
//! result before allocating it, a cast checks what it produced.

use super::analyze::{Func, TExpr};
use super::value::{cast, Value};
use crate::error::{sqlstate, SqlError};
use crate::limits::{check_memory, too_deep, MAX_TREE_HEIGHT};
use crate::session::Session;
use crate::settings::DEFAULT_SERVER_VERSION;

/// Largest value PostgreSQL can build (MaxAllocSize - 1).
const MAX_VALUE_LEN: usize = (1 << 30) - 1;

/// Evaluates `expr` with the Bind parameters `params`.
pub fn eval(expr: &TExpr, params: &[Value], session: &mut dyn Session) -> Result<Value, SqlError> {
    eval_at(expr, params, session, 0)
}

/// The size in memory of a value's payload (what the memory limit counts).
pub fn value_size(v: &Value) -> usize {
    match v {
        Value::Text(s) => s.len(),
        Value::Bytea(b) => b.len(),
        _ => std::mem::size_of::<Value>(),
    }
}

fn eval_at(
    expr: &TExpr,
    params: &[Value],
    session: &mut dyn Session,
    depth: usize,
) -> Result<Value, SqlError> {
    if depth >= MAX_TREE_HEIGHT {
        return Err(too_deep());
    }
    match expr {
        TExpr::Const(v, _) => Ok(v.clone()),
        TExpr::Param(i, _) => Ok(params.get(*i).cloned().unwrap_or(Value::Null)),
        TExpr::Cast(inner, target) => {
            let v = cast(
                eval_at(inner, params, session, depth + 1)?,
                inner.ty(),
                *target,
            )?;
            check_memory("a value", value_size(&v), session.memory_limit())?;
            Ok(v)
        }
        TExpr::Call(func, args, _) => {
            let values = args
                .iter()
                .map(|a| eval_at(a, params, session, depth + 1))
                .collect::<Result<Vec<_>, _>>()?;
            if values.contains(&Value::Null) {
                return Ok(Value::Null);
            }
            call(*func, &values, session)
        }
    }
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

fn call(func: Func, args: &[Value], session: &mut dyn Session) -> Result<Value, SqlError> {
    Ok(match func {
        Func::EmitMessageText | Func::EmitMessageBytea => {
            let transactional = matches!(args.first(), Some(Value::Bool(true)));
            let prefix = args.get(1).map(text).unwrap_or("");
            let payload: &[u8] = match args.get(2) {
                Some(Value::Bytea(b)) => b,
                Some(Value::Text(s)) => s.as_bytes(),
                _ => &[],
            };
            Value::U64(session.emit_message(transactional, prefix, payload)?)
        }
        Func::TxidCurrent => {
            let xid = session.txid_current()?;
            Value::Int(i64::try_from(xid).map_err(|_| {
                SqlError::error(sqlstate::NUMERIC_VALUE_OUT_OF_RANGE, "bigint out of range")
            })?)
        }
        Func::CurrentXactId => Value::U64(session.txid_current()?),
        Func::CurrentWalLsn => Value::U64(session.current_wal_lsn()),
        Func::CurrentWalInsertLsn => Value::U64(session.current_wal_insert_lsn()),
        Func::CurrentWalFlushLsn => Value::U64(session.current_wal_flush_lsn()),
        Func::SwitchWal => Value::U64(session.switch_wal()?),
        Func::Repeat => repeat(
            args.first().map(text).unwrap_or(""),
            args.get(1).map(int).unwrap_or(0),
            session.memory_limit(),
        )?,
        Func::CreatePhysicalSlot => {
            let name = args.first().map(text).unwrap_or("");
            let reserve = matches!(args.get(1), Some(Value::Bool(true)));
            let temporary = matches!(args.get(2), Some(Value::Bool(true)));
            let lsn = session.create_physical_replication_slot(name, reserve, temporary)?;
            let lsn = lsn.map(super::value::format_lsn).unwrap_or_default();
            Value::Text(format!("({name},{lsn})"))
        }
        Func::DropSlot => {
            session.drop_replication_slot(args.first().map(text).unwrap_or(""))?;
            Value::Void
        }
        Func::Version => Value::Text(format!(
            "PostgreSQL {DEFAULT_SERVER_VERSION} on {}-linux, compiled by rustc, 64-bit",
            std::env::consts::ARCH
        )),
    })
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
mod tests {
    use super::*;

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
