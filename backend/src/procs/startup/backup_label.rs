//! Base backups' `backup_label` (see "Base backups" in the module header
//! of `startup`): reading and parsing it as PostgreSQL 15 writes it, and
//! adopting it before step 1.
//!
//! Invariant: the control file names the label's checkpoint and redo point
//! (and is written) before the label is renamed to `backup_label.old`, so
//! a crash at any point either repeats the adoption or no longer needs it.

use super::fatal;
use crate::control::{ControlFile, DbState};
use crate::process::log;
use std::path::Path;
use walformat::{format_lsn, Lsn};

/// The file a base backup leaves in the copy (see
/// `replication::walsender::basebackup`).
pub const BACKUP_LABEL: &str = "backup_label";

/// What recovery takes from a `backup_label`.
#[derive(Debug, PartialEq, Eq)]
pub struct BackupLabel {
    pub redo: Lsn,
    pub checkpoint: Lsn,
    pub timeline: u32,
}

/// Parses `DIR/backup_label` (PostgreSQL 15's read_backup_label: START WAL
/// LOCATION, CHECKPOINT LOCATION, START TIMELINE); None without one.
pub fn read_backup_label(datadir: &Path) -> Result<Option<BackupLabel>, String> {
    let path = datadir.join(BACKUP_LABEL);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("could not read file \"{}\": {e}", path.display())),
    };
    parse_backup_label(&text)
        .map(Some)
        .ok_or_else(|| format!("invalid data in file \"{}\"", path.display()))
}

pub(super) fn parse_backup_label(text: &str) -> Option<BackupLabel> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let lsn = |s: &str| walformat::parse_lsn(s.split_whitespace().next()?).ok();
    let redo = lsn(field("START WAL LOCATION:")?)?;
    let checkpoint = lsn(field("CHECKPOINT LOCATION:")?)?;
    let timeline = match field("START TIMELINE:") {
        Some(t) => t.parse().ok()?,
        None => 0,
    };
    Some(BackupLabel {
        redo,
        checkpoint,
        timeline,
    })
}

/// A base backup's copy (see "Base backups" in the module header): the
/// control file is made to name the label's checkpoint and redo point,
/// in crash recovery, and written; only then is the label renamed to
/// `backup_label.old` (as PostgreSQL does). A crash before the rename
/// repeats this; one after it finds the control file naming the label's
/// checkpoint, so the label is never needed again, and the end-of-recovery
/// checkpoint cannot remove WAL that a later start would read from it.
pub(super) fn adopt_backup_label(
    datadir: &Path,
    mut control: ControlFile,
    l: &BackupLabel,
    fsync: bool,
) -> Result<ControlFile, i32> {
    log(
        "LOG",
        &format!(
            "starting backup recovery with redo LSN {}, checkpoint LSN {}, on timeline ID {} (\"{BACKUP_LABEL}\")",
            format_lsn(l.redo),
            format_lsn(l.checkpoint),
            l.timeline
        ),
    );
    if l.timeline != 0 && l.timeline != control.timeline {
        return Err(fatal(&format!(
            "\"{BACKUP_LABEL}\" names timeline {} but the control file timeline {}",
            l.timeline, control.timeline
        )));
    }
    control.checkpoint = l.checkpoint;
    control.redo = l.redo;
    control.state = DbState::InCrashRecovery;
    control
        .write(datadir, fsync)
        .map_err(|e| fatal(&e.to_string()))?;
    let old = datadir.join(format!("{BACKUP_LABEL}.old"));
    std::fs::rename(datadir.join(BACKUP_LABEL), &old).map_err(|e| {
        fatal(&format!(
            "could not rename \"{BACKUP_LABEL}\" to \"{}\": {e}",
            old.display()
        ))
    })?;
    if fsync {
        std::fs::File::open(datadir)
            .and_then(|d| d.sync_all())
            .map_err(|e| fatal(&format!("could not fsync the data directory: {e}")))?;
    }
    Ok(control)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backup_labels_as_postgresql_15_writes_them() {
        let text = "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\nCHECKPOINT LOCATION: 0/2000060\nBACKUP METHOD: streamed\nBACKUP FROM: primary\nSTART TIME: 2026-01-01 00:00:00 UTC\nLABEL: x\nSTART TIMELINE: 1\n";
        assert_eq!(
            parse_backup_label(text),
            Some(BackupLabel {
                redo: 0x2000028,
                checkpoint: 0x2000060,
                timeline: 1
            })
        );
        assert_eq!(parse_backup_label("LABEL: x\n"), None);
    }
}
