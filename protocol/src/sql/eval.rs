//! Evaluation of analyzed expressions against a [`Session`]: the only place
//! where SQL turns into WAL-writing calls.
//!
//! Invariants: all functions are strict (a NULL argument yields NULL
//! without calling the session), arguments are evaluated left to right, and
//! values returned carry the type the analyzer assigned.

use super::analyze::{Func, TExpr};
use super::value::{cast, Value};
use crate::error::{sqlstate, SqlError};
use crate::session::Session;
use crate::settings::DEFAULT_SERVER_VERSION;

/// Largest value PostgreSQL can build (MaxAllocSize - 1).
const MAX_VALUE_LEN: usize = (1 << 30) - 1;

pub fn eval(expr: &TExpr, params: &[Value], session: &mut dyn Session) -> Result<Value, SqlError> {
    match expr {
        TExpr::Const(v, _) => Ok(v.clone()),
        TExpr::Param(i, _) => Ok(params.get(*i).cloned().unwrap_or(Value::Null)),
        TExpr::Cast(inner, target) => cast(eval(inner, params, session)?, inner.ty(), *target),
        TExpr::Call(func, args, _) => {
            let values = args
                .iter()
                .map(|a| eval(a, params, session))
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
        )?,
        Func::Version => Value::Text(format!(
            "PostgreSQL {DEFAULT_SERVER_VERSION} on {}-linux, compiled by rustc, 64-bit",
            std::env::consts::ARCH
        )),
    })
}

fn repeat(s: &str, count: i64) -> Result<Value, SqlError> {
    if count <= 0 || s.is_empty() {
        return Ok(Value::Text(String::new()));
    }
    let total = (s.len() as u64).saturating_mul(count as u64);
    if total > MAX_VALUE_LEN as u64 {
        return Err(SqlError::error(
            sqlstate::PROGRAM_LIMIT_EXCEEDED,
            "requested length too large",
        ));
    }
    Ok(Value::Text(s.repeat(count as usize)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeat_behaves_like_postgres() {
        assert_eq!(repeat("ab", 3).unwrap(), Value::Text("ababab".into()));
        assert_eq!(repeat("ab", -1).unwrap(), Value::Text(String::new()));
        assert_eq!(repeat("ab", i32::MAX as i64).unwrap_err().code, "54000");
    }
}
