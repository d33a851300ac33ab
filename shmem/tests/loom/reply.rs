//! Loom models of the commit-reply hand-off (`commit_reply = flusher`,
//! `shmem::proc::ReplySlot`) over the same `Proc` slot the
//! runtime uses. The owner (a backend) hands its reply off, then settles
//! it (as before reading its next message): it sets `waiting`, looks at the
//! state again and sleeps on its semaphore; the flusher (the walwriter)
//! claims the reply once its flush covers the commit, "sends" it and
//! finishes it, posting the owner if it waits. Loom explores every
//! interleaving and checks:
//! - the owner never sleeps forever (loom reports a deadlock otherwise):
//!   no lost wake-up between `settle_step`'s look and `finish`;
//! - the flusher posts at most once (the semaphore count left is 0 or 1);
//! - the owner sees the bytes the flusher did not send (RETURNED), and the
//!   flusher sees the bytes the owner handed off (Release/Acquire);
//! - the flusher never claims a reply whose commit its flush does not
//!   cover.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p shmem --release --test loom reply::`.
#![cfg(loom)]

use loom::sync::Arc;
use shmem::proc::{Proc, Settled, REPLY_EMPTY};
use shmem::sync::{AtomicU64, Ordering};

const REPLY: &[u8] = b"C-COMMIT-Z";
const LSN: u64 = 100;

struct World {
    owner: Proc,
    flushed: AtomicU64,
}

/// The owner: hands off, then settles; returns what settling found.
fn owner(w: &World) -> Settled {
    let r = &w.owner.reply;
    r.prepare(LSN, 7);
    r.hand_off(REPLY);
    loop {
        match r.settle_step() {
            Settled::Busy => w.owner.sem.wait(),
            other => return other,
        }
    }
}

/// The flusher: flushes (to `LSN`), then claims, checks the bytes, sends
/// `sent` of them and finishes.
fn flusher(w: &World, sent: usize) {
    let r = &w.owner.reply;
    assert_eq!(
        r.claim(LSN - 1),
        None,
        "claimed a commit the flush does not cover"
    );
    w.flushed.store(LSN, Ordering::Release);
    let xid = loop {
        if let Some(x) = r.claim(w.flushed.load(Ordering::Acquire)) {
            break x;
        }
        loom::thread::yield_now();
    };
    assert_eq!(xid, 7);
    let mut bytes = Vec::new();
    r.copy_bytes(0, &mut bytes);
    assert_eq!(bytes, REPLY, "the flusher saw other bytes than handed off");
    if r.finish(sent) {
        w.owner.sem.post();
    }
}

fn run(sent: usize) -> (Settled, Vec<u8>) {
    let w = Arc::new(World {
        owner: Proc::new(0),
        flushed: AtomicU64::new(0),
    });
    let f = {
        let w = w.clone();
        loom::thread::spawn(move || flusher(&w, sent))
    };
    let settled = owner(&w);
    f.join().unwrap();
    assert!(w.owner.sem.count() <= 1, "posted twice");
    assert_eq!(w.owner.reply.state(), REPLY_EMPTY);
    let mut rest = Vec::new();
    if let Settled::Returned(n) = settled {
        w.owner.reply.copy_bytes(n, &mut rest);
    }
    (settled, rest)
}

#[test]
fn a_sent_reply_is_settled_without_a_lost_wakeup() {
    loom::model(|| {
        let (settled, _) = run(REPLY.len());
        assert_eq!(settled, Settled::Done);
    });
}

#[test]
fn a_short_send_returns_the_rest_to_the_owner() {
    loom::model(|| {
        let (settled, rest) = run(4);
        assert_eq!(settled, Settled::Returned(4));
        assert_eq!(rest, &REPLY[4..]);
    });
}
