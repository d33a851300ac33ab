//! SELECT's clauses in PostgreSQL's order: FROM (a relation or a
//! set-returning function, its arguments typed against its signature),
//! WHERE, the target list (`*` expanded), GROUP BY, HAVING, ORDER BY,
//! LIMIT/OFFSET, then the rewrite of a grouped query over its group row.
//!
//! Invariants: aggregates are collected only where `AggPlace::Allowed` is
//! set (target list, HAVING, ORDER BY); after `regroup_query` no target,
//! HAVING or sort key refers to an input column that is not a group key
//! (42803), and every aggregate is a group column after the keys.

use super::calls::no_such_function;
use super::resolve::{boolean, coerce, resolve_unknown_output};
use super::{
    column_name, typed, AggCall, AggPlace, Column, Ctx, Grouping, Params, Query, SortKey, Source,
    TExpr,
};
use crate::error::{sqlstate, SqlError};
use crate::limits::{too_deep, too_many_columns, MAX_TARGET_LIST};
use crate::sql::catalog;
use crate::sql::parser::{Expr, FromItem, OrderItem, Select, SelectItem};
use crate::sql::value::{SqlType, Value};
use SqlType::{Bool, Int8};

/// FROM's item: the relation and its arguments, typed against its signature.
pub(super) fn analyze_from(from: &FromItem, ctx: &mut Ctx) -> Result<Source, SqlError> {
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

pub(super) fn analyze_select(select: &Select, params: &mut Params) -> Result<Query, SqlError> {
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
    let Targets {
        columns,
        targets,
        sources,
    } = target_list(select, &mut ctx)?;
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

/// A target list with `*` expanded.
struct Targets<'s> {
    /// The output columns.
    columns: Vec<Column>,
    /// Their typed expressions, one per column.
    targets: Vec<TExpr>,
    /// When the query has GROUP BY, the parsed target of each output column
    /// (None for one from `*`), for GROUP BY ordinals and aliases.
    sources: Vec<Option<&'s Expr>>,
}

/// Types the target list of `select` (aggregates allowed).
fn target_list<'s>(select: &'s Select, ctx: &mut Ctx) -> Result<Targets<'s>, SqlError> {
    let mut columns = Vec::with_capacity(select.items.len());
    let mut targets = Vec::with_capacity(select.items.len());
    // The parsed target of each output column, for GROUP BY ordinals and aliases.
    let mut sources: Vec<Option<&Expr>> = Vec::new();
    for item in &select.items {
        if let Expr::Wildcard(pos) = item.expr {
            expand_wildcard(ctx, pos, &mut columns, &mut targets)?;
            if !select.group_by.is_empty() {
                sources.resize(targets.len(), None);
            }
            continue;
        }
        let e = typed(&item.expr, ctx, 0)?;
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
    Ok(Targets {
        columns,
        targets,
        sources,
    })
}

/// Rewrites targets, HAVING and sort keys over the group row.
pub(super) fn regroup_query(
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
pub(super) fn regroup(
    e: TExpr,
    keys: &[TExpr],
    names: &[&str],
    depth: usize,
) -> Result<TExpr, SqlError> {
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

pub(super) fn expand_wildcard(
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
pub(super) fn ordinal(e: &Expr) -> Option<i64> {
    match e {
        Expr::Integer(n) => Some(*n),
        _ => None,
    }
}

pub(super) fn bad_ordinal(clause: &str, n: i64) -> SqlError {
    SqlError::error(
        sqlstate::INVALID_COLUMN_REFERENCE,
        format!("{clause} position {n} is not in select list"),
    )
}

pub(super) fn group_key(
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

pub(super) fn sort_key(
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
pub(super) fn count_clause(e: Option<&Expr>, ctx: &mut Ctx) -> Result<Option<TExpr>, SqlError> {
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
