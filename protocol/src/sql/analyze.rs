//! Semantic analysis: resolves function calls against walshm's catalog,
//! applies PostgreSQL's literal and parameter typing rules, and fixes the
//! result columns of a statement, so it can be described before execution.
//!
//! Invariants: after `analyze`, every `TExpr` has a concrete type (never
//! `Unknown`), every parameter `$n` has a type in `param_types`, and string
//! literals have been converted by their type's input function (so bad
//! literals fail at analysis, as in PostgreSQL).
//!
//! Depth: `typed` recurses once per level of the parsed tree and refuses to
//! go deeper than `MAX_EXPR_DEPTH` (54001) even for a tree not made by the
//! parser; it adds at most one implicit cast above each level, so a
//! `TExpr` is at most `MAX_TREE_HEIGHT` high (see `crate::limits`).

use super::parser::{Expr, SelectItem, SetValue, Statement};
use super::value::{cast, parse_text, SqlType, Value};
use crate::error::{sqlstate, SqlError};
use crate::limits::{too_deep, MAX_EXPR_DEPTH};

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
    Repeat,
    Version,
    /// pg_create_physical_replication_slot(name [, immediately_reserve [, temporary]]) (issue 13).
    CreatePhysicalSlot,
    /// pg_drop_replication_slot(name) (issue 13).
    DropSlot,
}

struct Signature {
    name: &'static str,
    args: &'static [SqlType],
    result: SqlType,
    func: Func,
}

use SqlType::{Bool, Bytea, Int4, Int8, Lsn, Text, Xid8};

/// The catalog; for overloaded names the first listed wins ties (text before bytea).
static CATALOG: &[Signature] = &[
    Signature {
        name: "pg_logical_emit_message",
        args: &[Bool, Text, Text],
        result: Lsn,
        func: Func::EmitMessageText,
    },
    Signature {
        name: "pg_logical_emit_message",
        args: &[Bool, Text, Bytea],
        result: Lsn,
        func: Func::EmitMessageBytea,
    },
    Signature {
        name: "txid_current",
        args: &[],
        result: Int8,
        func: Func::TxidCurrent,
    },
    Signature {
        name: "pg_current_xact_id",
        args: &[],
        result: Xid8,
        func: Func::CurrentXactId,
    },
    Signature {
        name: "pg_current_wal_lsn",
        args: &[],
        result: Lsn,
        func: Func::CurrentWalLsn,
    },
    Signature {
        name: "pg_current_wal_insert_lsn",
        args: &[],
        result: Lsn,
        func: Func::CurrentWalInsertLsn,
    },
    Signature {
        name: "pg_current_wal_flush_lsn",
        args: &[],
        result: Lsn,
        func: Func::CurrentWalFlushLsn,
    },
    Signature {
        name: "pg_switch_wal",
        args: &[],
        result: Lsn,
        func: Func::SwitchWal,
    },
    Signature {
        name: "repeat",
        args: &[Text, Int4],
        result: Text,
        func: Func::Repeat,
    },
    Signature {
        name: "version",
        args: &[],
        result: Text,
        func: Func::Version,
    },
    // issue 13 (replication): the record (slot_name, lsn) as its text form.
    Signature {
        name: "pg_create_physical_replication_slot",
        args: &[Text],
        result: Text,
        func: Func::CreatePhysicalSlot,
    },
    Signature {
        name: "pg_create_physical_replication_slot",
        args: &[Text, Bool],
        result: Text,
        func: Func::CreatePhysicalSlot,
    },
    Signature {
        name: "pg_create_physical_replication_slot",
        args: &[Text, Bool, Bool],
        result: Text,
        func: Func::CreatePhysicalSlot,
    },
    Signature {
        name: "pg_drop_replication_slot",
        args: &[Text],
        result: SqlType::Void,
        func: Func::DropSlot,
    },
];

/// A typed expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TExpr {
    Const(Value, SqlType),
    /// 0-based parameter index.
    Param(usize, SqlType),
    Call(Func, Vec<TExpr>, SqlType),
    Cast(Box<TExpr>, SqlType),
}

impl TExpr {
    pub fn ty(&self) -> SqlType {
        match self {
            TExpr::Const(_, t) | TExpr::Param(_, t) | TExpr::Call(_, _, t) | TExpr::Cast(_, t) => {
                *t
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub ty: SqlType,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Select {
        columns: Vec<Column>,
        exprs: Vec<TExpr>,
    },
    Begin,
    Commit,
    Rollback,
    Checkpoint,
    Set {
        name: String,
        value: SetValue,
        local: bool,
    },
    SetIgnored,
    Reset(Option<String>),
    Show(String),
    /// No statement at all (empty query string).
    Empty,
}

/// An analyzed statement with its parameter types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Analyzed {
    pub kind: Kind,
    pub param_types: Vec<SqlType>,
}

impl Analyzed {
    /// The columns it returns (None: no rows, NoData).
    pub fn columns(&self) -> Option<Vec<Column>> {
        match &self.kind {
            Kind::Select { columns, .. } => Some(columns.clone()),
            Kind::Show(name) => Some(vec![Column {
                name: show_column_name(name),
                ty: Text,
            }]),
            _ => None,
        }
    }

    pub fn is_transaction_exit(&self) -> bool {
        matches!(self.kind, Kind::Commit | Kind::Rollback)
    }
}

fn show_column_name(name: &str) -> String {
    match name.to_ascii_lowercase().as_str() {
        "timezone" => "TimeZone".into(),
        "datestyle" => "DateStyle".into(),
        "intervalstyle" => "IntervalStyle".into(),
        other => other.to_string(),
    }
}

/// Parameter typing state: declared types (None = to infer) and whether
/// new parameters may appear (extended protocol) or not (simple query).
struct Params {
    types: Vec<Option<SqlType>>,
    extendable: bool,
}

impl Params {
    fn slot(&mut self, n: u32) -> Result<usize, SqlError> {
        let idx = (n as usize).checked_sub(1).filter(|&i| i < 65535);
        match idx {
            Some(i) if i < self.types.len() => Ok(i),
            Some(i) if self.extendable => {
                self.types.resize(i + 1, None);
                Ok(i)
            }
            _ => Err(SqlError::error(
                sqlstate::UNDEFINED_PARAMETER,
                format!("there is no parameter ${n}"),
            )),
        }
    }
}

/// Analyzes `stmt`. `declared` are the Parse message's type OIDs (0 = infer);
/// `extendable` allows `$n` beyond them (true for Parse, false for simple Query).
pub fn analyze(stmt: &Statement, declared: &[u32], extendable: bool) -> Result<Analyzed, SqlError> {
    let mut params = Params {
        types: Vec::with_capacity(declared.len()),
        extendable,
    };
    for &oid in declared {
        params.types.push(match oid {
            0 => None,
            oid => match SqlType::from_oid(oid) {
                Some(SqlType::Unknown) => None,
                Some(t) => Some(t),
                None => {
                    return Err(SqlError::not_supported(format!(
                        "parameter type {oid} is not supported by walshm"
                    )))
                }
            },
        });
    }
    let kind = match stmt {
        Statement::Select(items) => analyze_select(items, &mut params)?,
        Statement::Begin => Kind::Begin,
        Statement::Commit => Kind::Commit,
        Statement::Rollback => Kind::Rollback,
        Statement::Checkpoint => Kind::Checkpoint,
        Statement::Set { name, value, local } => Kind::Set {
            name: name.clone(),
            value: value.clone(),
            local: *local,
        },
        Statement::SetIgnored => Kind::SetIgnored,
        Statement::Reset(name) => Kind::Reset(name.clone()),
        Statement::Show(name) => Kind::Show(name.clone()),
        Statement::Unsupported(what) => {
            return Err(SqlError::not_supported(format!(
                "{what} is not supported by walshm"
            )))
        }
    };
    let mut param_types = Vec::with_capacity(params.types.len());
    for (i, t) in params.types.iter().enumerate() {
        match t {
            Some(t) => param_types.push(*t),
            None => {
                return Err(SqlError::error(
                    sqlstate::INDETERMINATE_DATATYPE,
                    format!("could not determine data type of parameter ${}", i + 1),
                ))
            }
        }
    }
    Ok(Analyzed { kind, param_types })
}

fn analyze_select(items: &[SelectItem], params: &mut Params) -> Result<Kind, SqlError> {
    let mut columns = Vec::with_capacity(items.len());
    let mut exprs = Vec::with_capacity(items.len());
    for item in items {
        let e = typed(&item.expr, params, 0)?;
        let e = resolve_unknown_output(e, params)?;
        let name = item
            .alias
            .clone()
            .unwrap_or_else(|| column_name(&item.expr, e.ty()));
        columns.push(Column { name, ty: e.ty() });
        exprs.push(e);
    }
    Ok(Kind::Select { columns, exprs })
}

/// An output column of unknown type (string literal, lone parameter) resolves to text.
fn resolve_unknown_output(e: TExpr, params: &mut Params) -> Result<TExpr, SqlError> {
    if e.ty() != SqlType::Unknown {
        return Ok(e);
    }
    Ok(coerce(e.clone(), Text, params)?.unwrap_or(e))
}

/// PostgreSQL's FigureColname, for the expressions walshm has.
fn column_name(expr: &Expr, ty: SqlType) -> String {
    match expr {
        Expr::Call { name, .. } => name.rsplit('.').next().unwrap_or(name).to_string(),
        Expr::Cast { expr, .. } => match expr.as_ref() {
            inner @ Expr::Call { .. } => column_name(inner, ty),
            _ => ty.typname().to_string(),
        },
        Expr::Bool(_) => "bool".into(),
        _ => "?column?".into(),
    }
}

/// Types an expression without context (string literals and untyped
/// parameters stay Unknown); `depth` is how many levels are above it.
fn typed(expr: &Expr, params: &mut Params, depth: usize) -> Result<TExpr, SqlError> {
    if depth >= MAX_EXPR_DEPTH {
        return Err(too_deep());
    }
    Ok(match expr {
        Expr::Integer(i) => {
            if i32::try_from(*i).is_ok() {
                TExpr::Const(Value::Int(*i), Int4)
            } else {
                TExpr::Const(Value::Int(*i), Int8)
            }
        }
        Expr::Str(s) => TExpr::Const(Value::Text(s.clone()), SqlType::Unknown),
        Expr::Bool(b) => TExpr::Const(Value::Bool(*b), Bool),
        Expr::Null => TExpr::Const(Value::Null, SqlType::Unknown),
        Expr::Param(n) => {
            let i = params.slot(*n)?;
            TExpr::Param(i, params.types[i].unwrap_or(SqlType::Unknown))
        }
        Expr::Negate(inner) => {
            let t = typed(inner, params, depth + 1)?.ty();
            return Err(SqlError::error(
                sqlstate::UNDEFINED_FUNCTION,
                format!("operator does not exist: - {}", t.display_name()),
            ));
        }
        Expr::Cast { expr, type_name } => {
            let target = SqlType::from_name(type_name)?;
            let inner = typed(expr, params, depth + 1)?;
            explicit_cast(inner, target, params)?
        }
        Expr::Call { name, args } => call(name, args, params, depth)?,
    })
}

fn explicit_cast(inner: TExpr, target: SqlType, params: &mut Params) -> Result<TExpr, SqlError> {
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
fn coerce(e: TExpr, target: SqlType, params: &mut Params) -> Result<Option<TExpr>, SqlError> {
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
        e if from.coerces_implicitly_to(target) => Some(TExpr::Cast(Box::new(e), target)),
        e if from == SqlType::Unknown => Some(TExpr::Cast(Box::new(e), target)),
        _ => None,
    })
}

/// Resolves and types a function call found `depth` levels down.
fn call(name: &str, args: &[Expr], params: &mut Params, depth: usize) -> Result<TExpr, SqlError> {
    let typed_args = args
        .iter()
        .map(|a| typed(a, params, depth + 1))
        .collect::<Result<Vec<_>, _>>()?;
    let arg_types: Vec<SqlType> = typed_args.iter().map(TExpr::ty).collect();
    let best = CATALOG
        .iter()
        .filter(|s| s.name == name && s.args.len() == arg_types.len())
        .filter(|s| {
            s.args
                .iter()
                .zip(&arg_types)
                .all(|(want, have)| *have == SqlType::Unknown || have.coerces_implicitly_to(*want))
        })
        .max_by_key(|s| {
            // More exact matches win; among equals, the earlier entry (max_by_key keeps the last, so negate the index).
            let exact = s
                .args
                .iter()
                .zip(&arg_types)
                .filter(|(w, h)| w == h)
                .count();
            (
                exact,
                std::cmp::Reverse(
                    CATALOG
                        .iter()
                        .position(|c| std::ptr::eq(c, *s))
                        .unwrap_or(0),
                ),
            )
        });
    let Some(sig) = best else {
        let list: Vec<&str> = arg_types.iter().map(|t| t.display_name()).collect();
        return Err(SqlError::error(
            sqlstate::UNDEFINED_FUNCTION,
            format!("function {name}({}) does not exist", list.join(", ")),
        )
        .with_hint("No function matches the given name and argument types. You might need to add explicit type casts."));
    };
    let mut coerced = Vec::with_capacity(typed_args.len());
    for (arg, want) in typed_args.into_iter().zip(sig.args) {
        let have = arg.ty();
        let c = coerce(arg, *want, params)?.ok_or_else(|| {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::parser::parse_statements;

    fn an(sql: &str, declared: &[u32], extendable: bool) -> Result<Analyzed, SqlError> {
        analyze(&parse_statements(sql).unwrap()[0], declared, extendable)
    }

    #[test]
    fn emit_message_resolves_text_for_literals_and_bytea_for_casts() {
        let a = an(
            "SELECT pg_logical_emit_message(false, 'p', 'x')",
            &[],
            false,
        )
        .unwrap();
        let Kind::Select { columns, exprs } = &a.kind else {
            panic!()
        };
        assert_eq!(
            columns,
            &vec![Column {
                name: "pg_logical_emit_message".into(),
                ty: Lsn
            }]
        );
        assert!(matches!(
            &exprs[0],
            TExpr::Call(Func::EmitMessageText, _, Lsn)
        ));
        let a = an(
            "SELECT pg_logical_emit_message(true, 'p', '\\x00'::bytea)",
            &[],
            false,
        )
        .unwrap();
        let Kind::Select { exprs, .. } = &a.kind else {
            panic!()
        };
        assert!(matches!(
            &exprs[0],
            TExpr::Call(Func::EmitMessageBytea, _, Lsn)
        ));
    }

    #[test]
    fn parameters_get_types_from_context() {
        let a = an("SELECT pg_logical_emit_message($1, $2, $3)", &[], true).unwrap();
        assert_eq!(a.param_types, vec![Bool, Text, Text]);
        let a = an(
            "SELECT pg_logical_emit_message($1, $2, $3)",
            &[0, 0, 17],
            true,
        )
        .unwrap();
        assert_eq!(a.param_types, vec![Bool, Text, Bytea]);
        let a = an("SELECT repeat($1, $2), $3", &[0, 20], true);
        assert_eq!(a.unwrap_err().code, "42883"); // bigint is not implicitly int4
        let a = an("SELECT repeat($1, $2), $3", &[], true).unwrap();
        assert_eq!(a.param_types, vec![Text, Int4, Text]);
    }

    #[test]
    fn simple_query_has_no_parameters() {
        assert_eq!(an("SELECT $1", &[], false).unwrap_err().code, "42P02");
        assert_eq!(an("SELECT 1", &[0], true).unwrap_err().code, "42P18");
    }

    #[test]
    fn undefined_function_message() {
        let e = an("SELECT foo()", &[], false).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            ("42883", "function foo() does not exist")
        );
        let e = an("SELECT txid_current(1)", &[], false).unwrap_err();
        assert_eq!(e.message, "function txid_current(integer) does not exist");
        let e = an("SELECT pg_logical_emit_message(1, 'a', 'b')", &[], false).unwrap_err();
        assert_eq!(
            e.message,
            "function pg_logical_emit_message(integer, unknown, unknown) does not exist"
        );
    }

    #[test]
    fn bad_literals_fail_at_analysis() {
        assert_eq!(
            an("SELECT repeat('x', 'abc')", &[], false)
                .unwrap_err()
                .code,
            "22P02"
        );
        assert_eq!(
            an("SELECT 'abc'::int", &[], false).unwrap_err().code,
            "22P02"
        );
        assert_eq!(
            an("SELECT 1::nosuchtype", &[], false).unwrap_err().code,
            "42704"
        );
    }

    #[test]
    fn column_names_and_types() {
        let a = an(
            "SELECT 1, 'a', true, 'x'::text, txid_current()::text, 5000000000 AS big",
            &[],
            false,
        )
        .unwrap();
        let cols = a.columns().unwrap();
        let got: Vec<(&str, SqlType)> = cols.iter().map(|c| (c.name.as_str(), c.ty)).collect();
        assert_eq!(
            got,
            vec![
                ("?column?", Int4),
                ("?column?", Text),
                ("bool", Bool),
                ("text", Text),
                ("txid_current", Text),
                ("big", Int8)
            ]
        );
    }

    #[test]
    fn unsupported_statement_is_0a000() {
        let e = an("CREATE TABLE t (a int)", &[], false).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            ("0A000", "CREATE TABLE is not supported by walshm")
        );
    }
}
