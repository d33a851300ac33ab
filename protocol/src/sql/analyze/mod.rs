//! Semantic analysis: resolves relations against `catalog`, column
//! references against the relation's columns, function calls against
//! walshm's function catalog, applies PostgreSQL's literal and parameter
//! typing rules and operator resolution, splits a grouped query into group
//! keys, aggregates and what is computed per group, and fixes the result
//! columns of a statement, so it can be described before execution.
//!
//! Invariants: after `analyze`, every `TExpr` has a concrete type (never
//! `Unknown`), every parameter `$n` has a type in `param_types`, and string
//! literals have been converted by their type's input function (so bad
//! literals fail at analysis, as in PostgreSQL). In a grouped query the
//! targets, HAVING and ORDER BY refer only to group columns (keys, then
//! aggregates): a bare input column there is 42803, as in PostgreSQL.
//!
//! Name resolution follows PostgreSQL: GROUP BY takes an input column
//! first, then an output column name, then an ordinal; ORDER BY takes an
//! output column name (or alias) first, then an ordinal, then an
//! expression over the input.
//!
//! Depth: `typed` recurses once per level of the parsed tree and refuses to
//! go deeper than `MAX_EXPR_DEPTH` (54001) even for a tree not made by the
//! parser; it adds at most one implicit cast above each level, so a
//! `TExpr` is at most `MAX_TREE_HEIGHT` high (see `crate::limits`).

mod calls;
mod resolve;
mod select;

use super::catalog::Relation;
use super::numeric;
use super::parser::{BinOp, Expr, Statement, Utility};
use super::value::{SqlType, Value};
use crate::error::{sqlstate, SqlError};
use crate::limits::{too_deep, MAX_EXPR_DEPTH};
pub use calls::Func;
use calls::{aggregate, aggregate_kind, call, no_such_function};
use resolve::{
    binary, boolean, coerce, explicit_cast, no_operator, resolve_unknown_output, unify_pair,
};
use select::analyze_select;

/// Aggregates walshm implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agg {
    CountStar,
    Count,
    Sum,
    Max,
    Min,
    Avg,
}

use SqlType::{Bool, Int4, Int8, Text};

/// Operators after resolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    And,
    Or,
    /// A comparison (`BinOp::Eq` .. `BinOp::Ge`) of two values of one type.
    Compare(BinOp),
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Concat,
    /// pg_lsn - pg_lsn, a numeric.
    LsnDiff,
}

/// A typed expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TExpr {
    Const(Value, SqlType),
    /// 0-based parameter index.
    Param(usize, SqlType),
    Call(Func, Vec<TExpr>, SqlType),
    Cast(Box<TExpr>, SqlType),
    /// Column `i` of the row being evaluated (an input row, or a group row).
    Column(usize, SqlType),
    /// Aggregate `i` of the query (replaced by a group column before execution).
    Agg(usize, SqlType),
    Binary(Op, Box<TExpr>, Box<TExpr>, SqlType),
    Negate(Box<TExpr>, SqlType),
    Not(Box<TExpr>),
    IsNull(Box<TExpr>, bool),
    Like {
        expr: Box<TExpr>,
        pattern: Box<TExpr>,
        negated: bool,
        insensitive: bool,
    },
    InList(Box<TExpr>, Vec<TExpr>, bool),
}

impl TExpr {
    pub fn ty(&self) -> SqlType {
        match self {
            TExpr::Const(_, t)
            | TExpr::Param(_, t)
            | TExpr::Call(_, _, t)
            | TExpr::Cast(_, t)
            | TExpr::Column(_, t)
            | TExpr::Agg(_, t)
            | TExpr::Binary(_, _, _, t)
            | TExpr::Negate(_, t) => *t,
            TExpr::Not(_) | TExpr::IsNull(..) | TExpr::Like { .. } | TExpr::InList(..) => Bool,
        }
    }

    /// The same node with each child replaced by `f(child)`.
    fn map_children(
        self,
        f: &mut dyn FnMut(TExpr) -> Result<TExpr, SqlError>,
    ) -> Result<TExpr, SqlError> {
        let bx = |e: Box<TExpr>, f: &mut dyn FnMut(TExpr) -> Result<TExpr, SqlError>| {
            f(*e).map(Box::new)
        };
        Ok(match self {
            TExpr::Call(func, args, t) => TExpr::Call(
                func,
                args.into_iter().map(&mut *f).collect::<Result<_, _>>()?,
                t,
            ),
            TExpr::Cast(e, t) => TExpr::Cast(bx(e, f)?, t),
            TExpr::Binary(op, l, r, t) => TExpr::Binary(op, bx(l, f)?, bx(r, f)?, t),
            TExpr::Negate(e, t) => TExpr::Negate(bx(e, f)?, t),
            TExpr::Not(e) => TExpr::Not(bx(e, f)?),
            TExpr::IsNull(e, n) => TExpr::IsNull(bx(e, f)?, n),
            TExpr::Like {
                expr,
                pattern,
                negated,
                insensitive,
            } => TExpr::Like {
                expr: bx(expr, f)?,
                pattern: bx(pattern, f)?,
                negated,
                insensitive,
            },
            TExpr::InList(e, list, n) => TExpr::InList(
                bx(e, f)?,
                list.into_iter().map(&mut *f).collect::<Result<_, _>>()?,
                n,
            ),
            leaf => leaf,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub ty: SqlType,
}

/// An aggregate call: its function, its argument (None for count(*)), its result type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggCall {
    pub agg: Agg,
    pub arg: Option<TExpr>,
    pub ty: SqlType,
}

/// FROM's relation with its typed arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub relation: &'static Relation,
    pub args: Vec<TExpr>,
}

/// GROUP BY keys and aggregates, both over input rows; a group row is the
/// keys' values followed by the aggregates' results.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Grouping {
    pub keys: Vec<TExpr>,
    pub aggs: Vec<AggCall>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey {
    pub expr: TExpr,
    pub descending: bool,
    pub nulls_first: bool,
}

/// An analyzed SELECT. Targets, HAVING and sort keys are over the stage
/// row: the input row, or the group row when `grouping` is Some.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub columns: Vec<Column>,
    pub source: Option<Source>,
    pub filter: Option<TExpr>,
    pub grouping: Option<Grouping>,
    pub having: Option<TExpr>,
    pub targets: Vec<TExpr>,
    pub order: Vec<SortKey>,
    pub limit: Option<TExpr>,
    pub offset: Option<TExpr>,
}

impl Query {
    /// One row of targets over no input: the simple-protocol hot path.
    pub fn is_single_row(&self) -> bool {
        self.source.is_none()
            && self.grouping.is_none()
            && self.filter.is_none()
            && self.limit.is_none()
            && self.offset.is_none()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Select(Box<Query>),
    /// A utility statement, as parsed (never `Show("all")`: that is ShowAll).
    Utility(Utility),
    /// SHOW ALL: name, setting, description.
    ShowAll,
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
            Kind::Select(q) => Some(q.columns.clone()),
            Kind::Utility(Utility::Show(name)) => Some(vec![Column {
                name: show_column_name(name),
                ty: Text,
            }]),
            Kind::ShowAll => Some(
                ["name", "setting", "description"]
                    .iter()
                    .map(|n| Column {
                        name: n.to_string(),
                        ty: Text,
                    })
                    .collect(),
            ),
            _ => None,
        }
    }

    pub fn is_transaction_exit(&self) -> bool {
        matches!(&self.kind, Kind::Utility(u) if u.is_transaction_exit())
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

/// Where aggregates may appear while typing an expression.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AggPlace {
    /// In a target list, HAVING or ORDER BY: collected.
    Allowed,
    /// Inside an aggregate's argument.
    Nested,
    /// In WHERE, GROUP BY, LIMIT, FROM: the clause's name for the message.
    Forbidden(&'static str),
}

/// What typing an expression can see: the parameters, the FROM relation
/// (with the name it is visible under) and the aggregates found so far.
struct Ctx<'a> {
    params: &'a mut Params,
    relation: Option<(&'static Relation, String)>,
    aggs: Vec<AggCall>,
    place: AggPlace,
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
        Statement::Select(select) => Kind::Select(Box::new(analyze_select(select, &mut params)?)),
        Statement::Utility(Utility::Show(name)) if name.eq_ignore_ascii_case("all") => {
            Kind::ShowAll
        }
        Statement::Utility(utility) => Kind::Utility(utility.clone()),
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

/// PostgreSQL's FigureColname, for the expressions walshm has.
fn column_name(expr: &Expr, ty: SqlType) -> String {
    match expr {
        Expr::Call { name, star, .. } if *star => name.clone(),
        Expr::Call { name, .. } => name.rsplit('.').next().unwrap_or(name).to_string(),
        Expr::Column { name, .. } => name.clone(),
        Expr::Cast { expr, .. } => match expr.as_ref() {
            inner @ (Expr::Call { .. } | Expr::Column { .. } | Expr::Cast { .. }) => {
                column_name(inner, ty)
            }
            _ => ty.typname().to_string(),
        },
        Expr::Bool(_) => "bool".into(),
        _ => "?column?".into(),
    }
}

/// Types an expression without context (string literals and untyped
/// parameters stay Unknown); `depth` is how many levels are above it.
fn typed(expr: &Expr, ctx: &mut Ctx, depth: usize) -> Result<TExpr, SqlError> {
    if depth >= MAX_EXPR_DEPTH {
        return Err(too_deep());
    }
    Ok(match expr {
        Expr::Integer(i) if i32::try_from(*i).is_ok() => TExpr::Const(Value::Int(*i), Int4),
        Expr::Integer(i) => TExpr::Const(Value::Int(*i), Int8),
        Expr::Decimal(d) => TExpr::Const(Value::numeric(numeric::parse(d)?), SqlType::Numeric),
        Expr::Str(s) => TExpr::Const(Value::Text(s.clone()), SqlType::Unknown),
        Expr::Bool(b) => TExpr::Const(Value::Bool(*b), Bool),
        Expr::Null => TExpr::Const(Value::Null, SqlType::Unknown),
        Expr::Param(n) => {
            let i = ctx.params.slot(*n)?;
            TExpr::Param(i, ctx.params.types[i].unwrap_or(SqlType::Unknown))
        }
        Expr::Negate(inner) => negate(typed(inner, ctx, depth + 1)?)?,
        Expr::Cast { expr, type_name } => {
            let target = SqlType::from_name(type_name)?;
            let inner = typed(expr, ctx, depth + 1)?;
            explicit_cast(inner, target, ctx.params)?
        }
        Expr::Call {
            name,
            args,
            star,
            pos,
        } => match aggregate_kind(name, *star) {
            Some(agg) => aggregate(agg, name, args, *pos, ctx, depth)?,
            None if *star => return Err(no_such_function(name, &[], *pos)),
            None => call(name, args, *pos, ctx, depth)?,
        },
        Expr::Column {
            qualifier,
            name,
            pos,
        } => column(qualifier.as_deref(), name, *pos, ctx)?,
        Expr::Wildcard(pos) => {
            return Err(SqlError::syntax_error("syntax error at or near \"*\"").with_position(*pos))
        }
        Expr::Binary {
            op,
            left,
            right,
            pos,
        } => {
            let l = typed(left, ctx, depth + 1)?;
            let r = typed(right, ctx, depth + 1)?;
            binary(*op, l, r, *pos, ctx.params)?
        }
        Expr::Not(inner) => {
            let e = typed(inner, ctx, depth + 1)?;
            TExpr::Not(Box::new(boolean(e, "NOT", ctx.params)?))
        }
        Expr::IsNull { expr, negated } => {
            let e = typed(expr, ctx, depth + 1)?;
            let e = resolve_unknown_output(e, ctx.params)?;
            TExpr::IsNull(Box::new(e), *negated)
        }
        Expr::Like {
            expr,
            pattern,
            negated,
            insensitive,
            pos,
        } => {
            let e = typed(expr, ctx, depth + 1)?;
            let p = typed(pattern, ctx, depth + 1)?;
            like(e, p, *negated, *insensitive, *pos, ctx.params)?
        }
        Expr::InList {
            expr,
            list,
            negated,
            pos,
        } => in_list(expr, list, *negated, *pos, ctx, depth)?,
    })
}

/// Unary minus over a typed operand: numeric types only (42883).
fn negate(e: TExpr) -> Result<TExpr, SqlError> {
    let t = e.ty();
    if !t.is_numeric() {
        return Err(SqlError::error(
            sqlstate::UNDEFINED_FUNCTION,
            format!("operator does not exist: - {}", t.display_name()),
        ));
    }
    Ok(TExpr::Negate(Box::new(e), t))
}

/// [NOT] LIKE/ILIKE: both sides as text, or 42883 naming `~~` (`~~*`).
fn like(
    e: TExpr,
    p: TExpr,
    negated: bool,
    insensitive: bool,
    pos: usize,
    params: &mut Params,
) -> Result<TExpr, SqlError> {
    let (lt, pt) = (e.ty(), p.ty());
    match (coerce(e, Text, params)?, coerce(p, Text, params)?) {
        (Some(e), Some(p)) => Ok(TExpr::Like {
            expr: Box::new(e),
            pattern: Box::new(p),
            negated,
            insensitive,
        }),
        _ => {
            let op = if insensitive { "~~*" } else { "~~" };
            Err(no_operator(op, lt, pt, pos))
        }
    }
}

/// [NOT] IN (list): each item unified with the left side as by `=`, then
/// all items coerced to the left side's final type.
fn in_list(
    expr: &Expr,
    list: &[Expr],
    negated: bool,
    pos: usize,
    ctx: &mut Ctx,
    depth: usize,
) -> Result<TExpr, SqlError> {
    let mut e = typed(expr, ctx, depth + 1)?;
    let mut items = Vec::with_capacity(list.len());
    for item in list {
        let it = typed(item, ctx, depth + 1)?;
        let (l, r) = unify_pair(e, it, BinOp::Eq, pos, ctx.params)?;
        e = l;
        items.push(r);
    }
    // Earlier items were unified with a possibly narrower left side.
    let ty = e.ty();
    let items = items
        .into_iter()
        .map(|it| {
            let have = it.ty();
            coerce(it, ty, ctx.params)?.ok_or_else(|| no_operator("=", ty, have, pos))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(TExpr::InList(Box::new(e), items, negated))
}

/// A column of the FROM relation (qualified by its visible name or not).
fn column(qualifier: Option<&str>, name: &str, pos: usize, ctx: &Ctx) -> Result<TExpr, SqlError> {
    if let Some(q) = qualifier {
        let visible = ctx.relation.as_ref().is_some_and(|(_, v)| v == q);
        if !visible {
            return Err(SqlError::error(
                sqlstate::UNDEFINED_TABLE,
                format!("missing FROM-clause entry for table \"{q}\""),
            )
            .with_position(pos));
        }
    }
    let found = ctx.relation.as_ref().and_then(|(r, _)| {
        r.columns
            .iter()
            .position(|c| c.0 == name)
            .map(|i| TExpr::Column(i, r.columns[i].1))
    });
    found.ok_or_else(|| {
        let shown = match qualifier {
            Some(q) => format!("{q}.{name}"),
            None => name.to_string(),
        };
        SqlError::error(
            sqlstate::UNDEFINED_COLUMN,
            format!("column \"{shown}\" does not exist"),
        )
        .with_position(pos)
    })
}

#[cfg(test)]
mod tests;
