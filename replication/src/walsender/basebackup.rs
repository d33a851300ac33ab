//! BASE_BACKUP: a copy of the data directory for PostgreSQL 15's
//! `pg_basebackup` (basebackup.c and basebackup_copy.c of PostgreSQL 15,
//! the "copystream" protocol of servers >= 15).
//!
//! Reply sequence:
//! 1. a result set (recptr text, tli int8) with the start position and
//!    timeline, CommandComplete "SELECT";
//! 2. the tablespace list: one row for the data directory (spcoid and
//!    spclocation NULL, size in kB with PROGRESS, else NULL),
//!    CommandComplete "SELECT";
//! 3. one CopyOutResponse, then CopyData messages whose first byte names
//!    them: 'n' new archive ("base.tar", then the tablespace path, "" for
//!    the data directory), 'd' archive bytes (a ustar stream as
//!    PostgreSQL's tarCreateHeader writes it, without the two zero blocks
//!    at the end: pg_basebackup adds them), 'p' progress (int64 bytes sent
//!    so far, at most once a second and at the end of the archive), 'm'
//!    the manifest begins, then 'd' manifest bytes; CopyDone;
//! 4. a result set with the end position and timeline, CommandComplete
//!    "SELECT", then CommandComplete "BASE_BACKUP".
//!
//! Content, in this order: `backup_label` (made here, as PostgreSQL 15
//! writes it), every file and directory of the data directory except
//! what PostgreSQL excludes (postmaster.pid, postmaster.opts, the
//! contents of pg_wal and pg_replslot and of the other transient
//! directories, temporary files, the sockets `.s.PGSQL.*` and
//! `.s.WALSHM.*` and their lock files; other links and special files are
//! skipped with a WARNING, a symlinked pg_wal is sent as a directory), then
//! `global/pg_control` last (and an empty `pg_tblspc/`, which
//! pg_basebackup expects in every copy); with WAL (`-X fetch`), the segments from the
//! start to the end position (the last one with the bytes from the end
//! position on zeroed) and the history files, under pg_wal/.
//!
//! Start and end: a checkpoint is requested (walshm has no data pages, so
//! a "spread" checkpoint costs what a fast one does: both are immediate),
//! and the start position is the redo point of the checkpoint the control
//! file then names. The end position is the WAL flush position after the
//! last file was copied: every commit acknowledged before that moment is
//! below it (a commit is acknowledged after its record is flushed), and
//! the WAL up to it never changes on disk. PostgreSQL writes a backup-end
//! record instead; walshm's recovery needs none: the copy is consistent
//! anywhere, since WAL is all the state there is.
//!
//! WAL retention: a temporary physical slot (`pg_basebackup_hold_PID`)
//! reserved before the checkpoint keeps the checkpointer from removing
//! the segments from the start position on while the backup runs (as
//! PostgreSQL's runningBackups does); it is dropped at the end, and with
//! the session if the walsender exits first.

use super::{End, Reply, WalSender};
use backend::checkpointer::request_checkpoint;
use backend::control::{unix_now, ControlFile};
use backend::process::log;
use backend::slots;
use protocol::replication::{self as repl, BaseBackupOptions, ColumnType, ManifestChecksum};
use protocol::{sqlstate, SqlError};
use sha2::Digest;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::time::{Duration, Instant};
use walformat::Lsn;

/// Bytes of archive data per CopyData message (PostgreSQL's default
/// bbsink buffer is 32 kB; larger messages cost fewer syscalls).
const CHUNK: usize = 256 << 10;
/// Least spacing of progress messages (PostgreSQL's
/// PROGRESS_REPORT_MILLISECOND_THRESHOLD).
const PROGRESS_EVERY: Duration = Duration::from_millis(1000);
/// Directories whose contents are not sent (the directory itself is):
/// PostgreSQL's excludeDirContents, and pg_wal (sent apart, with WAL).
const EXCLUDE_DIR_CONTENTS: [&str; 8] = [
    "pg_stat_tmp",
    "pg_replslot",
    "pg_dynshmem",
    "pg_notify",
    "pg_serial",
    "pg_snapshots",
    "pg_subtrans",
    "pg_wal",
];
/// Top-level files never sent (PostgreSQL's excludeFiles; backup_label is
/// made anew, pg_control is sent last).
const EXCLUDE_FILES: [&str; 7] = [
    "postgresql.auto.conf.tmp",
    "current_logfiles.tmp",
    "backup_label",
    "tablespace_map",
    "postmaster.pid",
    "postmaster.opts",
    "backup_manifest",
];
/// Moved-aside WAL (`startup::DISCARDED_DIR`) is not part of a copy.
const DISCARDED_DIR: &str = "pg_wal_discarded";
const CONTROL_PATH: &str = "global/pg_control";

/// One entry of the archive, relative to the data directory.
struct Entry {
    rel: String,
    dir: bool,
    size: u64,
    mode: u32,
    mtime: i64,
}

/// The archive being sent and the manifest being built.
struct Archive {
    out: Vec<u8>,
    done: u64,
    last_progress: Instant,
    started: Instant,
    max_rate: Option<u64>,
    manifest: Option<String>,
    checksum: ManifestChecksum,
    /// MANIFEST 'force-encode': every path hex-encoded.
    force_encode: bool,
    /// A shutdown request ended the backup (the stream stopped with this
    /// FATAL rather than because the client left).
    aborted: Option<SqlError>,
}

impl<S: Read + Write + AsRawFd> WalSender<'_, S> {
    /// BASE_BACKUP (see the module header).
    pub(super) fn base_backup(&mut self, o: BaseBackupOptions) -> Result<Reply, SqlError> {
        let hold = format!("pg_basebackup_hold_{}", std::process::id());
        let fsync = self.shm.settings().fsync;
        let held = match slots::create(self.shm, &self.datadir, &hold, true, true, fsync) {
            Ok(_) => {
                self.temp_slots.push(hold.clone());
                true
            }
            Err(e) => {
                log(
                    "WARNING",
                    &format!("base backup: no slot holds its WAL: {}", e.message),
                );
                false
            }
        };
        let result = self.base_backup_held(&o);
        if held {
            self.temp_slots.retain(|n| n != &hold);
            let _ = slots::drop_slot(self.shm, &self.datadir, &hold, false);
        }
        result
    }

    fn base_backup_held(&mut self, o: &BaseBackupOptions) -> Result<Reply, SqlError> {
        // PostgreSQL's do_pg_backup_start limit (MAXPGPATH).
        if o.label.len() > 1024 {
            return Err(SqlError::error(
                sqlstate::INVALID_PARAMETER_VALUE,
                "backup label too long (max 1024 bytes)",
            ));
        }
        request_checkpoint(self.shm);
        let control = read_control(&self.datadir)?;
        let start = control.redo;
        let tli = control.timeline;
        let started_unix = unix_now();
        log(
            "LOG",
            &format!(
                "base backup \"{}\" starts at {} (checkpoint at {}) on timeline {tli}",
                o.label,
                repl::format_lsn(start),
                repl::format_lsn(control.checkpoint)
            ),
        );
        let label = backup_label(
            &self.geo.file_name(tli, self.geo.seg_no(start)),
            start,
            control.checkpoint,
            started_unix,
            &o.label,
            tli,
        );
        let entries = backup_entries(&self.datadir, started_unix)?;
        let size_kb = o.progress.then(|| {
            let files: u64 = entries
                .iter()
                .map(|e| 512 + e.size.next_multiple_of(512))
                .sum();
            (files + 1024 + label.len() as u64) / 1024
        });
        let head = backup_head(start, tli, size_kb)?;
        let mut a = Archive::new(head, o);
        let mut new_archive = b"base.tar\0".to_vec();
        new_archive.push(0);
        repl::typed_copy_data(&mut a.out, b'n', &new_archive);
        let sent = self.archive_data_dir(&mut a, &label, started_unix, &entries)?;
        if let Some(e) = a.aborted.take() {
            return Err(e);
        }
        if !sent {
            return Ok(Reply::Ended(End::ClientGone));
        }
        let end = self.flush_lsn().max(start);
        if o.include_wal && !self.archive_wal(&mut a, tli, start, end)? {
            return match a.aborted.take() {
                Some(e) => Err(e),
                None => Ok(Reply::Ended(End::ClientGone)),
            };
        }
        let mut p = Vec::new();
        repl::typed_copy_data(&mut p, b'p', &(a.done as i64).to_be_bytes());
        a.out.extend_from_slice(&p);
        a.finish_manifest(tli, start, end);
        a.end(end, tli)?;
        log(
            "LOG",
            &format!(
                "base backup \"{}\" ends at {}: {} bytes of archive in {:.3} s",
                o.label,
                repl::format_lsn(end),
                a.done,
                a.started.elapsed().as_secs_f64()
            ),
        );
        Ok(Reply::Bytes(std::mem::take(&mut a.out)))
    }

    /// backup_label, the data directory's entries, and pg_control last;
    /// false if the stream stopped (the client left, or `a.aborted`).
    fn archive_data_dir(
        &mut self,
        a: &mut Archive,
        label: &str,
        started_unix: i64,
        entries: &[Entry],
    ) -> Result<bool, SqlError> {
        if !self.archive_file(a, "backup_label", label.as_bytes(), 0o600, started_unix)? {
            return Ok(false);
        }
        let (control, rest): (Vec<&Entry>, Vec<&Entry>) =
            entries.iter().partition(|e| e.rel == CONTROL_PATH);
        for e in rest.into_iter().chain(control) {
            if !self.archive_entry(a, e)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Sends what `a` gathered if it is large (or `force`); false if the
    /// client is gone or a shutdown was requested (then `a.aborted` holds
    /// the FATAL: a fast shutdown does not wait for a backup, as in
    /// PostgreSQL). Applies MAX_RATE and sends a progress message at most
    /// once a second.
    fn archive_flush(&mut self, a: &mut Archive, force: bool) -> bool {
        if a.out.len() < CHUNK && !force {
            return true;
        }
        if backend::process::shutdown_requested() {
            a.aborted = Some(SqlError::fatal(
                sqlstate::ADMIN_SHUTDOWN,
                "terminating connection due to administrator command",
            ));
            return false;
        }
        if a.last_progress.elapsed() >= PROGRESS_EVERY {
            a.last_progress = Instant::now();
            repl::typed_copy_data(&mut a.out, b'p', &(a.done as i64).to_be_bytes());
        }
        let ok = self.send(&a.out);
        a.out.clear();
        if let Some(rate) = a.max_rate {
            let due = Duration::from_secs_f64(a.done as f64 / rate as f64);
            // In short naps, so that a shutdown request ends it.
            while let Some(wait) = due.checked_sub(a.started.elapsed()) {
                if backend::process::shutdown_requested() {
                    break;
                }
                std::thread::sleep(wait.min(Duration::from_millis(100)));
            }
        }
        ok
    }

    /// Appends archive bytes in 'd' messages.
    fn archive_bytes(&mut self, a: &mut Archive, bytes: &[u8]) -> bool {
        for piece in bytes.chunks(CHUNK) {
            repl::typed_copy_data(&mut a.out, b'd', piece);
            a.done += piece.len() as u64;
            if !self.archive_flush(a, false) {
                return false;
            }
        }
        true
    }

    /// A file whose bytes are in memory (backup_label), with its manifest
    /// entry.
    fn archive_file(
        &mut self,
        a: &mut Archive,
        rel: &str,
        bytes: &[u8],
        mode: u32,
        mtime: i64,
    ) -> Result<bool, SqlError> {
        let h = tar_header(rel, false, bytes.len() as u64, mode, mtime)?;
        if !self.archive_bytes(a, &h) || !self.archive_bytes(a, bytes) {
            return Ok(false);
        }
        let pad = vec![0u8; padding(bytes.len() as u64)];
        if !self.archive_bytes(a, &pad) {
            return Ok(false);
        }
        let sum = Checksummer::new(a.checksum).update(bytes).finish();
        manifest_file(a, rel, bytes.len() as u64, mtime, sum, a.force_encode);
        Ok(true)
    }

    /// One entry of the data directory: a directory header, or a file
    /// streamed from disk (its size as listed: a file that grew is cut
    /// there, one that shrank is padded with zeros, as PostgreSQL does).
    fn archive_entry(&mut self, a: &mut Archive, e: &Entry) -> Result<bool, SqlError> {
        let h = tar_header(
            &e.rel,
            e.dir,
            if e.dir { 0 } else { e.size },
            e.mode,
            e.mtime,
        )?;
        if !self.archive_bytes(a, &h) {
            return Ok(false);
        }
        if e.dir {
            return Ok(true);
        }
        // A file removed since it was listed is sent as zeros of its listed
        // size (its header is out already), with its manifest line, so the
        // copy still verifies (pg_control, the one file recovery reads, is
        // replaced by rename and never missing).
        let mut f = match File::open(self.datadir.join(&e.rel)) {
            Ok(f) => Some(f),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
            Err(err) => return Err(io_error(err)),
        };
        let mut sum = Checksummer::new(a.checksum);
        let mut left = e.size;
        let mut buf = vec![0u8; CHUNK.min(e.size as usize).max(1)];
        while left > 0 {
            let want = buf.len().min(left as usize);
            let n = match f.as_mut() {
                Some(f) => f.read(&mut buf[..want]).map_err(io_error)?,
                None => 0,
            };
            if n == 0 {
                // Shrank or vanished: zeros up to the listed size.
                buf[..want].fill(0);
                sum = sum.update(&buf[..want]);
                if !self.archive_bytes(a, &buf[..want]) {
                    return Ok(false);
                }
                left -= want as u64;
                continue;
            }
            sum = sum.update(&buf[..n]);
            if !self.archive_bytes(a, &buf[..n]) {
                return Ok(false);
            }
            left -= n as u64;
        }
        let pad = vec![0u8; padding(e.size)];
        if !self.archive_bytes(a, &pad) {
            return Ok(false);
        }
        manifest_file(a, &e.rel, e.size, e.mtime, sum.finish(), a.force_encode);
        Ok(true)
    }

    /// `-X fetch`: the segments from `start` to `end` (the last one with
    /// the bytes from `end` on zeroed: they were not flushed when the
    /// backup ended) and the history files, under pg_wal/. Not in the
    /// manifest (pg_verifybackup checks WAL with pg_waldump).
    fn archive_wal(
        &mut self,
        a: &mut Archive,
        tli: u32,
        start: Lsn,
        end: Lsn,
    ) -> Result<bool, SqlError> {
        let geo = self.geo;
        let last = geo.seg_no(end.saturating_sub(1).max(start));
        let pg_wal = self.datadir.join("pg_wal");
        for segno in geo.seg_no(start)..=last {
            if !self.archive_segment(a, &pg_wal, tli, segno, end)? {
                return Ok(false);
            }
        }
        if !self.archive_histories(a, &pg_wal)? {
            return Ok(false);
        }
        Ok(self.archive_flush(a, true))
    }

    /// Segment `segno` of timeline `tli` under pg_wal/, its bytes from
    /// `end` on zeroed; false if the stream stopped.
    fn archive_segment(
        &mut self,
        a: &mut Archive,
        pg_wal: &Path,
        tli: u32,
        segno: u64,
        end: Lsn,
    ) -> Result<bool, SqlError> {
        let geo = self.geo;
        let name = geo.file_name(tli, segno);
        let unreadable = |e: std::io::Error| {
            SqlError::error(
                sqlstate::UNDEFINED_FILE,
                format!("could not read WAL segment \"{name}\" for the backup: {e}"),
            )
        };
        let f = File::open(pg_wal.join(&name)).map_err(unreadable)?;
        let h = tar_header(
            &format!("pg_wal/{name}"),
            false,
            geo.seg_size,
            0o600,
            unix_now(),
        )?;
        if !self.archive_bytes(a, &h) {
            return Ok(false);
        }
        // In pieces (a segment may be 1 GB); from `end` on, zeros.
        let valid = if segno == geo.seg_no(end) {
            geo.seg_offset(end)
        } else {
            geo.seg_size
        };
        let mut buf = vec![0u8; CHUNK];
        let mut at = 0u64;
        while at < geo.seg_size {
            let want = (geo.seg_size - at).min(CHUNK as u64) as usize;
            let readable = valid.saturating_sub(at).min(want as u64) as usize;
            let mut got = 0;
            while got < readable {
                let off = at + got as u64;
                match f
                    .read_at(&mut buf[got..readable], off)
                    .map_err(unreadable)?
                {
                    0 => break,
                    n => got += n,
                }
            }
            buf[got..want].fill(0);
            if !self.archive_bytes(a, &buf[..want]) {
                return Ok(false);
            }
            at += want as u64;
        }
        Ok(true)
    }

    /// The timeline history files under pg_wal/ (an unreadable directory
    /// or file is left out); false if the stream stopped.
    fn archive_histories(&mut self, a: &mut Archive, pg_wal: &Path) -> Result<bool, SqlError> {
        let Ok(dir) = fs::read_dir(pg_wal) else {
            return Ok(true);
        };
        let mut histories: Vec<String> = dir
            .filter_map(|d| d.ok()?.file_name().into_string().ok())
            .filter(|n| n.len() == 16 && n.ends_with(".history"))
            .collect();
        histories.sort();
        for name in histories {
            let Ok(bytes) = fs::read(pg_wal.join(&name)) else {
                continue;
            };
            let h = tar_header(
                &format!("pg_wal/{name}"),
                false,
                bytes.len() as u64,
                0o600,
                unix_now(),
            )?;
            let pad = vec![0u8; padding(bytes.len() as u64)];
            if !self.archive_bytes(a, &h)
                || !self.archive_bytes(a, &bytes)
                || !self.archive_bytes(a, &pad)
            {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The data directory's entries to archive, with an empty pg_tblspc/ when
/// it has none.
fn backup_entries(datadir: &Path, started_unix: i64) -> Result<Vec<Entry>, SqlError> {
    let mut entries = Vec::new();
    walk(datadir, "", &mut entries).map_err(io_error)?;
    // pg_basebackup syncs the copy's pg_tblspc/ at the end and reports
    // an error when it is absent: walshm's data directory has none, so
    // the archive carries an empty one.
    if !entries.iter().any(|e| e.rel == "pg_tblspc") {
        entries.push(Entry {
            rel: "pg_tblspc".to_string(),
            dir: true,
            size: 0,
            mode: 0o700,
            mtime: started_unix,
        });
    }
    Ok(entries)
}

/// What precedes the archive: the start position and timeline, the
/// tablespace row (with the size estimate of PROGRESS), CopyOutResponse.
fn backup_head(start: Lsn, tli: u32, size_kb: Option<u64>) -> Result<Vec<u8>, SqlError> {
    let mut head = repl::result_set(
        &[("recptr", ColumnType::Text), ("tli", ColumnType::Int8)],
        &[vec![Some(repl::format_lsn(start)), Some(tli.to_string())]],
        "SELECT",
    )?;
    head.extend_from_slice(&repl::result_set(
        &[
            ("spcoid", ColumnType::Oid),
            ("spclocation", ColumnType::Text),
            ("size", ColumnType::Int8),
        ],
        &[vec![None, None, size_kb.map(|k| k.to_string())]],
        "SELECT",
    )?);
    head.extend_from_slice(&repl::copy_out_response());
    Ok(head)
}

impl Archive {
    /// An archive to be sent after `head`, as `o` asks.
    fn new(head: Vec<u8>, o: &BaseBackupOptions) -> Archive {
        Archive {
            out: head,
            done: 0,
            last_progress: Instant::now(),
            started: Instant::now(),
            max_rate: o.max_rate_kb.map(|k| k as u64 * 1024),
            manifest: o
                .manifest
                .then(|| "{ \"PostgreSQL-Backup-Manifest-Version\": 1,\n\"Files\": [".to_string()),
            checksum: o.manifest_checksums,
            force_encode: o.manifest_force_encode,
            aborted: None,
        }
    }

    /// The manifest (if asked for) ended with the WAL range and its own
    /// checksum, sent as an archive of its own ('m').
    fn finish_manifest(&mut self, tli: u32, start: Lsn, end: Lsn) {
        if let Some(mut m) = self.manifest.take() {
            m.push_str("\n],\n\"WAL-Ranges\": [\n");
            m.push_str(&format!(
                "{{ \"Timeline\": {tli}, \"Start-LSN\": \"{}\", \"End-LSN\": \"{}\" }}",
                repl::format_lsn(start),
                repl::format_lsn(end)
            ));
            m.push_str("\n],\n");
            let digest = sha2::Sha256::digest(m.as_bytes());
            m.push_str(&format!("\"Manifest-Checksum\": \"{}\"}}\n", hex(&digest)));
            repl::typed_copy_data(&mut self.out, b'm', &[]);
            for piece in m.as_bytes().chunks(CHUNK) {
                repl::typed_copy_data(&mut self.out, b'd', piece);
            }
        }
    }

    /// What follows the archive: CopyDone, the end position and timeline,
    /// CommandComplete.
    fn end(&mut self, end: Lsn, tli: u32) -> Result<(), SqlError> {
        self.out.extend_from_slice(&repl::copy_done());
        self.out.extend_from_slice(&repl::result_set(
            &[("recptr", ColumnType::Text), ("tli", ColumnType::Int8)],
            &[vec![Some(repl::format_lsn(end)), Some(tli.to_string())]],
            "SELECT",
        )?);
        self.out
            .extend_from_slice(&repl::command_complete("BASE_BACKUP"));
        Ok(())
    }
}

/// The control file, read again if a concurrent rewrite made it fail its
/// check.
fn read_control(datadir: &Path) -> Result<ControlFile, SqlError> {
    let mut last = None;
    for _ in 0..20 {
        match ControlFile::read(datadir) {
            Ok(c) => return Ok(c),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Err(SqlError::error(
        sqlstate::INTERNAL_ERROR,
        format!("{}", last.expect("at least one attempt")),
    ))
}

fn io_error(e: std::io::Error) -> SqlError {
    SqlError::error(
        sqlstate::INTERNAL_ERROR,
        format!("could not read the data directory for the backup: {e}"),
    )
}

/// The backup_label file, as PostgreSQL 15's do_pg_backup_start writes it.
fn backup_label(
    start_file: &str,
    start: Lsn,
    checkpoint: Lsn,
    unix: i64,
    label: &str,
    tli: u32,
) -> String {
    format!(
        "START WAL LOCATION: {} (file {start_file})\nCHECKPOINT LOCATION: {}\nBACKUP METHOD: streamed\nBACKUP FROM: primary\nSTART TIME: {} UTC\nLABEL: {label}\nSTART TIMELINE: {tli}\n",
        repl::format_lsn(start),
        repl::format_lsn(checkpoint),
        walformat::format_unix_secs(unix),
    )
}

/// Lists the data directory below `rel` (depth first, sorted), leaving
/// out what the module header says.
fn walk(root: &Path, rel: &str, out: &mut Vec<Entry>) -> std::io::Result<()> {
    let dir = if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    };
    let mut names: Vec<String> = fs::read_dir(&dir)?
        .filter_map(|d| d.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    for name in names {
        let top = rel.is_empty();
        if top && (EXCLUDE_FILES.contains(&name.as_str()) || name == DISCARDED_DIR) {
            continue;
        }
        if name.starts_with("pgsql_tmp")
            || name.starts_with(".s.PGSQL.")
            || name.starts_with(".s.WALSHM.")
            || name.starts_with("pg_internal.init")
        {
            continue;
        }
        let path = format!("{rel}{}{name}", if top { "" } else { "/" });
        let Ok(lmd) = fs::symlink_metadata(root.join(&path)) else {
            continue;
        };
        // A symlinked pg_wal is sent as a directory, as PostgreSQL does;
        // any other link (walshm has no tablespaces), socket or device is
        // skipped with PostgreSQL's warning, so no link loop is walked.
        let md = if lmd.file_type().is_symlink() && top && name == "pg_wal" {
            match fs::metadata(root.join(&path)) {
                Ok(m) => m,
                Err(_) => continue,
            }
        } else {
            lmd
        };
        if !md.is_dir() && !md.is_file() {
            log("WARNING", &format!("skipping special file \"./{path}\""));
            continue;
        }
        let entry = Entry {
            rel: path.clone(),
            dir: md.is_dir(),
            size: if md.is_dir() { 0 } else { md.len() },
            mode: md.mode() & 0o7777,
            mtime: md.mtime(),
        };
        out.push(entry);
        if md.is_dir() {
            if top && EXCLUDE_DIR_CONTENTS.contains(&name.as_str()) {
                if name == "pg_wal" {
                    out.push(Entry {
                        rel: "pg_wal/archive_status".to_string(),
                        dir: true,
                        size: 0,
                        mode: md.mode() & 0o7777,
                        mtime: md.mtime(),
                    });
                }
                continue;
            }
            walk(root, &path, out)?;
        }
    }
    Ok(())
}

/// Zero bytes after `size` bytes of data up to the next 512-byte block.
fn padding(size: u64) -> usize {
    (size.next_multiple_of(512) - size) as usize
}

/// Writes `v` as `len - 1` octal digits and a NUL (PostgreSQL's
/// print_tar_number for values that fit).
fn tar_number(field: &mut [u8], v: u64) {
    let digits = field.len() - 1;
    let s = format!("{v:0digits$o}");
    field[..digits].copy_from_slice(&s.as_bytes()[s.len() - digits..]);
    field[digits] = 0;
}

/// A 512-byte ustar header as PostgreSQL's tarCreateHeader writes it (a
/// directory's name ends with '/'; owner "postgres").
fn tar_header(
    name: &str,
    dir: bool,
    size: u64,
    mode: u32,
    mtime: i64,
) -> Result<[u8; 512], SqlError> {
    if name.len() > 99 {
        return Err(SqlError::error(
            sqlstate::PROGRAM_LIMIT_EXCEEDED,
            format!("file name too long for tar format: \"{name}\""),
        ));
    }
    if size >= 1 << 33 {
        return Err(SqlError::error(
            sqlstate::PROGRAM_LIMIT_EXCEEDED,
            format!("archive member \"{name}\" too large for tar format"),
        ));
    }
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    if dir {
        h[name.len()] = b'/';
    }
    tar_number(&mut h[100..108], mode as u64);
    tar_number(&mut h[108..116], 0);
    tar_number(&mut h[116..124], 0);
    tar_number(&mut h[124..136], size);
    tar_number(&mut h[136..148], mtime.max(0) as u64);
    h[148..156].fill(b' ');
    h[156] = if dir { b'5' } else { b'0' };
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[265..273].copy_from_slice(b"postgres");
    h[297..305].copy_from_slice(b"postgres");
    tar_number(&mut h[329..337], 0);
    tar_number(&mut h[337..345], 0);
    let sum: u64 = h.iter().map(|&b| b as u64).sum();
    tar_number(&mut h[148..156], sum);
    Ok(h)
}

/// A file's manifest checksum, as it is computed.
enum Checksummer {
    None,
    Crc32c(u32),
    Sha224(sha2::Sha224),
    Sha256(sha2::Sha256),
    Sha384(sha2::Sha384),
    Sha512(sha2::Sha512),
}

impl Checksummer {
    fn new(kind: ManifestChecksum) -> Checksummer {
        match kind {
            ManifestChecksum::None => Checksummer::None,
            ManifestChecksum::Crc32c => Checksummer::Crc32c(0),
            ManifestChecksum::Sha224 => Checksummer::Sha224(sha2::Sha224::new()),
            ManifestChecksum::Sha256 => Checksummer::Sha256(sha2::Sha256::new()),
            ManifestChecksum::Sha384 => Checksummer::Sha384(sha2::Sha384::new()),
            ManifestChecksum::Sha512 => Checksummer::Sha512(sha2::Sha512::new()),
        }
    }

    fn update(mut self, bytes: &[u8]) -> Checksummer {
        match &mut self {
            Checksummer::None => {}
            Checksummer::Crc32c(c) => *c = crc32c::crc32c_append(*c, bytes),
            Checksummer::Sha224(h) => h.update(bytes),
            Checksummer::Sha256(h) => h.update(bytes),
            Checksummer::Sha384(h) => h.update(bytes),
            Checksummer::Sha512(h) => h.update(bytes),
        }
        self
    }

    /// The algorithm's name and the checksum's bytes as PostgreSQL's
    /// pg_checksum_final gives them (CRC32C: the 4 bytes in memory order,
    /// little-endian here); None without checksums.
    fn finish(self) -> Option<(&'static str, Vec<u8>)> {
        Some(match self {
            Checksummer::None => return None,
            Checksummer::Crc32c(c) => ("CRC32C", c.to_le_bytes().to_vec()),
            Checksummer::Sha224(h) => ("SHA224", h.finalize().to_vec()),
            Checksummer::Sha256(h) => ("SHA256", h.finalize().to_vec()),
            Checksummer::Sha384(h) => ("SHA384", h.finalize().to_vec()),
            Checksummer::Sha512(h) => ("SHA512", h.finalize().to_vec()),
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Appends a file's line to the manifest (PostgreSQL 15's
/// AddFileToBackupManifest: path, size, GMT modification time, checksum).
fn manifest_file(
    a: &mut Archive,
    rel: &str,
    size: u64,
    mtime: i64,
    sum: Option<(&'static str, Vec<u8>)>,
    force_encode: bool,
) {
    let Some(m) = a.manifest.as_mut() else {
        return;
    };
    let first = m.ends_with('[');
    m.push_str(if first { "\n" } else { ",\n" });
    if force_encode {
        m.push_str(&format!(
            "{{ \"Encoded-Path\": \"{}\", ",
            hex(rel.as_bytes())
        ));
    } else {
        m.push_str(&format!("{{ \"Path\": {}, ", json_string(rel)));
    }
    m.push_str(&format!(
        "\"Size\": {size}, \"Last-Modified\": \"{} GMT\"",
        walformat::format_unix_secs(mtime)
    ));
    if let Some((name, bytes)) = sum {
        m.push_str(&format!(
            ", \"Checksum-Algorithm\": \"{name}\", \"Checksum\": \"{}\"",
            hex(&bytes)
        ));
    }
    m.push_str(" }");
}

/// A JSON string literal (PostgreSQL's escape_json).
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tar_headers_are_ustar_with_a_valid_checksum() {
        let h = tar_header("global/pg_control", false, 8192, 0o600, 1_700_000_000).unwrap();
        assert_eq!(&h[124..136], b"00000020000\0");
        assert_eq!(&h[100..108], b"0000600\0");
        assert_eq!(&h[257..263], b"ustar\0");
        let stored = u64::from_str_radix(std::str::from_utf8(&h[148..155]).unwrap(), 8).unwrap();
        let mut blank = h;
        blank[148..156].fill(b' ');
        assert_eq!(stored, blank.iter().map(|&b| b as u64).sum::<u64>());
        let d = tar_header("pg_wal", true, 0, 0o700, 0).unwrap();
        assert_eq!(&d[..7], b"pg_wal/");
        assert_eq!(d[156], b'5');
        assert!(tar_header(&"x".repeat(100), false, 0, 0, 0).is_err());
    }

    #[test]
    fn crc32c_checksums_print_as_postgresql_does() {
        // CRC32C("123456789") = 0xe3069283, printed in memory order.
        let (name, bytes) = Checksummer::new(ManifestChecksum::Crc32c)
            .update(b"12345")
            .update(b"6789")
            .finish()
            .unwrap();
        assert_eq!((name, hex(&bytes).as_str()), ("CRC32C", "839206e3"));
    }
}
