//! `pgerror`: errors and notices as PostgreSQL reports them (the
//! ErrorResponse / NoticeResponse fields), plus the SQLSTATE codes walshm
//! uses. A leaf crate with no dependencies, so that the WAL engine
//! (`backend`: slots, sync rep) can say what went wrong in PostgreSQL's
//! terms without linking the wire protocol, SQL or SCRAM; `protocol`
//! re-exports it and puts it on the wire.
//!
//! Invariants: `severity` is one of PostgreSQL's non-localized severities
//! ("ERROR", "FATAL", "PANIC", "WARNING", "NOTICE", ...) and `code` is a
//! five-character SQLSTATE. A `SqlError` whose severity is "FATAL" or "PANIC"
//! ends the connection after it is sent; anything else keeps it open.

use std::fmt;

/// SQLSTATE codes (see PostgreSQL's `errcodes.txt`).
pub mod sqlstate {
    pub const WARNING: &str = "01000";
    pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
    pub const PROTOCOL_VIOLATION: &str = "08P01";
    pub const NUMERIC_VALUE_OUT_OF_RANGE: &str = "22003";
    pub const CHARACTER_NOT_IN_REPERTOIRE: &str = "22021";
    pub const INVALID_PARAMETER_VALUE: &str = "22023";
    pub const INVALID_TEXT_REPRESENTATION: &str = "22P02";
    pub const INVALID_BINARY_REPRESENTATION: &str = "22P03";
    pub const ACTIVE_SQL_TRANSACTION: &str = "25001";
    pub const NO_ACTIVE_SQL_TRANSACTION: &str = "25P01";
    pub const IN_FAILED_SQL_TRANSACTION: &str = "25P02";
    pub const INVALID_SQL_STATEMENT_NAME: &str = "26000";
    pub const INVALID_AUTHORIZATION_SPECIFICATION: &str = "28000";
    pub const INVALID_PASSWORD: &str = "28P01";
    pub const INVALID_CURSOR_NAME: &str = "34000";
    pub const SYNTAX_ERROR: &str = "42601";
    pub const UNDEFINED_FUNCTION: &str = "42883";
    pub const UNDEFINED_TABLE: &str = "42P01";
    pub const GROUPING_ERROR: &str = "42803";
    pub const DATATYPE_MISMATCH: &str = "42804";
    pub const AMBIGUOUS_COLUMN: &str = "42702";
    pub const INVALID_COLUMN_REFERENCE: &str = "42P10";
    pub const DIVISION_BY_ZERO: &str = "22012";
    pub const INVALID_ROW_COUNT: &str = "2201W";
    pub const INVALID_ROW_COUNT_OFFSET: &str = "2201X";
    pub const WRONG_OBJECT_TYPE: &str = "42809";
    pub const UNDEFINED_OBJECT: &str = "42704";
    pub const DUPLICATE_OBJECT: &str = "42710";
    pub const NULL_VALUE_NOT_ALLOWED: &str = "22004";
    pub const UNDEFINED_COLUMN: &str = "42703";
    pub const UNDEFINED_PARAMETER: &str = "42P02";
    pub const DUPLICATE_CURSOR: &str = "42P03";
    pub const DUPLICATE_PREPARED_STATEMENT: &str = "42P05";
    pub const INDETERMINATE_DATATYPE: &str = "42P18";
    pub const CANNOT_COERCE: &str = "42846";
    pub const PROGRAM_LIMIT_EXCEEDED: &str = "54000";
    pub const CANT_CHANGE_RUNTIME_PARAM: &str = "55P02";
    pub const STATEMENT_TOO_COMPLEX: &str = "54001";
    pub const TOO_MANY_COLUMNS: &str = "54011";
    pub const OUT_OF_MEMORY: &str = "53200";
    pub const TOO_MANY_CONNECTIONS: &str = "53300";
    pub const OBJECT_NOT_IN_PREREQUISITE_STATE: &str = "55000";
    pub const READ_ONLY_SQL_TRANSACTION: &str = "25006";
    pub const QUERY_CANCELED: &str = "57014";
    pub const ADMIN_SHUTDOWN: &str = "57P01";
    pub const CANNOT_CONNECT_NOW: &str = "57P03";
    pub const CRASH_SHUTDOWN: &str = "57P02";
    pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
    pub const UNDEFINED_FILE: &str = "58P01";
    pub const INTERNAL_ERROR: &str = "XX000";
}

/// An error (or, with severity "WARNING"/"NOTICE", a notice) to report to
/// the client, with PostgreSQL's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    /// Non-localized severity: "ERROR", "FATAL", "WARNING", ...
    pub severity: &'static str,
    /// SQLSTATE.
    pub code: &'static str,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
    /// Where in the query string the error is: a 1-based character
    /// index (the ErrorResponse `P` field), as PostgreSQL reports it.
    pub position: Option<usize>,
}

impl SqlError {
    fn with_severity(
        severity: &'static str,
        code: &'static str,
        message: impl Into<String>,
    ) -> Self {
        SqlError {
            severity,
            code,
            message: message.into(),
            detail: None,
            hint: None,
            position: None,
        }
    }

    /// An ERROR: aborts the current statement (and transaction), the session goes on.
    pub fn error(code: &'static str, message: impl Into<String>) -> Self {
        Self::with_severity("ERROR", code, message)
    }

    /// A FATAL error: the connection is closed after it is sent.
    pub fn fatal(code: &'static str, message: impl Into<String>) -> Self {
        Self::with_severity("FATAL", code, message)
    }

    /// A WARNING, sent as a NoticeResponse.
    pub fn warning(code: &'static str, message: impl Into<String>) -> Self {
        Self::with_severity("WARNING", code, message)
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The error points at character `position` (1-based) of the query.
    pub fn with_position(mut self, position: usize) -> Self {
        self.position = Some(position);
        self
    }

    /// True when sending this error must end the connection.
    pub fn is_fatal(&self) -> bool {
        matches!(self.severity, "FATAL" | "PANIC")
    }

    /// True for severities sent as NoticeResponse rather than ErrorResponse.
    pub fn is_notice(&self) -> bool {
        matches!(
            self.severity,
            "WARNING" | "NOTICE" | "DEBUG" | "INFO" | "LOG"
        )
    }

    pub fn syntax_error(message: impl Into<String>) -> Self {
        Self::error(sqlstate::SYNTAX_ERROR, message)
    }

    pub fn not_supported(message: impl Into<String>) -> Self {
        Self::error(sqlstate::FEATURE_NOT_SUPPORTED, message)
    }

    pub fn protocol_violation(message: impl Into<String>) -> Self {
        Self::fatal(sqlstate::PROTOCOL_VIOLATION, message)
    }
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.severity, self.code, self.message)?;
        if let Some(detail) = &self.detail {
            write!(f, " (DETAIL: {detail})")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, " (HINT: {hint})")?;
        }
        Ok(())
    }
}

impl std::error::Error for SqlError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severities_classify() {
        assert!(SqlError::fatal(sqlstate::ADMIN_SHUTDOWN, "x").is_fatal());
        assert!(!SqlError::error(sqlstate::SYNTAX_ERROR, "x").is_fatal());
        assert!(SqlError::warning(sqlstate::WARNING, "x").is_notice());
        assert!(!SqlError::error(sqlstate::SYNTAX_ERROR, "x").is_notice());
    }

    #[test]
    fn display_includes_code_and_detail() {
        let e = SqlError::error("42883", "function foo() does not exist").with_detail("d");
        assert_eq!(
            e.to_string(),
            "ERROR: 42883: function foo() does not exist (DETAIL: d)"
        );
    }
}
