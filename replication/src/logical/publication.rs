//! Publications as names (PostgreSQL's pg_publication, without tables:
//! walshm's WAL holds messages, which pgoutput sends whatever the
//! publication lists). `CREATE PUBLICATION name [FOR ALL TABLES]` and
//! `DROP PUBLICATION [IF EXISTS] name` keep them; pgoutput's
//! `publication_names` must name existing ones.
//!
//! On disk: one empty file per publication, `DIR/pg_publication/HEX`
//! where HEX is the name's UTF-8 bytes in lower-case hexadecimal (any
//! name is a safe file name). Creation is an exclusive create (of two
//! creators of one name exactly one succeeds), removal an unlink; with
//! `fsync` both are made durable with the directory.

use backend::walfile::{self, Op};
use protocol::{sqlstate, SqlError};
use std::path::{Path, PathBuf};

fn root(datadir: &Path) -> PathBuf {
    datadir.join("pg_publication")
}

fn file_name(name: &str) -> String {
    name.bytes().map(|b| format!("{b:02x}")).collect()
}

fn name_of(file: &str) -> Option<String> {
    if !file.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..file.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(file.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

fn io_error(e: std::io::Error) -> SqlError {
    SqlError::error("58030", format!("could not access publications: {e}"))
}

/// CREATE PUBLICATION: 42710 if it exists.
pub fn create(datadir: &Path, name: &str, fsync: bool) -> Result<(), SqlError> {
    let dir = root(datadir);
    walfile::create_dir_all(Op::WalDir, &dir).map_err(io_error)?;
    match walfile::create_new_file(Op::WalDir, &dir.join(file_name(name)), fsync) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(SqlError::error(
            sqlstate::DUPLICATE_OBJECT,
            format!("publication \"{name}\" already exists"),
        )),
        Err(e) => Err(io_error(e)),
    }
}

/// DROP PUBLICATION: 42704 if it does not exist (unless `if_exists`).
pub fn drop(datadir: &Path, name: &str, if_exists: bool, fsync: bool) -> Result<(), SqlError> {
    let dir = root(datadir);
    match walfile::remove_file(Op::WalRemove, &dir.join(file_name(name))) {
        Ok(()) => {
            if fsync {
                walfile::sync_dir(&dir).map_err(io_error)?;
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && if_exists => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(SqlError::error(
            sqlstate::UNDEFINED_OBJECT,
            format!("publication \"{name}\" does not exist"),
        )),
        Err(e) => Err(io_error(e)),
    }
}

/// Whether publication `name` exists.
pub fn exists(datadir: &Path, name: &str) -> bool {
    root(datadir).join(file_name(name)).exists()
}

/// Every publication's name, sorted.
pub fn list(datadir: &Path) -> Vec<String> {
    let mut names: Vec<String> = walfile::list_dir(Op::WalDir, &root(datadir))
        .unwrap_or_default()
        .iter()
        .filter_map(|f| name_of(f.to_str()?))
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_file_names() {
        for name in ["pub", "Mixed Case", "ä/\n\"", ""] {
            assert_eq!(name_of(&file_name(name)).as_deref(), Some(name));
        }
        assert_eq!(name_of("zz"), None);
        assert_eq!(name_of("abc"), None);
    }

    #[test]
    fn create_drop_and_list() {
        let dir = std::env::temp_dir().join(format!("walshm-pub-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        create(&dir, "b", false).unwrap();
        create(&dir, "A/x", false).unwrap();
        assert_eq!(create(&dir, "b", false).unwrap_err().code, "42710");
        assert_eq!(list(&dir), ["A/x", "b"]);
        assert!(exists(&dir, "A/x"));
        drop(&dir, "b", false, false).unwrap();
        assert_eq!(drop(&dir, "b", false, false).unwrap_err().code, "42704");
        drop(&dir, "b", true, false).unwrap();
        assert!(!exists(&dir, "b"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
