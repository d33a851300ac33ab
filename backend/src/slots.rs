//! Physical replication slots (PostgreSQL's slot.c, physical only): a named
//! position (`restart_lsn`) below which the checkpointer keeps WAL, advanced
//! by the flush reports of the receiver streaming from it.
//!
//! On disk: `DIR/pg_replslot/NAME/state`, replaced atomically (temporary
//! file, fsync, rename, directory fsync: `walfile::write_file_atomically`):
//!
//! ```text
//! { magic u32 = 0x534c5457 "WTLS" | version u32 = 1 | restart_lsn u64
//!   | name_len u32 | name bytes | crc32c u32 (of everything before) }
//! ```
//!
//! In shared memory (`ReplCtl::slots`, up to `max_replication_slots` used):
//! read from disk once per shared-memory generation (`ensure_loaded`, by
//! whoever needs slots first), created and dropped under `ReplCtl::lock`
//! (the name is reserved in memory before the file is written, so two
//! creators of one name cannot both succeed).
//!
//! Crash invariant: the checkpointer saves every slot whose restart_lsn
//! moved (`save_all`) *before* it computes what it may remove
//! (`removal_cutoff`), and computes from the saved positions, so after a
//! crash every slot's saved restart_lsn still has its WAL. A slot that
//! holds more than `max_slot_wal_keep_size` behind the redo point is
//! marked lost (wal_status 'lost') and no longer holds WAL back.

use crate::process::log;
use crate::walfile::{self, Op};
use pgerror::{sqlstate, SqlError};
use shmem::sync::Ordering;
use shmem::walsnd::{SlotShared, NAME_BYTES};
use shmem::Shmem;
use std::path::{Path, PathBuf};
use std::time::Duration;
use walformat::{Geometry, Lsn};

const MAGIC: u32 = 0x534c_5457;
const VERSION: u32 = 1;
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

fn encode(name: &str, restart_lsn: Lsn) -> Vec<u8> {
    let mut b = Vec::with_capacity(24 + name.len());
    b.extend_from_slice(&MAGIC.to_le_bytes());
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&restart_lsn.to_le_bytes());
    b.extend_from_slice(&(name.len() as u32).to_le_bytes());
    b.extend_from_slice(name.as_bytes());
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// (name, restart_lsn) of a state file, or why it is not one.
fn decode(b: &[u8]) -> Result<(String, Lsn), String> {
    let u32_at = |o: usize| -> Option<u32> {
        b.get(o..o + 4)
            .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    };
    if u32_at(0) != Some(MAGIC) || u32_at(4) != Some(VERSION) {
        return Err("bad magic or version".into());
    }
    let lsn = b
        .get(8..16)
        .map(|s| {
            let mut a = [0u8; 8];
            a.copy_from_slice(s);
            u64::from_le_bytes(a)
        })
        .ok_or("too short")?;
    let len = u32_at(16).ok_or("too short")? as usize;
    let end = 20usize.checked_add(len).ok_or("bad name length")?;
    let name = b.get(20..end).ok_or("too short")?;
    let crc = u32_at(end).ok_or("too short")?;
    if b.len() != end + 4 || crc32c::crc32c(&b[..end]) != crc {
        return Err("checksum mismatch".into());
    }
    let name = String::from_utf8(name.to_vec()).map_err(|_| "name is not UTF-8")?;
    Ok((name, lsn))
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
            Ok((name, lsn)) => match free.next() {
                Some(s) => fill(s, &name, lsn, false),
                None => log(
                    "WARNING",
                    &format!("too many replication slots on disk; \"{name}\" not loaded: increase max_replication_slots"),
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
    s.in_use.store(1, Ordering::Relaxed);
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
    ctl.lock.unlock();
    let lsn = if reserve_wal { reserve(shm, slot) } else { 0 };
    if !temporary {
        if let Err(e) = save(datadir, name, lsn, fsync) {
            free_entry(shm, idx);
            return Err(SqlError::error(
                "58030",
                format!("could not create replication slot \"{name}\": {e}"),
            ));
        }
    }
    Ok(lsn)
}

/// Reserves WAL for a new slot from the last checkpoint's redo point (as
/// PostgreSQL does for a physical slot), retrying if the checkpointer
/// removed that segment meanwhile.
fn reserve(shm: &Shmem, slot: &SlotShared) -> Lsn {
    let ctl = shm.repl();
    let geo = Geometry::new(shm.xlog().facts.seg_size).ok();
    loop {
        // Relaxed: a position to start from; the re-check below decides.
        let redo = shm.xlog().checkpointer.last_redo.load(Ordering::Relaxed);
        let lsn = if redo == 0 {
            shm.xlog().write.flush_result.load(Ordering::Relaxed)
        } else {
            redo
        };
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

fn save(datadir: &Path, name: &str, lsn: Lsn, fsync: bool) -> std::io::Result<()> {
    let root = slot_root(datadir);
    let dir = root.join(name);
    walfile::create_dir_all(Op::WalDir, &dir)?;
    if fsync {
        walfile::sync_dir(&root)?;
    }
    walfile::write_file_atomically(&dir.join("state"), &encode(name, lsn), fsync)
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

/// A walsender takes slot `name` for streaming; its index.
pub fn acquire(shm: &Shmem, datadir: &Path, name: &str) -> Result<usize, SqlError> {
    ensure_loaded(shm, datadir);
    take_inactive(shm, name).map_err(|e| take_error(name, e))
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

/// One slot as READ_REPLICATION_SLOT and pg_replication_slots show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRow {
    pub name: String,
    pub temporary: bool,
    pub active_pid: i32,
    pub restart_lsn: Lsn,
    pub lost: bool,
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
        })
        .collect()
}

/// The slot named `name`, if any.
pub fn row(shm: &Shmem, datadir: &Path, name: &str) -> Option<SlotRow> {
    rows(shm, datadir).into_iter().find(|r| r.name == name)
}

/// Writes every persistent slot whose restart_lsn moved since its last
/// save (the checkpointer, before it removes WAL).
pub fn save_all(shm: &Shmem, datadir: &Path, fsync: bool) {
    for s in used_slots(shm) {
        if s.in_use.load(Ordering::Relaxed) == 0 || s.temporary.load(Ordering::Relaxed) != 0 {
            continue;
        }
        let lsn = s.restart_lsn.load(Ordering::SeqCst);
        if lsn == s.saved_lsn.load(Ordering::Relaxed) {
            continue;
        }
        let name = s.name.load();
        match save(datadir, &name, lsn, fsync) {
            Ok(()) => s.saved_lsn.store(lsn, Ordering::Relaxed),
            Err(e) => log(
                "WARNING",
                &format!("could not save replication slot \"{name}\": {e}"),
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
        let b = encode("slot_1", 0x1_0200_0000);
        assert_eq!(decode(&b).unwrap(), ("slot_1".to_string(), 0x1_0200_0000));
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 0x40;
            assert!(decode(&bad).is_err(), "byte {i}");
        }
        assert!(decode(&b[..b.len() - 1]).is_err());
    }

    #[test]
    fn names_follow_postgresql_rules() {
        assert!(validate_name("pg_receivewal_1").is_ok());
        assert_eq!(validate_name("").unwrap_err().code, "42602");
        assert_eq!(validate_name("Upper").unwrap_err().code, "42602");
        assert_eq!(validate_name(&"a".repeat(64)).unwrap_err().code, "42622");
    }
}
