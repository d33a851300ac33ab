//! The power-loss rewriter: turns the files the runtime left behind (as a
//! `kill -9` leaves them: every write in the page cache) into a state a
//! power loss could have left, using the journal the I/O seam kept
//! (`backend::powerloss`, its format and its ordering guarantees).
//!
//! 1. Unsynced operations: a WRITE not followed by a SYNC of its file (or,
//!    for a ranged SYNC of an O_DSYNC write, of its bytes), a
//!    CREATE or RENAME not followed by a DIRSYNC of the directory holding
//!    the new name.
//! 2. Newest first, each unsynced write is kept, dropped or torn (one third
//!    each); a dropped write restores its before-image, a torn one restores
//!    it on a random half of its 512-byte sectors. A sector a newer write
//!    kept is never reverted by an older one: every sector ends up as it
//!    was after some prefix of its writes, as a disk that writes sectors
//!    atomically leaves it.
//! 3. Newest first too (interleaved with the writes, in journal order),
//!    each unsynced CREATE is undone (the file removed) and each unsynced
//!    RENAME undone (moved back, the replaced file restored) with
//!    probability one half.
//!
//! Every choice comes from the seeded generator: a run replays exactly.

use super::Rng;
use backend::powerloss::{decode_all, sync_covers, Kind, Record, NO_IMAGE, REPLACED};
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The sector size a power loss tears at.
pub const SECTOR: u64 = 512;

/// What a simulated power loss did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub records: u64,
    /// Bytes of the journal that held no valid record (cut short).
    pub skipped_bytes: u64,
    pub writes_kept: u64,
    pub writes_dropped: u64,
    pub writes_torn: u64,
    /// Sectors restored to their before-image.
    pub sectors_reverted: u64,
    pub creates_undone: u64,
    pub renames_undone: u64,
    /// Unsynced creations and renames left in place.
    pub entries_kept: u64,
    /// Files fdatasynced before their directory entry was durable
    /// ([`synced_before_entry`]).
    pub synced_without_entry: Vec<PathBuf>,
}

impl Outcome {
    pub fn add(&mut self, o: &Outcome) {
        self.records += o.records;
        self.skipped_bytes += o.skipped_bytes;
        self.writes_kept += o.writes_kept;
        self.writes_dropped += o.writes_dropped;
        self.writes_torn += o.writes_torn;
        self.sectors_reverted += o.sectors_reverted;
        self.creates_undone += o.creates_undone;
        self.renames_undone += o.renames_undone;
        self.entries_kept += o.entries_kept;
        for p in &o.synced_without_entry {
            if !self.synced_without_entry.contains(p) {
                self.synced_without_entry.push(p.clone());
            }
        }
    }
}

/// Rewrites the files the journal at `journal` names as a power loss could
/// leave them, then moves the journal aside (to `NAME.last`, evidence for
/// a bug report): the next power cycle starts afresh. A missing journal is
/// an empty one.
pub fn simulate(journal: &Path, rng: &mut Rng) -> Result<Outcome, String> {
    let bytes = match std::fs::read(journal) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(format!("could not read \"{}\": {e}", journal.display())),
    };
    let (records, skipped) = decode_all(&bytes);
    let mut out = rewrite(&records, rng)?;
    out.skipped_bytes = skipped as u64;
    out.synced_without_entry = synced_before_entry(&records);
    // Kept for a bug report: the journal of the last power loss.
    let last = journal.with_extension("last");
    std::fs::rename(journal, &last)
        .or_else(|_| std::fs::write(journal, b""))
        .map_err(|e| format!("could not empty \"{}\": {e}", journal.display()))?;
    Ok(out)
}

/// Files fdatasynced while their directory entry (a CREATE or RENAME)
/// was not yet durable: such an fdatasync promises data that a power loss
/// takes away with the name (a missing directory fsync). Found from the
/// journal's order alone, whatever the rewriter draws.
pub fn synced_before_entry(records: &[Record]) -> Vec<PathBuf> {
    let mut pending: HashSet<&Path> = HashSet::new();
    let mut found: Vec<PathBuf> = Vec::new();
    for r in records {
        match r.kind {
            Kind::Create => {
                pending.insert(&r.path);
            }
            Kind::Rename => {
                pending.insert(r.to.as_deref().unwrap_or(&r.path));
            }
            Kind::DirSync => pending.retain(|p| parent(p) != r.path),
            Kind::Sync if pending.contains(r.path.as_path()) && !found.contains(&r.path) => {
                found.push(r.path.clone())
            }
            Kind::Sync | Kind::Write => {}
        }
    }
    found
}

/// Indices of the records whose effect is not durable, in journal order.
pub fn unsynced(records: &[Record]) -> Vec<usize> {
    let mut writes: HashMap<&Path, Vec<usize>> = HashMap::new();
    let mut entries: HashMap<&Path, Vec<usize>> = HashMap::new();
    for (i, r) in records.iter().enumerate() {
        match r.kind {
            Kind::Write => writes.entry(&r.path).or_default().push(i),
            Kind::Sync => {
                if let Some(w) = writes.get_mut(r.path.as_path()) {
                    w.retain(|&j| !sync_covers(r, &records[j]));
                }
            }
            Kind::Create => entries.entry(parent(&r.path)).or_default().push(i),
            Kind::Rename => {
                let to = r.to.as_deref().unwrap_or(&r.path);
                entries.entry(parent(to)).or_default().push(i);
            }
            Kind::DirSync => {
                entries.remove(r.path.as_path());
            }
        }
    }
    let mut v: Vec<usize> = writes
        .into_values()
        .chain(entries.into_values())
        .flatten()
        .collect();
    v.sort_unstable();
    v
}

fn parent(p: &Path) -> &Path {
    p.parent().unwrap_or(Path::new("/"))
}

/// How one unsynced write fares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Keep,
    Drop,
    Tear,
}

/// Applies a power loss to the files `records` name (see the module
/// header).
pub fn rewrite(records: &[Record], rng: &mut Rng) -> Result<Outcome, String> {
    let mut out = Outcome {
        records: records.len() as u64,
        ..Outcome::default()
    };
    let mut kept: HashSet<(PathBuf, u64)> = HashSet::new();
    for &i in unsynced(records).iter().rev() {
        let r = &records[i];
        match r.kind {
            Kind::Write => {
                let fate = match rng.below(3) {
                    0 => Fate::Keep,
                    1 => Fate::Drop,
                    _ => Fate::Tear,
                };
                match fate {
                    Fate::Keep => out.writes_kept += 1,
                    Fate::Drop => out.writes_dropped += 1,
                    Fate::Tear => out.writes_torn += 1,
                }
                out.sectors_reverted += undo_write(r, fate, rng, &mut kept)?;
            }
            Kind::Create | Kind::Rename if rng.below(2) == 0 => out.entries_kept += 1,
            Kind::Create => {
                remove_if_present(&r.path)?;
                out.creates_undone += 1;
            }
            Kind::Rename => {
                undo_rename(r)?;
                out.renames_undone += 1;
            }
            Kind::Sync | Kind::DirSync => {}
        }
    }
    Ok(out)
}

/// Restores the before-image of write `r` on the sectors `fate` reverts
/// (and no newer write kept); returns how many sectors it restored.
fn undo_write(
    r: &Record,
    fate: Fate,
    rng: &mut Rng,
    kept: &mut HashSet<(PathBuf, u64)>,
) -> Result<u64, String> {
    if r.len == 0 {
        return Ok(0);
    }
    // Without its before-image a write cannot be undone: it stays.
    let fate = if r.flags & NO_IMAGE != 0 {
        Fate::Keep
    } else {
        fate
    };
    let file = match fate {
        Fate::Keep => None,
        _ => match std::fs::OpenOptions::new().write(true).open(&r.path) {
            Ok(f) => Some(f),
            // Removed since (an undone creation): nothing to restore.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(format!("could not open \"{}\": {e}", r.path.display())),
        },
    };
    let (start, end) = (r.offset, r.offset + r.len);
    let mut reverted = 0;
    for sector in start / SECTOR..end.div_ceil(SECTOR) {
        let revert = match fate {
            Fate::Keep => false,
            Fate::Drop => true,
            Fate::Tear => rng.below(2) == 0,
        };
        let key = (r.path.clone(), sector);
        if !revert || kept.contains(&key) {
            kept.insert(key);
            continue;
        }
        let Some(file) = &file else { continue };
        let from = (sector * SECTOR).max(start);
        let to = ((sector + 1) * SECTOR).min(end);
        file.write_all_at(&before_image(r, from, to), from)
            .map_err(|e| format!("could not write \"{}\": {e}", r.path.display()))?;
        reverted += 1;
    }
    Ok(reverted)
}

/// The bytes `from..to` of the file held before write `r` (zeros past the
/// end the file had then).
fn before_image(r: &Record, from: u64, to: u64) -> Vec<u8> {
    let mut b = vec![0u8; (to - from) as usize];
    let at = (from - r.offset) as usize;
    if at < r.data.len() {
        let n = b.len().min(r.data.len() - at);
        b[..n].copy_from_slice(&r.data[at..at + n]);
    }
    b
}

fn remove_if_present(p: &Path) -> Result<(), String> {
    match std::fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("could not remove \"{}\": {e}", p.display())),
    }
}

/// Moves a renamed file back and restores the file it replaced.
fn undo_rename(r: &Record) -> Result<(), String> {
    let Some(to) = &r.to else { return Ok(()) };
    if to.exists() {
        std::fs::rename(to, &r.path)
            .map_err(|e| format!("could not rename \"{}\" back: {e}", to.display()))?;
    }
    if r.flags & REPLACED != 0 {
        std::fs::write(to, &r.data)
            .map_err(|e| format!("could not restore \"{}\": {e}", to.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn dir(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("walbench-pl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }

    fn rec(kind: Kind, path: &Path) -> Record {
        Record {
            kind,
            pid: 1,
            path: path.to_path_buf(),
            to: None,
            offset: 0,
            len: 0,
            flags: 0,
            data: vec![],
        }
    }

    /// Writes `new` at `offset` of `path` and returns its WRITE record.
    fn write(path: &Path, offset: u64, new: &[u8]) -> Record {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let mut before = vec![0; new.len()];
        f.read_exact_at(&mut before, offset).unwrap();
        f.write_all_at(new, offset).unwrap();
        Record {
            offset,
            len: new.len() as u64,
            data: before,
            ..rec(Kind::Write, path)
        }
    }

    /// The first seed whose draws of `below(n)` are the `want`ed values
    /// in order (fates: keep 0, drop 1, tear 2 of `below(3)`; undo 1 of
    /// `below(2)`).
    fn seed_drawing(draws: &[(u64, u64)]) -> u64 {
        (1..)
            .find(|s| {
                let mut r = Rng::new(*s);
                draws.iter().all(|&(n, want)| r.below(n) == want)
            })
            .unwrap()
    }

    fn seed_for(fate: u64) -> u64 {
        seed_drawing(&[(3, fate)])
    }

    #[test]
    fn synced_writes_are_never_touched() {
        let d = dir("synced");
        let f = d.0.join("seg");
        std::fs::write(&f, vec![0u8; 2048]).unwrap();
        let recs = vec![write(&f, 0, &[7; 1024]), rec(Kind::Sync, &f)];
        assert!(unsynced(&recs).is_empty());
        let o = rewrite(&recs, &mut Rng::new(seed_for(1))).unwrap();
        assert_eq!(o.writes_dropped + o.writes_kept + o.writes_torn, 0);
        assert_eq!(std::fs::read(&f).unwrap()[..1024], [7; 1024]);
    }

    /// An O_DSYNC write's ranged SYNC makes only the bytes it names durable.
    #[test]
    fn a_ranged_sync_covers_only_its_bytes() {
        let f = Path::new("/d/pg_wal/seg");
        let ranged = |offset, len| Record {
            offset,
            len,
            flags: backend::powerloss::SYNC_RANGE,
            ..rec(Kind::Sync, f)
        };
        let written = |offset| Record {
            offset,
            len: 8192,
            ..rec(Kind::Write, f)
        };
        let recs = vec![written(0), written(8192), ranged(8192, 8192)];
        assert_eq!(unsynced(&recs), vec![0]);
        let mut whole = recs.clone();
        whole.push(rec(Kind::Sync, f));
        assert!(unsynced(&whole).is_empty());
    }

    #[test]
    fn keep_drop_and_tear() {
        let d = dir("fates");
        let f = d.0.join("seg");
        for (fate, seed) in [(0, seed_for(0)), (1, seed_for(1)), (2, seed_for(2))] {
            std::fs::write(&f, vec![1u8; 8192]).unwrap();
            let recs = vec![write(&f, 512, &[9; 4096])];
            let o = rewrite(&recs, &mut Rng::new(seed)).unwrap();
            let now = std::fs::read(&f).unwrap();
            let sectors: Vec<u8> = (1..9).map(|s| now[s * 512]).collect();
            assert!(now[..512].iter().all(|&b| b == 1), "outside the write");
            assert!(now[4608..].iter().all(|&b| b == 1), "outside the write");
            for s in 0..8 {
                let sec = &now[512 + s * 512..1024 + s * 512];
                assert!(sec.iter().all(|&b| b == sec[0]), "a sector is whole");
            }
            match fate {
                0 => assert!(o.writes_kept == 1 && sectors.iter().all(|&b| b == 9)),
                1 => assert!(o.writes_dropped == 1 && sectors.iter().all(|&b| b == 1)),
                _ => {
                    assert_eq!(o.writes_torn, 1);
                    assert_eq!(
                        o.sectors_reverted,
                        sectors.iter().filter(|&&b| b == 1).count() as u64
                    );
                }
            }
        }
    }

    /// A file of `size` bytes of 1 after two unsynced writes at its start,
    /// `older` then `newer`, met the fates `fates` (0 kept, 1 dropped).
    fn after_two_writes(
        tag: &str,
        size: usize,
        older: &[u8],
        newer: &[u8],
        fates: [u64; 2],
    ) -> Vec<u8> {
        let d = dir(tag);
        let f = d.0.join("seg");
        std::fs::write(&f, vec![1u8; size]).unwrap();
        let recs = vec![write(&f, 0, older), write(&f, 0, newer)];
        let seed = seed_drawing(&[(3, fates[0]), (3, fates[1])]);
        rewrite(&recs, &mut Rng::new(seed)).unwrap();
        std::fs::read(&f).unwrap()
    }

    #[test]
    fn dropped_overlapping_writes_restore_the_oldest_image() {
        // Two unsynced writes of the same sector: dropping both (newest
        // first) leaves the content before the first.
        let now = after_two_writes("overlap", 1024, &[2; 100], &[3; 200], [1, 1]);
        assert!(now.iter().all(|&b| b == 1));
    }

    #[test]
    fn a_kept_sector_is_not_reverted_by_an_older_write() {
        let now = after_two_writes("prefix", 512, &[2; 512], &[3; 512], [0, 1]);
        assert!(now.iter().all(|&b| b == 3));
    }

    #[test]
    fn unsynced_creation_and_rename_may_be_undone() {
        let d = dir("entries");
        let (seg, tmp, ctl) = (d.0.join("seg"), d.0.join("ctl.tmp"), d.0.join("ctl"));
        std::fs::write(&seg, b"segment").unwrap();
        std::fs::write(&ctl, b"new control").unwrap();
        let recs = vec![
            rec(Kind::Create, &seg),
            Record {
                to: Some(ctl.clone()),
                flags: REPLACED,
                data: b"old control".to_vec(),
                ..rec(Kind::Rename, &tmp)
            },
        ];
        assert_eq!(unsynced(&recs), vec![0, 1]);
        // Both undone: a seed drawing 1 twice from below(2).
        let seed = seed_drawing(&[(2, 1), (2, 1)]);
        let o = rewrite(&recs, &mut Rng::new(seed)).unwrap();
        assert_eq!((o.creates_undone, o.renames_undone), (1, 1));
        assert!(!seg.exists());
        assert_eq!(std::fs::read(&ctl).unwrap(), b"old control");
        assert_eq!(std::fs::read(&tmp).unwrap(), b"new control");
        // A directory fsync makes both durable.
        let mut synced = recs.clone();
        synced.push(rec(Kind::DirSync, &d.0));
        assert!(unsynced(&synced).is_empty());
    }

    #[test]
    fn a_sync_before_the_directory_fsync_is_found() {
        let (dir, seg) = (Path::new("/d/pg_wal"), Path::new("/d/pg_wal/seg"));
        let durable = vec![
            rec(Kind::Create, seg),
            rec(Kind::DirSync, dir),
            rec(Kind::Sync, seg),
        ];
        assert!(synced_before_entry(&durable).is_empty());
        let early = vec![
            rec(Kind::Create, seg),
            rec(Kind::Sync, seg),
            rec(Kind::DirSync, dir),
            rec(Kind::Sync, seg),
        ];
        assert_eq!(synced_before_entry(&early), vec![seg.to_path_buf()]);
        let renamed = vec![
            Record {
                to: Some(seg.to_path_buf()),
                ..rec(Kind::Rename, Path::new("/d/pg_wal/old"))
            },
            rec(Kind::DirSync, Path::new("/d/global")),
            rec(Kind::Sync, seg),
        ];
        assert_eq!(synced_before_entry(&renamed), vec![seg.to_path_buf()]);
    }

    #[test]
    fn simulate_reads_and_empties_the_journal() {
        let d = dir("journal");
        let f = d.0.join("seg");
        std::fs::write(&f, vec![5u8; 512]).unwrap();
        let j = d.0.join("journal");
        let w = write(&f, 0, &[6; 512]);
        std::fs::write(&j, w.encode()).unwrap();
        let o = simulate(&j, &mut Rng::new(seed_for(1))).unwrap();
        assert_eq!((o.records, o.writes_dropped, o.skipped_bytes), (1, 1, 0));
        assert!(std::fs::read(&f).unwrap().iter().all(|&b| b == 5));
        assert!(!j.exists() && j.with_extension("last").exists());
    }
}
