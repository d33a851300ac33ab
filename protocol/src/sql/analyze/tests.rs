//! Unit tests for analysis: literal and parameter typing, overload
//! resolution, result column names and types, and the SQLSTATEs of
//! statements and calls walshm refuses.

use super::*;
use crate::sql::parser::parse_statements;
use SqlType::{Bytea, Lsn};

fn an(sql: &str, declared: &[u32], extendable: bool) -> Result<Analyzed, SqlError> {
    analyze(&parse_statements(sql).unwrap()[0], declared, extendable)
}

/// Analyzing `sql` (a simple query) fails with this SQLSTATE and message.
#[track_caller]
fn assert_refused(sql: &str, code: &str, message: &str) {
    let e = an(sql, &[], false).unwrap_err();
    assert_eq!((e.code, e.message.as_str()), (code, message), "{sql}");
}

/// The analyzed query of `sql`, one SELECT sent as a simple query.
fn query(sql: &str) -> Box<Query> {
    let Kind::Select(q) = an(sql, &[], false).unwrap().kind else {
        panic!("not a query: {sql}")
    };
    q
}

#[test]
fn emit_message_resolves_text_for_literals_and_bytea_for_casts() {
    let q = query("SELECT pg_logical_emit_message(false, 'p', 'x')");
    assert_eq!(
        q.columns,
        vec![Column {
            name: "pg_logical_emit_message".into(),
            ty: Lsn
        }]
    );
    assert!(matches!(
        &q.targets[0],
        TExpr::Call(Func::EmitMessageText, _, Lsn)
    ));
    let q = query("SELECT pg_logical_emit_message(true, 'p', '\\x00'::bytea)");
    assert!(matches!(
        &q.targets[0],
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
    assert_refused("SELECT foo()", "42883", "function foo() does not exist");
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
    assert_refused(
        "CREATE TABLE t (a int)",
        "0A000",
        "CREATE TABLE is not supported by walshm",
    );
}
