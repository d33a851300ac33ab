//! WAL archiving's shared parts: the `pg_wal/archive_status/` files, the
//! checkpointer's removal guard, and running `archive_command` /
//! `restore_command` (PostgreSQL's xlogarchive.c and the command part of
//! pgarch.c).
//!
//! Status files, as PostgreSQL's: `NAME.ready` says "file NAME of pg_wal
//! is complete and must be archived", `NAME.done` says "archived". The
//! writer creates `.ready` (fsynced) right after a completed segment is
//! fdatasynced (`notify`); the archiver renames it to `.done` after
//! `archive_command` exited 0 (`mark_done`, directory fsynced).
//!
//! Invariant (with `archive_mode = on`): a segment is removed or recycled
//! only if its `.done` exists. The guard (`keep_unarchived`) also heals the
//! one window where a completed segment has no status file at all (a crash
//! between the fdatasync and the `.ready`): such a segment gets its
//! `.ready` then and is kept, as PostgreSQL's XLogArchiveCheckDone does.
//!
//! Crash: a segment archived whose `.ready` was not yet renamed is archived
//! again after a restart (PostgreSQL does the same: archive_command must
//! accept being run twice for the same file). That is the only repeat:
//! `.done` is durable before the next segment is handed to the command.
//!
//! Names: `archive_command` is run by the shell with the file's name in
//! it, so only names made of the characters of WAL file names (hex digits
//! and the letters of `.history`, `.backup`, `.partial`) are ever handed
//! to it; any other `.ready` file is ignored, as PostgreSQL's archiver
//! ignores it. Such a name can only come from someone writing into
//! `archive_status/` by hand.
//!
//! Orphans: `.done` files whose segment is gone (removed or recycled by the
//! checkpointer) are removed by the archiver (`remove_orphan_done`), so the
//! checkpointer's removal stays one loop.

use crate::process::log;
use crate::walfile::{self, Op};
use std::path::{Path, PathBuf};
use std::process::Command;
use walformat::Geometry;

/// Directory of the status files, under pg_wal.
pub const STATUS_DIR: &str = "archive_status";

const READY: &str = ".ready";
const DONE: &str = ".done";
/// The characters a WAL file's name may hold (PostgreSQL's
/// VALID_XFN_CHARS).
const WAL_NAME_CHARS: &str = "0123456789ABCDEF.historybackuppartial";

/// Whether `name` may be handed to `archive_command` (module header).
pub fn is_archivable_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| WAL_NAME_CHARS.contains(c))
}

/// The archive state of one file of pg_wal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// No status file.
    Unknown,
    Ready,
    Done,
}

pub fn status_dir(pg_wal: &Path) -> PathBuf {
    pg_wal.join(STATUS_DIR)
}

fn status_path(pg_wal: &Path, name: &str, suffix: &str) -> PathBuf {
    status_dir(pg_wal).join(format!("{name}{suffix}"))
}

/// The archive state of `name`.
pub fn status(pg_wal: &Path, name: &str) -> Status {
    if status_path(pg_wal, name, DONE).exists() {
        Status::Done
    } else if status_path(pg_wal, name, READY).exists() {
        Status::Ready
    } else {
        Status::Unknown
    }
}

/// Marks `name` (a completed segment, a history file, a `.partial`) ready
/// for archiving: creates `archive_status/NAME.ready`, fsynced with its
/// directory when `fsync` (PostgreSQL's XLogArchiveNotify).
pub fn notify(pg_wal: &Path, name: &str, fsync: bool) -> std::io::Result<()> {
    let dir = status_dir(pg_wal);
    if !dir.exists() {
        walfile::create_dir_all(Op::ArchiveStatus, &dir)?;
        if fsync {
            walfile::sync_dir(pg_wal)?;
        }
    }
    walfile::create_marker_file(&status_path(pg_wal, name, READY), fsync)
}

/// [`notify`], a failure logged (never fatal: the removal guard creates
/// the file later, and until then the segment is kept).
pub fn notify_or_log(pg_wal: &Path, name: &str, fsync: bool) {
    if let Err(e) = notify(pg_wal, name, fsync) {
        log(
            "LOG",
            &format!("could not create archive status file \"{name}{READY}\": {e}"),
        );
    }
}

/// `NAME.ready` -> `NAME.done`, directory fsynced with `fsync`.
pub fn mark_done(pg_wal: &Path, name: &str, fsync: bool) -> std::io::Result<()> {
    let from = status_path(pg_wal, name, READY);
    walfile::rename(Op::ArchiveStatus, &from, &status_path(pg_wal, name, DONE))?;
    if fsync {
        walfile::sync_dir(&status_dir(pg_wal))?;
    }
    Ok(())
}

/// Removes `NAME.ready` (its file is gone from pg_wal).
pub fn forget(pg_wal: &Path, name: &str) {
    let _ = walfile::remove_file(Op::ArchiveStatus, &status_path(pg_wal, name, READY));
}

/// Files waiting for the archiver, in the order it takes them: history
/// files first (a restore needs them to pick a timeline), then by name
/// (segments in WAL order), as PostgreSQL's pgarch_readyXlog; names
/// that are not WAL file names are left out (module header).
pub fn ready_files(pg_wal: &Path) -> Vec<String> {
    let Ok(names) = walfile::list_dir(Op::ArchiveStatus, &status_dir(pg_wal)) else {
        return Vec::new();
    };
    let mut ready: Vec<String> = names
        .iter()
        .filter_map(|n| n.to_str()?.strip_suffix(READY))
        .filter(|n| is_archivable_name(n))
        .map(str::to_string)
        .collect();
    ready.sort_by_key(|n| (!n.ends_with(".history"), n.clone()));
    ready
}

/// Removes `.done` files whose file is no longer in pg_wal; returns how
/// many.
pub fn remove_orphan_done(pg_wal: &Path) -> usize {
    let Ok(names) = walfile::list_dir(Op::ArchiveStatus, &status_dir(pg_wal)) else {
        return 0;
    };
    let mut removed = 0;
    for n in names.iter().filter_map(|n| n.to_str()) {
        let Some(file) = n.strip_suffix(DONE) else {
            continue;
        };
        if !pg_wal.join(file).exists()
            && walfile::remove_file(Op::ArchiveStatus, &status_dir(pg_wal).join(n)).is_ok()
        {
            removed += 1;
        }
    }
    removed
}

/// The checkpointer's removal guard: of the segments `segs` (of timeline
/// `tli`, ascending) below `cutoff`, the first one not yet archived bounds
/// what may go; returns the lowered cutoff. A segment below the cutoff with
/// no status file at all gets its `.ready` now (see the module header).
/// Without `archive_mode`, `cutoff` unchanged.
pub fn keep_unarchived(
    archive_mode: bool,
    pg_wal: &Path,
    geo: &Geometry,
    tli: u32,
    segs: &[u64],
    cutoff: u64,
) -> u64 {
    if !archive_mode {
        return cutoff;
    }
    for &n in segs.iter().filter(|&&n| n < cutoff) {
        let name = geo.file_name(tli, n);
        match status(pg_wal, &name) {
            Status::Done => continue,
            Status::Ready => return n,
            Status::Unknown => {
                notify_or_log(pg_wal, &name, true);
                return n;
            }
        }
    }
    cutoff
}

/// `%p` -> `path`, `%f` -> `file`, `%%` -> `%` (other `%x` kept as is),
/// as PostgreSQL's archive and restore commands.
pub fn expand_command(template: &str, path: &str, file: &str) -> String {
    let mut out = String::with_capacity(template.len() + path.len() + file.len());
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('p') => out.push_str(path),
            Some('f') => out.push_str(file),
            Some('%') => out.push('%'),
            _ => {
                out.push('%');
                continue;
            }
        }
        chars.next();
    }
    out
}

/// How a shell command ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// Exit code (not 0).
    Failed(i32),
    /// Killed by a signal (also a shell's exit code above 128, which is how
    /// `sh` reports a child that a signal killed).
    Signaled(i32),
    /// `/bin/sh` could not be run.
    NotRun(String),
    /// Stopped: the caller's `stop` became true while it ran
    /// ([`run_shell_until`]).
    Interrupted,
}

impl Outcome {
    /// For log lines: "failed with exit code N" and the like.
    pub fn describe(&self) -> String {
        match self {
            Outcome::Success => "succeeded".into(),
            Outcome::Failed(c) => format!("failed with exit code {c}"),
            Outcome::Signaled(s) => format!("was terminated by signal {s}"),
            Outcome::NotRun(e) => format!("could not be run: {e}"),
            Outcome::Interrupted => "was stopped at a shutdown request".into(),
        }
    }
}

/// Runs `command` with `/bin/sh -c` in `dir`; waits for it. Its output
/// goes to the server log (stderr), never to stdout, where the server's
/// `ack` lines and summary go.
pub fn run_shell(command: &str, dir: &Path) -> Outcome {
    match shell(command, dir).status() {
        Ok(st) => outcome_of(st),
        Err(e) => Outcome::NotRun(e.to_string()),
    }
}

/// `/bin/sh -c command` in `dir`, no stdin, its stdout into our stderr.
fn shell(command: &str, dir: &Path) -> Command {
    use std::process::Stdio;
    let mut c = Command::new("/bin/sh");
    c.arg("-c")
        .arg(command)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::io::stderr()));
    c
}

/// How often [`run_shell_until`] asks its `stop`.
const STOP_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// [`run_shell`], but asks `stop` every [`STOP_POLL`] while the command
/// runs: once it is true the command's whole process group (the shell is
/// started as its own group leader) gets SIGTERM, is waited for, and the
/// outcome is [`Outcome::Interrupted`]. As PostgreSQL's startup process,
/// which exits at once when a shutdown arrives during `restore_command`.
pub fn run_shell_until(command: &str, dir: &Path, stop: &dyn Fn() -> bool) -> Outcome {
    use std::os::unix::process::CommandExt;
    let child = shell(command, dir).process_group(0).spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return Outcome::NotRun(e.to_string()),
    };
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return outcome_of(st),
            Ok(None) if stop() => {
                // The process group the shell leads (its pid is the
                // group's id, `process_group(0)`).
                shmem::sys::kill(-(child.id() as i32), shmem::sys::Signal::SIGTERM);
                let _ = child.wait();
                return Outcome::Interrupted;
            }
            Ok(None) => std::thread::sleep(STOP_POLL),
            Err(e) => return Outcome::NotRun(e.to_string()),
        }
    }
}

/// The outcome a finished shell's status means.
fn outcome_of(st: std::process::ExitStatus) -> Outcome {
    use std::os::unix::process::ExitStatusExt;
    match (st.success(), st.code(), st.signal()) {
        (true, _, _) => Outcome::Success,
        (false, Some(c), _) if c > 128 => Outcome::Signaled(c - 128),
        (false, Some(c), _) => Outcome::Failed(c),
        (false, None, Some(s)) => Outcome::Signaled(s),
        (false, None, None) => Outcome::Failed(-1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_placeholders() {
        assert_eq!(
            expand_command("cp %p /a/%f && echo 100%% %x", "pg_wal/F", "F"),
            "cp pg_wal/F /a/F && echo 100% %x"
        );
        assert_eq!(expand_command("x%", "p", "f"), "x%");
    }

    #[test]
    fn status_files_and_guard() {
        let dir = std::env::temp_dir().join(format!("walshm-archive-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let geo = Geometry::new(1 << 20).unwrap();
        let name = |n| geo.file_name(1, n);
        for n in 1..=4 {
            std::fs::write(dir.join(name(n)), b"x").unwrap();
        }
        notify(&dir, &name(1), false).unwrap();
        notify(&dir, &name(2), false).unwrap();
        notify(&dir, "00000002.history", false).unwrap();
        assert_eq!(ready_files(&dir)[0], "00000002.history");
        assert_eq!(ready_files(&dir)[1], name(1));
        mark_done(&dir, &name(1), false).unwrap();
        assert_eq!(status(&dir, &name(1)), Status::Done);
        let segs = [1, 2, 3, 4];
        assert_eq!(keep_unarchived(false, &dir, &geo, 1, &segs, 4), 4);
        assert_eq!(keep_unarchived(true, &dir, &geo, 1, &segs, 4), 2);
        mark_done(&dir, &name(2), false).unwrap();
        // Segment 3 has no status file: it is kept and made ready.
        assert_eq!(keep_unarchived(true, &dir, &geo, 1, &segs, 4), 3);
        assert_eq!(status(&dir, &name(3)), Status::Ready);
        std::fs::remove_file(dir.join(name(1))).unwrap();
        assert_eq!(remove_orphan_done(&dir), 1);
        assert_eq!(status(&dir, &name(1)), Status::Unknown);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_wal_file_names_are_ready() {
        let dir = std::env::temp_dir().join(format!("walshm-archive-names-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(status_dir(&dir)).unwrap();
        let good = [
            "000000010000000000000003",
            "00000002.history",
            "000000010000000000000002.partial",
            "000000010000000000000001.00000028.backup",
        ];
        for n in good
            .iter()
            .chain(&["x;touch PWNED;#", "a b", "$(id)", "../x"])
        {
            std::fs::write(status_dir(&dir).join(format!("{n}{READY}")), b"").unwrap();
        }
        let mut got = ready_files(&dir);
        got.sort();
        let mut want: Vec<String> = good.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(got, want);
        assert!(!is_archivable_name(""));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn shell_outcomes() {
        let dir = std::env::temp_dir();
        assert_eq!(run_shell("true", &dir), Outcome::Success);
        assert_eq!(run_shell("exit 3", &dir), Outcome::Failed(3));
        assert_eq!(run_shell("kill -9 $$", &dir), Outcome::Signaled(9));
        assert_eq!(
            run_shell_until("exit 3", &dir, &|| false),
            Outcome::Failed(3)
        );
        let t = std::time::Instant::now();
        let late = move || t.elapsed() > std::time::Duration::from_millis(200);
        assert_eq!(
            run_shell_until("sleep 30; sleep 30", &dir, &late),
            Outcome::Interrupted
        );
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            t.elapsed()
        );
    }
}
