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

use super::catalog::{self, Relation};
use super::numeric;
use super::parser::{BinOp, Expr, FromItem, OrderItem, Select, SelectItem, SetValue, Statement};
use super::value::{cast, parse_text, SqlType, Value};
use crate::error::{sqlstate, SqlError};
use crate::limits::{too_deep, too_many_columns, MAX_EXPR_DEPTH, MAX_TARGET_LIST};

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

struct Signature {
    name: &'static str,
    args: &'static [SqlType],
    result: SqlType,
    func: Func,
}

use SqlType::{Bool, Bytea, Int4, Int8, Lsn, Text, Timestamptz, Xid8};

macro_rules! signatures {
    ($($name:literal ($($arg:expr),*) -> $result:expr => $func:ident;)*) => {
        &[$(Signature { name: $name, args: &[$($arg),*], result: $result, func: Func::$func },)*]
    };
}

/// The catalog; for overloaded names the first listed wins ties (text before bytea).
static CATALOG: &[Signature] = signatures! {
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
    CreatePublication(String),
    DropPublication {
        names: Vec<String>,
        if_exists: bool,
    },
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
            Kind::Show(name) => Some(vec![Column {
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
        Statement::CreatePublication(name) => Kind::CreatePublication(name.clone()),
        Statement::DropPublication { names, if_exists } => Kind::DropPublication {
            names: names.clone(),
            if_exists: *if_exists,
        },
        Statement::Reset(name) => Kind::Reset(name.clone()),
        Statement::Show(name) if name.eq_ignore_ascii_case("all") => Kind::ShowAll,
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

/// FROM's item: the relation and its arguments, typed against its signature.
fn analyze_from(from: &FromItem, ctx: &mut Ctx) -> Result<Source, SqlError> {
    let relation = catalog::lookup(&from.name, from.args.is_some(), from.pos)?;
    let given = from.args.as_deref().unwrap_or(&[]);
    let fixed = relation.args.unwrap_or(&[]);
    let extra = given.len().saturating_sub(fixed.len());
    let mut wanted: Vec<SqlType> = fixed.to_vec();
    wanted.extend(relation.extra.types(extra).unwrap_or_default());
    let mut args = Vec::with_capacity(given.len());
    for (arg, want) in given.iter().zip(&wanted) {
        let e = typed(arg, ctx, 0)?;
        let have = e.ty();
        args.push(
            coerce(e, *want, ctx.params)?
                .ok_or_else(|| no_such_function(&from.name, &[have], from.pos))?,
        );
    }
    if given.len() != wanted.len() {
        let types: Vec<SqlType> = given.iter().map(|_| SqlType::Unknown).collect();
        return Err(no_such_function(&from.name, &types, from.pos));
    }
    Ok(Source { relation, args })
}

fn analyze_select(select: &Select, params: &mut Params) -> Result<Query, SqlError> {
    let mut ctx = Ctx {
        params,
        relation: None,
        aggs: Vec::new(),
        place: AggPlace::Forbidden("FROM"),
    };
    let source = match &select.from {
        Some(from) => {
            let s = analyze_from(from, &mut ctx)?;
            let visible = from.alias.clone().unwrap_or_else(|| from.name.clone());
            ctx.relation = Some((s.relation, visible));
            Some(s)
        }
        None => None,
    };
    ctx.place = AggPlace::Forbidden("WHERE");
    let filter = match &select.filter {
        Some(e) => Some(boolean(typed(e, &mut ctx, 0)?, "WHERE", ctx.params)?),
        None => None,
    };
    // Target list, with `*` expanded.
    ctx.place = AggPlace::Allowed;
    let mut columns = Vec::with_capacity(select.items.len());
    let mut targets = Vec::with_capacity(select.items.len());
    // The parsed target of each output column, for GROUP BY ordinals and aliases.
    let mut sources: Vec<Option<&Expr>> = Vec::new();
    for item in &select.items {
        if let Expr::Wildcard(pos) = item.expr {
            expand_wildcard(&ctx, pos, &mut columns, &mut targets)?;
            if !select.group_by.is_empty() {
                sources.resize(targets.len(), None);
            }
            continue;
        }
        let e = typed(&item.expr, &mut ctx, 0)?;
        let e = resolve_unknown_output(e, ctx.params)?;
        let name = item
            .alias
            .clone()
            .unwrap_or_else(|| column_name(&item.expr, e.ty()));
        columns.push(Column { name, ty: e.ty() });
        targets.push(e);
        if !select.group_by.is_empty() {
            sources.push(Some(&item.expr));
        }
    }
    if targets.len() > MAX_TARGET_LIST {
        return Err(too_many_columns());
    }
    // GROUP BY: input column, then output name, then ordinal.
    ctx.place = AggPlace::Forbidden("GROUP BY");
    let mut keys = Vec::with_capacity(select.group_by.len());
    for g in &select.group_by {
        keys.push(group_key(g, &select.items, &sources, &targets, &mut ctx)?);
    }
    ctx.place = AggPlace::Allowed;
    let having = match &select.having {
        Some(e) => Some(boolean(typed(e, &mut ctx, 0)?, "HAVING", ctx.params)?),
        None => None,
    };
    let mut order = Vec::with_capacity(select.order_by.len());
    for item in &select.order_by {
        order.push(sort_key(item, &columns, &targets, &mut ctx)?);
    }
    ctx.place = AggPlace::Forbidden("LIMIT");
    let limit = count_clause(select.limit.as_ref(), &mut ctx)?;
    ctx.place = AggPlace::Forbidden("OFFSET");
    let offset = count_clause(select.offset.as_ref(), &mut ctx)?;
    let grouped = !select.group_by.is_empty() || !ctx.aggs.is_empty() || having.is_some();
    let mut query = Query {
        columns,
        source,
        filter,
        grouping: None,
        having,
        targets,
        order,
        limit,
        offset,
    };
    if grouped {
        regroup_query(&mut query, keys, std::mem::take(&mut ctx.aggs), &ctx)?;
    }
    Ok(query)
}

/// Rewrites targets, HAVING and sort keys over the group row.
fn regroup_query(
    q: &mut Query,
    keys: Vec<TExpr>,
    aggs: Vec<AggCall>,
    ctx: &Ctx,
) -> Result<(), SqlError> {
    let names: Vec<&str> = ctx
        .relation
        .as_ref()
        .map(|(r, _)| r.columns.iter().map(|c| c.0).collect())
        .unwrap_or_default();
    let mut over_group = |e: TExpr| regroup(e, &keys, &names, 0);
    q.targets = std::mem::take(&mut q.targets)
        .into_iter()
        .map(&mut over_group)
        .collect::<Result<_, _>>()?;
    q.having = q.having.take().map(&mut over_group).transpose()?;
    for k in &mut q.order {
        k.expr = over_group(std::mem::replace(
            &mut k.expr,
            TExpr::Const(Value::Null, Bool),
        ))?;
    }
    q.grouping = Some(Grouping { keys, aggs });
    Ok(())
}

/// `e` over the group row: a group key is that key's column, an aggregate
/// its column after the keys; any other input column is 42803.
fn regroup(e: TExpr, keys: &[TExpr], names: &[&str], depth: usize) -> Result<TExpr, SqlError> {
    if depth >= crate::limits::MAX_TREE_HEIGHT {
        return Err(too_deep());
    }
    if let Some(k) = keys.iter().position(|k| *k == e) {
        return Ok(TExpr::Column(k, e.ty()));
    }
    match e {
        TExpr::Agg(i, t) => Ok(TExpr::Column(keys.len() + i, t)),
        TExpr::Column(i, _) => Err(SqlError::error(
            sqlstate::GROUPING_ERROR,
            format!(
                "column \"{}\" must appear in the GROUP BY clause or be used in an aggregate function",
                names.get(i).copied().unwrap_or("?")
            ),
        )),
        other => other.map_children(&mut |c| regroup(c, keys, names, depth + 1)),
    }
}

fn expand_wildcard(
    ctx: &Ctx,
    pos: usize,
    columns: &mut Vec<Column>,
    targets: &mut Vec<TExpr>,
) -> Result<(), SqlError> {
    let Some((relation, _)) = &ctx.relation else {
        return Err(
            SqlError::syntax_error("SELECT * with no tables specified is not valid")
                .with_position(pos),
        );
    };
    for (i, (name, ty)) in relation.columns.iter().enumerate() {
        columns.push(Column {
            name: name.to_string(),
            ty: *ty,
        });
        targets.push(TExpr::Column(i, *ty));
    }
    Ok(())
}

/// An integer literal used as an ordinal (GROUP BY 1, ORDER BY 2).
fn ordinal(e: &Expr) -> Option<i64> {
    match e {
        Expr::Integer(n) => Some(*n),
        _ => None,
    }
}

fn bad_ordinal(clause: &str, n: i64) -> SqlError {
    SqlError::error(
        sqlstate::INVALID_COLUMN_REFERENCE,
        format!("{clause} position {n} is not in select list"),
    )
}

fn group_key(
    g: &Expr,
    items: &[SelectItem],
    sources: &[Option<&Expr>],
    targets: &[TExpr],
    ctx: &mut Ctx,
) -> Result<TExpr, SqlError> {
    if let Some(n) = ordinal(g) {
        let i = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .filter(|&i| i < targets.len())
            .ok_or_else(|| bad_ordinal("GROUP BY", n))?;
        return match sources.get(i).copied().flatten() {
            Some(src) => typed(src, ctx, 0).and_then(|e| resolve_unknown_output(e, ctx.params)),
            None => Ok(targets[i].clone()),
        };
    }
    if let Expr::Column {
        qualifier: None,
        name,
        ..
    } = g
    {
        let is_input = ctx
            .relation
            .as_ref()
            .is_some_and(|(r, _)| r.columns.iter().any(|c| c.0 == name));
        if !is_input {
            let by_alias = items
                .iter()
                .zip(sources)
                .find(|(item, _)| item.alias.as_deref() == Some(name));
            if let Some((_, Some(src))) = by_alias {
                return typed(src, ctx, 0);
            }
        }
    }
    typed(g, ctx, 0).and_then(|e| resolve_unknown_output(e, ctx.params))
}

fn sort_key(
    item: &OrderItem,
    columns: &[Column],
    targets: &[TExpr],
    ctx: &mut Ctx,
) -> Result<SortKey, SqlError> {
    let expr = if let Some(n) = ordinal(&item.expr) {
        let i = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .filter(|&i| i < targets.len())
            .ok_or_else(|| bad_ordinal("ORDER BY", n))?;
        targets[i].clone()
    } else {
        let by_name = match &item.expr {
            Expr::Column {
                qualifier: None,
                name,
                ..
            } => columns.iter().position(|c| &c.name == name),
            _ => None,
        };
        match by_name {
            Some(i) => targets[i].clone(),
            None => {
                let e = typed(&item.expr, ctx, 0)?;
                resolve_unknown_output(e, ctx.params)?
            }
        }
    };
    if matches!(expr.ty(), SqlType::Record | SqlType::Void) {
        return Err(SqlError::error(
            sqlstate::UNDEFINED_FUNCTION,
            format!(
                "could not identify an ordering operator for type {}",
                expr.ty().display_name()
            ),
        ));
    }
    Ok(SortKey {
        expr,
        descending: item.descending,
        nulls_first: item.nulls_first.unwrap_or(item.descending),
    })
}

/// LIMIT / OFFSET: a bigint expression (NULL: no limit).
fn count_clause(e: Option<&Expr>, ctx: &mut Ctx) -> Result<Option<TExpr>, SqlError> {
    let Some(e) = e else { return Ok(None) };
    let t = typed(e, ctx, 0)?;
    let have = t.ty();
    coerce(t, Int8, ctx.params)?.map(Some).ok_or_else(|| {
        SqlError::error(
            sqlstate::DATATYPE_MISMATCH,
            format!(
                "argument of LIMIT must be type bigint, not type {}",
                have.display_name()
            ),
        )
    })
}

/// A WHERE/HAVING condition: boolean (an unknown literal is read as one).
fn boolean(e: TExpr, clause: &str, params: &mut Params) -> Result<TExpr, SqlError> {
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
fn resolve_unknown_output(e: TExpr, params: &mut Params) -> Result<TExpr, SqlError> {
    if e.ty() != SqlType::Unknown {
        return Ok(e);
    }
    Ok(coerce(e.clone(), Text, params)?.unwrap_or(e))
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
        Expr::Integer(i) => {
            if i32::try_from(*i).is_ok() {
                TExpr::Const(Value::Int(*i), Int4)
            } else {
                TExpr::Const(Value::Int(*i), Int8)
            }
        }
        Expr::Decimal(d) => TExpr::Const(Value::numeric(numeric::parse(d)?), SqlType::Numeric),
        Expr::Str(s) => TExpr::Const(Value::Text(s.clone()), SqlType::Unknown),
        Expr::Bool(b) => TExpr::Const(Value::Bool(*b), Bool),
        Expr::Null => TExpr::Const(Value::Null, SqlType::Unknown),
        Expr::Param(n) => {
            let i = ctx.params.slot(*n)?;
            TExpr::Param(i, ctx.params.types[i].unwrap_or(SqlType::Unknown))
        }
        Expr::Negate(inner) => {
            let e = typed(inner, ctx, depth + 1)?;
            let t = e.ty();
            if !t.is_numeric() {
                return Err(SqlError::error(
                    sqlstate::UNDEFINED_FUNCTION,
                    format!("operator does not exist: - {}", t.display_name()),
                ));
            }
            TExpr::Negate(Box::new(e), t)
        }
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
            let (lt, pt) = (e.ty(), p.ty());
            let as_text = |x: TExpr, params: &mut Params| coerce(x, Text, params);
            match (as_text(e, ctx.params)?, as_text(p, ctx.params)?) {
                (Some(e), Some(p)) => TExpr::Like {
                    expr: Box::new(e),
                    pattern: Box::new(p),
                    negated: *negated,
                    insensitive: *insensitive,
                },
                _ => {
                    let op = if *insensitive { "~~*" } else { "~~" };
                    return Err(no_operator(op, lt, pt, *pos));
                }
            }
        }
        Expr::InList {
            expr,
            list,
            negated,
            pos,
        } => {
            let mut e = typed(expr, ctx, depth + 1)?;
            let mut items = Vec::with_capacity(list.len());
            for item in list {
                let it = typed(item, ctx, depth + 1)?;
                let (l, r) = unify_pair(e, it, BinOp::Eq, *pos, ctx.params)?;
                e = l;
                items.push(r);
            }
            // Earlier items were unified with a possibly narrower left side.
            let ty = e.ty();
            let items = items
                .into_iter()
                .map(|it| {
                    let have = it.ty();
                    coerce(it, ty, ctx.params)?.ok_or_else(|| no_operator("=", ty, have, *pos))
                })
                .collect::<Result<Vec<_>, _>>()?;
            TExpr::InList(Box::new(e), items, *negated)
        }
    })
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

fn aggregate_kind(name: &str, star: bool) -> Option<Agg> {
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
fn aggregate(
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

fn no_such_function(name: &str, types: &[SqlType], pos: usize) -> SqlError {
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

fn no_operator(op: &str, l: SqlType, r: SqlType, pos: usize) -> SqlError {
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
fn numeric_rank(t: SqlType) -> Option<u8> {
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
fn common_type(a: SqlType, b: SqlType) -> Option<SqlType> {
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
fn unify_pair(
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
fn binary(
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
        TExpr::Const(v, from) if from.coerces_implicitly_to(target) => {
            Some(TExpr::Const(cast(v, from, target)?, target))
        }
        e if from.coerces_implicitly_to(target) => Some(TExpr::Cast(Box::new(e), target)),
        e if from == SqlType::Unknown => Some(TExpr::Cast(Box::new(e), target)),
        _ => None,
    })
}

/// Resolves and types a function call found `depth` levels down.
fn call(
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
        let Kind::Select(q) = &a.kind else { panic!() };
        let (columns, exprs) = (&q.columns, &q.targets);
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
        let Kind::Select(q) = &a.kind else { panic!() };
        let exprs = &q.targets;
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
