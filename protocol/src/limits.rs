//! Limits that protect a backend from its client: how deep expressions may
//! nest, how many columns a target list may have, how much memory one
//! value or one message may take, and the checked conversions every wire
//! integer goes through.
//!
//! Invariants:
//! * no expression tree (parsed `Expr`, analyzed `TExpr`) is ever higher
//!   than [`MAX_TREE_HEIGHT`]: the parser refuses to build a node above
//!   [`MAX_EXPR_DEPTH`] (and its own recursion is bounded by the same
//!   number), analysis adds at most one implicit cast per level. Every
//!   recursive walk over a tree (analysis, evaluation, the compiler's
//!   `Drop`, `Clone`, `PartialEq`, `Debug`) is therefore bounded; the unit
//!   test `limits_fit_in_a_small_stack` runs each of them at the limit on a
//!   [`TEST_STACK`]-byte thread, a quarter of a main thread's 8 MiB.
//!   Measured at the limit (parse + analysis + evaluation, the deepest of
//!   parentheses, nested calls, unary minus, cast chains): nested calls
//!   cost the most, about 2.2 KiB per level in a debug (opt-level 1) build
//!   and 1.7 KiB in a release build, so 500 levels take about 1.1 MiB;
//! * a value that cannot be represented in its wire field is an error
//!   (54000), never a wrapped or truncated number;
//! * a single value, a single reply message or a single client message
//!   larger than the session's memory limit is ERROR 53200, and the
//!   session stays usable.

use crate::error::{sqlstate, SqlError};

/// How deep expressions may nest (parentheses, function arguments, unary
/// operators, casts). PostgreSQL's own limit comes from max_stack_depth
/// (2 MB); walshm's dialect has no operators beyond unary minus and casts,
/// so 500 levels is far more than any real query needs.
pub const MAX_EXPR_DEPTH: usize = 500;

/// Highest tree analysis can produce from a parsed tree of height
/// `MAX_EXPR_DEPTH` (an implicit cast above each level), plus the root.
pub const MAX_TREE_HEIGHT: usize = 2 * MAX_EXPR_DEPTH + 1;

/// PostgreSQL's MaxTupleAttributeNumber: target lists have at most this many entries.
pub const MAX_TARGET_LIST: usize = 1664;

/// Stack size the unit tests run the deepest accepted statements on.
pub const TEST_STACK: usize = 2 << 20;

/// ERROR 54001: an expression nested deeper than [`MAX_EXPR_DEPTH`].
pub fn too_deep() -> SqlError {
    SqlError::error(
        sqlstate::STATEMENT_TOO_COMPLEX,
        "stack depth limit exceeded",
    )
    .with_detail(format!(
        "walshm nests expressions at most {MAX_EXPR_DEPTH} levels deep (statement too complex)"
    ))
}

/// ERROR 54011: more than [`MAX_TARGET_LIST`] output columns.
pub fn too_many_columns() -> SqlError {
    SqlError::error(
        sqlstate::TOO_MANY_COLUMNS,
        format!("target lists can have at most {MAX_TARGET_LIST} entries"),
    )
}

/// ERROR 53200: `what` of `size` bytes does not fit in the session's memory limit.
pub fn out_of_memory(what: &str, size: usize, limit: usize) -> SqlError {
    SqlError::error(sqlstate::OUT_OF_MEMORY, "out of memory").with_detail(format!(
        "{what} of {size} bytes exceeds session_memory_limit ({limit} bytes)"
    ))
}

/// ERROR 53200 unless `size <= limit`.
pub fn check_memory(what: &str, size: usize, limit: usize) -> Result<(), SqlError> {
    if size > limit {
        Err(out_of_memory(what, size, limit))
    } else {
        Ok(())
    }
}

fn unrepresentable(what: &str, n: usize) -> SqlError {
    SqlError::error(
        sqlstate::PROGRAM_LIMIT_EXCEEDED,
        format!("{what} {n} does not fit in its protocol field"),
    )
}

/// `n` as an Int16 wire field (a column count), or 54000.
pub fn wire_i16(n: usize, what: &str) -> Result<i16, SqlError> {
    i16::try_from(n).map_err(|_| unrepresentable(what, n))
}

/// `n` as an Int16 field PostgreSQL reads unsigned (parameter counts, up to 65535), or 54000.
pub fn wire_u16(n: usize, what: &str) -> Result<u16, SqlError> {
    u16::try_from(n).map_err(|_| unrepresentable(what, n))
}

/// `n` as an Int32 wire field (a length), or 54000.
pub fn wire_i32(n: usize, what: &str) -> Result<i32, SqlError> {
    i32::try_from(n).map_err(|_| unrepresentable(what, n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::analyze::{analyze, Kind};
    use crate::sql::eval::{eval, Env};
    use crate::sql::parser::parse_statements;
    use crate::testing::FakeSession;
    use std::time::{Duration, Instant};

    /// Parses, analyzes and evaluates `sql` (one SELECT), returning the
    /// SQLSTATE of the first error, or None. Every tree is dropped inside.
    fn run(sql: &str) -> Option<&'static str> {
        let stmts = match parse_statements(sql) {
            Ok(s) => s,
            Err(e) => return Some(e.code),
        };
        let copy = stmts.clone();
        assert_eq!(copy, stmts, "Clone and PartialEq walk the tree too");
        let analyzed = match analyze(&stmts[0], &[], false) {
            Ok(a) => a,
            Err(e) => return Some(e.code),
        };
        let Kind::Select(query) = &analyzed.kind else {
            panic!("not a select: {sql}")
        };
        let copy = query.targets.clone();
        for e in &copy {
            if let Err(e) = Env::with(&mut FakeSession::default(), |env| eval(e, &[], env)) {
                return Some(e.code);
            }
        }
        None
    }

    fn nested(open: &str, inner: &str, close: &str, n: usize) -> String {
        format!("SELECT {}{inner}{}", open.repeat(n), close.repeat(n))
    }

    /// The deepest statements accepted, one of each kind of nesting, and
    /// what their parse, analysis, evaluation and drop cost in stack.
    fn deepest_accepted() -> Vec<(String, Option<&'static str>)> {
        let n = MAX_EXPR_DEPTH - 1;
        vec![
            (nested("(", "1", ")", n), None),
            (nested("repeat(", "'x'", ", 1)", n), None),
            (nested("- ", "'a'", "", n), Some("42883")),
            (
                format!("SELECT txid_current(){}", "::text::int8".repeat(n / 2)),
                None,
            ),
            (
                // varchar arguments: the analyzer adds an implicit cast to text at each level.
                nested("repeat((", "'x'", ")::varchar, 1)", n / 2),
                None,
            ),
        ]
    }

    #[test]
    fn limits_fit_in_a_small_stack() {
        let worker = std::thread::Builder::new()
            .stack_size(TEST_STACK)
            .spawn(|| {
                for (sql, want) in deepest_accepted() {
                    assert_eq!(run(&sql), want, "{}...", &sql[..60]);
                }
            })
            .unwrap();
        worker
            .join()
            .expect("the deepest accepted statements overflow a TEST_STACK stack");
    }

    #[test]
    fn deeper_nesting_is_54001_at_every_stage() {
        let worker = std::thread::Builder::new()
            .stack_size(TEST_STACK)
            .spawn(|| {
                let deep = [
                    nested("(", "1", ")", 30_000),
                    nested("(", "1", ")", MAX_EXPR_DEPTH),
                    nested("- ", "1", "", 300_000),
                    nested("-", "1", "", 1), // sanity: a short one is fine
                    nested("repeat(", "'x'", ", 1)", MAX_EXPR_DEPTH),
                    format!("SELECT 1{}", "::int8".repeat(MAX_EXPR_DEPTH)),
                    format!("SELECT txid_current(){}", "::text".repeat(300_000)),
                    format!("SELECT CAST({} AS text)", nested("(", "1", ")", 5000)),
                ];
                let got: Vec<_> = deep.iter().map(|sql| run(sql)).collect();
                let want = [
                    Some("54001"),
                    Some("54001"),
                    Some("54001"),
                    None,
                    Some("54001"),
                    Some("54001"),
                    Some("54001"),
                    Some("54001"),
                ];
                assert_eq!(got, want);
            })
            .unwrap();
        worker
            .join()
            .expect("a refused statement overflowed the stack");
    }

    #[test]
    fn target_lists_stop_at_1664_entries() {
        let list = |n: usize| format!("SELECT {}", vec!["1"; n].join(","));
        assert_eq!(run(&list(MAX_TARGET_LIST)), None);
        assert_eq!(run(&list(MAX_TARGET_LIST + 1)), Some("54011"));
        assert_eq!(run(&list(40_000)), Some("54011"));
    }

    #[test]
    fn long_flat_inputs_take_linear_time() {
        let start = Instant::now();
        // A left-deep chain of operators is refused by its height.
        let sum = format!("SELECT {}1", "1+".repeat(300_000));
        assert_eq!(run(&sum), Some("54001"));
        let in_list = format!("SELECT 1 IN ({}1)", "1,".repeat(300_000));
        assert_eq!(run(&in_list), None);
        let many = "SELECT 1;".repeat(100_000);
        assert_eq!(parse_statements(&many).unwrap().len(), 100_000);
        let args = format!("SELECT repeat({}'x', 1)", "'x'||".repeat(100_000));
        assert_eq!(run(&args), Some("54001"));
        let wide_call = format!("SELECT txid_current({}1)", "1,".repeat(300_000));
        assert_eq!(run(&wide_call), Some("42883"));
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "flat inputs took {:?}",
            start.elapsed()
        );
    }

    #[test]
    fn conversions_refuse_what_does_not_fit() {
        assert_eq!(wire_i16(1664, "columns").unwrap(), 1664);
        assert_eq!(wire_i16(40_000, "columns").unwrap_err().code, "54000");
        assert_eq!(wire_i16(32_768, "columns").unwrap_err().code, "54000");
        assert_eq!(wire_u16(65_535, "parameters").unwrap(), 65_535);
        assert_eq!(wire_u16(65_536, "parameters").unwrap_err().code, "54000");
        assert_eq!(wire_i32(i32::MAX as usize, "length").unwrap(), i32::MAX);
        assert_eq!(
            wire_i32(i32::MAX as usize + 1, "length").unwrap_err().code,
            "54000"
        );
    }

    #[test]
    fn memory_check_is_inclusive() {
        assert!(check_memory("value", 10, 10).is_ok());
        assert_eq!(check_memory("value", 11, 10).unwrap_err().code, "53200");
    }
}
