//! The control file `global/pg_control`: what recovery starts from.
//!
//! Byte layout (little-endian, 512 bytes used of one sector-sized write):
//!
//! ```text
//! { magic: u64 "WALSHMCF" | version: u32 | state: u32 | system_identifier: u64
//! | seg_size: u64 | timeline: u32 | pad: u32 | checkpoint: u64 | redo: u64
//! | next_xid: u64 | time: i64 | crc32c: u32 over all preceding bytes }
//! ```
//!
//! Crash safety: the file is written whole to `pg_control.tmp`, fsynced,
//! renamed over `pg_control`, and the directory fsynced, so a crash leaves
//! either the old or the new file, never a torn one. A file whose magic,
//! version or CRC does not check is refused with a clear error.

use std::fmt;
use std::path::{Path, PathBuf};
use walformat::Lsn;

const MAGIC: u64 = u64::from_le_bytes(*b"WALSHMCF");
const VERSION: u32 = 1;
const LEN: usize = 76;
const FILE_SIZE: usize = 512;

/// Cluster state, as PostgreSQL's DBState.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DbState {
    ShutDown = 1,
    InProduction = 2,
    InCrashRecovery = 3,
}

impl DbState {
    fn from_u32(v: u32) -> Option<DbState> {
        match v {
            1 => Some(DbState::ShutDown),
            2 => Some(DbState::InProduction),
            3 => Some(DbState::InCrashRecovery),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DbState::ShutDown => "shut down",
            DbState::InProduction => "in production",
            DbState::InCrashRecovery => "in crash recovery",
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

impl ControlFile {
    fn encode(&self) -> [u8; FILE_SIZE] {
        let mut b = [0u8; FILE_SIZE];
        let mut o = 0;
        let mut put = |bytes: &[u8]| {
            b[o..o + bytes.len()].copy_from_slice(bytes);
            o += bytes.len();
        };
        put(&MAGIC.to_le_bytes());
        put(&VERSION.to_le_bytes());
        put(&(self.state as u32).to_le_bytes());
        put(&self.system_identifier.to_le_bytes());
        put(&self.seg_size.to_le_bytes());
        put(&self.timeline.to_le_bytes());
        put(&0u32.to_le_bytes());
        put(&self.checkpoint.to_le_bytes());
        put(&self.redo.to_le_bytes());
        put(&self.next_xid.to_le_bytes());
        put(&self.time.to_le_bytes());
        debug_assert_eq!(o, LEN - 4);
        let crc = crc32c::crc32c(&b[..LEN - 4]);
        b[LEN - 4..LEN].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8], p: &Path) -> Result<ControlFile, ControlError> {
        let bad = |why: String| ControlError::Corrupt(p.to_path_buf(), why);
        if b.len() < LEN {
            return Err(bad(format!(
                "file is {} bytes, expected at least {LEN}",
                b.len()
            )));
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        if u64_at(0) != MAGIC {
            return Err(bad("bad magic number".into()));
        }
        if u32_at(8) != VERSION {
            return Err(bad(format!(
                "version {} (this program uses {VERSION})",
                u32_at(8)
            )));
        }
        let crc = crc32c::crc32c(&b[..LEN - 4]);
        if crc != u32_at(LEN - 4) {
            return Err(bad("incorrect checksum".into()));
        }
        let state = DbState::from_u32(u32_at(12))
            .ok_or_else(|| bad(format!("unknown state {}", u32_at(12))))?;
        Ok(ControlFile {
            state,
            system_identifier: u64_at(16),
            seg_size: u64_at(24),
            timeline: u32_at(32),
            checkpoint: u64_at(40),
            redo: u64_at(48),
            next_xid: u64_at(56),
            time: u64_at(64) as i64,
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

    #[test]
    fn round_trip_and_corruption() {
        let c = sample();
        let b = c.encode();
        assert_eq!(ControlFile::decode(&b, Path::new("x")).unwrap(), c);
        for i in 0..LEN {
            let mut d = b;
            d[i] ^= 0x40;
            assert!(
                ControlFile::decode(&d, Path::new("x")).is_err(),
                "flip at {i} accepted"
            );
        }
        assert!(ControlFile::decode(&b[..10], Path::new("x")).is_err());
    }
}
