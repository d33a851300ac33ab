//! A client connection's backend: the `protocol::Session` that turns
//! statements into WAL, and the connection's life (start-up, cancel
//! requests, serving, exit).
//!
//! Transactions follow the protocol crate's contract: `begin` at the start
//! of every transaction (implicit per query message, or an explicit
//! block), `commit` writes the commit record when an XID was assigned and,
//! with `synchronous_commit = on` and WAL written before it, returns only
//! after the flush — so a client that saw COMMIT succeed has a durable
//! commit. `rollback` writes an ABORT record when an XID was assigned.
//! `pg_logical_emit_message(true, ...)` assigns an XID (transactional);
//! `(false, ...)` writes a message with no XID and, as in PostgreSQL 15,
//! does not wait for its flush.
//!
//! Cancel requests arrive on a fresh, unauthenticated connection, so
//! [`forward_cancel`] trusts nothing in them: it signals only a live
//! connection backend (a backend proc slot with a pid > 0 whose nonzero
//! cancel key, compared in constant time, matches). Worker and auxiliary
//! slots never carry a key, free slots have pid 0 and key 0, and key 0 is
//! never handed out, so neither `kill(0, ...)` (the whole process group)
//! nor a signal to a worker can be provoked. A wrong cancel is ignored
//! without a word, as in PostgreSQL.

use crate::checkpointer::request_checkpoint;
use crate::client_poll::PollingStream;
use crate::context::ProcContext;
use crate::process::{self, log, shutdown_requested, CANCEL_REQUESTED};
use crate::procs::walsender;
use crate::xact::Xact;
use protocol::{sqlstate, Session, SqlError, Termination};
use shmem::sync::Ordering;
use shmem::Shmem;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

pub struct WalSession<'a> {
    shm: &'a Shmem,
    xact: Xact<'a>,
}

impl<'a> WalSession<'a> {
    /// Joins the ProcArray as the context's proc.
    pub fn new(ctx: &'a ProcContext<'a>) -> Self {
        WalSession {
            shm: ctx.shm,
            xact: Xact::new(ctx),
        }
    }

    /// Leaves the ProcArray; ends an open transaction first.
    pub fn close(mut self) {
        self.xact.abort();
        self.xact.shutdown();
    }
}

impl Session for WalSession<'_> {
    fn emit_message(
        &mut self,
        transactional: bool,
        prefix: &str,
        payload: &[u8],
    ) -> Result<u64, SqlError> {
        let xid = if transactional { self.xact.xid() } else { 0 };
        let mut rec = walformat::RecordBuf::default();
        walformat::try_logical_message_into(&mut rec, xid, transactional, prefix, payload)
            .map_err(|e| {
                SqlError::error(
                    sqlstate::PROGRAM_LIMIT_EXCEEDED,
                    format!("message too large: {e}"),
                )
            })?;
        let at = if transactional {
            self.xact.insert(&mut rec)
        } else {
            self.xact.xlog.insert(&mut rec)
        };
        Ok(at.end)
    }

    fn txid_current(&mut self) -> Result<u64, SqlError> {
        Ok(self.xact.full_xid())
    }

    fn current_wal_lsn(&mut self) -> u64 {
        self.xact.xlog.write_lsn()
    }

    fn current_wal_insert_lsn(&mut self) -> u64 {
        self.xact.xlog.insert_rec_ptr()
    }

    fn current_wal_flush_lsn(&mut self) -> u64 {
        self.xact.xlog.flush_lsn()
    }

    fn switch_wal(&mut self) -> Result<u64, SqlError> {
        let at = self.xact.xlog.insert(&mut walformat::switch_record());
        Ok(at.end)
    }

    fn checkpoint(&mut self) -> Result<(), SqlError> {
        request_checkpoint(self.shm);
        Ok(())
    }

    fn begin(&mut self) -> Result<(), SqlError> {
        self.xact.begin();
        Ok(())
    }

    fn commit(&mut self) -> Result<(), SqlError> {
        self.xact.commit();
        Ok(())
    }

    fn rollback(&mut self) -> Result<(), SqlError> {
        self.xact.abort();
        Ok(())
    }

    fn set_synchronous_commit(&mut self, on: bool) {
        self.xact.set_synchronous(on);
    }

    fn synchronous_commit(&self) -> bool {
        self.xact.synchronous()
    }

    fn set_synchronous_commit_level(&mut self, name: &str) {
        crate::syncrep::set_session_level(name);
    }

    fn create_physical_replication_slot(
        &mut self,
        name: &str,
        immediately_reserve: bool,
        temporary: bool,
    ) -> Result<Option<u64>, SqlError> {
        if temporary {
            return Err(SqlError::error(
                sqlstate::FEATURE_NOT_SUPPORTED,
                "temporary replication slots can only be created by a replication connection here",
            ));
        }
        let ctx = self.xact.xlog.context();
        let (shm, dir, fsync) = (self.shm, &ctx.datadir, ctx.settings.fsync);
        let lsn = crate::slots::create(shm, dir, name, false, immediately_reserve, fsync)?;
        Ok(immediately_reserve.then_some(lsn))
    }

    fn system_view(&mut self, name: &str) -> Option<protocol::SystemView> {
        let dir = &self.xact.xlog.context().datadir;
        match name {
            "pg_replication_slots" => Some((
                crate::slots::PG_REPLICATION_SLOTS,
                crate::slots::pg_replication_slots(self.shm, dir),
            )),
            "pg_stat_replication" => Some((
                crate::syncrep::PG_STAT_REPLICATION,
                crate::syncrep::pg_stat_replication(self.shm),
            )),
            _ => None,
        }
    }

    fn drop_replication_slot(&mut self, name: &str) -> Result<(), SqlError> {
        let dir = &self.xact.xlog.context().datadir;
        crate::slots::drop_slot(self.shm, dir, name, false)
    }

    fn termination(&self) -> Option<Termination> {
        shutdown_requested().then_some(Termination::FastShutdown)
    }

    fn take_cancel(&mut self) -> bool {
        CANCEL_REQUESTED.swap(false, Ordering::Relaxed)
    }

    fn memory_limit(&self) -> usize {
        usize::try_from(self.shm.settings().session_memory_limit).unwrap_or(usize::MAX)
    }

    fn server_setting(&self, name: &str) -> Option<String> {
        self.shm.settings().show(name)
    }
}

/// How the client reached us.
pub enum Peer {
    Unix,
    Tcp,
}

/// Credentials of a Unix-socket peer (SO_PEERCRED).
fn peer_uid(fd: i32) -> Option<u32> {
    // SAFETY: an all-zero ucred is a valid value for getsockopt to fill.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid out-pointers of the right size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    (r == 0).then_some(cred.uid)
}

/// A nonzero random cancel key; None when the kernel cannot give random
/// bytes (the connection is then refused rather than given a guessable key).
fn random_key() -> Option<u32> {
    for _ in 0..16 {
        let mut b = [0u8; 4];
        // SAFETY: `b` is a writable 4-byte buffer.
        let n = unsafe { libc::getrandom(b.as_mut_ptr() as *mut libc::c_void, 4, 0) };
        if n == 4 {
            match u32::from_le_bytes(b) {
                0 => continue,
                key => return Some(key),
            }
        }
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return None;
        }
    }
    None
}

/// Does proc slot `p` belong to a live connection backend whose key is
/// `key`? Key 0 (free, worker and auxiliary slots) never matches.
fn cancel_matches(p: &shmem::proc::Proc, pid: i32, key: u32) -> bool {
    let slot_key = p.cancel_key.load(Ordering::Relaxed);
    let key_ok = protocol::constant_time_eq(&slot_key.to_ne_bytes(), &key.to_ne_bytes());
    pid > 0 && key != 0 && slot_key != 0 && p.pid.load(Ordering::Relaxed) == pid && key_ok
}

/// Sends a CancelRequest on to the backend it names, if the key matches;
/// anything else is ignored.
fn forward_cancel(shm: &Shmem, pid: i32, key: i32) {
    let backends = &shm.procs()[..shm.layout().max_backends as usize];
    if backends.iter().any(|p| cancel_matches(p, pid, key as u32)) {
        // SAFETY: kill has no memory effects; pid > 0 names one process.
        unsafe { libc::kill(pid, libc::SIGINT) };
    }
}

/// A connection backend's whole life; returns the exit code.
pub fn run_connection<S: Read + Write + AsRawFd>(
    shm: &Shmem,
    datadir: &Path,
    mut stream: S,
    peer: Peer,
    password: Option<String>,
) -> i32 {
    process::enable_cancel_signal();
    let fd = stream.as_raw_fd();
    // Reads and writes return every 200 ms so that a blocked one notices
    // a fast shutdown (protocol::serve polls termination on each timeout).
    set_socket_timeout(fd, libc::SO_RCVTIMEO, 200);
    set_socket_timeout(fd, libc::SO_SNDTIMEO, 200);
    process::set_quit_message(fd, protocol::crash_notice_bytes());
    let pid = std::process::id() as i32;
    let Some(key) = random_key() else {
        log("FATAL", "could not generate a cancel key: no random bytes");
        return process::EXIT_FATAL;
    };
    let transport = match peer {
        Peer::Unix => protocol::Transport::Unix {
            peer_uid: peer_uid(fd),
            // SAFETY: geteuid has no preconditions.
            server_uid: unsafe { libc::geteuid() },
        },
        Peer::Tcp => protocol::Transport::Tcp,
    };
    let params = protocol::ServerParams::new(pid, key as i32, password);
    // A replication connection takes its walsender entry before the
    // greeting (FATAL 53300 beyond max_wal_senders, as PostgreSQL).
    let mut walsender = None;
    let mut admit = |info: &protocol::StartupInfo| {
        if info.replication.is_some() {
            walsender = Some(walsender::claim(shm, &info.application_name)?);
        }
        Ok(())
    };
    let started = protocol::startup_with(&mut stream, &transport, &params, &mut admit);
    let info = match started {
        Ok(protocol::Startup::Ready(info)) => info,
        Ok(protocol::Startup::Cancel { pid, key }) => {
            forward_cancel(shm, pid, key);
            return 0;
        }
        Ok(protocol::Startup::Rejected) | Err(_) => {
            if let Some(me) = walsender {
                walsender::release(shm, me);
            }
            return 0;
        }
    };
    // Authenticated: from here on the session counts against
    // max_connections (its proc slot), not against the start-up deadline.
    process::disarm_startup_timeout();
    if let Some(me) = walsender {
        return walsender::run(shm, datadir, stream, &info, me);
    }
    let Some(procno) = shm.alloc_backend_proc() else {
        let e = SqlError::fatal(
            sqlstate::TOO_MANY_CONNECTIONS,
            "sorry, too many clients already",
        );
        let _ = protocol::send_error_after_startup(&mut stream, &e);
        return 0;
    };
    let me = &shm.procs()[procno as usize];
    me.counters.reset();
    me.cancel_key.store(key, Ordering::Relaxed);
    // Relaxed: `cancel_matches` reads pid and key with no order between
    // them, and a slot seen with its pid but not yet its key has key 0,
    // which never matches.
    me.pid.store(pid, Ordering::Relaxed);
    let ctx = ProcContext::new(shm, procno, datadir);
    let mut session = WalSession::new(&ctx);
    if let Some(on) = info.synchronous_commit {
        session.set_synchronous_commit(on);
    }
    let mut stream = PollingStream::new(stream, shm);
    if let Err(e) = protocol::serve(&mut stream, &mut session) {
        if e.kind() != std::io::ErrorKind::BrokenPipe
            && e.kind() != std::io::ErrorKind::ConnectionReset
        {
            log("LOG", &format!("connection ended: {e}"));
        }
    }
    session.close();
    me.cancel_key.store(0, Ordering::Relaxed);
    shm.free_backend_proc(procno);
    0
}

fn set_socket_timeout(fd: i32, option: libc::c_int, ms: i64) {
    let tv = libc::timeval {
        tv_sec: ms / 1000,
        tv_usec: (ms % 1000) * 1000,
    };
    // SAFETY: `tv` is a valid timeval for SO_RCVTIMEO / SO_SNDTIMEO.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            &tv as *const libc::timeval as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
}
