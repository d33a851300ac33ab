//! Small process-level system calls that several crates need, written
//! once: whether a process exists, which one it is, and writing a whole buffer to a
//! descriptor with whatever call suits it (`write`, or `send` with
//! MSG_NOSIGNAL on a socket). The futex has its own module (`futex`).
//!
//! Why by hand: each is one libc call with an EINTR or errno rule around
//! it; a crate would add a dependency for two functions.

use std::io;

/// Whether process `pid` exists (signal 0: EPERM means it exists but is
/// another user's; only ESRCH means it is gone). A zombie exists.
pub fn process_exists(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 sends nothing; it only checks that the process
    // exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Which process `pid` is, while it runs: its start time (clock ticks
/// since boot, `/proc/PID/stat` field 22), so that a later look can tell
/// it from another process that got the same pid. None once it is gone
/// or a zombie (dead, not yet reaped).
pub fn live_process_identity(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name's closing parenthesis: state
    // first, start time the 20th.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// Writes all of `bytes` through `call` (a `write(2)`-like call given the
/// rest of the buffer, returning the byte count or -1 with errno set),
/// retrying after EINTR and short writes.
pub fn write_all_with(bytes: &[u8], mut call: impl FnMut(&[u8]) -> isize) -> io::Result<()> {
    let mut off = 0;
    while off < bytes.len() {
        let n = call(&bytes[off..]);
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        off += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_exists_and_pid_0_never_does() {
        assert!(process_exists(std::process::id() as i32));
        assert!(!process_exists(0));
        assert!(!process_exists(-1));
    }

    #[test]
    fn short_writes_and_eintr_are_retried() {
        let mut got = Vec::new();
        let mut calls = 0;
        let r = write_all_with(b"abcdef", |rest| {
            calls += 1;
            got.push(rest[0]);
            1
        });
        assert!(r.is_ok());
        assert_eq!((calls, got), (6, b"abcdef".to_vec()));
    }
}
