//! The data directory: creation (`init`), configuration, and the
//! `postmaster.pid` interlock.
//!
//! Layout: `PG_VERSION` ("15", as PostgreSQL 15's tools expect),
//! `walshm.conf` (settings, and `worker = 'NAME=COMMAND'` lines:
//! repeatable, so read beside the settings table), `postgresql.auto.conf`
//! if present (settings PostgreSQL's tools write, such as recovery
//! targets; read after walshm.conf, before the command line's, as
//! PostgreSQL reads it after postgresql.conf), `global/pg_control`
//! (control file, PostgreSQL 15's layout), `pg_wal/` (WAL segments),
//! `postmaster.pid` while a postmaster runs, `postmaster.opts` (the
//! command line of the last start, which `pg_ctl restart` reuses),
//! `.s.WALSHM.worker` (the registration socket).
//!
//! `postmaster.pid` has PostgreSQL's lines (miscadmin.h's
//! LOCK_FILE_LINE_*), so that `pg_ctl` reads it:
//!
//! ```text
//! 1 PID                 5 Unix socket directory
//! 2 data directory      6 first listen address ('' if none)
//! 3 start time (Unix s) 7 shared memory key: "        0         0" (the segment is an unnamed memfd)
//! 4 port                8 status: "starting", "ready   " or "stopping" (8 bytes, rewritten in place)
//! 9 the registration socket's path (walshm's own line)
//! ```
//!
//! Modes, as PostgreSQL's: the directory and its subdirectories are 0700,
//! every file is created 0600 explicitly (and the process umask is 0077,
//! set by `main`, for anything created implicitly); `start` refuses a data
//! directory that group or others can access, saying which chmod to run.

use crate::cli::InitOptions;
use crate::supervised::WorkerSpec;
use backend::control::{unix_now, ControlFile, DbState};
use shmem::settings::{Settings, SETTINGS};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use walformat::{checkpoint_record, Geometry, SegmentWriter};

pub const CONFIG_FILE: &str = "walshm.conf";
/// PostgreSQL's file of settings written by its tools (`ALTER SYSTEM`,
/// `pg_basebackup -R`), read after [`CONFIG_FILE`].
pub const AUTO_CONFIG_FILE: &str = "postgresql.auto.conf";
pub const PID_FILE: &str = "postmaster.pid";
pub const OPTS_FILE: &str = "postmaster.opts";
/// What PostgreSQL 15's tools find in `PG_VERSION`.
pub const PG_VERSION_FILE: &str = "PG_VERSION";
const PG_VERSION: &str = "15\n";
/// First XID handed out, in its 64-bit (epoch 0) form.
const FIRST_NORMAL_FULL_XID: u64 = backend::procarray::FIRST_NORMAL_XID as u64;

/// A system identifier as initdb makes one: time in the high bits, PID low.
fn new_system_identifier() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (now.as_secs() << 32)
        | ((now.subsec_micros() as u64) << 12)
        | (std::process::id() as u64 & 0xFFF)
}

fn is_empty_dir(p: &Path) -> std::io::Result<bool> {
    Ok(fs::read_dir(p)?.next().is_none())
}

/// Both configured verifiers are well formed.
fn check_verifiers(s: &Settings) -> Result<(), String> {
    use crate::password::{check_verifier, LOGIN, REPLICATION};
    check_verifier(&LOGIN, s.password.as_str())?;
    check_verifier(&REPLICATION, s.replication_password.as_str())
}

/// walshm.conf lines holding the verifiers of the passwords given to
/// `init` (files or environment).
fn verifier_lines(opts: &InitOptions) -> Result<Vec<String>, String> {
    use crate::password::{verifier_from_inputs, LOGIN, REPLICATION};
    let mut lines = Vec::new();
    for (secret, file) in [
        (&LOGIN, &opts.pwfile),
        (&REPLICATION, &opts.replication_pwfile),
    ] {
        if let Some(v) = verifier_from_inputs(secret, file.as_deref())? {
            lines.push(format!("{} = '{v}'", secret.setting));
        }
    }
    Ok(lines)
}

/// Makes `dir` (mode 0700) or checks that it is an empty directory;
/// returns whether it existed.
fn make_empty_dir(dir: &Path) -> Result<bool, String> {
    let existed = dir.exists();
    match fs::metadata(dir) {
        Ok(m) if !m.is_dir() => {
            return Err(format!(
                "\"{}\" exists but is not a directory",
                dir.display()
            ))
        }
        Ok(_) => {
            if !is_empty_dir(dir)
                .map_err(|e| format!("could not read directory \"{}\": {e}", dir.display()))?
            {
                return Err(format!(
                    "directory \"{}\" exists but is not empty; remove it or choose another",
                    dir.display()
                ));
            }
        }
        Err(_) => fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("could not create directory \"{}\": {e}", dir.display()))?,
    }
    Ok(existed)
}

/// `postmaster init -D DIR`.
pub fn init(opts: &InitOptions) -> Result<(), String> {
    let dir = &opts.datadir;
    // Validate settings before touching the disk.
    let mut settings = Settings::default();
    for s in &opts.sets {
        settings.set_assignment(s).map_err(|e| e.to_string())?;
    }
    check_verifiers(&settings)?;
    // A WAL source is checked whole before anything is created.
    let source = opts
        .from_wal
        .as_deref()
        .map(crate::restore::examine)
        .transpose()?;
    let mut lines = opts.sets.clone();
    lines.extend(verifier_lines(opts)?);
    let existed = make_empty_dir(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(|e| e.to_string())?;
    for sub in ["pg_wal", "global"] {
        fs::DirBuilder::new()
            .mode(0o700)
            .create(dir.join(sub))
            .map_err(|e| format!("could not create \"{}\": {e}", dir.join(sub).display()))?;
    }
    write_config(dir, &lines)?;
    write_pg_version(dir)?;
    if let Some(src) = source {
        return init_from_wal(dir, &src).inspect_err(|_| remove_created(dir, existed));
    }

    let geo = Geometry::new(opts.seg_size).map_err(|e| e.to_string())?;
    let sysid = new_system_identifier();
    let tli = 1;
    // WAL starts in segment 1, as initdb's does (LSN 0 is invalid).
    let mut w = SegmentWriter::new(geo, tli, sysid, geo.seg_start(1), 0);
    let redo = w.insert_pos();
    let cp = backend::checkpointer::checkpoint_contents(redo, tli, FIRST_NORMAL_FULL_XID);
    let checkpoint = w.append(&mut checkpoint_record(&cp, true));
    let pg_wal = dir.join("pg_wal");
    w.write_to_dir(&pg_wal)
        .map_err(|e| format!("could not write WAL: {e}"))?;
    for segno in w.segment_numbers() {
        let f =
            fs::File::open(pg_wal.join(geo.file_name(tli, segno))).map_err(|e| e.to_string())?;
        f.set_permissions(fs::Permissions::from_mode(0o600))
            .and_then(|_| f.sync_all())
            .map_err(|e| e.to_string())?;
    }
    backend::walfile::sync_dir(&pg_wal).map_err(|e| e.to_string())?;
    ControlFile {
        state: DbState::ShutDown,
        system_identifier: sysid,
        seg_size: geo.seg_size,
        timeline: tli,
        checkpoint,
        redo,
        next_xid: FIRST_NORMAL_FULL_XID,
        time: unix_now(),
    }
    .write(dir, true)
    .map_err(|e| e.to_string())?;
    println!(
        "walshm: initialized data directory \"{}\" (system identifier {sysid}, WAL segment size {} MB, first checkpoint at {})",
        dir.display(),
        geo.seg_size >> 20,
        walformat::format_lsn(checkpoint)
    );
    println!("start it with: postmaster start -D {}", dir.display());
    Ok(())
}

/// `init --from-wal`: the validated WAL of `src` copied into `dir`, the
/// control file naming its first checkpoint, and `recovery.signal`.
fn init_from_wal(dir: &Path, src: &crate::restore::Source) -> Result<(), String> {
    let pg_wal = dir.join("pg_wal");
    crate::restore::copy_into(src, &pg_wal)?;
    ControlFile {
        state: DbState::ShutDown,
        system_identifier: src.system_identifier,
        seg_size: src.geo.seg_size,
        timeline: src.history.tli,
        checkpoint: src.checkpoint,
        redo: src.redo,
        next_xid: src.next_xid,
        time: unix_now(),
    }
    .write(dir, true)
    .map_err(|e| e.to_string())?;
    let signal = dir.join(backend::restore::RECOVERY_SIGNAL);
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&signal)
        .and_then(|f| f.sync_all())
        .and_then(|()| backend::walfile::sync_dir(dir))
        .map_err(|e| format!("could not create \"{}\": {e}", signal.display()))?;
    println!(
        "walshm: initialized data directory \"{}\" from the WAL in \"{}\" (system identifier {}, WAL segment size {} MB, first checkpoint at {}): {} segment(s) of timeline {}, {} valid record(s) up to {}",
        dir.display(),
        src.dir.display(),
        src.system_identifier,
        src.geo.seg_size >> 20,
        walformat::format_lsn(src.checkpoint),
        src.segments.len(),
        src.history.tli,
        src.records,
        walformat::format_lsn(src.end)
    );
    println!(
        "start it with: postmaster start -D {} (it recovers that WAL to its end, then continues on a new timeline)",
        dir.display()
    );
    Ok(())
}

/// After a failed `init --from-wal`: removes what init created in `dir`
/// (the directory itself if it did not exist before).
fn remove_created(dir: &Path, existed: bool) {
    if !existed {
        let _ = fs::remove_dir_all(dir);
        return;
    }
    for sub in [
        "pg_wal",
        "global",
        CONFIG_FILE,
        PG_VERSION_FILE,
        backend::restore::RECOVERY_SIGNAL,
    ] {
        let p = dir.join(sub);
        let _ = fs::remove_dir_all(&p).or_else(|_| fs::remove_file(&p));
    }
}

/// Writes `bytes` to `p` (mode 0600), replacing it or, with `new_only`,
/// refusing an existing file.
fn write_private(p: &Path, bytes: &[u8], new_only: bool) -> Result<(), String> {
    fs::OpenOptions::new()
        .write(true)
        .create(!new_only)
        .create_new(new_only)
        .truncate(!new_only)
        .mode(0o600)
        .open(p)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| format!("could not write \"{}\": {e}", p.display()))
}

/// Writes `DIR/PG_VERSION` ("15"), mode 0600.
pub fn write_pg_version(dir: &Path) -> Result<(), String> {
    write_private(&dir.join(PG_VERSION_FILE), PG_VERSION.as_bytes(), false)
}

/// A data directory made by an earlier walshm: its control file in the
/// previous format is rewritten in PostgreSQL 15's, and `PG_VERSION` is
/// added if missing. Called at start, with the pid file held.
pub fn bring_up_to_date(dir: &Path) -> Result<(), String> {
    if backend::control::convert_legacy(dir).map_err(|e| e.to_string())? {
        crate::log(
            "LOG",
            "control file converted to PostgreSQL 15's pg_control layout",
        );
    }
    if !dir.join(PG_VERSION_FILE).exists() {
        write_pg_version(dir)?;
    }
    Ok(())
}

/// Writes `DIR/postmaster.opts` as PostgreSQL's postmaster does: this
/// program's path, then each argument in double quotes, on one line
/// (`pg_ctl restart` starts the server again with it).
pub fn write_opts_file(dir: &Path, args: &[String]) -> Result<(), String> {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "postmaster".into());
    let mut line = exe;
    for a in args {
        line.push_str(&format!(" \"{a}\""));
    }
    line.push('\n');
    write_private(&dir.join(OPTS_FILE), line.as_bytes(), false)
}

fn write_config(dir: &Path, sets: &[String]) -> Result<(), String> {
    let mut text =
        String::from("# walshm configuration: NAME = VALUE lines; --set NAME=VALUE overrides.\n");
    let defaults = Settings::default();
    for row in SETTINGS {
        let (name, default) = (row.name, row.config_value(&defaults));
        text.push_str(&format!(
            "#{name} = {default}\t\t# {}: {}\n",
            row.valid(),
            row.what()
        ));
    }
    text.push_str(
        "#worker = 'NAME=COMMAND [ARGS]'\t\t# repeatable: a supervised worker (as start --worker)\n",
    );
    for s in sets {
        text.push_str(s);
        text.push('\n');
    }
    write_private(&dir.join(CONFIG_FILE), text.as_bytes(), true)
}

/// Settings for `start`: defaults, then the configuration file, then --set.
pub fn load_settings(dir: &Path, sets: &[String]) -> Result<Settings, String> {
    Ok(load_config(dir, sets)?.0)
}

/// Settings for `start` (as `load_settings`) and the configuration file's
/// `worker` lines, in order. The recovery target settings are checked
/// together here, as PostgreSQL checks them when it loads them.
pub fn load_config(dir: &Path, sets: &[String]) -> Result<(Settings, Vec<WorkerSpec>), String> {
    let mut s = Settings::default();
    let mut workers = Vec::new();
    if let Some((text, origin)) = read_config_file(&dir.join(CONFIG_FILE))? {
        let (settings_text, lines) = split_worker_lines(&text, &origin)?;
        workers = lines;
        s.apply_config_text(&settings_text, &origin)
            .map_err(|e| e.to_string())?
    }
    apply_auto_conf(dir, &mut s)?;
    for a in sets {
        s.set_assignment(a).map_err(|e| e.to_string())?;
    }
    check_verifiers(&s)?;
    backend::recovery_target::RecoveryTarget::from_settings(&s)?;
    Ok((s, workers))
}

/// The text of configuration file `p` and its name for errors; None when
/// there is no such file.
fn read_config_file(p: &Path) -> Result<Option<(String, String)>, String> {
    match fs::read_to_string(p) {
        Ok(text) => Ok(Some((text, p.display().to_string()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("could not read \"{}\": {e}", p.display())),
    }
}

/// Applies `DIR/postgresql.auto.conf` (the file `ALTER SYSTEM` and
/// `pg_basebackup -R` write; read after the configuration file, before
/// the command line, as PostgreSQL reads it) when there is one: `name = 'value'`
/// lines, with postgresql.conf's quoting ('' for a quote), so that the
/// `primary_conninfo` pg_basebackup -R writes keeps its inner quotes.
fn apply_auto_conf(dir: &Path, s: &mut Settings) -> Result<(), String> {
    let p = dir.join(AUTO_CONFIG_FILE);
    let text = match fs::read_to_string(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("could not read \"{}\": {e}", p.display())),
    };
    for (i, raw) in text.lines().enumerate() {
        let at = |e: String| format!("{}:{}: {e}", p.display(), i + 1);
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, value) = line
            .split_once('=')
            .ok_or_else(|| at(format!("expected NAME = VALUE, got \"{line}\"")))?;
        let value = unquote_conf_value(value.trim()).map_err(at)?;
        s.set_unquoted(name.trim(), &value)
            .map_err(|e| at(e.to_string()))?;
    }
    Ok(())
}

/// Takes the `worker = 'NAME=COMMAND'` lines out of a configuration text
/// (each replaced by an empty line, so that errors keep their line
/// numbers) and parses them. The value is one quoted string ('' stands
/// for a quote, as in postgresql.conf) or the rest of the line.
fn split_worker_lines(text: &str, origin: &str) -> Result<(String, Vec<WorkerSpec>), String> {
    let mut rest = String::with_capacity(text.len());
    let mut workers = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        let value = line
            .split_once('=')
            .filter(|(name, _)| name.trim() == "worker")
            .map(|(_, v)| v.trim());
        match value {
            Some(v) => {
                let at = |e: String| format!("{origin}:{}: {e}", i + 1);
                let v = unquote_conf_value(v).map_err(at)?;
                workers.push(WorkerSpec::parse(&v).map_err(at)?);
            }
            None => rest.push_str(raw),
        }
        rest.push('\n');
    }
    Ok((rest, workers))
}

fn unquote_conf_value(v: &str) -> Result<String, String> {
    let Some(inner) = v.strip_prefix('\'') else {
        return Ok(v.to_string());
    };
    let inner = inner
        .strip_suffix('\'')
        .ok_or_else(|| format!("unterminated quoted string {v}"))?;
    Ok(inner.replace("''", "'"))
}

/// Checks that `dir` is a data directory; returns its canonical path.
pub fn check_datadir(dir: &Path) -> Result<PathBuf, String> {
    let canon = dir.canonicalize().map_err(|e| {
        format!(
            "data directory \"{}\" does not exist or is not accessible: {e}",
            dir.display()
        )
    })?;
    if !backend::control::path(&canon).exists() {
        return Err(format!(
            "\"{}\" is not a walshm data directory (no global/pg_control); create one with: postmaster init -D {}",
            dir.display(),
            dir.display()
        ));
    }
    check_datadir_mode(&canon)?;
    Ok(canon)
}

/// Refuses a data directory that group or others may enter or list.
fn check_datadir_mode(dir: &Path) -> Result<(), String> {
    let mode = fs::metadata(dir)
        .map_err(|e| format!("could not stat data directory \"{}\": {e}", dir.display()))?
        .permissions()
        .mode()
        & 0o7777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "data directory \"{}\" has invalid permissions (mode {mode:04o}): it must be accessible by its owner only (0700); fix it with: chmod 0700 {}",
            dir.display(),
            dir.display()
        ));
    }
    Ok(())
}

/// The pid file, removed when dropped.
pub struct PidFile {
    path: PathBuf,
    /// Byte offset of line 8, the status.
    status_at: u64,
}

/// What the pid file's lines 4 to 6 say (see the module's table).
pub struct PidFacts {
    pub port: u32,
    pub socket_dir: String,
    pub listen_addr: String,
}

/// The status line's words (miscadmin.h's PM_STATUS_*: 8 bytes each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PmStatus {
    Starting,
    Ready,
    Stopping,
}

impl PmStatus {
    fn word(self) -> &'static str {
        match self {
            PmStatus::Starting => "starting",
            PmStatus::Ready => "ready   ",
            PmStatus::Stopping => "stopping",
        }
    }
}

impl PidFile {
    /// Creates `DIR/postmaster.pid` (status "starting"), refusing if a
    /// live postmaster owns the directory and taking over a stale file.
    /// Returns the file and whether a stale one was found (its owner died
    /// without cleaning up).
    pub fn create(dir: &Path, facts: &PidFacts) -> Result<(PidFile, bool), String> {
        let socket = shmem::register::socket_path(dir);
        let path = dir.join(PID_FILE);
        let mut stale = false;
        for _ in 0..2 {
            let f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path);
            match f {
                Ok(mut f) => {
                    let head = format!(
                        "{}\n{}\n{}\n{}\n{}\n{}\n{:>9} {:>9}\n",
                        std::process::id(),
                        dir.display(),
                        unix_now(),
                        facts.port,
                        facts.socket_dir,
                        facts.listen_addr,
                        0,
                        0
                    );
                    let text = format!(
                        "{head}{}\n{}\n",
                        PmStatus::Starting.word(),
                        socket.display()
                    );
                    f.write_all(text.as_bytes())
                        .and_then(|_| f.sync_all())
                        .map_err(|e| format!("could not write \"{}\": {e}", path.display()))?;
                    let status_at = head.len() as u64;
                    return Ok((PidFile { path, status_at }, stale));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let text = fs::read_to_string(&path).unwrap_or_default();
                    let owner: i32 = text
                        .lines()
                        .next()
                        .and_then(|l| l.trim().parse().ok())
                        .unwrap_or(0);
                    if owner != std::process::id() as i32
                        && shmem::sys::process_exists(owner)
                        && is_postmaster(owner)
                    {
                        return Err(format!(
                            "another postmaster (PID {owner}) is running in data directory \"{}\"",
                            dir.display()
                        ));
                    }
                    eprintln!(
                        "postmaster: LOG:  removing stale pid file \"{}\" (PID {owner} is not running)",
                        path.display()
                    );
                    stale = true;
                    fs::remove_file(&path).map_err(|e| {
                        format!("could not remove stale \"{}\": {e}", path.display())
                    })?;
                }
                Err(e) => return Err(format!("could not create \"{}\": {e}", path.display())),
            }
        }
        Err(format!(
            "could not create \"{}\": it keeps reappearing",
            path.display()
        ))
    }

    /// Rewrites the status line in place (one 8-byte write: a reader such
    /// as `pg_ctl -w` sees the old word or the new one). A failure is
    /// logged, never fatal: the server runs on without it, as PostgreSQL's.
    pub fn set_status(&self, status: PmStatus) {
        use std::os::unix::fs::FileExt;
        let r = fs::OpenOptions::new()
            .write(true)
            .open(&self.path)
            .and_then(|f| f.write_all_at(status.word().as_bytes(), self.status_at));
        if let Err(e) = r {
            crate::log(
                "LOG",
                &format!("could not write \"{}\": {e}", self.path.display()),
            );
        }
    }
}

/// Does `pid` look like a postmaster (its comm)?
fn is_postmaster(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim() == "postmaster")
        .unwrap_or(true)
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}
