//! Parser for walshm's SQL: SELECT (target list with aliases and `*`, FROM
//! one relation or set-returning function, WHERE, GROUP BY, HAVING, ORDER
//! BY, LIMIT/OFFSET) over expressions (literals, `$n`, column references,
//! function calls and aggregates, casts, arithmetic, comparisons, AND/OR/NOT,
//! IS [NOT] NULL, [NOT] LIKE/ILIKE, [NOT] IN (list)), transaction control,
//! CHECKPOINT, SET/RESET/SHOW. Known SQL commands walshm does not implement
//! parse to `Unsupported` (reported as 0A000); anything else is a 42601
//! syntax error.
//!
//! Why hand-written and not the `sqlparser` crate (0.64, PostgreSqlDialect;
//! maintained by Apache DataFusion, releases every few weeks): measured with
//! `cargo run --release -p protocol --example parse_bench` beside a scratch
//! build of sqlparser (2 cores, shared machine, best of 5 x 400k parses):
//! `SELECT pg_logical_emit_message(false, 'test', repeat('x', 16))` 1.0 us
//! here vs 8.4 us, `SELECT 1` 0.23 us vs 1.9 us, the GROUP BY monitoring
//! query 0.8 us vs 9.1 us. A simple-protocol round trip is about 18 us
//! (54 k tps, one client), so sqlparser would cost ~35 % there, far past
//! the 5 % allowed; and its errors carry no position at end of input and
//! quote other tokens than PostgreSQL's grammar ("Expected: an expression,
//! found: EOF"). So the hand-written parser was extended; extended, it
//! parses the same two statements in 0.9 us and 0.19 us (best of 4 runs
//! beside the old one's 1.0 us and 0.21 us), and `examples/serve_bench`
//! puts a whole simple Query through `serve` at +0.1 us (`SELECT 1`) and
//! +0.3 us (the emit statement) over the parser before this extension.
//!
//! Precedence, loosest first, as PostgreSQL's grammar: OR, AND, NOT, IS,
//! comparisons (non-associative), LIKE/ILIKE/IN, `||`, `+ -`, `* / %`,
//! unary minus, `::`.
//!
//! Invariants: one `Statement` per `;`-separated piece; empty pieces are
//! dropped (as PostgreSQL's raw parser does); syntax errors quote the token
//! "at or near" which parsing failed and carry its 1-based character
//! position (the `;` that ends a piece, or the end of the string, as
//! PostgreSQL does); nodes that analysis may complain about (column
//! references, calls, FROM items, operators) keep their position too.
//!
//! Depth (see `crate::limits`): every recursion of the parser goes through
//! `nested` (via `unary` for parentheses, arguments, unary signs and CAST;
//! directly for NOT), which refuses
//! to go deeper than `MAX_EXPR_DEPTH` (54001). Chains built in loops
//! (`a + b + c ...`, `x::a::b ...`) are checked by each subtree's height
//! (`Tree`): no node above `MAX_EXPR_DEPTH` is built. Hence no `Expr` that
//! exists, even a partial one dropped after an error, is higher than
//! `MAX_EXPR_DEPTH`, and the recursive `Drop`/`Clone`/`PartialEq` of
//! `Box<Expr>` trees are bounded. A target list stops at `MAX_TARGET_LIST`
//! entries (54011). The lexer is one pass and the parser never backtracks
//! more than a token, so long flat inputs cost linear time.

mod expr;

use super::lexer::{end_position, lex_within, Tok, Token};
use crate::error::SqlError;
use crate::limits::{too_deep, too_many_columns, MAX_EXPR_DEPTH, MAX_TARGET_LIST};

/// Binary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Concat,
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

impl BinOp {
    /// The operator as SQL writes it (for error messages).
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Or => "OR",
            BinOp::And => "AND",
            BinOp::Eq => "=",
            BinOp::Ne => "<>",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Concat => "||",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Mod => "%",
        }
    }

    fn comparison(op: &str) -> Option<BinOp> {
        Some(match op {
            "=" => BinOp::Eq,
            "<>" | "!=" => BinOp::Ne,
            "<" => BinOp::Lt,
            "<=" => BinOp::Le,
            ">" => BinOp::Gt,
            ">=" => BinOp::Ge,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    Integer(i64),
    /// A numeric literal that is not a bigint (has a point, or is too long).
    Decimal(String),
    /// A string literal (type unknown until context decides).
    Str(String),
    Bool(bool),
    Null,
    Param(u32),
    /// `name(args)`; `star` for `count(*)`. `pos`: where the name is.
    Call {
        name: String,
        args: Vec<Expr>,
        star: bool,
        pos: usize,
    },
    Cast {
        expr: Box<Expr>,
        type_name: String,
    },
    Negate(Box<Expr>),
    /// A column reference, possibly qualified by the relation's name or alias.
    Column {
        qualifier: Option<String>,
        name: String,
        pos: usize,
    },
    /// `*` in a target list.
    Wildcard(usize),
    Binary {
        op: BinOp,
        left: Box<Expr>,
        right: Box<Expr>,
        pos: usize,
    },
    Not(Box<Expr>),
    IsNull {
        expr: Box<Expr>,
        negated: bool,
    },
    Like {
        expr: Box<Expr>,
        pattern: Box<Expr>,
        negated: bool,
        insensitive: bool,
        pos: usize,
    },
    InList {
        expr: Box<Expr>,
        list: Vec<Expr>,
        negated: bool,
        pos: usize,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectItem {
    pub expr: Expr,
    pub alias: Option<String>,
}

/// FROM's one item: a relation, or a set-returning function with its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FromItem {
    pub name: String,
    /// Some for `name(args)`.
    pub args: Option<Vec<Expr>>,
    pub alias: Option<String>,
    pub pos: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderItem {
    pub expr: Expr,
    pub descending: bool,
    /// None: PostgreSQL's default (NULLs last ascending, first descending).
    pub nulls_first: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Select {
    pub items: Vec<SelectItem>,
    pub from: Option<FromItem>,
    pub filter: Option<Expr>,
    pub group_by: Vec<Expr>,
    pub having: Option<Expr>,
    pub order_by: Vec<OrderItem>,
    pub limit: Option<Expr>,
    pub offset: Option<Expr>,
}

impl Select {
    /// A FROM-less SELECT of `items` (the common fast path).
    pub fn of(items: Vec<SelectItem>) -> Select {
        Select {
            items,
            ..Select::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetValue {
    Default,
    Values(Vec<String>),
}

/// A utility statement: transaction control, CHECKPOINT, the run-time
/// parameters' SET/RESET/SHOW and publications. Analysis has nothing to
/// type in one, so it is carried into `Kind::Utility` as parsed (as
/// PostgreSQL's Query carries `utilityStmt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Utility {
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
    /// SHOW name (`all` included: analysis tells SHOW ALL apart).
    Show(String),
    /// CREATE PUBLICATION name [FOR ALL TABLES] [WITH (...)].
    CreatePublication(String),
    /// DROP PUBLICATION [IF EXISTS] name [, ...] [CASCADE | RESTRICT].
    DropPublication {
        names: Vec<String>,
        if_exists: bool,
    },
}

impl Utility {
    /// COMMIT/ROLLBACK: the only statements allowed in a failed transaction block.
    pub fn is_transaction_exit(&self) -> bool {
        matches!(self, Utility::Commit | Utility::Rollback)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Statement {
    Select(Box<Select>),
    Utility(Utility),
    /// A known SQL command walshm does not implement; the text names it.
    Unsupported(String),
}

impl Statement {
    /// COMMIT/ROLLBACK: the only statements allowed in a failed transaction block.
    pub fn is_transaction_exit(&self) -> bool {
        matches!(self, Statement::Utility(u) if u.is_transaction_exit())
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

/// Operator precedences, loosest first (PostgreSQL's grammar).
const PREC_OR: u8 = 1;
const PREC_AND: u8 = 2;
const PREC_NOT: u8 = 3;
const PREC_IS: u8 = 4;
const PREC_COMPARE: u8 = 5;
const PREC_LIKE: u8 = 6;
const PREC_CONCAT: u8 = 7;
const PREC_ADD: u8 = 8;
const PREC_MUL: u8 = 9;

/// The SELECT clauses walshm implements after FROM, in their order.
const CLAUSES_AFTER_FROM: &[&str] = &["where", "group", "having", "order", "limit", "offset"];

/// SELECT clauses walshm does not implement.
const UNSUPPORTED_CLAUSES: &[&str] = &[
    "union",
    "intersect",
    "except",
    "into",
    "for",
    "window",
    "fetch",
];

/// Keywords that start a join.
const JOIN_KEYWORDS: &[&str] = &["join", "inner", "left", "right", "full", "cross", "natural"];

/// A clause that may follow FROM (implemented or not).
fn is_clause_after_from(kw: &str) -> bool {
    CLAUSES_AFTER_FROM.contains(&kw) || UNSUPPORTED_CLAUSES.contains(&kw)
}

/// Keywords that end a target-list item (never a bare alias): FROM and
/// every clause after it.
fn ends_select_item(kw: &str) -> bool {
    kw == "from" || is_clause_after_from(kw)
}

/// Keywords that cannot be a bare alias of a FROM item: the clauses after
/// FROM, a join's keywords and its ON / USING.
fn ends_from_item(kw: &str) -> bool {
    is_clause_after_from(kw) || JOIN_KEYWORDS.contains(&kw) || kw == "on" || kw == "using"
}

/// Parses a query string into statements.
pub fn parse_statements(src: &str) -> Result<Vec<Statement>, SqlError> {
    parse_statements_within(src, usize::MAX)
}

/// `parse_statements`, 53200 if the tokens would take more than `memory_limit` bytes.
pub fn parse_statements_within(src: &str, memory_limit: usize) -> Result<Vec<Statement>, SqlError> {
    let tokens = lex_within(src, memory_limit)?;
    let mut statements = Vec::new();
    let mut rest = &tokens[..];
    while !rest.is_empty() {
        let cut = rest.iter().position(|t| t.tok == Tok::Semicolon);
        let (piece, terminator) = match cut {
            Some(i) => (&rest[..i], Some(&rest[i])),
            None => (rest, None),
        };
        rest = cut.map_or(&[][..], |i| &rest[i + 1..]);
        if piece.is_empty() {
            continue;
        }
        let parser = Parser {
            src,
            toks: piece,
            terminator,
            pos: 0,
            nesting: 0,
        };
        statements.push(parser.statement()?);
    }
    Ok(statements)
}

struct Parser<'a> {
    src: &'a str,
    toks: &'a [Token],
    /// The `;` that ends this piece (None: the end of the string).
    terminator: Option<&'a Token>,
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

    /// `kw BY` (GROUP BY, ORDER BY): true once both are eaten; 42601 if
    /// `kw` is not followed by BY.
    fn eat_kw_by(&mut self, kw: &str) -> Result<bool, SqlError> {
        if !self.eat_kw(kw) {
            return Ok(false);
        }
        self.expect_kw("by")?;
        Ok(true)
    }

    fn eat(&mut self, tok: &Tok) -> bool {
        let hit = self.peek().is_some_and(|t| &t.tok == tok);
        if hit {
            self.pos += 1;
        }
        hit
    }

    /// "syntax error at or near ..." for the current token (or end of
    /// input), at its position.
    fn syntax_error(&self) -> SqlError {
        match self.peek().or(self.terminator) {
            Some(t) => SqlError::syntax_error(format!(
                "syntax error at or near \"{}\"",
                &self.src[t.start..t.end]
            ))
            .with_position(t.pos),
            None => SqlError::syntax_error("syntax error at end of input")
                .with_position(end_position(self.src)),
        }
    }

    /// The position of the current token (or of the end of the piece).
    fn here(&self) -> usize {
        match self.peek().or(self.terminator) {
            Some(t) => t.pos,
            None => end_position(self.src),
        }
    }

    fn at_op(&self, op: &str) -> bool {
        matches!(self.peek().map(|t| &t.tok), Some(Tok::Op(o)) if o == op)
    }

    fn eat_op(&mut self, op: &str) -> bool {
        let hit = self.at_op(op);
        if hit {
            self.pos += 1;
        }
        hit
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
            "begin" => Statement::Utility(self.begin(true)?),
            "start" => {
                if !self.eat_kw("transaction") {
                    return Err(self.syntax_error());
                }
                Statement::Utility(self.begin(false)?)
            }
            "commit" | "end" => self.finish_transaction(Utility::Commit, &first)?,
            "rollback" | "abort" => self.finish_transaction(Utility::Rollback, &first)?,
            "checkpoint" => {
                self.expect_end()?;
                Statement::Utility(Utility::Checkpoint)
            }
            "set" => Statement::Utility(self.set()?),
            "reset" => Statement::Utility(self.reset()?),
            "show" => Statement::Utility(self.show()?),
            "create" if self.eat_kw("publication") => self.create_publication()?,
            "drop" if self.eat_kw("publication") => self.drop_publication()?,
            other if UNSUPPORTED_COMMANDS.contains(&other) => self.unsupported(other),
            _ => {
                self.pos -= 1;
                return Err(self.syntax_error());
            }
        };
        Ok(stmt)
    }

    /// After CREATE PUBLICATION: a publication is a name (walshm has no
    /// tables, so FOR TABLE / FOR TABLES IN SCHEMA are not supported);
    /// WITH options are skipped.
    fn create_publication(&mut self) -> Result<Statement, SqlError> {
        let name = self.name()?;
        if self.eat_kw("for") && !(self.eat_kw("all") && self.eat_kw("tables")) {
            return Ok(Statement::Unsupported(
                "CREATE PUBLICATION ... FOR TABLE".into(),
            ));
        }
        if self.eat_kw("with") {
            if !self.eat(&Tok::LParen) {
                return Err(self.syntax_error());
            }
            while !self.eat(&Tok::RParen) {
                if self.peek().is_none() {
                    return Err(self.syntax_error());
                }
                self.pos += 1;
            }
        }
        self.expect_end()?;
        Ok(Statement::Utility(Utility::CreatePublication(name)))
    }

    /// After DROP PUBLICATION.
    fn drop_publication(&mut self) -> Result<Statement, SqlError> {
        let if_exists = self.at_kw("if") && self.peek_at(1).is_some_and(|t| t.is_kw("exists"));
        if if_exists {
            self.pos += 2;
        }
        let mut names = vec![self.name()?];
        while self.eat(&Tok::Comma) {
            names.push(self.name()?);
        }
        if !self.eat_kw("cascade") {
            self.eat_kw("restrict");
        }
        self.expect_end()?;
        Ok(Statement::Utility(Utility::DropPublication {
            names,
            if_exists,
        }))
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

    fn begin(&mut self, allow_work: bool) -> Result<Utility, SqlError> {
        if allow_work && !self.eat_kw("work") {
            self.eat_kw("transaction");
        }
        self.transaction_modes()?;
        Ok(Utility::Begin)
    }

    fn finish_transaction(&mut self, stmt: Utility, first: &str) -> Result<Statement, SqlError> {
        if self.at_kw("prepared") {
            return Ok(Statement::Unsupported(format!(
                "{} PREPARED",
                first.to_ascii_uppercase()
            )));
        }
        if !self.eat_kw("work") {
            self.eat_kw("transaction");
        }
        if stmt == Utility::Rollback && self.at_kw("to") {
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
        Ok(Statement::Utility(stmt))
    }

    /// A possibly dotted parameter name (custom.setting).
    fn parameter_name(&mut self) -> Result<String, SqlError> {
        let mut name = self.name()?;
        while self.eat(&Tok::Dot) {
            name = format!("{name}.{}", self.name()?);
        }
        Ok(name)
    }

    fn set(&mut self) -> Result<Utility, SqlError> {
        let local = self.eat_kw("local");
        if !local {
            self.eat_kw("session");
        }
        if self.at_kw("transaction") || self.at_kw("characteristics") {
            self.pos = self.toks.len();
            return Ok(Utility::SetIgnored);
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
        let value = self.set_value(name == "timezone")?;
        Ok(Utility::Set { name, value, local })
    }

    /// `timezone`: SET TIME ZONE LOCAL means DEFAULT; for any other
    /// parameter LOCAL is a plain word (`synchronous_commit = local`).
    fn set_value(&mut self, time_zone: bool) -> Result<SetValue, SqlError> {
        if self.eat_kw("default") || (time_zone && self.eat_kw("local")) {
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

    fn reset(&mut self) -> Result<Utility, SqlError> {
        if self.eat_kw("all") {
            self.expect_end()?;
            return Ok(Utility::Reset(None));
        }
        let name = self.parameter_name()?;
        self.expect_end()?;
        Ok(Utility::Reset(Some(name)))
    }

    fn show(&mut self) -> Result<Utility, SqlError> {
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
        Ok(Utility::Show(name))
    }

    fn select(&mut self) -> Result<Statement, SqlError> {
        if self.at_kw("distinct") {
            return Ok(Statement::Unsupported("SELECT DISTINCT".into()));
        }
        self.eat_kw("all");
        let mut select = Select::default();
        if self.peek().is_some() && !self.at_select_clause() {
            loop {
                if select.items.len() == MAX_TARGET_LIST {
                    return Err(too_many_columns());
                }
                select.items.push(self.select_item()?);
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
        }
        if self.eat_kw("from") {
            select.from = Some(self.relation_item()?);
            if self.at(&Tok::Comma) || self.at_join() {
                return Ok(Statement::Unsupported("SELECT ... JOIN".into()));
            }
        }
        if self.eat_kw("where") {
            select.filter = Some(self.expr()?.expr);
        }
        if self.eat_kw_by("group")? {
            select.group_by = self.expr_list()?;
        }
        if self.eat_kw("having") {
            select.having = Some(self.expr()?.expr);
        }
        if self.eat_kw_by("order")? {
            select.order_by = self.order_list()?;
        }
        self.limit_and_offset(&mut select)?;
        if let Some(Tok::Ident(kw)) = self.peek().map(|t| &t.tok) {
            if UNSUPPORTED_CLAUSES.contains(&kw.as_str()) {
                return Ok(Statement::Unsupported(format!(
                    "SELECT ... {}",
                    kw.to_ascii_uppercase()
                )));
            }
        }
        self.expect_end()?;
        Ok(Statement::Select(Box::new(select)))
    }

    fn at(&self, tok: &Tok) -> bool {
        self.peek().is_some_and(|t| &t.tok == tok)
    }

    fn at_join(&self) -> bool {
        JOIN_KEYWORDS.iter().any(|kw| self.at_kw(kw))
    }

    fn expect_kw(&mut self, kw: &str) -> Result<(), SqlError> {
        if self.eat_kw(kw) {
            Ok(())
        } else {
            Err(self.syntax_error())
        }
    }

    fn at_select_clause(&self) -> bool {
        matches!(self.peek().map(|t| &t.tok), Some(Tok::Ident(kw)) if ends_select_item(kw))
    }

    fn expr_list(&mut self) -> Result<Vec<Expr>, SqlError> {
        let mut list = vec![self.expr()?.expr];
        while self.eat(&Tok::Comma) {
            list.push(self.expr()?.expr);
        }
        Ok(list)
    }

    fn order_list(&mut self) -> Result<Vec<OrderItem>, SqlError> {
        let mut list = Vec::new();
        loop {
            let expr = self.expr()?.expr;
            let descending = if self.eat_kw("desc") {
                true
            } else {
                self.eat_kw("asc");
                false
            };
            let nulls_first = if self.eat_kw("nulls") {
                if self.eat_kw("first") {
                    Some(true)
                } else {
                    self.expect_kw("last")?;
                    Some(false)
                }
            } else {
                None
            };
            list.push(OrderItem {
                expr,
                descending,
                nulls_first,
            });
            if !self.eat(&Tok::Comma) {
                return Ok(list);
            }
        }
    }

    /// LIMIT n|ALL and OFFSET n [ROW|ROWS], in either order.
    fn limit_and_offset(&mut self, select: &mut Select) -> Result<(), SqlError> {
        loop {
            if select.limit.is_none() && self.eat_kw("limit") {
                select.limit = Some(if self.eat_kw("all") {
                    Expr::Null
                } else {
                    self.expr()?.expr
                });
            } else if select.offset.is_none() && self.eat_kw("offset") {
                select.offset = Some(self.expr()?.expr);
                if !self.eat_kw("rows") {
                    self.eat_kw("row");
                }
            } else {
                return Ok(());
            }
        }
    }

    fn relation_item(&mut self) -> Result<FromItem, SqlError> {
        if self.at(&Tok::LParen) {
            return Err(
                SqlError::not_supported("subqueries in FROM are not supported by walshm")
                    .with_position(self.here()),
            );
        }
        let pos = self.here();
        let mut name = self.name()?;
        if self.eat(&Tok::Dot) {
            let second = self.name()?;
            name = if name == "pg_catalog" {
                second
            } else {
                format!("{name}.{second}")
            };
        }
        let args = if self.eat(&Tok::LParen) {
            Some(self.call_args()?.0)
        } else {
            None
        };
        let alias = self.alias(ends_from_item)?;
        Ok(FromItem {
            name,
            args,
            alias,
            pos,
        })
    }

    fn select_item(&mut self) -> Result<SelectItem, SqlError> {
        if self.at_op("*") {
            let pos = self.here();
            self.pos += 1;
            return Ok(SelectItem {
                expr: Expr::Wildcard(pos),
                alias: None,
            });
        }
        let expr = self.expr()?.expr;
        let alias = self.alias(ends_select_item)?;
        Ok(SelectItem { expr, alias })
    }

    /// An optional alias: `AS name`, a quoted name, or a bare name that
    /// `ends_item` does not claim as the keyword after the item.
    fn alias(&mut self, ends_item: fn(&str) -> bool) -> Result<Option<String>, SqlError> {
        if self.eat_kw("as") {
            return Ok(Some(self.name()?));
        }
        let alias = match self.peek().map(|t| &t.tok) {
            Some(Tok::QuotedIdent(s)) => s.clone(),
            Some(Tok::Ident(s)) if !ends_item(s) => s.clone(),
            _ => return Ok(None),
        };
        self.pos += 1;
        Ok(Some(alias))
    }
}
#[cfg(test)]
mod tests;
