//! Output plugins (PostgreSQL's output_plugin.h): what turns decoded
//! changes into the bytes a client receives. Two are built in, chosen by
//! name as a slot was created with: `test_decoding` (text,
//! [`super::test_decoding`]) and `pgoutput` (binary, the logical
//! replication protocol, [`super::pgoutput`]). Any other name is what
//! PostgreSQL answers for a missing shared library: 58P01.
//!
//! A plugin checks its options when decoding starts (START_REPLICATION,
//! `pg_logical_slot_get_changes`), with PostgreSQL's errors, and then
//! renders each [`Change`] into [`Output`]s, each one CopyData 'w' message
//! (or one row of the SQL functions) with the position PostgreSQL's
//! walsender puts in its header (`ctx->write_location`).

use backend::reorder::Change;
use protocol::replication::PluginOption;
use protocol::{sqlstate, SqlError};
use walformat::Lsn;

/// One unit of plugin output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// The write location: where a client that has this may confirm.
    pub lsn: Lsn,
    /// The transaction's XID (0 for a non-transactional message).
    pub xid: u32,
    pub data: Vec<u8>,
}

/// An output plugin, started with its options.
pub trait Plugin {
    /// Whether the output is binary (pgoutput) rather than text.
    fn binary(&self) -> bool;
    /// Appends what `change` renders to.
    fn render(&mut self, change: &Change, out: &mut Vec<Output>);
}

/// The built-in plugins' names.
pub const PLUGINS: [&str; 2] = ["test_decoding", "pgoutput"];

/// A slot may be created for `name` only if it is a built-in plugin.
pub fn check_name(name: &str) -> Result<(), SqlError> {
    if PLUGINS.contains(&name) {
        return Ok(());
    }
    Err(SqlError::error(
        sqlstate::UNDEFINED_FILE,
        format!("could not access file \"{name}\": No such file or directory"),
    ))
}

/// Starts plugin `name` with `options`; `publication_exists` answers for
/// pgoutput's publication_names.
pub fn start(
    name: &str,
    options: &[PluginOption],
    publication_exists: &dyn Fn(&str) -> bool,
) -> Result<Box<dyn Plugin>, SqlError> {
    match name {
        "test_decoding" => Ok(Box::new(super::test_decoding::TestDecoding::new(options)?)),
        "pgoutput" => Ok(Box::new(super::pgoutput::PgOutput::new(
            options,
            publication_exists,
        )?)),
        other => check_name(other).map(|_| unreachable!("check_name refuses unknown names")),
    }
}

/// PostgreSQL's parse_bool: true, false, yes, no and their unique
/// prefixes, on, off, 1, 0, in any case.
pub fn parse_bool(value: &str) -> Option<bool> {
    let v = value.trim().to_ascii_lowercase();
    let prefix_of = |word: &str| !v.is_empty() && word.starts_with(v.as_str());
    match v.as_str() {
        "on" | "1" => Some(true),
        "of" | "off" | "0" => Some(false),
        _ if prefix_of("true") || prefix_of("yes") => Some(true),
        _ if prefix_of("false") || prefix_of("no") => Some(false),
        _ => None,
    }
}

/// PostgreSQL's "conflicting or redundant options" (42601).
pub fn conflicting_options() -> SqlError {
    SqlError::error(sqlstate::SYNTAX_ERROR, "conflicting or redundant options")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_parse_as_postgresql_does() {
        for t in ["t", "TRUE", "yes", "y", "on", "1"] {
            assert_eq!(parse_bool(t), Some(true), "{t}");
        }
        for f in ["f", "false", "No", "n", "off", "of", "0"] {
            assert_eq!(parse_bool(f), Some(false), "{f}");
        }
        for bad in ["", "o", "2", "truee", "onn"] {
            assert_eq!(parse_bool(bad), None, "{bad}");
        }
    }

    #[test]
    fn unknown_plugins_are_missing_files() {
        assert!(check_name("pgoutput").is_ok());
        let e = check_name("wal2json").unwrap_err();
        assert_eq!(e.code, "58P01");
        assert!(start("wal2json", &[], &|_| true).is_err());
    }
}
