//! Admission of clients: whether an accepted connection gets a backend,
//! and how a refusal reaches the client. What a hostile client can make
//! the postmaster do is bounded here:
//!
//! - a connection child has `authentication_timeout` for its whole start-up
//!   and authentication exchange, then exits with EXIT_FATAL (not a crash);
//!   rejecter children run under the same deadline;
//! - authenticated sessions (connection children holding a backend proc
//!   slot: `Shmem::sessions`, an atomic read) count against
//!   `max_connections`; the others are counted apart and capped at
//!   [`unauthenticated_cap`], so clients that never authenticate cannot make
//!   a normal login fail with 53300;
//! - a refusal forks a rejecter only while fewer than [`MAX_REJECTERS`]
//!   live; beyond that the postmaster writes the pre-encoded FATAL itself
//!   (one non-blocking send, [`refuse_here`]) and closes the socket:
//!   refusals cost no unbounded forks;
//! - right after `fork` every child closes the descriptors it does not own
//!   (listening sockets, self-pipe, the other clients of the same accept
//!   batch), keeping only 0, 1, 2 and its own client socket
//!   (`children::fork_process`).
//!
//! [`judge`] is a pure function of what the supervisor knows (its state and
//! its children), so the caps are tested without a server.

use crate::listen::Accepted;
use backend::process::become_child;
use shmem::{Settings, Shmem};
use std::path::Path;

/// Live rejecter children at most; beyond, the postmaster refuses itself.
pub(crate) const MAX_REJECTERS: usize = 8;

const TOO_MANY: &str = "sorry, too many clients already";

/// Connection children that have not authenticated yet, at most.
pub(crate) fn unauthenticated_cap(max_connections: u32) -> usize {
    2 * max_connections as usize + 16
}

/// Where the server is, as far as clients care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    StartingUp,
    Running,
    /// Restarting after a crash, or stopping.
    Recovering,
    ShuttingDown,
}

/// The server's load at the moment a client is accepted.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Load {
    pub phase: Phase,
    /// Live connection children (authenticated or not).
    pub connections: usize,
    /// Authenticated sessions (backend proc slots held by clients).
    pub sessions: usize,
    /// Live rejecter children.
    pub rejecters: usize,
    pub max_connections: u32,
}

/// What to do with an accepted client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Fork a connection backend.
    Admit,
    /// Fork a rejecter that reads the start-up packet, then sends this.
    RefuseByChild(&'static str),
    /// Too many rejecters live: send this from the postmaster and close.
    RefuseHere(&'static str),
}

/// Decides the fate of the next accepted client.
pub(crate) fn judge(load: &Load) -> Verdict {
    let why = match load.phase {
        Phase::ShuttingDown => "the database system is shutting down",
        Phase::StartingUp => "the database system is starting up",
        Phase::Recovering => "the database system is in recovery mode",
        Phase::Running if is_full(load) => TOO_MANY,
        Phase::Running => return Verdict::Admit,
    };
    if load.rejecters < MAX_REJECTERS {
        Verdict::RefuseByChild(why)
    } else {
        Verdict::RefuseHere(why)
    }
}

fn is_full(load: &Load) -> bool {
    let authenticated = load.sessions.min(load.connections);
    let unauthenticated = load.connections - authenticated;
    authenticated >= load.max_connections as usize
        || unauthenticated >= unauthenticated_cap(load.max_connections)
}

/// The FATAL error of a refusal: 53300 at the connection limits, 57P03
/// while the server cannot accept connections.
fn refusal_error(msg: &str) -> protocol::SqlError {
    let code = if msg == TOO_MANY {
        protocol::sqlstate::TOO_MANY_CONNECTIONS
    } else {
        protocol::sqlstate::CANNOT_CONNECT_NOW
    };
    protocol::SqlError::fatal(code, msg.to_string())
}

/// Refuses a client from the postmaster itself: a best-effort
/// non-blocking send of the FATAL; the socket closes when `conn` drops.
pub(crate) fn refuse_here(conn: Accepted, why: &str) {
    let bytes = protocol::error_response_bytes(&refusal_error(why));
    // The socket stays open until `conn` drops at the end of this function.
    let _ = shmem::sys::sock::send(conn.raw_fd(), &bytes, true);
}

/// The body of a forked client child: a connection backend, or (with
/// `refusal`) a rejecter that reads the start-up packet and sends that
/// FATAL message. Returns the exit code.
pub(crate) fn run_client_child(
    shm: &Shmem,
    datadir: &Path,
    settings: &Settings,
    conn: Accepted,
    refusal: Option<&str>,
    postmaster_pid: i32,
) -> i32 {
    use connection::{run_connection, Peer};
    become_child("backend", postmaster_pid);
    // The session runs with what the postmaster's last reload gave it.
    shm.adopt_reloaded_settings(settings);
    backend::process::arm_startup_timeout(settings.authentication_timeout_s);
    let verifier = |v: &str| Some(v.to_string()).filter(|v| !v.is_empty());
    let password = verifier(settings.password.as_str());
    let repl = verifier(settings.replication_password.as_str());
    match (conn, refusal) {
        (Accepted::Unix(mut s), Some(msg)) => reject(&mut s, msg),
        (Accepted::Tcp(mut s), Some(msg)) => reject(&mut s, msg),
        (Accepted::Unix(s), None) => run_connection(shm, datadir, s, Peer::Unix, password, repl),
        (Accepted::Tcp(s), None) => run_connection(shm, datadir, s, Peer::Tcp, password, repl),
    }
}

/// Sends a client a FATAL 57P03 (or 53300) after reading its start-up
/// packet; returns the exit code.
fn reject<S: std::io::Read + std::io::Write>(s: &mut S, msg: &str) -> i32 {
    let _ = protocol::reject_with(s, &refusal_error(msg));
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(connections: usize, sessions: usize, rejecters: usize) -> Load {
        Load {
            phase: Phase::Running,
            connections,
            sessions,
            rejecters,
            max_connections: 4,
        }
    }

    #[test]
    fn admits_below_both_caps() {
        assert_eq!(judge(&running(0, 0, 0)), Verdict::Admit);
        assert_eq!(judge(&running(3, 3, 0)), Verdict::Admit);
        // Unauthenticated children below their own cap do not count
        // against max_connections.
        assert_eq!(judge(&running(23, 0, 0)), Verdict::Admit);
    }

    #[test]
    fn refuses_at_max_connections_or_the_unauthenticated_cap() {
        assert_eq!(judge(&running(4, 4, 0)), Verdict::RefuseByChild(TOO_MANY));
        assert_eq!(unauthenticated_cap(4), 24);
        assert_eq!(judge(&running(24, 0, 0)), Verdict::RefuseByChild(TOO_MANY));
        // More sessions than children (a session counted before its child
        // was reaped) never underflows.
        assert_eq!(judge(&running(2, 9, 0)), Verdict::Admit);
    }

    #[test]
    fn refuses_by_phase_and_from_the_postmaster_beyond_max_rejecters() {
        let mut l = running(0, 0, MAX_REJECTERS - 1);
        for (phase, word) in [
            (Phase::StartingUp, "starting up"),
            (Phase::Recovering, "recovery mode"),
            (Phase::ShuttingDown, "shutting down"),
        ] {
            l.phase = phase;
            let Verdict::RefuseByChild(why) = judge(&l) else {
                panic!("{phase:?} admitted")
            };
            assert!(why.contains(word), "{phase:?}: {why}");
        }
        l.rejecters = MAX_REJECTERS;
        assert!(matches!(judge(&l), Verdict::RefuseHere(_)));
    }

    #[test]
    fn refusal_sqlstates() {
        assert_eq!(
            refusal_error(TOO_MANY).code,
            protocol::sqlstate::TOO_MANY_CONNECTIONS
        );
        assert_eq!(
            refusal_error("the database system is starting up").code,
            protocol::sqlstate::CANNOT_CONNECT_NOW
        );
    }
}
