//! The SQL dialect walshm understands: lexing, parsing, type analysis
//! (with `$n` parameters), values and their text/binary formats, the
//! catalog of virtual relations, functions, and evaluation of queries
//! against a [`crate::Session`].
//!
//! Invariants: every function returns `SqlError`s with PostgreSQL's SQLSTATE
//! (and, where PostgreSQL gives one, the error's position) for bad input
//! and never panics; analysis fixes every expression's type before
//! execution, so RowDescription/ParameterDescription can be sent for a
//! prepared statement without running it.

pub mod analyze;
pub mod catalog;
pub mod eval;
pub mod functions;
pub mod interval;
pub mod lexer;
pub mod numeric;
pub mod parser;
pub mod query;
pub mod value;

pub use analyze::{analyze, Analyzed, Column, Kind};
pub use parser::{parse_statements, Statement};
pub use value::{SqlType, Value};
