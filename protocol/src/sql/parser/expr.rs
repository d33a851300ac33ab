//! Expressions: precedence climbing over PostgreSQL's operator levels
//! (see the parser's header for the order), primaries (literals, `$n`,
//! column references, calls and aggregates, parenthesized and cast
//! expressions), each node's height checked against the depth limit as it
//! is built.

use super::*;

impl<'a> Parser<'a> {
    /// A whole expression; an operator walshm does not know is 0A000.
    pub(super) fn expr(&mut self) -> Result<Tree, SqlError> {
        let e = self.operators(0)?;
        if let Some(t) = self.peek() {
            if let Tok::Op(op) = &t.tok {
                return Err(SqlError::not_supported(format!(
                    "operator {op} is not supported by walshm"
                ))
                .with_position(t.pos));
            }
        }
        Ok(e)
    }

    /// The binary operator at the current token and its precedence.
    pub(super) fn infix(&self) -> Option<(BinOp, u8)> {
        let t = self.peek()?;
        Some(match &t.tok {
            Tok::Ident(kw) if kw == "or" => (BinOp::Or, PREC_OR),
            Tok::Ident(kw) if kw == "and" => (BinOp::And, PREC_AND),
            Tok::Op(op) => match op.as_str() {
                "||" => (BinOp::Concat, PREC_CONCAT),
                "+" => (BinOp::Add, PREC_ADD),
                "-" => (BinOp::Sub, PREC_ADD),
                "*" => (BinOp::Mul, PREC_MUL),
                "/" => (BinOp::Div, PREC_MUL),
                "%" => (BinOp::Mod, PREC_MUL),
                other => (BinOp::comparison(other)?, PREC_COMPARE),
            },
            _ => return None,
        })
    }

    /// Precedence climbing: an operand, then every operator binding at
    /// least as tightly as `min` (left-associative; comparisons do not
    /// associate, as in PostgreSQL: `a = b = c` is a syntax error).
    pub(super) fn operators(&mut self, min: u8) -> Result<Tree, SqlError> {
        let mut left = if self.eat_kw("not") {
            self.nested(|p| p.operators(PREC_NOT))?.wrap(Expr::Not)?
        } else {
            self.unary()?
        };
        loop {
            // Fast exit where an operand is most often followed by nothing more.
            if matches!(
                self.peek().map(|t| &t.tok),
                None | Some(Tok::Comma | Tok::RParen)
            ) {
                return Ok(left);
            }
            if min <= PREC_IS && self.at_is() {
                left = self.is_null(left)?;
                continue;
            }
            if min <= PREC_LIKE && self.at_like_or_in() {
                left = self.like_or_in(left)?;
                continue;
            }
            let Some((op, prec)) = self.infix() else {
                return Ok(left);
            };
            if prec < min {
                return Ok(left);
            }
            let pos = self.here();
            self.pos += 1;
            let right = self.operators(prec + 1)?;
            left = binary(op, left, right, pos)?;
            if prec == PREC_COMPARE && self.infix().is_some_and(|(_, p)| p == PREC_COMPARE) {
                return Err(self.syntax_error());
            }
        }
    }

    pub(super) fn at_is(&self) -> bool {
        self.at_kw("is") || self.at_kw("isnull") || self.at_kw("notnull")
    }

    /// IS [NOT] NULL, ISNULL, NOTNULL after `e`.
    pub(super) fn is_null(&mut self, e: Tree) -> Result<Tree, SqlError> {
        let negated = if self.eat_kw("is") {
            let negated = self.eat_kw("not");
            self.expect_kw("null")?;
            negated
        } else {
            self.pos += 1;
            self.toks[self.pos - 1].is_kw("notnull")
        };
        e.wrap(|expr| Expr::IsNull { expr, negated })
    }

    pub(super) fn at_like_or_in(&self) -> bool {
        let is = |t: Option<&Token>| {
            t.is_some_and(|t| t.is_kw("like") || t.is_kw("ilike") || t.is_kw("in"))
        };
        is(self.peek()) || (self.at_kw("not") && is(self.peek_at(1)))
    }

    /// [NOT] LIKE / ILIKE pattern, [NOT] IN (list) after `left`.
    pub(super) fn like_or_in(&mut self, left: Tree) -> Result<Tree, SqlError> {
        let negated = self.eat_kw("not");
        let pos = self.here();
        if self.eat_kw("in") {
            self.expect(&Tok::LParen)?;
            if self.at_kw("select") {
                return Err(
                    SqlError::not_supported("subqueries are not supported by walshm")
                        .with_position(self.here()),
                );
            }
            let (list, highest) = self.call_args()?;
            let height = node_above(left.height.max(highest))?;
            return Ok(Tree {
                expr: Expr::InList {
                    expr: Box::new(left.expr),
                    list,
                    negated,
                    pos,
                },
                height,
            });
        }
        let insensitive = self.at_kw("ilike");
        self.pos += 1;
        let pattern = self.operators(PREC_LIKE + 1)?;
        let height = node_above(left.height.max(pattern.height))?;
        Ok(Tree {
            expr: Expr::Like {
                expr: Box::new(left.expr),
                pattern: Box::new(pattern.expr),
                negated,
                insensitive,
                pos,
            },
            height,
        })
    }

    /// Every recursion of the parser passes here: refuses to nest deeper than MAX_EXPR_DEPTH.
    pub(super) fn nested(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<Tree, SqlError>,
    ) -> Result<Tree, SqlError> {
        if self.nesting >= MAX_EXPR_DEPTH {
            return Err(too_deep());
        }
        self.nesting += 1;
        let result = f(self);
        self.nesting -= 1;
        result
    }

    /// A unary expression (signs, then a primary with its casts); the
    /// recursion gate for parentheses, arguments and signs.
    pub(super) fn unary(&mut self) -> Result<Tree, SqlError> {
        if self.nesting >= MAX_EXPR_DEPTH {
            return Err(too_deep());
        }
        self.nesting += 1;
        let result = self.unary_nested();
        self.nesting -= 1;
        result
    }

    pub(super) fn unary_nested(&mut self) -> Result<Tree, SqlError> {
        if self.eat_op("-") {
            let operand = self.unary()?;
            return match operand.expr {
                Expr::Integer(n) => Ok(Tree::leaf(Expr::Integer(-n))),
                Expr::Decimal(d) => Ok(Tree::leaf(Expr::Decimal(format!("-{d}")))),
                _ => operand.wrap(Expr::Negate),
            };
        }
        if self.eat_op("+") {
            return self.unary();
        }
        self.postfix()
    }

    /// A primary and its postfix casts (a loop: each cast is checked by `Tree::wrap`).
    pub(super) fn postfix(&mut self) -> Result<Tree, SqlError> {
        let mut e = self.primary()?;
        while self.eat_op("::") {
            let type_name = self.type_name()?;
            e = e.wrap(|expr| Expr::Cast { expr, type_name })?;
        }
        Ok(e)
    }

    /// A type name, possibly two words ("double precision") and a typmod to ignore.
    pub(super) fn type_name(&mut self) -> Result<String, SqlError> {
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

    pub(super) fn integer(&self, text: &str) -> Tree {
        match text.parse::<i64>() {
            Ok(n) => Tree::leaf(Expr::Integer(n)),
            Err(_) => Tree::leaf(Expr::Decimal(text.to_string())),
        }
    }

    pub(super) fn primary(&mut self) -> Result<Tree, SqlError> {
        let Some(t) = self.peek() else {
            return Err(self.syntax_error());
        };
        match &t.tok {
            Tok::Integer(text) => {
                self.pos += 1;
                Ok(self.integer(text))
            }
            Tok::Decimal(text) => {
                self.pos += 1;
                Ok(Tree::leaf(Expr::Decimal(text.clone())))
            }
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
                if self.at_kw("select") {
                    return Err(
                        SqlError::not_supported("subqueries are not supported by walshm")
                            .with_position(self.here()),
                    );
                }
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
    pub(super) fn word(&mut self, word: &str) -> Result<Tree, SqlError> {
        let next_is_string = matches!(self.peek_at(1).map(|t| &t.tok), Some(Tok::Str(_)));
        let next_is_paren = self.peek_at(1).is_some_and(|t| t.tok == Tok::LParen);
        match word {
            "true" | "false" | "null" if !next_is_paren => {
                self.pos += 1;
                Ok(Tree::leaf(match word {
                    "true" => Expr::Bool(true),
                    "false" => Expr::Bool(false),
                    _ => Expr::Null,
                }))
            }
            "current_timestamp" | "localtimestamp" if !next_is_paren => {
                let pos = self.here();
                self.pos += 1;
                Ok(Tree::leaf(Expr::Call {
                    name: word.to_string(),
                    args: Vec::new(),
                    star: false,
                    pos,
                }))
            }
            "cast" if next_is_paren => {
                self.pos += 2;
                let expr = self.expr()?;
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

    /// Arguments up to the closing parenthesis (the `(` is eaten), with the highest one's height.
    pub(super) fn call_args(&mut self) -> Result<(Vec<Expr>, usize), SqlError> {
        let mut args = Vec::new();
        let mut highest = 0;
        if self.eat(&Tok::RParen) {
            return Ok((args, highest));
        }
        loop {
            let arg = self.expr()?;
            highest = highest.max(arg.height);
            args.push(arg.expr);
            if self.eat(&Tok::RParen) {
                return Ok((args, highest));
            }
            self.expect(&Tok::Comma)?;
        }
    }

    pub(super) fn call_or_column(&mut self) -> Result<Tree, SqlError> {
        let pos = self.here();
        let mut qualifier = None;
        let mut name = self.name()?;
        if self.eat(&Tok::Dot) {
            if self.at_op("*") {
                return Err(
                    SqlError::not_supported("qualified * is not supported by walshm")
                        .with_position(self.here()),
                );
            }
            let second = self.name()?;
            qualifier = Some(std::mem::replace(&mut name, second));
        }
        if !self.eat(&Tok::LParen) {
            return Ok(Tree::leaf(Expr::Column {
                qualifier,
                name,
                pos,
            }));
        }
        if let Some(q) = qualifier.filter(|q| q != "pg_catalog") {
            name = format!("{q}.{name}");
        }
        if self.at_op("*") && self.peek_at(1).is_some_and(|t| t.tok == Tok::RParen) {
            self.pos += 2;
            return Ok(Tree::leaf(Expr::Call {
                name,
                args: Vec::new(),
                star: true,
                pos,
            }));
        }
        if self.at_kw("distinct") {
            return Err(SqlError::not_supported(
                "DISTINCT in aggregates is not supported by walshm",
            )
            .with_position(self.here()));
        }
        let (args, highest) = self.call_args()?;
        Ok(Tree {
            height: node_above(highest)?,
            expr: Expr::Call {
                name,
                args,
                star: false,
                pos,
            },
        })
    }
}

/// `left op right`, if not too high.
fn binary(op: BinOp, left: Tree, right: Tree, pos: usize) -> Result<Tree, SqlError> {
    Ok(Tree {
        height: node_above(left.height.max(right.height))?,
        expr: Expr::Binary {
            op,
            left: Box::new(left.expr),
            right: Box::new(right.expr),
            pos,
        },
    })
}
