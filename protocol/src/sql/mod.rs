//! The small SQL dialect walshm understands: lexing, parsing, type
//! analysis (with `$n` parameters), values and their text/binary formats,
//! and evaluation against a [`crate::Session`].
//!
//! Invariants: every function returns `SqlError`s with PostgreSQL's SQLSTATE
//! for bad input and never panics; analysis fixes every expression's type
//! before execution, so RowDescription/ParameterDescription can be sent
//! for a prepared statement without running it.

pub mod analyze;
pub mod eval;
pub mod lexer;
pub mod parser;
pub mod value;

pub use analyze::{analyze, Analyzed, Column, Kind};
pub use parser::{parse_statements, Statement};
pub use value::{SqlType, Value};
