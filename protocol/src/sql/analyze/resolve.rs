//! PostgreSQL's implicit typing for walshm's types: literal and parameter
//! coercion (`coerce`, an unknown literal is converted by its target's input
//! function), explicit casts, the common type of two operands (numeric
//! promotion by rank, strings to text) and binary operator resolution.
//!
//! Invariants: `coerce` returns None rather than an error when PostgreSQL
//! would not convert implicitly, so callers choose the message (42883 for
//! operators, 42804 for clauses); a parameter of unknown type takes the
//! first type it is coerced to, recorded in `Params`.

use super::{Op, Params, TExpr};
use crate::error::{sqlstate, SqlError};
use crate::sql::parser::BinOp;
use crate::sql::value::{cast, parse_text, SqlType, Value};
use SqlType::{Bool, Bytea, Int4, Int8, Lsn, Text};

/// A WHERE/HAVING condition: boolean (an unknown literal is read as one).
pub(super) fn boolean(e: TExpr, clause: &str, params: &mut Params) -> Result<TExpr, SqlError> {
    let have = e.ty();
    coerce(e, Bool, params)?.ok_or_else(|| {
        SqlError::error(
            sqlstate::DATATYPE_MISMATCH,
            format!(
                "argument of {clause} must be type boolean, not type {}",
                have.display_name()
            ),
        )
    })
}

/// An output column of unknown type (string literal, lone parameter) resolves to text.
pub(super) fn resolve_unknown_output(e: TExpr, params: &mut Params) -> Result<TExpr, SqlError> {
    if e.ty() != SqlType::Unknown {
        return Ok(e);
    }
    Ok(coerce(e.clone(), Text, params)?.unwrap_or(e))
}

pub(super) fn no_operator(op: &str, l: SqlType, r: SqlType, pos: usize) -> SqlError {
    SqlError::error(
        sqlstate::UNDEFINED_FUNCTION,
        format!(
            "operator does not exist: {} {op} {}",
            l.display_name(),
            r.display_name()
        ),
    )
    .with_hint(
        "No operator matches the given name and argument types. You might need to add explicit type casts.",
    )
    .with_position(pos)
}

/// Rank of a numeric type in PostgreSQL's implicit promotions.
pub(super) fn numeric_rank(t: SqlType) -> Option<u8> {
    Some(match t {
        SqlType::Int2 => 0,
        Int4 => 1,
        Int8 => 2,
        SqlType::Numeric => 3,
        SqlType::Float8 => 4,
        _ => return None,
    })
}

/// The common type two operands are compared or combined in.
pub(super) fn common_type(a: SqlType, b: SqlType) -> Option<SqlType> {
    if a == b {
        return Some(if a == SqlType::Unknown { Text } else { a });
    }
    if a == SqlType::Unknown {
        return Some(b);
    }
    if b == SqlType::Unknown {
        return Some(a);
    }
    if let (Some(x), Some(y)) = (numeric_rank(a), numeric_rank(b)) {
        return Some(if x >= y { a } else { b });
    }
    if a.is_string() && b.is_string() {
        return Some(Text);
    }
    None
}

/// Both operands in their common type, or 42883.
pub(super) fn unify_pair(
    l: TExpr,
    r: TExpr,
    op: BinOp,
    pos: usize,
    params: &mut Params,
) -> Result<(TExpr, TExpr), SqlError> {
    let (lt, rt) = (l.ty(), r.ty());
    let fail = || no_operator(op.symbol(), lt, rt, pos);
    let common = common_type(lt, rt).ok_or_else(fail)?;
    let l = coerce(l, common, params)?.ok_or_else(fail)?;
    let r = coerce(r, common, params)?.ok_or_else(fail)?;
    Ok((l, r))
}

/// Resolves a binary operator over typed operands.
pub(super) fn binary(
    op: BinOp,
    l: TExpr,
    r: TExpr,
    pos: usize,
    params: &mut Params,
) -> Result<TExpr, SqlError> {
    let (lt, rt) = (l.ty(), r.ty());
    let resolved = match op {
        BinOp::And | BinOp::Or => {
            let l = boolean(l, op.symbol(), params)?;
            let r = boolean(r, op.symbol(), params)?;
            let o = if op == BinOp::And { Op::And } else { Op::Or };
            return Ok(TExpr::Binary(o, Box::new(l), Box::new(r), Bool));
        }
        BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
            let (l, r) = unify_pair(l, r, op, pos, params)?;
            if matches!(l.ty(), SqlType::Record | SqlType::Void | Bytea)
                && op != BinOp::Eq
                && op != BinOp::Ne
            {
                return Err(no_operator(op.symbol(), lt, rt, pos));
            }
            TExpr::Binary(Op::Compare(op), Box::new(l), Box::new(r), Bool)
        }
        BinOp::Concat => {
            let as_text = |e: TExpr, params: &mut Params| -> Result<TExpr, SqlError> {
                match coerce(e.clone(), Text, params)? {
                    Some(t) => Ok(t),
                    None => explicit_cast(e, Text, params),
                }
            };
            if !(lt.is_string()
                || lt == SqlType::Unknown
                || rt.is_string()
                || rt == SqlType::Unknown)
            {
                return Err(no_operator("||", lt, rt, pos));
            }
            let l = as_text(l, params)?;
            let r = as_text(r, params)?;
            TExpr::Binary(Op::Concat, Box::new(l), Box::new(r), Text)
        }
        BinOp::Sub if (lt == Lsn || rt == Lsn) => {
            let fail = || no_operator("-", lt, rt, pos);
            let l = coerce(l, Lsn, params)?.ok_or_else(fail)?;
            let r = coerce(r, Lsn, params)?.ok_or_else(fail)?;
            TExpr::Binary(Op::LsnDiff, Box::new(l), Box::new(r), SqlType::Numeric)
        }
        BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Mod => {
            let (l, r) = unify_pair(l, r, op, pos, params)?;
            let t = l.ty();
            if !t.is_numeric() || (op == BinOp::Mod && t == SqlType::Float8) {
                return Err(no_operator(op.symbol(), lt, rt, pos));
            }
            let o = match op {
                BinOp::Add => Op::Add,
                BinOp::Sub => Op::Sub,
                BinOp::Mul => Op::Mul,
                BinOp::Div => Op::Div,
                _ => Op::Mod,
            };
            TExpr::Binary(o, Box::new(l), Box::new(r), t)
        }
    };
    Ok(resolved)
}

pub(super) fn explicit_cast(
    inner: TExpr,
    target: SqlType,
    params: &mut Params,
) -> Result<TExpr, SqlError> {
    if inner.ty() == SqlType::Unknown || inner.ty() == target {
        if let Some(e) = coerce(inner.clone(), target, params)? {
            return Ok(e);
        }
    }
    if let TExpr::Const(v, from) = &inner {
        return Ok(TExpr::Const(cast(v.clone(), *from, target)?, target));
    }
    Ok(TExpr::Cast(Box::new(inner), target))
}

/// Converts `e` to `target` if PostgreSQL would do so implicitly; None if not.
pub(super) fn coerce(
    e: TExpr,
    target: SqlType,
    params: &mut Params,
) -> Result<Option<TExpr>, SqlError> {
    let from = e.ty();
    if from == target {
        return Ok(Some(e));
    }
    Ok(match e {
        TExpr::Const(Value::Text(s), SqlType::Unknown) => {
            Some(TExpr::Const(parse_text(target, &s)?, target))
        }
        TExpr::Const(Value::Null, _) => Some(TExpr::Const(Value::Null, target)),
        TExpr::Param(i, SqlType::Unknown) => {
            params.types[i] = Some(target);
            Some(TExpr::Param(i, target))
        }
        TExpr::Const(v, from) if from.coerces_implicitly_to(target) => {
            Some(TExpr::Const(cast(v, from, target)?, target))
        }
        e if from.coerces_implicitly_to(target) => Some(TExpr::Cast(Box::new(e), target)),
        e if from == SqlType::Unknown => Some(TExpr::Cast(Box::new(e), target)),
        _ => None,
    })
}
