//! Replication slots (PostgreSQL's slot.c): a named position
//! (`restart_lsn`) below which the checkpointer keeps WAL. A physical slot
//! is advanced by the flush reports of the receiver streaming from it; a
//! logical slot also holds `confirmed_flush` (its client has everything
//! that committed before it) and the output plugin and database it was
//! created for, and its restart_lsn is the oldest WAL that decoding from
//! confirmed_flush needs (`confirm`).
//!
//! On disk: `DIR/pg_replslot/NAME/state`, replaced atomically (temporary
//! file, fsync, rename, directory fsync: `walfile::write_file_atomically`):
//!
//! ```text
//! version 1 (physical slots, still read):
//! { magic u32 = 0x534c5457 "WTLS" | version u32 = 1 | restart_lsn u64
//!   | name_len u32 | name bytes | crc32c u32 (of everything before) }
//! version 2 (written now):
//! { magic u32 | version u32 = 2 | restart_lsn u64 | logical u8 | two_phase u8
//!   | reserved u16 = 0 | confirmed_flush u64 | name_len u32 | name bytes
//!   | plugin_len u32 | plugin bytes | database_len u32 | database bytes
//!   | crc32c u32 (of everything before) }
//! ```
//!
//! In shared memory (`ReplCtl::slots`, up to `max_replication_slots` used):
//! read from disk once per shared-memory generation (`ensure_loaded`, by
//! whoever needs slots first), created and dropped under `ReplCtl::lock`
//! (the name is reserved in memory before the file is written, so two
//! creators of one name cannot both succeed).
//!
//! Crash invariant: the checkpointer saves every slot whose restart_lsn or
//! confirmed_flush moved (`save_all`) *before* it computes what it may
//! remove (`removal_cutoff`), and computes from the saved positions, so
//! after a crash every slot's saved restart_lsn still has its WAL. A slot
//! that holds more than `max_slot_wal_keep_size` behind the redo point is
//! marked lost (wal_status 'lost') and no longer holds WAL back. A logical
//! slot's saved confirmed_flush may be older than what its client
//! confirmed last before a crash: the client then gets those transactions
//! again (at least once, as PostgreSQL).
//!
//! A logical slot's first position (`create_logical`, PostgreSQL's
//! snapshot builder reduced to what messages need): restart_lsn is the
//! insert position C0 read before a look at the running transactions; the
//! slot waits until each of them ended and takes the insert position then,
//! C1, as confirmed_flush (the "consistent point"). A transaction that
//! commits at or after C1 was not running when C0 was read (each running
//! one ended before C1), so it assigned its XID, and wrote its first
//! record, after C0: decoding from C0 sees all of it. (Reading C0 with
//! Acquire sees the XID of whoever reserved WAL below it: a reserver
//! publishes its XID before it reserves.)

use crate::process::log;
use crate::walfile::{self, Op};
use pgerror::sqlstate;
pub use pgerror::SqlError;
use shmem::sync::Ordering;
use shmem::walsnd::{SlotShared, NAME_BYTES};
use shmem::Shmem;
use std::path::{Path, PathBuf};
use std::time::Duration;
use walformat::{Geometry, Lsn};

const MAGIC: u32 = 0x534c_5457;
/// The state file version written; [`VERSION_PHYSICAL`] is still read.
const VERSION: u32 = 2;
const VERSION_PHYSICAL: u32 = 1;
const LOADED: u32 = 2;
const LOADING: u32 = 1;

/// `DIR/pg_replslot`.
pub fn slot_root(datadir: &Path) -> PathBuf {
    datadir.join("pg_replslot")
}

/// PostgreSQL's ReplicationSlotValidateName.
pub fn validate_name(name: &str) -> Result<(), SqlError> {
    if name.is_empty() {
        return Err(SqlError::error(
            "42602",
            format!("replication slot name \"{name}\" is too short"),
        ));
    }
    if name.len() >= NAME_BYTES {
        return Err(SqlError::error(
            "42622",
            format!("replication slot name \"{name}\" is too long"),
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(SqlError::error(
            "42602",
            format!("replication slot name \"{name}\" contains invalid character"),
        )
        .with_hint(
            "Replication slot names may only contain lower case letters, numbers, and the underscore character.",
        ));
    }
    Ok(())
}

fn not_found(name: &str) -> SqlError {
    SqlError::error(
        sqlstate::UNDEFINED_OBJECT,
        format!("replication slot \"{name}\" does not exist"),
    )
}

/// A logical slot's decoding state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogicalState {
    pub plugin: String,
    pub database: String,
    pub confirmed_flush: Lsn,
    pub two_phase: bool,
}

/// What a state file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SlotFile {
    name: String,
    restart_lsn: Lsn,
    logical: Option<LogicalState>,
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u32).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

fn encode(f: &SlotFile) -> Vec<u8> {
    let l = f.logical.clone().unwrap_or_default();
    let mut b = Vec::with_capacity(64 + f.name.len());
    b.extend_from_slice(&MAGIC.to_le_bytes());
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&f.restart_lsn.to_le_bytes());
    b.push(f.logical.is_some() as u8);
    b.push(l.two_phase as u8);
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(&l.confirmed_flush.to_le_bytes());
    put_str(&mut b, &f.name);
    put_str(&mut b, &l.plugin);
    put_str(&mut b, &l.database);
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// Reads a state file's fields in order, each bounds-checked.
struct Fields<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).ok_or("bad length")?;
        let s = self.b.get(self.at..end).ok_or("too short")?;
        self.at = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn u64(&mut self) -> Result<u64, String> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }

    fn string(&mut self) -> Result<String, String> {
        let len = self.u32()? as usize;
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| "a name is not UTF-8".to_string())
    }
}

/// A state file's contents, or why it is not one.
fn decode(b: &[u8]) -> Result<SlotFile, String> {
    let mut f = Fields { b, at: 0 };
    let version = match (f.u32(), f.u32()) {
        (Ok(MAGIC), Ok(v @ (VERSION_PHYSICAL | VERSION))) => v,
        _ => return Err("bad magic or version".into()),
    };
    let restart_lsn = f.u64()?;
    let (logical, two_phase, confirmed_flush) = if version == VERSION {
        let logical = f.u8()? != 0;
        let two_phase = f.u8()? != 0;
        f.take(2)?;
        (logical, two_phase, f.u64()?)
    } else {
        (false, false, 0)
    };
    let name = f.string()?;
    let (plugin, database) = if version == VERSION {
        (f.string()?, f.string()?)
    } else {
        (String::new(), String::new())
    };
    let end = f.at;
    let crc = f.u32()?;
    if b.len() != end + 4 || crc32c::crc32c(&b[..end]) != crc {
        return Err("checksum mismatch".into());
    }
    Ok(SlotFile {
        name,
        restart_lsn,
        logical: logical.then_some(LogicalState {
            plugin,
            database,
            confirmed_flush,
            two_phase,
        }),
    })
}

fn used_slots(shm: &Shmem) -> &[SlotShared] {
    let slots = &shm.repl().slots;
    &slots[..(shm.settings().max_replication_slots as usize).min(slots.len())]
}

/// Reads the slots from disk into shared memory, once per generation.
pub fn ensure_loaded(shm: &Shmem, datadir: &Path) {
    let ctl = shm.repl();
    loop {
        // Acquire pairs with the Release store of LOADED below.
        match ctl.slots_loaded.load(Ordering::Acquire) {
            LOADED => return,
            LOADING => std::thread::sleep(Duration::from_millis(1)),
            _ => {
                if ctl
                    .slots_loaded
                    .compare_exchange(0, LOADING, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    load_from_disk(shm, datadir);
                    // Release pairs with the Acquire load above.
                    ctl.slots_loaded.store(LOADED, Ordering::Release);
                    return;
                }
            }
        }
    }
}

fn load_from_disk(shm: &Shmem, datadir: &Path) {
    let root = slot_root(datadir);
    let Ok(entries) = walfile::list_dir(Op::WalDir, &root) else {
        return;
    };
    let mut free = used_slots(shm).iter();
    for entry in entries {
        let dir = root.join(&entry);
        if entry.to_string_lossy().ends_with(".tmp") {
            remove_slot_dir(&dir);
            continue;
        }
        let decoded = walfile::read_file(Op::WalRead, &dir.join("state"))
            .map_err(|e| e.to_string())
            .and_then(|b| decode(&b));
        match decoded {
            Ok(file) => match free.next() {
                Some(s) => {
                    fill(s, &file.name, file.restart_lsn, false);
                    fill_logical(s, file.logical.as_ref());
                    s.saved_confirmed
                        .store(s.confirmed_flush.load(Ordering::Relaxed), Ordering::Relaxed);
                }
                None => log(
                    "WARNING",
                    &format!(
                        "too many replication slots on disk; \"{}\" not loaded: increase max_replication_slots",
                        file.name
                    ),
                ),
            },
            Err(e) => log(
                "WARNING",
                &format!("replication slot file {} ignored: {e}", dir.display()),
            ),
        }
    }
}

fn fill(s: &SlotShared, name: &str, lsn: Lsn, temporary: bool) {
    // Relaxed: under ReplCtl::lock or before the slots are published as
    // loaded (Release store of LOADED).
    s.name.store(name);
    s.restart_lsn.store(lsn, Ordering::Relaxed);
    s.saved_lsn.store(lsn, Ordering::Relaxed);
    s.lost.store(0, Ordering::Relaxed);
    s.active_pid.store(0, Ordering::Relaxed);
    s.temporary.store(temporary as u32, Ordering::Relaxed);
    s.logical.store(0, Ordering::Relaxed);
    s.confirmed_flush.store(0, Ordering::Relaxed);
    s.saved_confirmed.store(0, Ordering::Relaxed);
    s.two_phase.store(0, Ordering::Relaxed);
    s.in_use.store(1, Ordering::Relaxed);
}

/// Makes `s` (just filled) a logical slot with `state`.
fn fill_logical(s: &SlotShared, state: Option<&LogicalState>) {
    let Some(l) = state else { return };
    // Relaxed: as in `fill`.
    s.plugin.store(&l.plugin);
    s.database.store(&l.database);
    s.confirmed_flush
        .store(l.confirmed_flush, Ordering::Relaxed);
    s.two_phase.store(l.two_phase as u32, Ordering::Relaxed);
    s.logical.store(1, Ordering::Relaxed);
}

/// A slot's logical state, None for a physical slot.
fn logical_state(s: &SlotShared) -> Option<LogicalState> {
    (s.logical.load(Ordering::Relaxed) != 0).then(|| LogicalState {
        plugin: s.plugin.load(),
        database: s.database.load(),
        confirmed_flush: s.confirmed_flush.load(Ordering::Relaxed),
        two_phase: s.two_phase.load(Ordering::Relaxed) != 0,
    })
}

fn file_of(s: &SlotShared, restart_lsn: Lsn) -> SlotFile {
    SlotFile {
        name: s.name.load(),
        restart_lsn,
        logical: logical_state(s),
    }
}

/// Index of the slot named `name`; caller holds the lock or accepts a
/// racy answer.
fn find(shm: &Shmem, name: &str) -> Option<usize> {
    used_slots(shm)
        .iter()
        .position(|s| s.in_use.load(Ordering::Relaxed) != 0 && s.name.load() == name)
}

/// CREATE_REPLICATION_SLOT / pg_create_physical_replication_slot: the
/// slot's restart_lsn (0 when no WAL was reserved).
pub fn create(
    shm: &Shmem,
    datadir: &Path,
    name: &str,
    temporary: bool,
    reserve_wal: bool,
    fsync: bool,
) -> Result<Lsn, SqlError> {
    validate_name(name)?;
    ensure_loaded(shm, datadir);
    let idx = claim_entry(shm, name, temporary, None)?;
    let slot = &used_slots(shm)[idx];
    let lsn = if reserve_wal { reserve(shm, slot) } else { 0 };
    persist_new(shm, datadir, idx, fsync)?;
    Ok(lsn)
}

/// Takes a free entry for a new slot `name` under the lock (42710 if the
/// name is taken, 53400 if none is free). A logical slot is marked active
/// for this process until it is ready (see `create_logical`).
fn claim_entry(
    shm: &Shmem,
    name: &str,
    temporary: bool,
    logical: Option<&LogicalState>,
) -> Result<usize, SqlError> {
    let ctl = shm.repl();
    ctl.lock.lock();
    if find(shm, name).is_some() {
        ctl.lock.unlock();
        return Err(SqlError::error(
            "42710",
            format!("replication slot \"{name}\" already exists"),
        ));
    }
    let Some(idx) = used_slots(shm)
        .iter()
        .position(|s| s.in_use.load(Ordering::Relaxed) == 0)
    else {
        ctl.lock.unlock();
        return Err(SqlError::error("53400", "all replication slots are in use")
            .with_hint("Free one or increase max_replication_slots."));
    };
    let slot = &used_slots(shm)[idx];
    fill(slot, name, 0, temporary);
    if logical.is_some() {
        fill_logical(slot, logical);
        // Relaxed: under the lock, as `fill`.
        slot.active_pid
            .store(std::process::id() as i32, Ordering::Relaxed);
    }
    ctl.lock.unlock();
    Ok(idx)
}

/// Writes a new slot's state file (not for a temporary slot); on failure
/// the slot is freed again.
fn persist_new(shm: &Shmem, datadir: &Path, idx: usize, fsync: bool) -> Result<(), SqlError> {
    let slot = &used_slots(shm)[idx];
    if slot.temporary.load(Ordering::Relaxed) != 0 {
        return Ok(());
    }
    let file = file_of(slot, slot.restart_lsn.load(Ordering::Relaxed));
    save(datadir, &file, fsync).map_err(|e| {
        free_entry(shm, idx);
        SqlError::error(
            "58030",
            format!("could not create replication slot \"{}\": {e}", file.name),
        )
    })
}

/// What a new logical slot is for.
pub struct NewLogical<'n> {
    pub name: &'n str,
    pub temporary: bool,
    pub plugin: &'n str,
    pub database: &'n str,
    pub two_phase: bool,
}

/// CREATE_REPLICATION_SLOT ... LOGICAL / pg_create_logical_replication_slot:
/// the slot's consistent point (its confirmed_flush; see the module
/// header). The plugin name is checked by the caller.
pub fn create_logical(
    shm: &Shmem,
    datadir: &Path,
    new: &NewLogical,
    fsync: bool,
) -> Result<Lsn, SqlError> {
    validate_name(new.name)?;
    ensure_loaded(shm, datadir);
    let state = LogicalState {
        plugin: new.plugin.to_string(),
        database: new.database.to_string(),
        confirmed_flush: 0,
        two_phase: new.two_phase,
    };
    let idx = claim_entry(shm, new.name, new.temporary, Some(&state))?;
    let slot = &used_slots(shm)[idx];
    // `claim_entry` marked the slot active for us: nobody drops or uses
    // it while it is being made.
    reserve_at(shm, slot, || insert_rec_ptr(shm));
    let consistent = match wait_for_running_transactions(shm) {
        Some(lsn) => lsn,
        None => {
            free_entry(shm, idx);
            return Err(SqlError::fatal(
                pgerror::sqlstate::ADMIN_SHUTDOWN,
                "terminating connection due to administrator command",
            ));
        }
    };
    slot.confirmed_flush.store(consistent, Ordering::Relaxed);
    persist_new(shm, datadir, idx, fsync)?;
    slot.saved_confirmed.store(consistent, Ordering::Relaxed);
    let ctl = shm.repl();
    ctl.lock.lock();
    slot.active_pid.store(0, Ordering::Relaxed);
    ctl.lock.unlock();
    Ok(consistent)
}

/// Where the next record will start: C0 and C1 of the module header
/// (`xlog::next_record_start` reads it with Acquire, so the XID of whoever
/// reserved WAL below it is visible).
fn insert_rec_ptr(shm: &Shmem) -> Lsn {
    Geometry::new(shm.xlog().facts.seg_size).map_or(0, |g| crate::xlog::next_record_start(shm, &g))
}

/// Waits until every transaction running now has ended; the insert
/// position then. None if a shutdown was asked for meanwhile.
fn wait_for_running_transactions(shm: &Shmem) -> Option<Lsn> {
    // SeqCst: the XIDs are read after C0 (the caller's Acquire load).
    shmem::sync::fence(Ordering::SeqCst);
    let running: Vec<(u32, u32)> = crate::procarray::assigned_xids(shm).collect();
    let procs = shm.procs();
    for (procno, xid) in running {
        while procs[procno as usize].xid.load(Ordering::Acquire) == xid {
            if crate::process::shutdown_requested() {
                return None;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    Some(insert_rec_ptr(shm))
}

/// Reserves WAL for a new physical slot from the last checkpoint's redo
/// point (as PostgreSQL does), or the flush position before the first
/// checkpoint.
fn reserve(shm: &Shmem, slot: &SlotShared) -> Lsn {
    reserve_at(shm, slot, || {
        // Relaxed: a position to start from; `reserve_at` re-checks.
        let redo = shm.xlog().checkpointer.last_redo.load(Ordering::Relaxed);
        if redo == 0 {
            shm.xlog().write.flush_result.load(Ordering::Relaxed)
        } else {
            redo
        }
    })
}

/// Makes `start()` the slot's restart_lsn, retrying with a fresh position
/// if the checkpointer removed that segment meanwhile.
fn reserve_at(shm: &Shmem, slot: &SlotShared, start: impl Fn() -> Lsn) -> Lsn {
    let ctl = shm.repl();
    let geo = Geometry::new(shm.xlog().facts.seg_size).ok();
    loop {
        let lsn = start();
        // SeqCst: store, then load the intent; `removal_cutoff` stores
        // the intent, then loads this (Dekker): the checkpointer sees
        // this reservation, or we see its intent and reserve again.
        slot.restart_lsn.store(lsn, Ordering::SeqCst);
        let seg = geo.map_or(0, |g| g.seg_no(lsn));
        if ctl.removal_intent_seg.load(Ordering::SeqCst) <= seg {
            slot.saved_lsn.store(lsn, Ordering::Relaxed);
            return lsn;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn save(datadir: &Path, file: &SlotFile, fsync: bool) -> std::io::Result<()> {
    let root = slot_root(datadir);
    let dir = root.join(&file.name);
    walfile::create_dir_all(Op::WalDir, &dir)?;
    if fsync {
        walfile::sync_dir(&root)?;
    }
    walfile::write_file_atomically(&dir.join("state"), &encode(file), fsync)
}

fn remove_slot_dir(dir: &Path) {
    let _ = walfile::remove_file(Op::WalRemove, &dir.join("state"));
    let _ = walfile::remove_file(Op::WalRemove, &dir.join("state.tmp"));
    let _ = walfile::remove_dir(Op::WalRemove, dir);
}

fn free_entry(shm: &Shmem, idx: usize) {
    let ctl = shm.repl();
    ctl.lock.lock();
    let s = &used_slots(shm)[idx];
    s.restart_lsn.store(0, Ordering::Relaxed);
    s.active_pid.store(0, Ordering::Relaxed);
    s.in_use.store(0, Ordering::Relaxed);
    ctl.lock.unlock();
}

/// Marks slot `name` active for this process, if it exists and no other
/// process has it; Err(None): no such slot, Err(Some(pid)): active there.
fn take_inactive(shm: &Shmem, name: &str) -> Result<usize, Option<i32>> {
    let ctl = shm.repl();
    ctl.lock.lock();
    let found = find(shm, name);
    let taken = match found {
        None => Err(None),
        Some(idx) => {
            let s = &used_slots(shm)[idx];
            let me = std::process::id() as i32;
            match s.active_pid.load(Ordering::Relaxed) {
                pid if pid != 0 && pid != me => Err(Some(pid)),
                _ => {
                    s.active_pid.store(me, Ordering::Relaxed);
                    Ok(idx)
                }
            }
        }
    };
    ctl.lock.unlock();
    taken
}

fn take_error(name: &str, e: Option<i32>) -> SqlError {
    match e {
        None => not_found(name),
        Some(pid) => SqlError::error(
            "55006",
            format!("replication slot \"{name}\" is active for PID {pid}"),
        ),
    }
}

/// DROP_REPLICATION_SLOT / pg_drop_replication_slot. With `wait`, waits
/// for an active slot to become inactive (bounded by shutdown).
pub fn drop_slot(shm: &Shmem, datadir: &Path, name: &str, wait: bool) -> Result<(), SqlError> {
    ensure_loaded(shm, datadir);
    let idx = loop {
        match take_inactive(shm, name) {
            Ok(idx) => break idx,
            Err(Some(_)) if wait && !crate::process::shutdown_requested() => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(take_error(name, e)),
        }
    };
    let root = slot_root(datadir);
    let dir = root.join(name);
    let tmp = root.join(format!("{name}.tmp"));
    if walfile::rename(Op::WalRemove, &dir, &tmp).is_ok() {
        let _ = walfile::sync_dir(&root);
        remove_slot_dir(&tmp);
        let _ = walfile::sync_dir(&root);
    }
    free_entry(shm, idx);
    Ok(())
}

/// A walsender takes slot `name` for physical streaming; its index.
pub fn acquire(shm: &Shmem, datadir: &Path, name: &str) -> Result<usize, SqlError> {
    acquire_kind(shm, datadir, name, false)
}

/// A walsender or a session takes slot `name` for decoding: its index and
/// state. An invalidated slot cannot be read (55000, as PostgreSQL).
pub fn acquire_logical(
    shm: &Shmem,
    datadir: &Path,
    name: &str,
) -> Result<(usize, LogicalState), SqlError> {
    let idx = acquire_kind(shm, datadir, name, true)?;
    let s = &used_slots(shm)[idx];
    if s.lost.load(Ordering::Relaxed) != 0 {
        release(shm, idx);
        return Err(SqlError::error(
            pgerror::sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("cannot read from logical replication slot \"{name}\""),
        )
        .with_detail(
            "This slot has been invalidated because it exceeded the maximum reserved size.",
        ));
    }
    let state = logical_state(s).unwrap_or_default();
    Ok((idx, state))
}

fn acquire_kind(shm: &Shmem, datadir: &Path, name: &str, logical: bool) -> Result<usize, SqlError> {
    ensure_loaded(shm, datadir);
    let idx = take_inactive(shm, name).map_err(|e| take_error(name, e))?;
    let is_logical = used_slots(shm)[idx].logical.load(Ordering::Relaxed) != 0;
    if is_logical != logical {
        release(shm, idx);
        let message = if logical {
            "cannot use physical replication slot for logical decoding".to_string()
        } else {
            "cannot use a logical replication slot for physical replication".to_string()
        };
        return Err(SqlError::error(
            pgerror::sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
            message,
        ));
    }
    Ok(idx)
}

/// Releases every slot process `pid` had active (it died; a temporary
/// one is dropped, as at the end of its session); returns their names.
pub fn release_all_of(shm: &Shmem, pid: i32) -> Vec<String> {
    let mut names = Vec::new();
    for (idx, s) in used_slots(shm).iter().enumerate() {
        if s.in_use.load(Ordering::Relaxed) != 0 && s.active_pid.load(Ordering::Relaxed) == pid {
            names.push(s.name.load());
            release(shm, idx);
        }
    }
    names
}

/// The walsender is done with slot `idx`; a temporary slot is dropped.
pub fn release(shm: &Shmem, idx: usize) {
    let s = &used_slots(shm)[idx];
    if s.temporary.load(Ordering::Relaxed) != 0 {
        free_entry(shm, idx);
        return;
    }
    let ctl = shm.repl();
    ctl.lock.lock();
    s.active_pid.store(0, Ordering::Relaxed);
    ctl.lock.unlock();
}

/// The receiver flushed up to `flush`: the slot no longer needs WAL
/// before it (only moves forward).
pub fn advance(shm: &Shmem, idx: usize, flush: Lsn) {
    let s = &used_slots(shm)[idx];
    if flush != 0 {
        // Relaxed: the checkpointer reads it in `save_all`, and WAL is
        // kept from the saved position, which it wrote itself.
        s.restart_lsn.fetch_max(flush, Ordering::Relaxed);
    }
}

/// The client of logical slot `idx` confirmed `confirmed` (only moves
/// forward); `restart`, when known, is the oldest WAL decoding from there
/// needs (only moves forward). Saved by the next checkpoint.
pub fn confirm(shm: &Shmem, idx: usize, confirmed: Lsn, restart: Option<Lsn>) {
    let s = &used_slots(shm)[idx];
    // Relaxed: as in `advance`.
    s.confirmed_flush.fetch_max(confirmed, Ordering::Relaxed);
    if let Some(r) = restart.filter(|&r| r != 0) {
        s.restart_lsn.fetch_max(r, Ordering::Relaxed);
    }
}

/// Slot `idx`'s restart_lsn.
pub fn restart_lsn(shm: &Shmem, idx: usize) -> Lsn {
    // Relaxed: the slot is acquired by the caller, the only mover.
    used_slots(shm)[idx].restart_lsn.load(Ordering::Relaxed)
}

/// One slot as READ_REPLICATION_SLOT and pg_replication_slots show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRow {
    pub name: String,
    pub temporary: bool,
    pub active_pid: i32,
    pub restart_lsn: Lsn,
    pub lost: bool,
    /// A logical slot's state; None for a physical slot.
    pub logical: Option<LogicalState>,
}

/// Every slot in use.
pub fn rows(shm: &Shmem, datadir: &Path) -> Vec<SlotRow> {
    ensure_loaded(shm, datadir);
    used_slots(shm)
        .iter()
        .filter(|s| s.in_use.load(Ordering::Relaxed) != 0)
        .map(|s| SlotRow {
            name: s.name.load(),
            temporary: s.temporary.load(Ordering::Relaxed) != 0,
            active_pid: s.active_pid.load(Ordering::Relaxed),
            restart_lsn: s.restart_lsn.load(Ordering::Relaxed),
            lost: s.lost.load(Ordering::Relaxed) != 0,
            logical: logical_state(s),
        })
        .collect()
}

/// The slot named `name`, if any.
pub fn row(shm: &Shmem, datadir: &Path, name: &str) -> Option<SlotRow> {
    rows(shm, datadir).into_iter().find(|r| r.name == name)
}

/// Writes every persistent slot whose restart_lsn or confirmed_flush
/// moved since its last save (the checkpointer, before it removes WAL;
/// the only writer of existing slots' files).
pub fn save_all(shm: &Shmem, datadir: &Path, fsync: bool) {
    for s in used_slots(shm) {
        if s.in_use.load(Ordering::Relaxed) == 0 || s.temporary.load(Ordering::Relaxed) != 0 {
            continue;
        }
        let lsn = s.restart_lsn.load(Ordering::SeqCst);
        let confirmed = s.confirmed_flush.load(Ordering::Relaxed);
        if lsn == s.saved_lsn.load(Ordering::Relaxed)
            && confirmed == s.saved_confirmed.load(Ordering::Relaxed)
        {
            continue;
        }
        let mut file = file_of(s, lsn);
        if let Some(l) = file.logical.as_mut() {
            l.confirmed_flush = confirmed;
        }
        match save(datadir, &file, fsync) {
            Ok(()) => {
                s.saved_lsn.store(lsn, Ordering::Relaxed);
                s.saved_confirmed.store(confirmed, Ordering::Relaxed);
            }
            Err(e) => log(
                "WARNING",
                &format!("could not save replication slot \"{}\": {e}", file.name),
            ),
        }
    }
}

/// The checkpointer's "keep what slots need" (one call before it removes
/// segments below `cutoff`, the first segment it would keep): saves moved
/// slots, marks lost those beyond `max_slot_wal_keep_size`, and returns
/// the first segment to keep. Publishes the result before any removal.
pub fn removal_cutoff(
    shm: &Shmem,
    datadir: &Path,
    geo: &Geometry,
    redo: Lsn,
    cutoff: u64,
    fsync: bool,
) -> u64 {
    ensure_loaded(shm, datadir);
    // SeqCst: pairs with the loads in `reserve` (see there).
    shm.repl()
        .removal_intent_seg
        .fetch_max(cutoff, Ordering::SeqCst);
    save_all(shm, datadir, fsync);
    let redo_seg = geo.seg_no(redo);
    let limit = shmem::settings::parse_keep_size_mb(shm.settings().max_slot_wal_keep_size.as_str())
        .flatten()
        .map(|mb| (mb << 20).div_ceil(geo.seg_size));
    let oldest_allowed = limit.map_or(0, |segs| redo_seg.saturating_sub(segs));
    let mut keep = cutoff;
    for s in used_slots(shm) {
        if s.in_use.load(Ordering::Relaxed) == 0 || s.lost.load(Ordering::Relaxed) != 0 {
            continue;
        }
        // SeqCst: pairs with the store in `reserve` (a slot being created
        // has no saved position yet: its reservation counts, or `reserve`
        // saw the intent published above and reserves again).
        let restart = s.restart_lsn.load(Ordering::SeqCst);
        let saved = s.saved_lsn.load(Ordering::Relaxed);
        let lsn = if s.temporary.load(Ordering::Relaxed) != 0 || saved == 0 {
            restart
        } else {
            saved
        };
        if lsn == 0 {
            continue;
        }
        let seg = geo.seg_no(lsn);
        if seg < oldest_allowed {
            s.lost.store(1, Ordering::Relaxed);
            log(
                "LOG",
                &format!(
                    "invalidating replication slot \"{}\": its restart_lsn {} exceeds max_slot_wal_keep_size",
                    s.name.load(),
                    walformat::format_lsn(lsn)
                ),
            );
            continue;
        }
        keep = keep.min(seg);
    }
    // SeqCst: pairs with the walsender's check after reading a segment.
    shm.repl()
        .removed_below_seg
        .fetch_max(keep, Ordering::SeqCst);
    keep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_file_round_trips_and_detects_damage() {
        let physical = SlotFile {
            name: "slot_1".into(),
            restart_lsn: 0x1_0200_0000,
            logical: None,
        };
        let logical = SlotFile {
            name: "slot_2".into(),
            restart_lsn: 0x1_0200_0028,
            logical: Some(LogicalState {
                plugin: "test_decoding".into(),
                database: "postgres".into(),
                confirmed_flush: 0x1_0300_0000,
                two_phase: true,
            }),
        };
        for f in [physical, logical] {
            let b = encode(&f);
            assert_eq!(decode(&b).unwrap(), f);
            for i in 0..b.len() {
                let mut bad = b.clone();
                bad[i] ^= 0x40;
                assert!(decode(&bad).is_err(), "byte {i}");
            }
            assert!(decode(&b[..b.len() - 1]).is_err());
        }
    }

    #[test]
    fn version_1_files_are_physical_slots() {
        let mut b = Vec::new();
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&VERSION_PHYSICAL.to_le_bytes());
        b.extend_from_slice(&0x1_0200_0000u64.to_le_bytes());
        put_str(&mut b, "old");
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        let f = decode(&b).unwrap();
        assert_eq!(f.name, "old");
        assert_eq!(f.restart_lsn, 0x1_0200_0000);
        assert_eq!(f.logical, None);
    }

    #[test]
    fn names_follow_postgresql_rules() {
        assert!(validate_name("pg_receivewal_1").is_ok());
        assert_eq!(validate_name("").unwrap_err().code, "42602");
        assert_eq!(validate_name("Upper").unwrap_err().code, "42602");
        assert_eq!(validate_name(&"a".repeat(64)).unwrap_err().code, "42622");
    }
}
