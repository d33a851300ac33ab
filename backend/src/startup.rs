//! The startup process: finds the end of valid WAL and prepares shared
//! memory so that insertion continues exactly there (StartupXLOG, reduced to
//! what a log without data pages needs: there is nothing to redo, only to
//! validate and to find the end).
//!
//! Steps: read the control file; read the checkpoint record it names; read
//! forward record by record, validating page headers, lengths, `xl_prev`
//! and CRC, until a clean end or the first invalid record; then set the
//! insert position after the last valid record, load the partial last page
//! into its WAL buffer with everything after the end zeroed (so a torn tail
//! never reaches disk again), and set the write/flush results to the end.
//!
//! Invariant on exit 0: `curr_byte_pos` is the end of valid WAL,
//! `prev_byte_pos` the start of the last valid record, and the buffers hold
//! the page the next record goes to.

use crate::control::{ControlFile, DbState};
use crate::process::log;
use shmem::sync::Ordering;
use shmem::Shmem;
use std::path::Path;
use walformat::{format_lsn, Geometry, Lsn, WalReader, XLOG_BLCKSZ};

const BLCKSZ: u64 = XLOG_BLCKSZ as u64;

/// What recovery found.
#[derive(Clone, Debug)]
pub struct RecoveryResult {
    /// Start of the last valid record.
    pub last_record: Lsn,
    /// Where the next record goes.
    pub end_of_wal: Lsn,
    pub records: u64,
    /// Highest XID seen in a record, 0 if none.
    pub max_xid: u32,
    /// Why reading stopped (None: clean end).
    pub stop_reason: Option<String>,
}

/// Reads the checkpoint record the control file names, then WAL from its
/// redo point to the end.
pub fn scan_wal(datadir: &Path, control: &ControlFile) -> Result<RecoveryResult, String> {
    let geo = Geometry::new(control.seg_size).map_err(|e| e.to_string())?;
    let pg_wal = datadir.join("pg_wal");
    let open = |at: Lsn| {
        WalReader::open(
            &pg_wal,
            geo,
            control.timeline,
            Some(control.system_identifier),
            at,
        )
    };
    let mut reader = open(control.checkpoint).map_err(|e| {
        format!(
            "could not locate a valid checkpoint record at {}: {e}",
            format_lsn(control.checkpoint)
        )
    })?;
    match reader.next_record() {
        Ok(Some(r)) if r.lsn == control.checkpoint && r.as_checkpoint().is_some() => {}
        Ok(Some(r)) => {
            return Err(format!(
                "record at {} is not the checkpoint the control file names ({} {})",
                format_lsn(r.lsn),
                r.rmgr_name(),
                r.describe()
            ))
        }
        Ok(None) => {
            return Err(format!(
                "no checkpoint record at {}",
                format_lsn(control.checkpoint)
            ))
        }
        Err(e) => return Err(format!("invalid checkpoint record: {e}")),
    }
    if control.redo != control.checkpoint {
        reader = open(control.redo).map_err(|e| {
            format!(
                "could not read WAL at redo point {}: {e}",
                format_lsn(control.redo)
            )
        })?;
    } else {
        reader = open(control.checkpoint).map_err(|e| e.to_string())?;
    }
    let mut result = RecoveryResult {
        last_record: control.checkpoint,
        end_of_wal: control.checkpoint,
        records: 0,
        max_xid: 0,
        stop_reason: None,
    };
    let mut saw_checkpoint = false;
    loop {
        match reader.next_record() {
            Ok(Some(r)) => {
                saw_checkpoint |= r.lsn == control.checkpoint;
                result.last_record = r.lsn;
                result.end_of_wal = r.next;
                result.records += 1;
                if r.xid != 0
                    && (result.max_xid == 0
                        || crate::procarray::xid_precedes(result.max_xid, r.xid))
                {
                    result.max_xid = r.xid;
                }
            }
            Ok(None) => break,
            Err(e) => {
                result.stop_reason = Some(e.to_string());
                break;
            }
        }
    }
    if !saw_checkpoint {
        return Err(format!(
            "WAL between redo point {} and checkpoint {} is damaged: {}",
            format_lsn(control.redo),
            format_lsn(control.checkpoint),
            result.stop_reason.unwrap_or_else(|| "it ends early".into())
        ));
    }
    Ok(result)
}

/// Sets shared memory up so insertion continues at the end of valid WAL.
pub fn install_end_of_wal(
    shm: &Shmem,
    datadir: &Path,
    geo: &Geometry,
    tli: u32,
    r: &RecoveryResult,
) -> Result<(), String> {
    let x = shm.xlog();
    let end = r.end_of_wal;
    let end_pos = geo.recptr_to_bytepos(end);
    let prev_pos = geo.recptr_to_bytepos(r.last_record);
    x.insert.curr_byte_pos.store(end_pos, Ordering::Release);
    x.insert.prev_byte_pos.store(prev_pos, Ordering::Release);
    crate::xlog::seed_prev_link(shm, prev_pos, end_pos);

    let page_start = end - end % BLCKSZ;
    if !end.is_multiple_of(BLCKSZ) {
        // Load the partial last page; zero what follows the end of WAL.
        let n_buffers = shm.layout().n_buffers as u64;
        let idx = ((page_start / BLCKSZ) % n_buffers) as usize;
        let segno = geo.seg_no(page_start);
        let path = datadir.join("pg_wal").join(geo.file_name(tli, segno));
        let file = std::fs::File::open(&path)
            .map_err(|e| format!("could not open {}: {e}", path.display()))?;
        // SAFETY: the startup process is the only process attached to the
        // segment now; buffer `idx` is 8 KiB inside the mapping.
        let page = unsafe { std::slice::from_raw_parts_mut(shm.wal_page(idx), XLOG_BLCKSZ) };
        use std::os::unix::fs::FileExt;
        file.read_exact_at(page, geo.seg_offset(page_start))
            .map_err(|e| {
                format!(
                    "could not read {} at {}: {e}",
                    path.display(),
                    geo.seg_offset(page_start)
                )
            })?;
        page[(end % BLCKSZ) as usize..].fill(0);
        shm.xlblocks()[idx].store(page_start + BLCKSZ, Ordering::Release);
        x.bufmap
            .initialized_up_to
            .store(page_start + BLCKSZ, Ordering::Release);
    } else {
        x.bufmap.initialized_up_to.store(end, Ordering::Release);
    }
    x.write.write_result.store(end, Ordering::Release);
    x.write.flush_result.store(end, Ordering::Release);
    x.write.req_write.store(end, Ordering::Relaxed);
    x.write.req_flush.store(end, Ordering::Relaxed);
    Ok(())
}

/// The startup process body. Returns the process exit code.
pub fn run(shm: &Shmem, datadir: &Path) -> i32 {
    let control = match ControlFile::read(datadir) {
        Ok(c) => c,
        Err(e) => {
            log("FATAL", &e.to_string());
            return crate::process::EXIT_FATAL;
        }
    };
    let crashed = control.state != DbState::ShutDown;
    if crashed {
        log(
            "LOG",
            &format!(
                "database system was interrupted while {}; last known up at {} (unix time); automatic recovery in progress",
                control.state.name(),
                control.time
            ),
        );
        let mut c = control;
        c.state = DbState::InCrashRecovery;
        if let Err(e) = c.write(datadir, shm.settings().fsync) {
            log("FATAL", &e.to_string());
            return crate::process::EXIT_FATAL;
        }
    }
    log(
        "LOG",
        &format!("redo starts at {}", format_lsn(control.redo)),
    );
    let started = std::time::Instant::now();
    let r = match scan_wal(datadir, &control) {
        Ok(r) => r,
        Err(e) => {
            log("FATAL", &e);
            return crate::process::EXIT_FATAL;
        }
    };
    let geo = Geometry::new(control.seg_size).expect("validated by scan_wal");
    if let Err(e) = install_end_of_wal(shm, datadir, &geo, control.timeline, &r) {
        log("FATAL", &e);
        return crate::process::EXIT_FATAL;
    }
    crate::procarray::restore_next_xid(shm, control.next_xid, r.max_xid);
    shm.xlog()
        .checkpointer
        .last_redo
        .store(control.redo, Ordering::Release);
    let mut c = control;
    c.state = DbState::InProduction;
    c.time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    if let Err(e) = c.write(datadir, shm.settings().fsync) {
        log("FATAL", &e.to_string());
        return crate::process::EXIT_FATAL;
    }
    let how = match &r.stop_reason {
        None => "clean end of WAL".to_string(),
        Some(why) => format!("invalid record: {why}"),
    };
    log(
        "LOG",
        &format!(
            "redo done at {}: {} records in {:.3} s; end of WAL at {} ({how})",
            format_lsn(r.last_record),
            r.records,
            started.elapsed().as_secs_f64(),
            format_lsn(r.end_of_wal)
        ),
    );
    0
}
