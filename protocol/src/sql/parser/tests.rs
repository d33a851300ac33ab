//! Unit tests for the SQL parser: statements parse to the expected trees
//! (positions zeroed by `without_positions`), and syntax errors quote the
//! token and 1-based position PostgreSQL reports.

use super::*;

fn one(sql: &str) -> Statement {
    let mut v = parse_statements(sql).unwrap();
    assert_eq!(v.len(), 1, "{sql}");
    without_positions(v.remove(0))
}

/// The one utility statement `sql` parses to.
fn utility(sql: &str) -> Utility {
    match one(sql) {
        Statement::Utility(u) => u,
        other => panic!("{sql}: not a utility statement: {other:?}"),
    }
}

/// `sql` is a statement walshm knows and does not implement.
fn is_unsupported(sql: &str) -> bool {
    matches!(one(sql), Statement::Unsupported(_))
}

/// Positions zeroed, so expected trees need not spell them out.
fn without_positions(s: Statement) -> Statement {
    match s {
        Statement::Select(mut sel) => {
            for item in &mut sel.items {
                item.expr = zero(item.expr.clone());
            }
            Statement::Select(sel)
        }
        other => other,
    }
}

fn zero(e: Expr) -> Expr {
    match e {
        Expr::Call {
            name, args, star, ..
        } => Expr::Call {
            name,
            args: args.into_iter().map(zero).collect(),
            star,
            pos: 0,
        },
        Expr::Cast { expr, type_name } => Expr::Cast {
            expr: Box::new(zero(*expr)),
            type_name,
        },
        other => other,
    }
}

fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Call {
        name: name.into(),
        args,
        star: false,
        pos: 0,
    }
}

fn select(items: Vec<SelectItem>) -> Statement {
    Statement::Select(Box::new(Select::of(items)))
}

#[test]
fn parses_emit_message_with_nested_repeat() {
    let s = one("  select pg_logical_emit_message(false, 'test', repeat('x', 100));  ");
    assert_eq!(
        s,
        select(vec![SelectItem {
            expr: call(
                "pg_logical_emit_message",
                vec![
                    Expr::Bool(false),
                    Expr::Str("test".into()),
                    call("repeat", vec![Expr::Str("x".into()), Expr::Integer(100)])
                ]
            ),
            alias: None
        }])
    );
}

#[test]
fn parses_multiple_statements_and_drops_empty_ones() {
    let v = parse_statements("BEGIN;; SELECT txid_current() AS x; COMMIT;").unwrap();
    assert_eq!(v.len(), 3);
    assert_eq!(v[0], Statement::Utility(Utility::Begin));
    assert_eq!(
        without_positions(v[1].clone()),
        select(vec![SelectItem {
            expr: call("txid_current", vec![]),
            alias: Some("x".into())
        }])
    );
    assert_eq!(v[2], Statement::Utility(Utility::Commit));
    assert!(parse_statements(" ; -- nothing\n").unwrap().is_empty());
}

#[test]
fn parses_transaction_variants() {
    assert_eq!(
        utility("START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ WRITE"),
        Utility::Begin
    );
    assert_eq!(utility("begin work"), Utility::Begin);
    assert_eq!(utility("END TRANSACTION"), Utility::Commit);
    assert_eq!(utility("abort"), Utility::Rollback);
    assert_eq!(utility("ROLLBACK AND NO CHAIN"), Utility::Rollback);
    assert!(is_unsupported("COMMIT AND CHAIN"));
    assert_eq!(
        utility("CREATE PUBLICATION \"Pub\" FOR ALL TABLES WITH (publish = 'insert')"),
        Utility::CreatePublication("Pub".into())
    );
    assert_eq!(
        utility("drop publication if exists a, B cascade"),
        Utility::DropPublication {
            names: vec!["a".into(), "b".into()],
            if_exists: true
        }
    );
    assert!(is_unsupported("CREATE PUBLICATION p FOR TABLE t"));
    assert!(is_unsupported("ROLLBACK TO SAVEPOINT a"));
}

#[test]
fn parses_set_show_reset() {
    assert_eq!(
        utility("SET synchronous_commit TO off"),
        Utility::Set {
            name: "synchronous_commit".into(),
            value: SetValue::Values(vec!["off".into()]),
            local: false
        }
    );
    assert_eq!(
        utility("set local synchronous_commit = 'remote_write'"),
        Utility::Set {
            name: "synchronous_commit".into(),
            value: SetValue::Values(vec!["remote_write".into()]),
            local: true
        }
    );
    assert_eq!(
        utility("SET synchronous_commit = local"),
        Utility::Set {
            name: "synchronous_commit".into(),
            value: SetValue::Values(vec!["local".into()]),
            local: false
        }
    );
    assert_eq!(
        utility("SET TIME ZONE LOCAL"),
        Utility::Set {
            name: "timezone".into(),
            value: SetValue::Default,
            local: false
        }
    );
    assert_eq!(
        utility("SET TIME ZONE 'UTC'"),
        Utility::Set {
            name: "timezone".into(),
            value: SetValue::Values(vec!["UTC".into()]),
            local: false
        }
    );
    assert_eq!(
        utility("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
        Utility::SetIgnored
    );
    assert_eq!(
        utility("SHOW synchronous_commit"),
        Utility::Show("synchronous_commit".into())
    );
    assert_eq!(
        utility("SHOW TRANSACTION ISOLATION LEVEL"),
        Utility::Show("transaction_isolation".into())
    );
    assert_eq!(utility("RESET ALL"), Utility::Reset(None));
}

#[test]
fn parses_casts_and_typed_literals() {
    assert_eq!(
        one("SELECT $1::bytea, CAST('5' AS bigint), text 'a', -3"),
        select(vec![
            SelectItem {
                expr: Expr::Cast {
                    expr: Box::new(Expr::Param(1)),
                    type_name: "bytea".into()
                },
                alias: None
            },
            SelectItem {
                expr: Expr::Cast {
                    expr: Box::new(Expr::Str("5".into())),
                    type_name: "bigint".into()
                },
                alias: None
            },
            SelectItem {
                expr: Expr::Cast {
                    expr: Box::new(Expr::Str("a".into())),
                    type_name: "text".into()
                },
                alias: None
            },
            SelectItem {
                expr: Expr::Integer(-3),
                alias: None
            },
        ])
    );
}

#[test]
fn errors_have_the_right_sqlstate() {
    for (sql, code) in [
        ("SELEC 1", "42601"),
        ("SELECT (1", "42601"),
        ("SELECT foo(", "42601"),
        ("SELECT 1 2", "42601"),
        ("SELECT 1 ~ 1", "0A000"),
        ("SELECT 1 = 1 = 1", "42601"),
    ] {
        assert_eq!(parse_statements(sql).unwrap_err().code, code, "{sql}");
    }
    assert!(
        matches!(one("CREATE TABLE t (a int)"), Statement::Unsupported(s) if s == "CREATE TABLE")
    );
    assert!(is_unsupported("SELECT 1 FROM t, u"));
    assert!(is_unsupported("SELECT 1 UNION SELECT 2"));
}

/// Positions as PostgreSQL 15 reports them (checked with psql against it).
#[test]
fn syntax_errors_carry_postgres_positions() {
    for (sql, message, position) in [
        ("SELECT 1 2", "syntax error at or near \"2\"", 10),
        ("SELECT (", "syntax error at end of input", 9),
        ("SELECT (   ", "syntax error at end of input", 12),
        ("SELECT (; SELECT 1", "syntax error at or near \";\"", 9),
        ("SELEC 1", "syntax error at or near \"SELEC\"", 1),
        ("SELECT 1 FROM", "syntax error at end of input", 14),
        (
            "SELECT 1; SELECT 'é' 2",
            "syntax error at or near \"2\"",
            22,
        ),
        (
            "SELECT 'abc",
            "unterminated quoted string at or near \"'abc\"",
            8,
        ),
    ] {
        let e = parse_statements(sql).unwrap_err();
        assert_eq!(
            (e.message.as_str(), e.position),
            (message, Some(position)),
            "{sql}"
        );
    }
}

#[test]
fn parses_clauses() {
    let Statement::Select(s) = parse_statements(
        "SELECT a AS x, count(*) FROM pg_catalog.pg_stat_activity s WHERE a IS NOT NULL AND b NOT LIKE 'x%' \
         GROUP BY 1, b HAVING count(*) > 1 ORDER BY 2 DESC NULLS LAST, x LIMIT 5 OFFSET 1",
    )
    .unwrap()
    .remove(0) else {
        panic!()
    };
    let from = s.from.unwrap();
    assert_eq!(
        (from.name.as_str(), from.alias.as_deref()),
        ("pg_stat_activity", Some("s"))
    );
    assert!(matches!(
        s.filter,
        Some(Expr::Binary { op: BinOp::And, .. })
    ));
    assert_eq!(s.group_by.len(), 2);
    assert!(s.having.is_some());
    assert_eq!(s.order_by.len(), 2);
    assert!(s.order_by[0].descending && s.order_by[0].nulls_first == Some(false));
    assert_eq!(
        (s.limit, s.offset),
        (Some(Expr::Integer(5)), Some(Expr::Integer(1)))
    );
    assert!(matches!(&s.items[1].expr, Expr::Call { star: true, .. }));
}

#[test]
fn precedence_follows_postgres() {
    // 1 + 2 * 3 = 7 parses as (1 + (2 * 3)) = 7; NOT binds looser than =.
    let Statement::Select(s) = parse_statements("SELECT NOT 1 + 2 * 3 = 7 OR false")
        .unwrap()
        .remove(0)
    else {
        panic!()
    };
    let Expr::Binary {
        op: BinOp::Or,
        left,
        ..
    } = &s.items[0].expr
    else {
        panic!("{:?}", s.items[0].expr)
    };
    let Expr::Not(inner) = left.as_ref() else {
        panic!()
    };
    let Expr::Binary {
        op: BinOp::Eq,
        left,
        ..
    } = inner.as_ref()
    else {
        panic!()
    };
    assert!(
        matches!(left.as_ref(), Expr::Binary { op: BinOp::Add, right, .. } if matches!(right.as_ref(), Expr::Binary { op: BinOp::Mul, .. }))
    );
}

#[test]
fn syntax_error_quotes_the_token() {
    let e = parse_statements("SELECT 1 garbage(").unwrap_err();
    assert_eq!(e.message, "syntax error at or near \"(\"");
    let e = parse_statements("SELECT pg_switch_wal(").unwrap_err();
    assert_eq!(e.message, "syntax error at end of input");
}
