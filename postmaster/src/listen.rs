//! The postmaster's listening sockets: the Unix socket `.s.PGSQL.PORT` (in
//! `unix_socket_directories`, by default the data directory) and, only when
//! `listen_addresses` is set, TCP on 127.0.0.1. Both are non-blocking; the
//! main loop polls them beside its self-pipe and forks one backend per
//! accepted connection.

use shmem::Settings;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

pub struct Listeners {
    pub unix: UnixListener,
    pub unix_path: PathBuf,
    pub tcp: Option<TcpListener>,
}

pub enum Accepted {
    Unix(std::os::unix::net::UnixStream),
    Tcp(std::net::TcpStream),
}

impl Listeners {
    /// Opens the sockets. A socket file left by a dead postmaster is
    /// removed (we own the data directory's pid file by now).
    pub fn open(datadir: &Path, s: &Settings) -> Result<Listeners, String> {
        let dir = match s.unix_socket_directories.as_str() {
            "" => datadir.to_path_buf(),
            d => PathBuf::from(d),
        };
        let unix_path = dir.join(format!(".s.PGSQL.{}", s.port));
        if unix_path.exists() {
            std::fs::remove_file(&unix_path).map_err(|e| {
                format!(
                    "could not remove stale socket \"{}\": {e}",
                    unix_path.display()
                )
            })?;
        }
        let unix = UnixListener::bind(&unix_path).map_err(|e| {
            format!(
                "could not create Unix socket \"{}\": {e}",
                unix_path.display()
            )
        })?;
        unix.set_nonblocking(true).map_err(|e| e.to_string())?;
        let tcp = match s.listen_addresses.as_str() {
            "" => None,
            _ => {
                let addr = format!("127.0.0.1:{}", s.port);
                let l = TcpListener::bind(&addr)
                    .map_err(|e| format!("could not listen on {addr}: {e}"))?;
                l.set_nonblocking(true).map_err(|e| e.to_string())?;
                Some(l)
            }
        };
        Ok(Listeners {
            unix,
            unix_path,
            tcp,
        })
    }

    pub fn fds(&self) -> Vec<RawFd> {
        let mut v = vec![self.unix.as_raw_fd()];
        if let Some(t) = &self.tcp {
            v.push(t.as_raw_fd());
        }
        v
    }

    /// Every connection waiting to be accepted.
    pub fn accept_all(&self) -> Vec<Accepted> {
        let mut out = Vec::new();
        while let Ok((s, _)) = self.unix.accept() {
            let _ = s.set_nonblocking(false);
            out.push(Accepted::Unix(s));
        }
        if let Some(t) = &self.tcp {
            while let Ok((s, _)) = t.accept() {
                let _ = s.set_nonblocking(false);
                let _ = s.set_nodelay(true);
                out.push(Accepted::Tcp(s));
            }
        }
        out
    }
}

impl Drop for Listeners {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.unix_path);
    }
}
