//! Values of the run-time parameters a client may set (at start-up or with
//! SET), validated as PostgreSQL validates them, and the parameters the
//! server reports with ParameterStatus.
//!
//! The server's own settings (walshm.conf, `--set`) are declared once in
//! `shmem::settings`; a session reaches them through
//! `Session::server_setting`: SHOW prints them, SET of one is refused with
//! [`cannot_change`] (all but synchronous_commit are fixed at start-up).
//!
//! Invariants: walshm always talks UTF-8 (SQL_ASCII is accepted, being a
//! byte pass-through for our ASCII output); other encodings are refused
//! rather than silently mis-encoded.

use crate::error::{sqlstate, SqlError};

/// The default `server_version` (what `version()` and SHOW report too).
pub const DEFAULT_SERVER_VERSION: &str = "15.0 (walshm)";

/// Parses a synchronous_commit value: off/false/no/0 → false; on, local,
/// remote_write, remote_apply, true, yes, 1 → true (one server: all are "wait for local flush").
/// Returns the canonical name to SHOW with the flag.
pub fn parse_synchronous_commit(value: &str) -> Result<(bool, &'static str), SqlError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Ok((true, "on")),
        "off" | "false" | "no" | "0" => Ok((false, "off")),
        "local" => Ok((true, "local")),
        "remote_write" => Ok((true, "remote_write")),
        "remote_apply" => Ok((true, "remote_apply")),
        _ => Err(invalid_value("synchronous_commit", value)
            .with_hint("Available values: local, remote_write, remote_apply, on, off.")),
    }
}

/// Canonical name of an accepted client_encoding.
pub fn parse_client_encoding(value: &str) -> Result<&'static str, SqlError> {
    let normalized: String = value
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_lowercase();
    match normalized.as_str() {
        "utf8" | "unicode" => Ok("UTF8"),
        "sqlascii" => Ok("SQL_ASCII"),
        _ => Err(invalid_value("client_encoding", value)
            .with_detail("walshm supports only the UTF8 (and SQL_ASCII) client encodings.")),
    }
}

pub fn invalid_value(name: &str, value: &str) -> SqlError {
    SqlError::error(
        sqlstate::INVALID_PARAMETER_VALUE,
        format!("invalid value for parameter \"{name}\": \"{value}\""),
    )
}

/// SET of a setting fixed when the server started (PostgreSQL's 55P02).
pub fn cannot_change(name: &str) -> SqlError {
    SqlError::error(
        sqlstate::CANT_CHANGE_RUNTIME_PARAM,
        format!("parameter \"{name}\" cannot be changed without restarting the server"),
    )
}

/// Parameters reported to the client (GUC_REPORT in PostgreSQL), in the
/// order PostgreSQL sends them, with their values for this session.
pub fn reported_parameters(
    server_version: &str,
    user: &str,
    application_name: &str,
    client_encoding: &str,
) -> Vec<(&'static str, String)> {
    vec![
        ("application_name", application_name.to_string()),
        ("client_encoding", client_encoding.to_string()),
        ("DateStyle", "ISO, MDY".to_string()),
        ("default_transaction_read_only", "off".to_string()),
        ("in_hot_standby", "off".to_string()),
        ("integer_datetimes", "on".to_string()),
        ("IntervalStyle", "postgres".to_string()),
        ("is_superuser", "on".to_string()),
        ("server_encoding", "UTF8".to_string()),
        ("server_version", server_version.to_string()),
        ("session_authorization", user.to_string()),
        ("standard_conforming_strings", "on".to_string()),
        ("TimeZone", "UTC".to_string()),
    ]
}

/// True for parameter names whose changes are reported with ParameterStatus.
pub fn is_reported(name: &str) -> Option<&'static str> {
    const REPORTED: [&str; 13] = [
        "application_name",
        "client_encoding",
        "DateStyle",
        "default_transaction_read_only",
        "in_hot_standby",
        "integer_datetimes",
        "IntervalStyle",
        "is_superuser",
        "server_encoding",
        "server_version",
        "session_authorization",
        "standard_conforming_strings",
        "TimeZone",
    ];
    REPORTED
        .iter()
        .copied()
        .find(|r| r.eq_ignore_ascii_case(name))
}

/// Parses PostgreSQL's `options` start-up parameter (`-c name=value`,
/// `--name=value`, backslash-escaped spaces) into name/value pairs;
/// other switches are ignored.
pub fn parse_options(options: &str) -> Vec<(String, String)> {
    let words = split_escaped_words(options);
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        let setting = if w == "-c" {
            i += 1;
            words.get(i).cloned()
        } else if let Some(rest) = w.strip_prefix("-c") {
            Some(rest.to_string())
        } else {
            w.strip_prefix("--").map(str::to_string)
        };
        if let Some((name, value)) = setting.as_deref().and_then(|s| s.split_once('=')) {
            out.push((name.replace('-', "_"), value.to_string()));
        }
        i += 1;
    }
    out
}

fn split_escaped_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => current.extend(chars.next()),
            c if c.is_whitespace() => {
                if !current.is_empty() {
                    words.push(std::mem::take(&mut current));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synchronous_commit_values() {
        assert_eq!(parse_synchronous_commit("OFF").unwrap(), (false, "off"));
        assert_eq!(
            parse_synchronous_commit("remote_apply").unwrap(),
            (true, "remote_apply")
        );
        assert_eq!(parse_synchronous_commit("bogus").unwrap_err().code, "22023");
    }

    #[test]
    fn encodings() {
        assert_eq!(parse_client_encoding("utf-8").unwrap(), "UTF8");
        assert_eq!(parse_client_encoding("SQL_ASCII").unwrap(), "SQL_ASCII");
        assert!(parse_client_encoding("LATIN1").is_err());
    }

    #[test]
    fn options_parsing() {
        assert_eq!(
            parse_options("-c synchronous_commit=off --application-name=a\\ b -cx=1 -d 5"),
            vec![
                ("synchronous_commit".to_string(), "off".to_string()),
                ("application_name".to_string(), "a b".to_string()),
                ("x".to_string(), "1".to_string()),
            ]
        );
    }
}
