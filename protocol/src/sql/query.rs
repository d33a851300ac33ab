//! Runs an analyzed SELECT: rows of the FROM relation (or one empty row),
//! WHERE, grouping with aggregates, HAVING, the target list, ORDER BY,
//! OFFSET and LIMIT, in PostgreSQL's order of evaluation.
//!
//! Invariants: a query without FROM and GROUP BY yields exactly one row
//! (less if WHERE / LIMIT / OFFSET say so); an aggregate query without
//! GROUP BY yields one row even over no input; sorting is stable, NULLs
//! sort as PostgreSQL's default (last ascending, first descending) unless
//! NULLS FIRST/LAST says otherwise; the result held in memory stays below
//! the session's memory limit (53200 beyond it), counted as rows are made.

use super::analyze::{Agg, AggCall, Grouping, Query, SortKey};
use super::eval::{eval, truth, value_size, Env};
use super::numeric::Numeric;
use super::value::{compare_values, format_text, SqlType, Value, F64};
use crate::error::{sqlstate, SqlError};
use crate::limits::check_memory;
use std::cmp::Ordering;
use std::collections::HashMap;

/// The rows `q` returns, each with one value per output column.
pub fn run_query(q: &Query, env: &mut Env) -> Result<Vec<Vec<Value>>, SqlError> {
    let memory_limit = env.session.memory_limit();
    if q.is_single_row() && q.order.is_empty() {
        return single_row(q, env, memory_limit);
    }
    let mut held = 0usize;
    let mut charge = |row: &[Value]| {
        held = held.saturating_add(row.iter().map(value_size).sum::<usize>());
        check_memory("a query's result", held, memory_limit)
    };
    let input = match &q.source {
        Some(source) => {
            let mut args = Vec::with_capacity(source.args.len());
            for a in &source.args {
                args.push(eval(a, &[], env)?);
            }
            (source.relation.rows)(env, &args)?
        }
        None => vec![Vec::new()],
    };
    let mut rows = Vec::with_capacity(input.len());
    for row in input {
        if let Some(f) = &q.filter {
            if truth(eval(f, &row, env)?) != Some(true) {
                continue;
            }
        }
        charge(&row)?;
        rows.push(row);
    }
    if let Some(g) = &q.grouping {
        rows = group(g, rows, env)?;
    }
    let mut out: Vec<(Vec<Value>, Vec<Value>)> = Vec::with_capacity(rows.len());
    for row in rows {
        if let Some(h) = &q.having {
            if truth(eval(h, &row, env)?) != Some(true) {
                continue;
            }
        }
        let mut targets = Vec::with_capacity(q.targets.len());
        for t in &q.targets {
            targets.push(eval(t, &row, env)?);
        }
        charge(&targets)?;
        let mut keys = Vec::with_capacity(q.order.len());
        for k in &q.order {
            keys.push(eval(&k.expr, &row, env)?);
        }
        out.push((keys, targets));
    }
    if !q.order.is_empty() {
        out.sort_by(|a, b| compare_keys(&q.order, &a.0, &b.0));
    }
    let offset = count(q.offset.as_ref(), env, "OFFSET")?.unwrap_or(0);
    let limit = count(q.limit.as_ref(), env, "LIMIT")?;
    Ok(out
        .into_iter()
        .skip(offset)
        .take(limit.unwrap_or(usize::MAX))
        .map(|(_, targets)| targets)
        .collect())
}

/// The hot path (`SELECT f(...)`): the targets over no input, one row.
fn single_row(q: &Query, env: &mut Env, memory_limit: usize) -> Result<Vec<Vec<Value>>, SqlError> {
    let mut row = Vec::with_capacity(q.targets.len());
    let mut size = 0usize;
    for t in &q.targets {
        let v = eval(t, &[], env)?;
        size = size.saturating_add(value_size(&v));
        check_memory("a result row", size, memory_limit)?;
        row.push(v);
    }
    Ok(vec![row])
}

/// LIMIT / OFFSET's value (None: absent or NULL); negative is an error.
fn count(
    e: Option<&super::analyze::TExpr>,
    env: &mut Env,
    what: &str,
) -> Result<Option<usize>, SqlError> {
    let Some(e) = e else { return Ok(None) };
    match eval(e, &[], env)? {
        Value::Int(n) if n < 0 => Err(SqlError::error(
            if what == "LIMIT" {
                sqlstate::INVALID_ROW_COUNT
            } else {
                sqlstate::INVALID_ROW_COUNT_OFFSET
            },
            format!("{what} must not be negative"),
        )),
        Value::Int(n) => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
        _ => Ok(None),
    }
}

fn compare_keys(order: &[SortKey], a: &[Value], b: &[Value]) -> Ordering {
    for (k, (x, y)) in order.iter().zip(a.iter().zip(b)) {
        let ord = match (x == &Value::Null, y == &Value::Null) {
            (true, true) => Ordering::Equal,
            (true, false) => nulls(k),
            (false, true) => nulls(k).reverse(),
            (false, false) => {
                let o = compare_values(x, y).unwrap_or(Ordering::Equal);
                if k.descending {
                    o.reverse()
                } else {
                    o
                }
            }
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    Ordering::Equal
}

/// Where a NULL goes relative to a value.
fn nulls(k: &SortKey) -> Ordering {
    if k.nulls_first {
        Ordering::Less
    } else {
        Ordering::Greater
    }
}

/// Groups `rows` by the keys: one row per group, keys then aggregates.
fn group(g: &Grouping, rows: Vec<Vec<Value>>, env: &mut Env) -> Result<Vec<Vec<Value>>, SqlError> {
    let mut index: HashMap<Vec<Option<Vec<u8>>>, usize> = HashMap::new();
    let mut groups: Vec<(Vec<Value>, Vec<Acc>)> = Vec::new();
    let fresh = || g.aggs.iter().map(Acc::new).collect::<Vec<_>>();
    for row in rows {
        let mut keys = Vec::with_capacity(g.keys.len());
        for k in &g.keys {
            keys.push(eval(k, &row, env)?);
        }
        let hash_key: Vec<Option<Vec<u8>>> = keys
            .iter()
            .zip(&g.keys)
            .map(|(v, k)| format_text(v, k.ty()))
            .collect();
        let at = match index.get(&hash_key) {
            Some(&i) => i,
            None => {
                groups.push((keys, fresh()));
                index.insert(hash_key, groups.len() - 1);
                groups.len() - 1
            }
        };
        for (acc, call) in groups[at].1.iter_mut().zip(&g.aggs) {
            let v = match &call.arg {
                Some(a) => eval(a, &row, env)?,
                None => Value::Bool(true),
            };
            acc.add(v)?;
        }
    }
    if g.keys.is_empty() && groups.is_empty() {
        groups.push((Vec::new(), fresh()));
    }
    groups
        .into_iter()
        .map(|(mut keys, accs)| {
            for (acc, call) in accs.into_iter().zip(&g.aggs) {
                keys.push(acc.finish(call)?);
            }
            Ok(keys)
        })
        .collect()
}

/// One aggregate's running state over a group.
enum Acc {
    Count(i64),
    /// Sum (and count, for avg) of integers / numerics.
    Exact {
        sum: Option<Numeric>,
        n: i64,
        avg: bool,
    },
    Float {
        sum: Option<f64>,
        n: i64,
        avg: bool,
    },
    Extreme {
        best: Value,
        max: bool,
    },
}

impl Acc {
    fn new(call: &AggCall) -> Acc {
        let float_arg = call.arg.as_ref().is_some_and(|a| a.ty() == SqlType::Float8);
        match call.agg {
            Agg::CountStar | Agg::Count => Acc::Count(0),
            Agg::Sum | Agg::Avg if float_arg => Acc::Float {
                sum: None,
                n: 0,
                avg: call.agg == Agg::Avg,
            },
            Agg::Sum | Agg::Avg => Acc::Exact {
                sum: None,
                n: 0,
                avg: call.agg == Agg::Avg,
            },
            Agg::Max | Agg::Min => Acc::Extreme {
                best: Value::Null,
                max: call.agg == Agg::Max,
            },
        }
    }

    /// Adds one input value (NULLs are skipped, as SQL's aggregates do).
    fn add(&mut self, v: Value) -> Result<(), SqlError> {
        if v == Value::Null {
            return Ok(());
        }
        match self {
            Acc::Count(n) => *n += 1,
            Acc::Exact { sum, n, .. } => {
                let x = match v {
                    Value::Int(i) => Numeric::from_int(i),
                    Value::Numeric(x) => *x,
                    _ => return Ok(()),
                };
                *sum = Some(match sum {
                    Some(s) => s.checked_add(x)?,
                    None => x,
                });
                *n += 1;
            }
            Acc::Float { sum, n, .. } => {
                if let Value::Float(f) = v {
                    *sum = Some(sum.unwrap_or(0.0) + f.0);
                    *n += 1;
                }
            }
            Acc::Extreme { best, max } => {
                let better = match compare_values(&v, best) {
                    None => true,
                    Some(o) => (o == Ordering::Greater) == *max && o != Ordering::Equal,
                };
                if better {
                    *best = v;
                }
            }
        }
        Ok(())
    }

    fn finish(self, call: &AggCall) -> Result<Value, SqlError> {
        Ok(match self {
            Acc::Count(n) => Value::Int(n),
            Acc::Exact { sum: None, .. } | Acc::Float { sum: None, .. } => Value::Null,
            Acc::Exact {
                sum: Some(s),
                n,
                avg: true,
            } => Value::numeric(s.checked_div(Numeric::from_int(n))?),
            Acc::Exact { sum: Some(s), .. } if call.ty == SqlType::Int8 => Value::Int(s.to_i64()?),
            Acc::Exact { sum: Some(s), .. } => Value::numeric(s),
            Acc::Float {
                sum: Some(s),
                n,
                avg,
            } => Value::Float(F64(if avg { s / n as f64 } else { s })),
            Acc::Extreme { best, .. } => best,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::sql::eval::tests::rows;

    fn texts(sql: &str) -> Vec<Vec<String>> {
        rows(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .into_iter()
            .map(|r| {
                r.into_iter()
                    .map(|v| v.unwrap_or_else(|| "NULL".into()))
                    .collect()
            })
            .collect()
    }

    fn code(sql: &str) -> &'static str {
        rows(sql).unwrap_err().code
    }

    #[test]
    fn groups_and_orders_like_postgres() {
        // Ties on the count go by wait_event ascending, NULLs last.
        assert_eq!(
            texts(
                "SELECT wait_event_type, wait_event, count(*) FROM pg_stat_activity GROUP BY 1, 2 ORDER BY 3 DESC, 2"
            ),
            vec![
                vec!["LWLock", "WALInsert", "2"],
                vec!["NULL", "NULL", "2"],
                vec!["Activity", "CheckpointerMain", "1"],
                vec!["Activity", "WalWriterMain", "1"],
            ]
        );
        let got = texts(
            "SELECT wait_event_type, wait_event, count(*) AS n FROM pg_stat_activity GROUP BY wait_event_type, wait_event ORDER BY n DESC, wait_event NULLS FIRST",
        );
        assert_eq!(
            got,
            vec![
                vec!["NULL", "NULL", "2"],
                vec!["LWLock", "WALInsert", "2"],
                vec!["Activity", "CheckpointerMain", "1"],
                vec!["Activity", "WalWriterMain", "1"],
            ]
        );
    }

    #[test]
    fn where_limit_offset_and_aliases() {
        assert_eq!(
            texts("SELECT pid, state, query FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND state IS NOT NULL ORDER BY pid DESC LIMIT 2"),
            vec![vec!["14", "active", "q14"], vec!["13", "active", "q13"]]
        );
        assert_eq!(
            texts("SELECT a.pid p FROM pg_stat_activity AS a WHERE a.backend_type LIKE '%er' ORDER BY p OFFSET 1"),
            vec![vec!["11"]]
        );
        assert_eq!(
            texts("SELECT pid FROM pg_stat_activity WHERE pid IN (10, 12) ORDER BY 1"),
            vec![vec!["10"], vec!["12"]]
        );
        assert_eq!(texts("SELECT 1 WHERE false"), Vec::<Vec<String>>::new());
        assert_eq!(texts("SELECT 1 LIMIT 0"), Vec::<Vec<String>>::new());
        assert_eq!(code("SELECT 1 LIMIT -1"), "2201W");
    }

    #[test]
    fn aggregates_over_no_rows_and_all_rows() {
        assert_eq!(
            texts("SELECT count(*), count(state), sum(pid), max(pid), min(backend_type), avg(pid) FROM pg_stat_activity"),
            vec![vec!["6", "4", "4302", "4242", "checkpointer", "717.0000000000000000"]]
        );
        assert_eq!(
            texts("SELECT count(*), sum(pid), max(pid) FROM pg_stat_activity WHERE false"),
            vec![vec!["0", "NULL", "NULL"]]
        );
        assert_eq!(
            texts("SELECT backend_type, count(*) FROM pg_stat_activity GROUP BY backend_type HAVING count(*) > 1"),
            vec![vec!["client backend", "4"]]
        );
        assert_eq!(
            texts("SELECT wal_records, wal_bytes, wal_write_time FROM pg_stat_wal"),
            vec![vec!["7", "560", "1.5"]]
        );
    }

    #[test]
    fn errors_like_postgres() {
        for (sql, want) in [
            ("SELECT pid, count(*) FROM pg_stat_activity", "42803"),
            (
                "SELECT count(*) FROM pg_stat_activity WHERE count(*) > 1",
                "42803",
            ),
            ("SELECT max(count(*)) FROM pg_stat_activity", "42803"),
            ("SELECT nosuch FROM pg_stat_activity", "42703"),
            ("SELECT * FROM nosuch", "42P01"),
            ("SELECT x.pid FROM pg_stat_activity", "42P01"),
            ("SELECT pid FROM pg_stat_activity ORDER BY 5", "42P10"),
            ("SELECT pid FROM pg_stat_activity WHERE pid", "42804"),
            ("SELECT pid FROM pg_stat_activity WHERE pid = 'x'", "22P02"),
            ("SELECT * FROM pg_stat_activity WHERE state = 1", "42883"),
        ] {
            assert_eq!(code(sql), want, "{sql}");
        }
    }

    #[test]
    fn replication_views_filter_and_sort() {
        assert_eq!(
            texts("SELECT slot_name, active, active_pid, restart_lsn, wal_status FROM pg_replication_slots ORDER BY slot_name"),
            vec![
                vec!["s0", "t", "77", "NULL", "NULL"],
                vec!["s1", "f", "NULL", "0/3000000", "reserved"],
            ]
        );
        assert_eq!(
            texts(
                "SELECT slot_type, temporary FROM pg_replication_slots WHERE restart_lsn > '0/1'"
            ),
            vec![vec!["physical", "f"]]
        );
        assert_eq!(texts("SELECT * FROM pg_replication_slots")[0].len(), 15);
        assert_eq!(
            texts("SELECT application_name, state, flush_lsn, write_lsn, sync_priority, sync_state, client_port FROM pg_stat_replication WHERE pid = 77"),
            vec![vec!["rx", "streaming", "0/3000000", "NULL", "1", "sync", "-1"]]
        );
        let r = texts("SELECT * FROM pg_stat_replication");
        assert_eq!(r[0].len(), 20);
        assert_eq!(code("SELECT nosuch FROM pg_stat_replication"), "42703");
    }

    #[test]
    fn wildcard_expands_every_column() {
        let r = texts("SELECT * FROM pg_walfile_name_offset('0/16B6C50')");
        assert_eq!(r, vec![vec!["000000010000000000000001", "7040080"]]);
        let r = texts("SELECT * FROM pg_stat_activity WHERE pid = 12");
        assert_eq!(r[0].len(), 22);
    }
}
