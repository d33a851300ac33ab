//! Function and aggregate calls: the catalog of functions walshm implements
//! (`CATALOG`, one row per overload), overload resolution as PostgreSQL's
//! (a candidate takes every argument implicitly; more exact matches win,
//! then the earlier row), and aggregates with their result types.
//!
//! Invariants: a resolved `TExpr::Call` has its arguments coerced to the
//! chosen signature; an aggregate is registered in `Ctx::aggs` only where
//! aggregates are allowed, never nested (42803).

use super::resolve::{coerce, resolve_unknown_output};
use super::{typed, Agg, AggCall, AggPlace, Ctx, TExpr};
use crate::error::{sqlstate, SqlError};
use crate::sql::parser::Expr;
use crate::sql::value::SqlType;
use SqlType::{Bool, Bytea, Int4, Int8, Lsn, Text, Timestamptz, Xid8};

/// Functions walshm implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    EmitMessageText,
    EmitMessageBytea,
    TxidCurrent,
    CurrentXactId,
    CurrentWalLsn,
    CurrentWalInsertLsn,
    CurrentWalFlushLsn,
    SwitchWal,
    CreateRestorePoint,
    Repeat,
    Version,
    /// pg_create_physical_replication_slot(name [, immediately_reserve [, temporary]]).
    CreatePhysicalSlot,
    /// pg_drop_replication_slot(name).
    DropSlot,
    Now,
    WalfileName,
    WalfileNameOffset,
    WalLsnDiff,
    IsInRecovery,
    LastWalReceiveLsn,
    LastWalReplayLsn,
    Promote,
    BackendPid,
    PostmasterStartTime,
    CurrentSetting,
    CurrentSettingMissingOk,
    SetConfig,
    CreateLogicalSlot,
    SlotAdvance,
    SizePrettyInt,
    SizePrettyNumeric,
    StatResetShared,
    Upper,
    Lower,
    Length,
}

pub(super) struct Signature {
    name: &'static str,
    args: &'static [SqlType],
    result: SqlType,
    func: Func,
}

macro_rules! signatures {
    ($($name:literal ($($arg:expr),*) -> $result:expr => $func:ident;)*) => {
        &[$(Signature { name: $name, args: &[$($arg),*], result: $result, func: Func::$func },)*]
    };
}

/// The catalog; for overloaded names the first listed wins ties (text before bytea).
pub(super) static CATALOG: &[Signature] = signatures! {
    "pg_logical_emit_message"(Bool, Text, Text) -> Lsn => EmitMessageText;
    "pg_logical_emit_message"(Bool, Text, Bytea) -> Lsn => EmitMessageBytea;
    "txid_current"() -> Int8 => TxidCurrent;
    "pg_current_xact_id"() -> Xid8 => CurrentXactId;
    "pg_current_wal_lsn"() -> Lsn => CurrentWalLsn;
    "pg_current_wal_insert_lsn"() -> Lsn => CurrentWalInsertLsn;
    "pg_current_wal_flush_lsn"() -> Lsn => CurrentWalFlushLsn;
    "pg_switch_wal"() -> Lsn => SwitchWal;
    "pg_create_restore_point"(Text) -> Lsn => CreateRestorePoint;
    "repeat"(Text, Int4) -> Text => Repeat;
    "version"() -> Text => Version;
    "now"() -> Timestamptz => Now;
    "current_timestamp"() -> Timestamptz => Now;
    "transaction_timestamp"() -> Timestamptz => Now;
    "pg_walfile_name"(Lsn) -> Text => WalfileName;
    "pg_walfile_name_offset"(Lsn) -> SqlType::Record => WalfileNameOffset;
    "pg_wal_lsn_diff"(Lsn, Lsn) -> SqlType::Numeric => WalLsnDiff;
    "pg_is_in_recovery"() -> Bool => IsInRecovery;
    "pg_last_wal_receive_lsn"() -> Lsn => LastWalReceiveLsn;
    "pg_last_wal_replay_lsn"() -> Lsn => LastWalReplayLsn;
    "pg_promote"() -> Bool => Promote;
    "pg_promote"(Bool) -> Bool => Promote;
    "pg_promote"(Bool, Int4) -> Bool => Promote;
    "pg_backend_pid"() -> Int4 => BackendPid;
    "pg_postmaster_start_time"() -> Timestamptz => PostmasterStartTime;
    "current_setting"(Text) -> Text => CurrentSetting;
    "current_setting"(Text, Bool) -> Text => CurrentSettingMissingOk;
    "set_config"(Text, Text, Bool) -> Text => SetConfig;
    "pg_size_pretty"(Int8) -> Text => SizePrettyInt;
    "pg_size_pretty"(SqlType::Numeric) -> Text => SizePrettyNumeric;
    "pg_stat_reset_shared"(Text) -> SqlType::Void => StatResetShared;
    "upper"(Text) -> Text => Upper;
    "lower"(Text) -> Text => Lower;
    "length"(Text) -> Int4 => Length;
    // Replication slots: creation returns the record (slot_name, lsn).
    "pg_create_physical_replication_slot"(Text) -> SqlType::Record => CreatePhysicalSlot;
    "pg_create_physical_replication_slot"(Text, Bool) -> SqlType::Record => CreatePhysicalSlot;
    "pg_create_physical_replication_slot"(Text, Bool, Bool) -> SqlType::Record => CreatePhysicalSlot;
    "pg_drop_replication_slot"(Text) -> SqlType::Void => DropSlot;
    "pg_create_logical_replication_slot"(Text, Text) -> SqlType::Record => CreateLogicalSlot;
    "pg_create_logical_replication_slot"(Text, Text, Bool) -> SqlType::Record => CreateLogicalSlot;
    "pg_create_logical_replication_slot"(Text, Text, Bool, Bool) -> SqlType::Record => CreateLogicalSlot;
    "pg_replication_slot_advance"(Text, Lsn) -> SqlType::Record => SlotAdvance;
    // PostgreSQL 17's form: the fourth argument is `flush`.
    "pg_logical_emit_message"(Bool, Text, Text, Bool) -> Lsn => EmitMessageText;
    "pg_logical_emit_message"(Bool, Text, Bytea, Bool) -> Lsn => EmitMessageBytea;
};

pub(super) fn aggregate_kind(name: &str, star: bool) -> Option<Agg> {
    Some(match (name, star) {
        ("count", true) => Agg::CountStar,
        ("count", false) => Agg::Count,
        ("sum", false) => Agg::Sum,
        ("max", false) => Agg::Max,
        ("min", false) => Agg::Min,
        ("avg", false) => Agg::Avg,
        _ => return None,
    })
}

/// An aggregate call: typed argument, result type, registered in `ctx`.
pub(super) fn aggregate(
    agg: Agg,
    name: &str,
    args: &[Expr],
    pos: usize,
    ctx: &mut Ctx,
    depth: usize,
) -> Result<TExpr, SqlError> {
    match ctx.place {
        AggPlace::Allowed => {}
        AggPlace::Nested => {
            return Err(SqlError::error(
                sqlstate::GROUPING_ERROR,
                "aggregate function calls cannot be nested",
            )
            .with_position(pos))
        }
        AggPlace::Forbidden(clause) => {
            return Err(SqlError::error(
                sqlstate::GROUPING_ERROR,
                format!("aggregate functions are not allowed in {clause}"),
            )
            .with_position(pos))
        }
    }
    let (arg, ty) = if agg == Agg::CountStar {
        (None, Int8)
    } else {
        let [arg] = args else {
            let types: Vec<SqlType> = args.iter().map(|_| SqlType::Unknown).collect();
            return Err(no_such_function(name, &types, pos));
        };
        ctx.place = AggPlace::Nested;
        let typed_arg = typed(arg, ctx, depth + 1);
        ctx.place = AggPlace::Allowed;
        let e = resolve_unknown_output(typed_arg?, ctx.params)?;
        let t = e.ty();
        let result = match (agg, t) {
            (Agg::Count, _) => Some(Int8),
            (Agg::Sum, SqlType::Int2 | Int4) => Some(Int8),
            (Agg::Sum | Agg::Avg, Int8 | SqlType::Numeric) => Some(SqlType::Numeric),
            (Agg::Avg, SqlType::Int2 | Int4) => Some(SqlType::Numeric),
            (Agg::Sum | Agg::Avg, SqlType::Float8) => Some(SqlType::Float8),
            (Agg::Max | Agg::Min, t)
                if !matches!(t, Bool | Bytea | SqlType::Record | SqlType::Void) =>
            {
                Some(t)
            }
            _ => None,
        };
        match result {
            Some(r) => (Some(e), r),
            None => return Err(no_such_function(name, &[t], pos)),
        }
    };
    ctx.aggs.push(AggCall { agg, arg, ty });
    Ok(TExpr::Agg(ctx.aggs.len() - 1, ty))
}

pub(super) fn no_such_function(name: &str, types: &[SqlType], pos: usize) -> SqlError {
    let list: Vec<&str> = types.iter().map(|t| t.display_name()).collect();
    SqlError::error(
        sqlstate::UNDEFINED_FUNCTION,
        format!("function {name}({}) does not exist", list.join(", ")),
    )
    .with_hint(
        "No function matches the given name and argument types. You might need to add explicit type casts.",
    )
    .with_position(pos)
}

/// Resolves and types a function call found `depth` levels down.
pub(super) fn call(
    name: &str,
    args: &[Expr],
    pos: usize,
    ctx: &mut Ctx,
    depth: usize,
) -> Result<TExpr, SqlError> {
    let typed_args = args
        .iter()
        .map(|a| typed(a, ctx, depth + 1))
        .collect::<Result<Vec<_>, _>>()?;
    let arg_types: Vec<SqlType> = typed_args.iter().map(TExpr::ty).collect();
    let best = CATALOG
        .iter()
        .enumerate()
        .filter(|(_, s)| s.name == name && s.args.len() == arg_types.len())
        .filter(|(_, s)| {
            s.args
                .iter()
                .zip(&arg_types)
                .all(|(want, have)| *have == SqlType::Unknown || have.coerces_implicitly_to(*want))
        })
        .max_by_key(|(i, s)| {
            // More exact matches win; among equals, the earlier entry (max_by_key keeps the last, so negate the index).
            let exact = s
                .args
                .iter()
                .zip(&arg_types)
                .filter(|(w, h)| w == h)
                .count();
            (exact, std::cmp::Reverse(*i))
        });
    let Some((_, sig)) = best else {
        return Err(no_such_function(name, &arg_types, pos));
    };
    let mut coerced = Vec::with_capacity(typed_args.len());
    for (arg, want) in typed_args.into_iter().zip(sig.args) {
        let have = arg.ty();
        let c = coerce(arg, *want, ctx.params)?.ok_or_else(|| {
            SqlError::error(
                sqlstate::UNDEFINED_FUNCTION,
                format!(
                    "function {name} cannot take {} for a {} argument",
                    have.display_name(),
                    want.display_name()
                ),
            )
        })?;
        coerced.push(c);
    }
    Ok(TExpr::Call(sig.func, coerced, sig.result))
}
