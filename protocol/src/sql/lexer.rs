//! SQL lexer: identifiers (folded to lower case unless quoted), string
//! literals ('...' with standard_conforming_strings on, E'...', $tag$...$tag$),
//! numbers, `$n` parameters, punctuation and operators; `--` and nested
//! `/* */` comments are skipped.
//!
//! Invariants: each token remembers its byte span in the source, so errors
//! can quote the text "at or near" which they occur, and its 1-based
//! character position (`pos`, counted in the same single pass), which is
//! what PostgreSQL reports as an error's position; lexing never panics on
//! arbitrary UTF-8.
//!
//! Memory: a token takes tens of bytes for one or two bytes of source, so
//! a query string well within the memory limit could lex into many times
//! it. `lex_within` charges each token its size twice (the token, and the
//! statement the parser builds from it, which is no larger) plus its text,
//! and stops with 53200 once the charge passes the limit.

use crate::error::SqlError;
use crate::limits::out_of_memory;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tok {
    Ident(String),
    QuotedIdent(String),
    Str(String),
    Integer(String),
    Decimal(String),
    Param(u32),
    LParen,
    RParen,
    Comma,
    Semicolon,
    Dot,
    LBracket,
    RBracket,
    Op(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub tok: Tok,
    pub start: usize,
    pub end: usize,
    /// 1-based character (not byte) position of `start` in the source.
    pub pos: usize,
}

impl Token {
    /// True for the unquoted keyword `kw` (lower case).
    pub fn is_kw(&self, kw: &str) -> bool {
        matches!(&self.tok, Tok::Ident(s) if s == kw)
    }
}

const OP_CHARS: &[u8] = b"+-*/<>=~!@#%^&|`?:";

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || !c.is_ascii()
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '$' || !c.is_ascii()
}

/// Error text quoting the source from `start` to the end of input.
fn near(src: &str, start: usize) -> String {
    let rest: String = src[start..].chars().take(40).collect();
    rest
}

struct Lexer<'a> {
    src: &'a str,
    bytes: &'a [u8],
    pos: usize,
    /// Byte offset where the token being lexed starts (for error positions).
    tok_start: usize,
}

impl<'a> Lexer<'a> {
    fn peek(&self, off: usize) -> Option<u8> {
        self.bytes.get(self.pos + off).copied()
    }

    fn char_at(&self, pos: usize) -> Option<char> {
        self.src.get(pos..).and_then(|s| s.chars().next())
    }

    fn skip_space_and_comments(&mut self) -> Result<(), SqlError> {
        loop {
            match (self.peek(0), self.peek(1)) {
                (Some(b' ' | b'\t' | b'\n' | b'\r' | b'\x0c'), _) => self.pos += 1,
                (Some(b'-'), Some(b'-')) => {
                    while let Some(b) = self.peek(0) {
                        self.pos += 1;
                        if b == b'\n' {
                            break;
                        }
                    }
                }
                (Some(b'/'), Some(b'*')) => self.skip_block_comment()?,
                _ => return Ok(()),
            }
        }
    }

    fn skip_block_comment(&mut self) -> Result<(), SqlError> {
        let start = self.pos;
        let mut depth = 0usize;
        while self.pos < self.bytes.len() {
            match (self.peek(0), self.peek(1)) {
                (Some(b'/'), Some(b'*')) => {
                    depth += 1;
                    self.pos += 2;
                }
                (Some(b'*'), Some(b'/')) => {
                    depth -= 1;
                    self.pos += 2;
                    if depth == 0 {
                        return Ok(());
                    }
                }
                _ => self.pos += 1,
            }
        }
        Err(SqlError::syntax_error(format!(
            "unterminated /* comment at or near \"{}\"",
            near(self.src, start)
        )))
    }

    /// Reads a quoted sequence closed by `quote` (doubled to escape); returns the contents.
    fn quoted(&mut self, quote: u8, backslash_escapes: bool) -> Option<String> {
        let mut out: Vec<u8> = Vec::new();
        loop {
            let b = self.peek(0)?;
            self.pos += 1;
            if b == quote {
                if self.peek(0) == Some(quote) {
                    out.push(quote);
                    self.pos += 1;
                    continue;
                }
                return String::from_utf8(out).ok();
            }
            if b == b'\\' && backslash_escapes {
                self.escape(&mut out)?;
                continue;
            }
            out.push(b);
        }
    }

    /// One backslash escape of an E'' string.
    fn escape(&mut self, out: &mut Vec<u8>) -> Option<()> {
        let b = self.peek(0)?;
        self.pos += 1;
        match b {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'0'..=b'7' => {
                let mut v = u32::from(b - b'0');
                for _ in 0..2 {
                    match self.peek(0) {
                        Some(d @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(d - b'0');
                            self.pos += 1;
                        }
                        _ => break,
                    }
                }
                out.push((v & 0xff) as u8);
            }
            b'x' => {
                let mut v = 0u32;
                let mut n = 0;
                while n < 2 {
                    match self.peek(0).and_then(|d| (d as char).to_digit(16)) {
                        Some(d) => {
                            v = v * 16 + d;
                            self.pos += 1;
                            n += 1;
                        }
                        None => break,
                    }
                }
                if n == 0 {
                    out.push(b'x');
                } else {
                    out.push(v as u8);
                }
            }
            other => out.push(other),
        }
        Some(())
    }

    fn dollar_quoted(&mut self, start: usize) -> Result<Option<Token>, SqlError> {
        // $tag$ where tag is empty or an identifier without '$'.
        let mut end = self.pos + 1;
        while let Some(c) = self.char_at(end) {
            if c == '$' {
                break;
            }
            if !(is_ident_char(c) && c != '$') || (end == self.pos + 1 && c.is_ascii_digit()) {
                return Ok(None);
            }
            end += c.len_utf8();
        }
        if self.char_at(end) != Some('$') {
            return Ok(None);
        }
        let delim = &self.src[self.pos..=end];
        let body_start = end + 1;
        match self.src[body_start..].find(delim) {
            Some(off) => {
                let body = self.src[body_start..body_start + off].to_string();
                self.pos = body_start + off + delim.len();
                Ok(Some(Token {
                    tok: Tok::Str(body),
                    start,
                    end: self.pos,
                    pos: 0,
                }))
            }
            None => Err(SqlError::syntax_error(format!(
                "unterminated dollar-quoted string at or near \"{}\"",
                near(self.src, start)
            ))),
        }
    }

    fn number(&mut self, start: usize) -> Token {
        let mut decimal = false;
        while let Some(b) = self.peek(0) {
            match b {
                b'0'..=b'9' => self.pos += 1,
                b'.' if !decimal && self.peek(1) != Some(b'.') => {
                    decimal = true;
                    self.pos += 1;
                }
                b'e' | b'E' if matches!(self.peek(1), Some(b'0'..=b'9' | b'+' | b'-')) => {
                    decimal = true;
                    self.pos += 2;
                    while matches!(self.peek(0), Some(b'0'..=b'9')) {
                        self.pos += 1;
                    }
                    break;
                }
                _ => break,
            }
        }
        let text = self.src[start..self.pos].to_string();
        let tok = if decimal {
            Tok::Decimal(text)
        } else {
            Tok::Integer(text)
        };
        Token {
            tok,
            start,
            end: self.pos,
            pos: 0,
        }
    }

    fn identifier(&mut self, start: usize) -> Token {
        while let Some(c) = self.char_at(self.pos) {
            if !is_ident_char(c) {
                break;
            }
            self.pos += c.len_utf8();
        }
        Token {
            tok: Tok::Ident(self.src[start..self.pos].to_ascii_lowercase()),
            start,
            end: self.pos,
            pos: 0,
        }
    }

    fn operator(&mut self, start: usize) -> Token {
        while let Some(b) = self.peek(0) {
            if !OP_CHARS.contains(&b)
                || (self.pos > start
                    && matches!((b, self.peek(1)), (b'-', Some(b'-')) | (b'/', Some(b'*'))))
            {
                break;
            }
            self.pos += 1;
        }
        // As PostgreSQL: a multi-character operator does not end in + or -
        // unless it holds one of ~!@#%^&|`? ("=-1" is "=" then "-1").
        let special = |s: &[u8]| s.iter().any(|b| b"~!@#%^&|`?".contains(b));
        while self.pos - start > 1
            && matches!(self.bytes[self.pos - 1], b'+' | b'-')
            && !special(&self.bytes[start..self.pos])
        {
            self.pos -= 1;
        }
        Token {
            tok: Tok::Op(self.src[start..self.pos].to_string()),
            start,
            end: self.pos,
            pos: 0,
        }
    }

    /// The text of a quoted string or identifier whose opening `quote` is
    /// the last of the `skip` bytes at `start` (backslash escapes with
    /// `escapes`, as in E'...'); 42601 "unterminated {what}" without its
    /// closing quote.
    fn quoted_text(
        &mut self,
        start: usize,
        skip: usize,
        quote: u8,
        escapes: bool,
        what: &str,
    ) -> Result<String, SqlError> {
        self.pos += skip;
        self.quoted(quote, escapes).ok_or_else(|| {
            SqlError::syntax_error(format!(
                "unterminated {what} at or near \"{}\"",
                near(self.src, start)
            ))
        })
    }

    /// A string constant, '...' (`skip` 1) or E'...' (`skip` 2, `escapes`).
    fn string_literal(
        &mut self,
        start: usize,
        skip: usize,
        escapes: bool,
    ) -> Result<Token, SqlError> {
        let s = self.quoted_text(start, skip, b'\'', escapes, "quoted string")?;
        Ok(self.token_from(Tok::Str(s), start))
    }

    /// A double-quoted identifier; an empty one is 42601, as in PostgreSQL.
    fn quoted_identifier(&mut self, start: usize) -> Result<Token, SqlError> {
        let s = self.quoted_text(start, 1, b'"', false, "quoted identifier")?;
        if s.is_empty() {
            return Err(SqlError::syntax_error(
                "zero-length delimited identifier at or near \"\"\"\"",
            ));
        }
        Ok(self.token_from(Tok::QuotedIdent(s), start))
    }

    /// A parameter `$n` (digits follow the `$` at `start`); a number too
    /// large for u32 becomes u32::MAX, which analysis refuses.
    fn param(&mut self, start: usize) -> Token {
        self.pos += 1;
        while matches!(self.peek(0), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        let n = self.src[start + 1..self.pos]
            .parse::<u32>()
            .unwrap_or(u32::MAX);
        self.token_from(Tok::Param(n), start)
    }

    /// The token `tok` from `start` to the current position.
    fn token_from(&self, tok: Tok, start: usize) -> Token {
        Token {
            tok,
            start,
            end: self.pos,
            pos: 0,
        }
    }

    fn next(&mut self) -> Result<Option<Token>, SqlError> {
        self.tok_start = self.pos;
        self.skip_space_and_comments()?;
        let start = self.pos;
        self.tok_start = start;
        let Some(c) = self.char_at(start) else {
            return Ok(None);
        };
        let single = |tok: Tok| Token {
            tok,
            start,
            end: start + 1,
            pos: 0,
        };
        let token = match c {
            '(' => single(Tok::LParen),
            ')' => single(Tok::RParen),
            ',' => single(Tok::Comma),
            ';' => single(Tok::Semicolon),
            '[' => single(Tok::LBracket),
            ']' => single(Tok::RBracket),
            '.' if !matches!(self.peek(1), Some(b'0'..=b'9')) => single(Tok::Dot),
            '\'' => return self.string_literal(start, 1, false).map(Some),
            'e' | 'E' if self.peek(1) == Some(b'\'') => {
                return self.string_literal(start, 2, true).map(Some)
            }
            '"' => return self.quoted_identifier(start).map(Some),
            '$' if matches!(self.peek(1), Some(b'0'..=b'9')) => return Ok(Some(self.param(start))),
            '$' => match self.dollar_quoted(start)? {
                Some(t) => return Ok(Some(t)),
                None => {
                    return Err(SqlError::syntax_error(
                        "syntax error at or near \"$\"".to_string(),
                    ))
                }
            },
            '0'..='9' | '.' => return Ok(Some(self.number(start))),
            c if is_ident_start(c) => return Ok(Some(self.identifier(start))),
            c if c.is_ascii() && OP_CHARS.contains(&(c as u8)) => {
                return Ok(Some(self.operator(start)))
            }
            other => {
                return Err(SqlError::syntax_error(format!(
                    "syntax error at or near \"{other}\""
                )));
            }
        };
        self.pos = token.end;
        Ok(Some(token))
    }
}

/// Converts byte offsets, visited in increasing order, to 1-based
/// character positions in one pass over the source.
#[derive(Default)]
struct CharCount {
    byte: usize,
    chars: usize,
}

impl CharCount {
    fn position_of(&mut self, src: &str, byte: usize) -> usize {
        if byte >= self.byte {
            self.chars += src.get(self.byte..byte).map_or(0, |s| s.chars().count());
            self.byte = byte;
        }
        self.chars + 1
    }
}

/// 1-based character position just past the end of `src` (where
/// PostgreSQL places "at end of input").
pub fn end_position(src: &str) -> usize {
    src.chars().count() + 1
}

/// Splits `src` into tokens.
#[cfg(test)]
pub fn lex(src: &str) -> Result<Vec<Token>, SqlError> {
    lex_within(src, usize::MAX)
}

/// What a token is charged against the memory limit.
fn charge(t: &Token) -> usize {
    let text = match &t.tok {
        Tok::Ident(s)
        | Tok::QuotedIdent(s)
        | Tok::Str(s)
        | Tok::Integer(s)
        | Tok::Decimal(s)
        | Tok::Op(s) => s.len(),
        _ => 0,
    };
    2 * std::mem::size_of::<Token>() + text
}

/// Splits `src` into tokens; 53200 once they (and what the parser will
/// build from them) would take more than `memory_limit` bytes.
pub fn lex_within(src: &str, memory_limit: usize) -> Result<Vec<Token>, SqlError> {
    let mut lexer = Lexer {
        src,
        bytes: src.as_bytes(),
        pos: 0,
        tok_start: 0,
    };
    let mut out = Vec::new();
    let mut charged = 0usize;
    let mut counted = CharCount::default();
    loop {
        let next = lexer.next().map_err(|e| {
            let at = counted.position_of(src, lexer.tok_start);
            e.with_position(at)
        })?;
        let Some(mut t) = next else { break };
        t.pos = counted.position_of(src, t.start);
        charged = charged.saturating_add(charge(&t));
        if charged > memory_limit {
            return Err(out_of_memory("the parsed query", charged, memory_limit));
        }
        out.push(t);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        lex(s).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn lexes_call_with_literals_and_comments() {
        assert_eq!(
            toks("SeLeCt /* c /* nested */ */ Pg_X(false, 'it''s', $2) -- tail\n;"),
            vec![
                Tok::Ident("select".into()),
                Tok::Ident("pg_x".into()),
                Tok::LParen,
                Tok::Ident("false".into()),
                Tok::Comma,
                Tok::Str("it's".into()),
                Tok::Comma,
                Tok::Param(2),
                Tok::RParen,
                Tok::Semicolon,
            ]
        );
    }

    #[test]
    fn lexes_casts_numbers_and_special_strings() {
        assert_eq!(
            toks("'\\x00'::bytea 1.5 42 E'a\\nb' $$x'y$$ $q$z$q$ \"Quoted\""),
            vec![
                Tok::Str("\\x00".into()),
                Tok::Op("::".into()),
                Tok::Ident("bytea".into()),
                Tok::Decimal("1.5".into()),
                Tok::Integer("42".into()),
                Tok::Str("a\nb".into()),
                Tok::Str("x'y".into()),
                Tok::Str("z".into()),
                Tok::QuotedIdent("Quoted".into()),
            ]
        );
    }

    #[test]
    fn unterminated_things_are_syntax_errors() {
        for bad in ["'abc", "/* x", "\"abc", "$$abc", "\"\""] {
            assert_eq!(lex(bad).unwrap_err().code, "42601", "{bad}");
        }
    }

    #[test]
    fn lexing_stops_at_the_memory_limit() {
        let list = format!("SELECT {}1", "1,".repeat(500_000));
        assert_eq!(lex_within(&list, 4 << 20).unwrap_err().code, "53200");
        assert!(lex_within(&list, 1 << 30).is_ok());
    }

    #[test]
    fn operator_stops_before_comment() {
        assert_eq!(
            toks("=--x\n1"),
            vec![Tok::Op("=".into()), Tok::Integer("1".into())]
        );
    }
}
