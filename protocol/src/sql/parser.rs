//! Parser for walshm's SQL: SELECT of a list of expressions (function calls,
//! literals, `$n`, casts), transaction control, CHECKPOINT, SET/RESET/SHOW.
//! Known SQL commands walshm does not implement parse to `Unsupported`
//! (reported as 0A000); anything else is a 42601 syntax error.
//!
//! Invariants: one `Statement` per `;`-separated piece; empty pieces are
//! dropped (as PostgreSQL's raw parser does); syntax errors quote the token
//! "at or near" which parsing failed.
//!
//! Depth (see `crate::limits`): the parser's own recursion goes through
//! `unary` at every level (parentheses, arguments, unary signs, CAST), and
//! `unary` refuses to go deeper than `MAX_EXPR_DEPTH` (54001). Postfix casts
//! (`x::a::b::...`) are built in a loop, not by recursion, so the parser
//! also tracks each subtree's height (`Tree`) and refuses to build a node
//! above `MAX_EXPR_DEPTH`. Hence no `Expr` that exists, even a partial one
//! dropped after an error, is higher than `MAX_EXPR_DEPTH`, and the
//! recursive `Drop`/`Clone`/`PartialEq` of `Box<Expr>` trees are bounded.
//! A target list stops at `MAX_TARGET_LIST` entries (54011). The lexer is
//! one pass and the parser never backtracks more than a token, so long flat
//! inputs (many statements, long argument lists) cost linear time.

use super::lexer::{lex_within, Tok, Token};
use crate::error::SqlError;
use crate::limits::{too_deep, too_many_columns, MAX_EXPR_DEPTH, MAX_TARGET_LIST};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    Integer(i64),
    /// A string literal (type unknown until context decides).
    Str(String),
    Bool(bool),
    Null,
    Param(u32),
    Call {
        name: String,
        args: Vec<Expr>,
    },
    Cast {
        expr: Box<Expr>,
        type_name: String,
    },
    Negate(Box<Expr>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectItem {
    pub expr: Expr,
    pub alias: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetValue {
    Default,
    Values(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Statement {
    Select(Vec<SelectItem>),
    Begin,
    Commit,
    Rollback,
    Checkpoint,
    Set {
        name: String,
        value: SetValue,
        local: bool,
    },
    /// SET TRANSACTION / SET SESSION CHARACTERISTICS: accepted, ignored.
    SetIgnored,
    /// RESET name; None: RESET ALL.
    Reset(Option<String>),
    Show(String),
    /// A known SQL command walshm does not implement; the text names it.
    Unsupported(String),
}

impl Statement {
    /// COMMIT/ROLLBACK: the only statements allowed in a failed transaction block.
    pub fn is_transaction_exit(&self) -> bool {
        matches!(self, Statement::Commit | Statement::Rollback)
    }
}

/// Commands PostgreSQL has and walshm does not.
const UNSUPPORTED_COMMANDS: &[&str] = &[
    "alter",
    "analyze",
    "call",
    "close",
    "cluster",
    "comment",
    "copy",
    "create",
    "deallocate",
    "declare",
    "delete",
    "discard",
    "do",
    "drop",
    "execute",
    "explain",
    "fetch",
    "grant",
    "import",
    "insert",
    "listen",
    "load",
    "lock",
    "merge",
    "move",
    "notify",
    "prepare",
    "reassign",
    "refresh",
    "reindex",
    "release",
    "revoke",
    "savepoint",
    "security",
    "table",
    "truncate",
    "unlisten",
    "update",
    "vacuum",
    "values",
    "with",
];

/// Keywords that would continue a SELECT past its target list.
const SELECT_CLAUSES: &[&str] = &[
    "from",
    "where",
    "group",
    "having",
    "order",
    "limit",
    "offset",
    "union",
    "intersect",
    "except",
    "into",
    "for",
    "window",
    "fetch",
];

/// Parses a query string into statements.
pub fn parse_statements(src: &str) -> Result<Vec<Statement>, SqlError> {
    parse_statements_within(src, usize::MAX)
}

/// `parse_statements`, 53200 if the tokens would take more than `memory_limit` bytes.
pub fn parse_statements_within(src: &str, memory_limit: usize) -> Result<Vec<Statement>, SqlError> {
    let tokens = lex_within(src, memory_limit)?;
    tokens
        .split(|t| t.tok == Tok::Semicolon)
        .filter(|piece| !piece.is_empty())
        .map(|piece| {
            Parser {
                src,
                toks: piece,
                pos: 0,
                nesting: 0,
            }
            .statement()
        })
        .collect()
}

struct Parser<'a> {
    src: &'a str,
    toks: &'a [Token],
    pos: usize,
    /// How many `unary` calls are active (the parser's recursion depth).
    nesting: usize,
}

/// An expression with its height (nodes on its longest root-to-leaf path).
struct Tree {
    expr: Expr,
    height: usize,
}

impl Tree {
    fn leaf(expr: Expr) -> Tree {
        Tree { expr, height: 1 }
    }

    /// Puts a node above `self`; 54001 if it would be higher than MAX_EXPR_DEPTH.
    fn wrap(self, node: impl FnOnce(Box<Expr>) -> Expr) -> Result<Tree, SqlError> {
        node_above(self.height).map(|height| Tree {
            expr: node(Box::new(self.expr)),
            height,
        })
    }
}

/// The height of a node whose highest child is `child_height` high, if allowed.
fn node_above(child_height: usize) -> Result<usize, SqlError> {
    if child_height >= MAX_EXPR_DEPTH {
        Err(too_deep())
    } else {
        Ok(child_height + 1)
    }
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a Token> {
        self.toks.get(self.pos)
    }

    fn peek_at(&self, off: usize) -> Option<&'a Token> {
        self.toks.get(self.pos + off)
    }

    fn bump(&mut self) -> Option<&'a Token> {
        let t = self.toks.get(self.pos);
        self.pos += 1;
        t
    }

    fn at_kw(&self, kw: &str) -> bool {
        self.peek().is_some_and(|t| t.is_kw(kw))
    }

    fn eat_kw(&mut self, kw: &str) -> bool {
        let hit = self.at_kw(kw);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn eat(&mut self, tok: &Tok) -> bool {
        let hit = self.peek().is_some_and(|t| &t.tok == tok);
        if hit {
            self.pos += 1;
        }
        hit
    }

    /// "syntax error at or near ..." for the current token (or end of input).
    fn syntax_error(&self) -> SqlError {
        match self.peek() {
            Some(t) => SqlError::syntax_error(format!(
                "syntax error at or near \"{}\"",
                &self.src[t.start..t.end]
            )),
            None => SqlError::syntax_error("syntax error at end of input"),
        }
    }

    fn expect(&mut self, tok: &Tok) -> Result<(), SqlError> {
        if self.eat(tok) {
            Ok(())
        } else {
            Err(self.syntax_error())
        }
    }

    fn expect_end(&self) -> Result<(), SqlError> {
        if self.peek().is_none() {
            Ok(())
        } else {
            Err(self.syntax_error())
        }
    }

    /// An identifier (keyword or quoted), as a name.
    fn name(&mut self) -> Result<String, SqlError> {
        match self.peek().map(|t| &t.tok) {
            Some(Tok::Ident(s) | Tok::QuotedIdent(s)) => {
                self.pos += 1;
                Ok(s.clone())
            }
            _ => Err(self.syntax_error()),
        }
    }

    fn statement(mut self) -> Result<Statement, SqlError> {
        let first = match self.peek().map(|t| &t.tok) {
            Some(Tok::Ident(kw)) => kw.clone(),
            Some(Tok::LParen) => {
                return Err(SqlError::not_supported(
                    "parenthesized queries are not supported by walshm",
                ))
            }
            _ => return Err(self.syntax_error()),
        };
        self.pos += 1;
        let stmt = match first.as_str() {
            "select" => self.select()?,
            "begin" => self.begin(true)?,
            "start" => {
                if !self.eat_kw("transaction") {
                    return Err(self.syntax_error());
                }
                self.begin(false)?
            }
            "commit" | "end" => self.finish_transaction(Statement::Commit, &first)?,
            "rollback" | "abort" => self.finish_transaction(Statement::Rollback, &first)?,
            "checkpoint" => {
                self.expect_end()?;
                Statement::Checkpoint
            }
            "set" => self.set()?,
            "reset" => self.reset()?,
            "show" => self.show()?,
            other if UNSUPPORTED_COMMANDS.contains(&other) => self.unsupported(other),
            _ => {
                self.pos -= 1;
                return Err(self.syntax_error());
            }
        };
        Ok(stmt)
    }

    fn unsupported(&mut self, command: &str) -> Statement {
        let mut what = command.to_ascii_uppercase();
        if let Some(Tok::Ident(object)) = self.peek().map(|t| &t.tok) {
            if matches!(
                command,
                "create"
                    | "drop"
                    | "alter"
                    | "comment"
                    | "grant"
                    | "revoke"
                    | "prepare"
                    | "release"
            ) {
                what = format!("{what} {}", object.to_ascii_uppercase());
            }
        }
        Statement::Unsupported(what)
    }

    /// Skips transaction modes (ISOLATION LEVEL ..., READ WRITE, ...), which walshm ignores.
    fn transaction_modes(&mut self) -> Result<(), SqlError> {
        while let Some(t) = self.peek() {
            match &t.tok {
                Tok::Ident(_) | Tok::Comma => self.pos += 1,
                _ => return Err(self.syntax_error()),
            }
        }
        Ok(())
    }

    fn begin(&mut self, allow_work: bool) -> Result<Statement, SqlError> {
        if allow_work && !self.eat_kw("work") {
            self.eat_kw("transaction");
        }
        self.transaction_modes()?;
        Ok(Statement::Begin)
    }

    fn finish_transaction(&mut self, stmt: Statement, first: &str) -> Result<Statement, SqlError> {
        if self.at_kw("prepared") {
            return Ok(Statement::Unsupported(format!(
                "{} PREPARED",
                first.to_ascii_uppercase()
            )));
        }
        if !self.eat_kw("work") {
            self.eat_kw("transaction");
        }
        if stmt == Statement::Rollback && self.at_kw("to") {
            return Ok(Statement::Unsupported("ROLLBACK TO SAVEPOINT".into()));
        }
        if self.eat_kw("and") {
            let no = self.eat_kw("no");
            if !self.eat_kw("chain") {
                return Err(self.syntax_error());
            }
            if !no {
                return Ok(Statement::Unsupported(format!(
                    "{} AND CHAIN",
                    first.to_ascii_uppercase()
                )));
            }
        }
        self.expect_end()?;
        Ok(stmt)
    }

    /// A possibly dotted parameter name (custom.setting).
    fn parameter_name(&mut self) -> Result<String, SqlError> {
        let mut name = self.name()?;
        while self.eat(&Tok::Dot) {
            name = format!("{name}.{}", self.name()?);
        }
        Ok(name)
    }

    fn set(&mut self) -> Result<Statement, SqlError> {
        let local = self.eat_kw("local");
        if !local {
            self.eat_kw("session");
        }
        if self.at_kw("transaction") || self.at_kw("characteristics") {
            self.pos = self.toks.len();
            return Ok(Statement::SetIgnored);
        }
        let name = if self.at_kw("time") && self.peek_at(1).is_some_and(|t| t.is_kw("zone")) {
            self.pos += 2;
            "timezone".to_string()
        } else if self.eat_kw("names") {
            "client_encoding".to_string()
        } else if self.eat_kw("schema") {
            "search_path".to_string()
        } else {
            let name = self.parameter_name()?;
            if !(self.eat_kw("to") || self.eat(&Tok::Op("=".into()))) {
                return Err(self.syntax_error());
            }
            name
        };
        let value = self.set_value()?;
        Ok(Statement::Set { name, value, local })
    }

    fn set_value(&mut self) -> Result<SetValue, SqlError> {
        if self.eat_kw("default") || self.eat_kw("local") {
            self.expect_end()?;
            return Ok(SetValue::Default);
        }
        let mut values = Vec::new();
        loop {
            let negative = self.eat(&Tok::Op("-".into()));
            let value = match self.bump().map(|t| &t.tok) {
                Some(
                    Tok::Ident(s)
                    | Tok::QuotedIdent(s)
                    | Tok::Str(s)
                    | Tok::Integer(s)
                    | Tok::Decimal(s),
                ) => s.clone(),
                _ => {
                    self.pos -= 1;
                    return Err(self.syntax_error());
                }
            };
            values.push(if negative { format!("-{value}") } else { value });
            if !self.eat(&Tok::Comma) {
                break;
            }
        }
        self.expect_end()?;
        Ok(SetValue::Values(values))
    }

    fn reset(&mut self) -> Result<Statement, SqlError> {
        if self.eat_kw("all") {
            self.expect_end()?;
            return Ok(Statement::Reset(None));
        }
        let name = self.parameter_name()?;
        self.expect_end()?;
        Ok(Statement::Reset(Some(name)))
    }

    fn show(&mut self) -> Result<Statement, SqlError> {
        let name = if self.at_kw("time") && self.peek_at(1).is_some_and(|t| t.is_kw("zone")) {
            self.pos += 2;
            "timezone".to_string()
        } else if self.at_kw("transaction") {
            self.pos += 1;
            for kw in ["isolation", "level"] {
                if !self.eat_kw(kw) {
                    return Err(self.syntax_error());
                }
            }
            "transaction_isolation".to_string()
        } else {
            self.parameter_name()?
        };
        self.expect_end()?;
        Ok(Statement::Show(name))
    }

    fn select(&mut self) -> Result<Statement, SqlError> {
        if self.at_kw("distinct") {
            return Ok(Statement::Unsupported("SELECT DISTINCT".into()));
        }
        self.eat_kw("all");
        let mut items = Vec::new();
        if self.peek().is_some() && !self.at_select_clause() {
            loop {
                if items.len() == MAX_TARGET_LIST {
                    return Err(too_many_columns());
                }
                items.push(self.select_item()?);
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
        }
        if let Some(t) = self.peek() {
            if let Tok::Ident(kw) = &t.tok {
                if SELECT_CLAUSES.contains(&kw.as_str()) {
                    return Ok(Statement::Unsupported(format!(
                        "SELECT ... {}",
                        kw.to_ascii_uppercase()
                    )));
                }
            }
            return Err(self.syntax_error());
        }
        Ok(Statement::Select(items))
    }

    fn at_select_clause(&self) -> bool {
        matches!(self.peek().map(|t| &t.tok), Some(Tok::Ident(kw)) if SELECT_CLAUSES.contains(&kw.as_str()))
    }

    fn select_item(&mut self) -> Result<SelectItem, SqlError> {
        if self.peek().is_some_and(|t| t.tok == Tok::Op("*".into())) {
            return Err(SqlError::syntax_error(
                "SELECT * with no tables specified is not valid",
            ));
        }
        let expr = self.expr()?.expr;
        let alias = if self.eat_kw("as") {
            Some(self.name()?)
        } else {
            match self.peek().map(|t| &t.tok) {
                Some(Tok::QuotedIdent(s)) => {
                    self.pos += 1;
                    Some(s.clone())
                }
                Some(Tok::Ident(s)) if !SELECT_CLAUSES.contains(&s.as_str()) => {
                    self.pos += 1;
                    Some(s.clone())
                }
                _ => None,
            }
        };
        Ok(SelectItem { expr, alias })
    }

    fn expr(&mut self) -> Result<Tree, SqlError> {
        let e = self.expr_without_trailing_check()?;
        if let Some(Tok::Op(op)) = self.peek().map(|t| &t.tok) {
            return Err(SqlError::not_supported(format!(
                "operator {op} is not supported by walshm"
            )));
        }
        Ok(e)
    }

    /// Every recursion of the parser passes here: refuses to nest deeper than MAX_EXPR_DEPTH.
    fn unary(&mut self) -> Result<Tree, SqlError> {
        if self.nesting >= MAX_EXPR_DEPTH {
            return Err(too_deep());
        }
        self.nesting += 1;
        let result = self.unary_nested();
        self.nesting -= 1;
        result
    }

    fn unary_nested(&mut self) -> Result<Tree, SqlError> {
        if self.eat(&Tok::Op("-".into())) {
            let operand = self.unary()?;
            return match operand.expr {
                Expr::Integer(n) => Ok(Tree::leaf(Expr::Integer(-n))),
                _ => operand.wrap(Expr::Negate),
            };
        }
        if self.eat(&Tok::Op("+".into())) {
            return self.unary();
        }
        self.primary()
    }

    /// A type name, possibly two words ("double precision") and a typmod to ignore.
    fn type_name(&mut self) -> Result<String, SqlError> {
        let mut name = self.name()?;
        if name == "pg_catalog" && self.eat(&Tok::Dot) {
            name = self.name()?;
        }
        if matches!(name.as_str(), "double" | "character") {
            if let Some(Tok::Ident(second)) = self.peek().map(|t| &t.tok) {
                name = format!("{name} {second}");
                self.pos += 1;
            }
        }
        if self.eat(&Tok::LParen) {
            while !self.eat(&Tok::RParen) {
                if self.bump().is_none() {
                    return Err(self.syntax_error());
                }
            }
        }
        if self.peek().is_some_and(|t| t.tok == Tok::LBracket) {
            return Err(SqlError::not_supported(
                "arrays are not supported by walshm",
            ));
        }
        Ok(name)
    }

    fn integer(&self, text: &str) -> Result<Tree, SqlError> {
        text.parse::<i64>()
            .map(|n| Tree::leaf(Expr::Integer(n)))
            .map_err(|_| {
                SqlError::not_supported(format!(
                    "numeric literal {text} is not supported by walshm"
                ))
            })
    }

    fn primary(&mut self) -> Result<Tree, SqlError> {
        let Some(t) = self.peek() else {
            return Err(self.syntax_error());
        };
        match &t.tok {
            Tok::Integer(text) => {
                self.pos += 1;
                self.integer(text)
            }
            Tok::Decimal(text) => Err(SqlError::not_supported(format!(
                "numeric literal {text} is not supported by walshm"
            ))),
            Tok::Str(s) => {
                self.pos += 1;
                Ok(Tree::leaf(Expr::Str(s.clone())))
            }
            Tok::Param(n) => {
                self.pos += 1;
                Ok(Tree::leaf(Expr::Param(*n)))
            }
            Tok::LParen => {
                self.pos += 1;
                let e = self.expr()?;
                self.expect(&Tok::RParen)?;
                Ok(e)
            }
            Tok::Ident(word) => self.word(word),
            Tok::QuotedIdent(_) => self.call_or_column(),
            _ => Err(self.syntax_error()),
        }
    }

    /// A primary starting with a keyword or identifier.
    fn word(&mut self, word: &str) -> Result<Tree, SqlError> {
        let next_is_string = matches!(self.peek_at(1).map(|t| &t.tok), Some(Tok::Str(_)));
        match word {
            "true" | "false" | "null" if !self.peek_at(1).is_some_and(|t| t.tok == Tok::LParen) => {
                self.pos += 1;
                Ok(Tree::leaf(match word {
                    "true" => Expr::Bool(true),
                    "false" => Expr::Bool(false),
                    _ => Expr::Null,
                }))
            }
            "cast" if self.peek_at(1).is_some_and(|t| t.tok == Tok::LParen) => {
                self.pos += 2;
                let expr = self.expr_without_trailing_check()?;
                if !self.eat_kw("as") {
                    return Err(self.syntax_error());
                }
                let type_name = self.type_name()?;
                self.expect(&Tok::RParen)?;
                expr.wrap(|expr| Expr::Cast { expr, type_name })
            }
            _ if next_is_string => {
                // Typed literal: text 'abc', bytea '\x00', pg_lsn '0/10'.
                let type_name = self.type_name()?;
                let Some(Tok::Str(s)) = self.bump().map(|t| &t.tok) else {
                    return Err(self.syntax_error());
                };
                Tree::leaf(Expr::Str(s.clone())).wrap(|expr| Expr::Cast { expr, type_name })
            }
            _ => self.call_or_column(),
        }
    }

    /// A unary expression and its postfix casts (a loop: each cast is checked by `Tree::wrap`).
    fn expr_without_trailing_check(&mut self) -> Result<Tree, SqlError> {
        let mut e = self.unary()?;
        while self.eat(&Tok::Op("::".into())) {
            let type_name = self.type_name()?;
            e = e.wrap(|expr| Expr::Cast { expr, type_name })?;
        }
        Ok(e)
    }

    fn call_or_column(&mut self) -> Result<Tree, SqlError> {
        let mut name = self.name()?;
        if self.eat(&Tok::Dot) {
            let second = self.name()?;
            name = if name == "pg_catalog" {
                second
            } else {
                format!("{name}.{second}")
            };
        }
        if !self.eat(&Tok::LParen) {
            return Err(SqlError::error(
                crate::error::sqlstate::UNDEFINED_COLUMN,
                format!("column \"{name}\" does not exist"),
            ));
        }
        let mut args = Vec::new();
        let mut highest_arg = 0;
        if !self.eat(&Tok::RParen) {
            loop {
                let arg = self.expr()?;
                highest_arg = highest_arg.max(arg.height);
                args.push(arg.expr);
                if self.eat(&Tok::RParen) {
                    break;
                }
                self.expect(&Tok::Comma)?;
            }
        }
        Ok(Tree {
            height: node_above(highest_arg)?,
            expr: Expr::Call { name, args },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(sql: &str) -> Statement {
        let mut v = parse_statements(sql).unwrap();
        assert_eq!(v.len(), 1, "{sql}");
        v.remove(0)
    }

    fn call(name: &str, args: Vec<Expr>) -> Expr {
        Expr::Call {
            name: name.into(),
            args,
        }
    }

    #[test]
    fn parses_emit_message_with_nested_repeat() {
        let s = one("  select pg_logical_emit_message(false, 'test', repeat('x', 100));  ");
        assert_eq!(
            s,
            Statement::Select(vec![SelectItem {
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
        assert_eq!(v[0], Statement::Begin);
        assert_eq!(
            v[1],
            Statement::Select(vec![SelectItem {
                expr: call("txid_current", vec![]),
                alias: Some("x".into())
            }])
        );
        assert_eq!(v[2], Statement::Commit);
        assert!(parse_statements(" ; -- nothing\n").unwrap().is_empty());
    }

    #[test]
    fn parses_transaction_variants() {
        assert_eq!(
            one("START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ WRITE"),
            Statement::Begin
        );
        assert_eq!(one("begin work"), Statement::Begin);
        assert_eq!(one("END TRANSACTION"), Statement::Commit);
        assert_eq!(one("abort"), Statement::Rollback);
        assert_eq!(one("ROLLBACK AND NO CHAIN"), Statement::Rollback);
        assert!(matches!(one("COMMIT AND CHAIN"), Statement::Unsupported(_)));
        assert!(matches!(
            one("ROLLBACK TO SAVEPOINT a"),
            Statement::Unsupported(_)
        ));
    }

    #[test]
    fn parses_set_show_reset() {
        assert_eq!(
            one("SET synchronous_commit TO off"),
            Statement::Set {
                name: "synchronous_commit".into(),
                value: SetValue::Values(vec!["off".into()]),
                local: false
            }
        );
        assert_eq!(
            one("set local synchronous_commit = 'remote_write'"),
            Statement::Set {
                name: "synchronous_commit".into(),
                value: SetValue::Values(vec!["remote_write".into()]),
                local: true
            }
        );
        assert_eq!(
            one("SET TIME ZONE 'UTC'"),
            Statement::Set {
                name: "timezone".into(),
                value: SetValue::Values(vec!["UTC".into()]),
                local: false
            }
        );
        assert_eq!(
            one("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
            Statement::SetIgnored
        );
        assert_eq!(
            one("SHOW synchronous_commit"),
            Statement::Show("synchronous_commit".into())
        );
        assert_eq!(
            one("SHOW TRANSACTION ISOLATION LEVEL"),
            Statement::Show("transaction_isolation".into())
        );
        assert_eq!(one("RESET ALL"), Statement::Reset(None));
    }

    #[test]
    fn parses_casts_and_typed_literals() {
        assert_eq!(
            one("SELECT $1::bytea, CAST('5' AS bigint), text 'a', -3"),
            Statement::Select(vec![
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
        let code = |sql: &str| parse_statements(sql).unwrap_err().code;
        assert_eq!(code("SELEC 1"), "42601");
        assert_eq!(code("SELECT (1"), "42601");
        assert_eq!(code("SELECT foo("), "42601");
        assert_eq!(code("SELECT 1 2"), "42601");
        assert_eq!(code("SELECT x"), "42703");
        assert_eq!(code("SELECT 1 + 1"), "0A000");
        assert!(
            matches!(one("CREATE TABLE t (a int)"), Statement::Unsupported(s) if s == "CREATE TABLE")
        );
        assert!(matches!(one("SELECT 1 FROM t"), Statement::Unsupported(_)));
    }

    #[test]
    fn syntax_error_quotes_the_token() {
        let e = parse_statements("SELECT 1 garbage(").unwrap_err();
        assert_eq!(e.message, "syntax error at or near \"(\"");
        let e = parse_statements("SELECT pg_switch_wal(").unwrap_err();
        assert_eq!(e.message, "syntax error at end of input");
    }
}
