//! The control file `global/pg_control`: what recovery starts from, in
//! PostgreSQL 15's `ControlFileData` layout, so that PostgreSQL's own
//! `pg_controldata` (and `pg_ctl promote`, `pg_basebackup`, ...) read it.
//!
//! The file is `PG_CONTROL_FILE_SIZE` (8192) bytes: the 296-byte struct
//! image, then zeros. Little-endian, x86-64 alignment (as PostgreSQL 15
//! built for this machine lays the C struct out); offsets in decimal:
//!
//! ```text
//! { system_identifier: u64 | pg_control_version: u32 = 1300 | catalog_version_no: u32 = 202209061 |
//!   0                        8                                 12
//!   state: u32 (DBState) | pad: 4 | time: i64 | checkPoint: u64 | checkPointCopy: CheckPoint (88) |
//!   16                     20       24          32                40
//!   unloggedLSN: u64 | minRecoveryPoint: u64 | minRecoveryPointTLI: u32 | pad: 4 |
//!   128                136                     144                        148
//!   backupStartPoint: u64 | backupEndPoint: u64 | backupEndRequired: bool | pad: 3 |
//!   152                     160                   168                       169
//!   wal_level: i32 | wal_log_hints: bool | pad: 3 | MaxConnections: i32 | max_worker_processes: i32 |
//!   172              176                   177      180                   184
//!   max_wal_senders: i32 | max_prepared_xacts: i32 | max_locks_per_xact: i32 |
//!   188                    192                       196
//!   track_commit_timestamp: bool | pad: 3 | maxAlign: u32 | floatFormat: f64 = 1234567.0 |
//!   200                            201      204             208
//!   blcksz: u32 | relseg_size: u32 | xlog_blcksz: u32 | xlog_seg_size: u32 | nameDataLen: u32 |
//!   216           220                224                228                  232
//!   indexMaxKeys: u32 | toast_max_chunk_size: u32 | loblksize: u32 | float8ByVal: bool | pad: 3 |
//!   236                 240                         244              248                 249
//!   data_checksum_version: u32 | mock_authentication_nonce: [u8; 32] | crc: u32 (CRC-32C of 0..288) | pad: 4 }
//!   252                          256                                   288                              292..296
//! ```
//!
//! `checkPointCopy` is the 88-byte `CheckPoint` of the WAL's checkpoint
//! record (`walformat::CheckPoint`). What walshm keeps ([`ControlFile`]):
//! state, system identifier, segment size, timeline, checkpoint and redo
//! LSNs, next XID and time; the rest is written with the values
//! PostgreSQL 15's defaults give (`wal_level` logical, `max_connections`
//! 100, 8 kB blocks, no data checksums, ...), the checkpoint copy as the
//! checkpointer writes its record ([`crate::checkpointer::checkpoint_contents`]),
//! and the nonce derived from the system identifier.
//!
//! Reading checks the version, the CRC-32C and the state, and refuses a
//! file with a clear error otherwise. A file in walshm's previous format
//! (magic "WALSHMCF", 512 bytes) is still read; [`convert_legacy`] rewrites
//! it in this layout once (the postmaster calls it at start), and every
//! write is in this layout.
//!
//! Crash safety: the file is written whole to `pg_control.tmp`, fsynced,
//! renamed over `pg_control`, and the directory fsynced, so a crash leaves
//! either the old or the new file, never a torn one.

use std::fmt;
use std::path::{Path, PathBuf};
use walformat::{CheckPoint, Lsn, SIZE_OF_CHECKPOINT};

/// PostgreSQL 15's PG_CONTROL_VERSION.
pub const PG_CONTROL_VERSION: u32 = 1300;
/// PostgreSQL 15's CATALOG_VERSION_NO.
pub const CATALOG_VERSION_NO: u32 = 202_209_061;
/// PG_CONTROL_FILE_SIZE: the file's physical size.
const FILE_SIZE: usize = 8192;
/// sizeof(ControlFileData).
const STRUCT_SIZE: usize = 296;
/// offsetof(ControlFileData, crc): the CRC covers every byte before it.
const CRC_AT: usize = 288;

/// Offsets of the fields walshm reads and writes (see the diagram above).
mod at {
    pub const SYSTEM_IDENTIFIER: usize = 0;
    pub const VERSION: usize = 8;
    pub const CATALOG_VERSION: usize = 12;
    pub const STATE: usize = 16;
    pub const TIME: usize = 24;
    pub const CHECKPOINT: usize = 32;
    pub const CHECKPOINT_COPY: usize = 40;
    pub const WAL_LEVEL: usize = 172;
    pub const MAX_CONNECTIONS: usize = 180;
    pub const MAX_WORKER_PROCESSES: usize = 184;
    pub const MAX_WAL_SENDERS: usize = 188;
    pub const MAX_PREPARED_XACTS: usize = 192;
    pub const MAX_LOCKS_PER_XACT: usize = 196;
    pub const MAX_ALIGN: usize = 204;
    pub const FLOAT_FORMAT: usize = 208;
    pub const BLCKSZ: usize = 216;
    pub const RELSEG_SIZE: usize = 220;
    pub const XLOG_BLCKSZ: usize = 224;
    pub const XLOG_SEG_SIZE: usize = 228;
    pub const NAME_DATA_LEN: usize = 232;
    pub const INDEX_MAX_KEYS: usize = 236;
    pub const TOAST_MAX_CHUNK_SIZE: usize = 240;
    pub const LOBLKSIZE: usize = 244;
    pub const FLOAT8_BYVAL: usize = 248;
    pub const NONCE: usize = 256;
}

const _: () = assert!(at::CHECKPOINT_COPY + SIZE_OF_CHECKPOINT == 128);
const _: () = assert!(at::NONCE + 32 == CRC_AT && CRC_AT + 8 == STRUCT_SIZE);

/// The previous walshm format: `{ magic "WALSHMCF" | version 1 | state |
/// system_identifier | seg_size | timeline | pad | checkpoint | redo |
/// next_xid | time | crc32c }`, 76 bytes used of 512.
mod legacy {
    pub const MAGIC: u64 = u64::from_le_bytes(*b"WALSHMCF");
    pub const VERSION: u32 = 1;
    pub const LEN: usize = 76;
}

shmem::code_enum! {
    /// Cluster state, PostgreSQL's DBState (same numbers), named as
    /// `pg_controldata` prints it.
    pub enum DbState: u32 {
        Startup = 0 => "starting up",
        ShutDown = 1 => "shut down",
        ShutDownInRecovery = 2 => "shut down in recovery",
        ShuttingDown = 3 => "shutting down",
        InCrashRecovery = 4 => "in crash recovery",
        InArchiveRecovery = 5 => "in archive recovery",
        InProduction = 6 => "in production",
    }
}

impl DbState {
    /// The state of walshm's previous format (1 shut down, 2 in
    /// production, 3 in crash recovery).
    fn from_legacy(v: u32) -> Option<DbState> {
        match v {
            1 => Some(DbState::ShutDown),
            2 => Some(DbState::InProduction),
            3 => Some(DbState::InCrashRecovery),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlFile {
    pub state: DbState,
    pub system_identifier: u64,
    pub seg_size: u64,
    pub timeline: u32,
    /// LSN of the last checkpoint record.
    pub checkpoint: Lsn,
    /// Redo point of that checkpoint.
    pub redo: Lsn,
    pub next_xid: u64,
    /// Unix seconds of the last update.
    pub time: i64,
}

#[derive(Debug)]
pub enum ControlError {
    Io(PathBuf, std::io::Error),
    Corrupt(PathBuf, String),
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlError::Io(p, e) => {
                write!(f, "could not access control file \"{}\": {e}", p.display())
            }
            ControlError::Corrupt(p, why) => {
                write!(f, "control file \"{}\" is invalid: {why}", p.display())
            }
        }
    }
}

impl std::error::Error for ControlError {}

/// Now in Unix seconds (the control file's and the checkpoint record's
/// `time`); 0 if the clock is before 1970.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

pub fn path(datadir: &Path) -> PathBuf {
    datadir.join("global").join("pg_control")
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(w)
}

fn put(b: &mut [u8], o: usize, bytes: &[u8]) {
    b[o..o + bytes.len()].copy_from_slice(bytes);
}

impl ControlFile {
    /// Whose WAL this cluster writes now: its segment geometry, timeline
    /// and system identifier (what a look-ahead past the end of WAL
    /// accepts). Errors only for a segment size `read` would have refused.
    pub fn wal_system(&self) -> Result<walformat::WalSystem, walformat::FormatError> {
        Ok(walformat::WalSystem {
            geo: walformat::Geometry::new(self.seg_size)?,
            tli: self.timeline,
            sysid: self.system_identifier,
        })
    }

    /// The `CheckPoint` copy the file carries: what the checkpointer
    /// writes in its record for this redo point, timeline and next XID,
    /// stamped with the file's time.
    pub fn checkpoint_copy(&self) -> CheckPoint {
        CheckPoint {
            time: self.time,
            ..crate::checkpointer::checkpoint_contents(self.redo, self.timeline, self.next_xid)
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; FILE_SIZE];
        let i32_ = |v: i32| v.to_le_bytes();
        put(
            &mut b,
            at::SYSTEM_IDENTIFIER,
            &self.system_identifier.to_le_bytes(),
        );
        put(&mut b, at::VERSION, &PG_CONTROL_VERSION.to_le_bytes());
        put(
            &mut b,
            at::CATALOG_VERSION,
            &CATALOG_VERSION_NO.to_le_bytes(),
        );
        put(&mut b, at::STATE, &(self.state as u32).to_le_bytes());
        put(&mut b, at::TIME, &self.time.to_le_bytes());
        put(&mut b, at::CHECKPOINT, &self.checkpoint.to_le_bytes());
        put(
            &mut b,
            at::CHECKPOINT_COPY,
            &self.checkpoint_copy().to_bytes(),
        );
        // unloggedLSN, minRecoveryPoint(TLI), backup points: zero.
        put(&mut b, at::WAL_LEVEL, &i32_(2)); // WAL_LEVEL_LOGICAL
        put(&mut b, at::MAX_CONNECTIONS, &i32_(100));
        put(&mut b, at::MAX_WORKER_PROCESSES, &i32_(8));
        put(&mut b, at::MAX_WAL_SENDERS, &i32_(10));
        put(&mut b, at::MAX_PREPARED_XACTS, &i32_(0));
        put(&mut b, at::MAX_LOCKS_PER_XACT, &i32_(64));
        put(&mut b, at::MAX_ALIGN, &8u32.to_le_bytes());
        put(&mut b, at::FLOAT_FORMAT, &1234567.0f64.to_le_bytes());
        put(&mut b, at::BLCKSZ, &8192u32.to_le_bytes());
        put(&mut b, at::RELSEG_SIZE, &131_072u32.to_le_bytes());
        put(
            &mut b,
            at::XLOG_BLCKSZ,
            &(walformat::XLOG_BLCKSZ as u32).to_le_bytes(),
        );
        // Segment sizes are at most 1 GB (walformat::Geometry).
        put(
            &mut b,
            at::XLOG_SEG_SIZE,
            &(self.seg_size as u32).to_le_bytes(),
        );
        put(&mut b, at::NAME_DATA_LEN, &64u32.to_le_bytes());
        put(&mut b, at::INDEX_MAX_KEYS, &32u32.to_le_bytes());
        put(&mut b, at::TOAST_MAX_CHUNK_SIZE, &1996u32.to_le_bytes());
        put(&mut b, at::LOBLKSIZE, &2048u32.to_le_bytes());
        b[at::FLOAT8_BYVAL] = 1;
        // data_checksum_version: 0 (no data pages to checksum).
        for i in 0..4 {
            let word = self.system_identifier.rotate_left(16 * i as u32) ^ 0x9e37_79b9_7f4a_7c15;
            put(&mut b, at::NONCE + 8 * i, &word.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b[..CRC_AT]);
        put(&mut b, CRC_AT, &crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8], p: &Path) -> Result<ControlFile, ControlError> {
        let bad = |why: String| ControlError::Corrupt(p.to_path_buf(), why);
        if b.len() >= 8 && u64_at(b, 0) == legacy::MAGIC {
            return ControlFile::decode_legacy(b, p);
        }
        if b.len() < STRUCT_SIZE {
            return Err(bad(format!(
                "file is {} bytes, expected {FILE_SIZE} (at least {STRUCT_SIZE})",
                b.len()
            )));
        }
        let version = u32_at(b, at::VERSION);
        if version != PG_CONTROL_VERSION {
            return Err(bad(format!(
                "pg_control_version {version} (this program reads {PG_CONTROL_VERSION}, PostgreSQL 15's)"
            )));
        }
        if crc32c::crc32c(&b[..CRC_AT]) != u32_at(b, CRC_AT) {
            return Err(bad("incorrect checksum".into()));
        }
        let state = u32_at(b, at::STATE);
        let state =
            DbState::from_code(state).ok_or_else(|| bad(format!("unknown state {state}")))?;
        let page = u32_at(b, at::XLOG_BLCKSZ);
        if page as usize != walformat::XLOG_BLCKSZ {
            return Err(bad(format!(
                "WAL block size {page} (this program uses {})",
                walformat::XLOG_BLCKSZ
            )));
        }
        let seg_size = u32_at(b, at::XLOG_SEG_SIZE) as u64;
        walformat::Geometry::new(seg_size)
            .map_err(|_| bad(format!("invalid WAL segment size {seg_size}")))?;
        let copy = CheckPoint::from_bytes(&b[at::CHECKPOINT_COPY..at::CHECKPOINT_COPY + 88])
            .ok_or_else(|| bad("short checkpoint copy".into()))?;
        Ok(ControlFile {
            state,
            system_identifier: u64_at(b, at::SYSTEM_IDENTIFIER),
            seg_size,
            timeline: copy.tli,
            checkpoint: u64_at(b, at::CHECKPOINT),
            redo: copy.redo,
            next_xid: copy.next_xid,
            time: u64_at(b, at::TIME) as i64,
        })
    }

    fn decode_legacy(b: &[u8], p: &Path) -> Result<ControlFile, ControlError> {
        let bad = |why: String| ControlError::Corrupt(p.to_path_buf(), why);
        if b.len() < legacy::LEN {
            return Err(bad(format!(
                "file in walshm's previous format is {} bytes, expected at least {}",
                b.len(),
                legacy::LEN
            )));
        }
        if u32_at(b, 8) != legacy::VERSION {
            return Err(bad(format!(
                "walshm format version {} (this program reads {})",
                u32_at(b, 8),
                legacy::VERSION
            )));
        }
        if crc32c::crc32c(&b[..legacy::LEN - 4]) != u32_at(b, legacy::LEN - 4) {
            return Err(bad("incorrect checksum".into()));
        }
        let state = DbState::from_legacy(u32_at(b, 12))
            .ok_or_else(|| bad(format!("unknown state {}", u32_at(b, 12))))?;
        Ok(ControlFile {
            state,
            system_identifier: u64_at(b, 16),
            seg_size: u64_at(b, 24),
            timeline: u32_at(b, 32),
            checkpoint: u64_at(b, 40),
            redo: u64_at(b, 48),
            next_xid: u64_at(b, 56),
            time: u64_at(b, 64) as i64,
        })
    }

    pub fn read(datadir: &Path) -> Result<ControlFile, ControlError> {
        let p = path(datadir);
        let b = crate::walfile::read_file(crate::walfile::Op::ControlRead, &p)
            .map_err(|e| ControlError::Io(p.clone(), e))?;
        ControlFile::decode(&b, &p)
    }

    /// Writes the file crash-safely (temp file, fsync, rename, dir fsync;
    /// the fsyncs only with `fsync`).
    pub fn write(&self, datadir: &Path, fsync: bool) -> Result<(), ControlError> {
        let p = path(datadir);
        crate::walfile::write_file_atomically(&p, &self.encode(), fsync)
            .map_err(|e| ControlError::Io(p.clone(), e))
    }
}

/// Rewrites a control file still in walshm's previous format in
/// PostgreSQL 15's layout (crash-safely, fsynced); returns whether it did.
/// A file already in the new layout is left alone; an invalid one is an
/// error, as for [`ControlFile::read`].
pub fn convert_legacy(datadir: &Path) -> Result<bool, ControlError> {
    let p = path(datadir);
    let b = crate::walfile::read_file(crate::walfile::Op::ControlRead, &p)
        .map_err(|e| ControlError::Io(p.clone(), e))?;
    let c = ControlFile::decode(&b, &p)?;
    if b.len() >= 8 && u64_at(&b, 0) == legacy::MAGIC {
        c.write(datadir, true)?;
        return Ok(true);
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ControlFile {
        ControlFile {
            state: DbState::InProduction,
            system_identifier: 7713694972811727722,
            seg_size: 16 << 20,
            timeline: 1,
            checkpoint: 0x1000028,
            redo: 0x1000028,
            next_xid: 742,
            time: 1_790_000_000,
        }
    }

    /// The previous format's bytes for `c`, as the previous version wrote them.
    fn legacy_bytes(c: &ControlFile) -> Vec<u8> {
        let mut b = vec![0u8; 512];
        put(&mut b, 0, &legacy::MAGIC.to_le_bytes());
        put(&mut b, 8, &legacy::VERSION.to_le_bytes());
        let state: u32 = match c.state {
            DbState::ShutDown => 1,
            DbState::InProduction => 2,
            _ => 3,
        };
        put(&mut b, 12, &state.to_le_bytes());
        put(&mut b, 16, &c.system_identifier.to_le_bytes());
        put(&mut b, 24, &c.seg_size.to_le_bytes());
        put(&mut b, 32, &c.timeline.to_le_bytes());
        put(&mut b, 40, &c.checkpoint.to_le_bytes());
        put(&mut b, 48, &c.redo.to_le_bytes());
        put(&mut b, 56, &c.next_xid.to_le_bytes());
        put(&mut b, 64, &c.time.to_le_bytes());
        let crc = crc32c::crc32c(&b[..legacy::LEN - 4]);
        put(&mut b, legacy::LEN - 4, &crc.to_le_bytes());
        b
    }

    #[test]
    fn round_trip_in_every_state() {
        for state in 0..7 {
            let c = ControlFile {
                state: DbState::from_code(state).unwrap(),
                ..sample()
            };
            let b = c.encode();
            assert_eq!(b.len(), FILE_SIZE);
            assert_eq!(ControlFile::decode(&b, Path::new("x")).unwrap(), c);
        }
    }

    /// Fields where pg_controldata finds them.
    #[test]
    fn fields_at_postgresql_offsets() {
        let c = sample();
        let b = c.encode();
        assert_eq!(u64_at(&b, 0), c.system_identifier);
        assert_eq!(u32_at(&b, 8), 1300);
        assert_eq!(u32_at(&b, 12), 202_209_061);
        assert_eq!(u32_at(&b, 16), 6);
        assert_eq!(u64_at(&b, 32), c.checkpoint);
        assert_eq!(u64_at(&b, 40), c.redo);
        assert_eq!(u32_at(&b, 48), c.timeline);
        assert_eq!(u64_at(&b, 64), c.next_xid);
        assert_eq!(u32_at(&b, 228), 16 << 20);
        assert_eq!(
            f64::from_le_bytes(b[208..216].try_into().unwrap()),
            1234567.0
        );
        assert_eq!(u32_at(&b, CRC_AT), crc32c::crc32c(&b[..CRC_AT]));
        assert!(b[STRUCT_SIZE..].iter().all(|&x| x == 0));
    }

    #[test]
    fn damage_is_refused() {
        let b = sample().encode();
        for i in 0..CRC_AT + 4 {
            let mut d = b.clone();
            d[i] ^= 0x40;
            assert!(
                ControlFile::decode(&d, Path::new("x")).is_err(),
                "flip at {i} accepted"
            );
        }
        for len in [0, 10, STRUCT_SIZE - 1] {
            let e = ControlFile::decode(&b[..len], Path::new("x")).unwrap_err();
            assert!(e.to_string().contains("bytes"), "{e}");
        }
        let mut v = b.clone();
        put(&mut v, at::VERSION, &1201u32.to_le_bytes());
        let e = ControlFile::decode(&v, Path::new("x")).unwrap_err();
        assert!(e.to_string().contains("pg_control_version 1201"), "{e}");
        // A valid CRC over an unknown state or a bad segment size.
        for (o, v) in [(at::STATE, 7u32), (at::XLOG_SEG_SIZE, 12345)] {
            let mut d = b.clone();
            put(&mut d, o, &v.to_le_bytes());
            let crc = crc32c::crc32c(&d[..CRC_AT]);
            put(&mut d, CRC_AT, &crc.to_le_bytes());
            assert!(ControlFile::decode(&d, Path::new("x")).is_err(), "{o}");
        }
    }

    #[test]
    fn legacy_format_is_read_and_converted() {
        let c = sample();
        let old = legacy_bytes(&c);
        assert_eq!(ControlFile::decode(&old, Path::new("x")).unwrap(), c);
        for i in 0..legacy::LEN {
            let mut d = old.clone();
            d[i] ^= 0x40;
            assert!(
                ControlFile::decode(&d, Path::new("x")).is_err(),
                "legacy flip at {i} accepted"
            );
        }
        let dir = std::env::temp_dir().join(format!("walshm-control-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("global")).unwrap();
        std::fs::write(path(&dir), &old).unwrap();
        assert!(convert_legacy(&dir).unwrap());
        let now = std::fs::read(path(&dir)).unwrap();
        assert_eq!(now.len(), FILE_SIZE);
        assert_eq!(u32_at(&now, at::VERSION), PG_CONTROL_VERSION);
        assert_eq!(ControlFile::read(&dir).unwrap(), c);
        assert!(!convert_legacy(&dir).unwrap(), "converted twice");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
