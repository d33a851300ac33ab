//! Group XID clear (seed 004, PostgreSQL's ProcArrayGroupClearXid): many
//! backends ending transactions at once share one exclusive acquisition of
//! ProcArrayLock.
//!
//! Protocol:
//! 1. a backend that could not take the lock at once records the XID to
//!    clear in its proc, sets `group_clear_member`, and pushes its proc
//!    number on the lock-free list `head` (compare-exchange loop; the list
//!    is linked through `group_clear_next`);
//! 2. if the list was non-empty, a leader exists or is about to: sleep on
//!    the proc semaphore until `group_clear_member` drops to 0, absorbing
//!    (and afterwards re-posting) wake-ups meant for something else;
//! 3. the backend that found the list empty is the leader: it takes the
//!    lock exclusively, detaches the whole list with one swap, clears every
//!    member's XID (`clear` callback) including its own, releases the lock,
//!    then for each follower reads its `next` link, resets it, stores
//!    `group_clear_member = 0` (Release) and posts its semaphore.
//!
//! Race defended against: a follower reusing its proc fields (next
//! transaction) while the leader still walks the list — the leader reads
//! each link before releasing that member. An empty list is
//! INVALID_PROCNO, never 0, since 0 is a valid proc number.
//!
//! Ended generations (a library process, whose `LockEnv` has a generation
//! flag; see `lwlock`'s module header): a follower whose leader was killed
//! would sleep forever. The postmaster marks the generation ended and then
//! posts every proc's semaphore; the follower checks the flag after each
//! wake-up and, once it is set, counts its clear as done (and the wait as
//! cut short, so the library call fails with `ServerRestarted`). Sound
//! because nothing in an ended generation reaches disk: its ProcArray is
//! never read again.

use crate::crit::IN_GROUP_CLEAR;
use crate::lwlock::{LWLock, LWLockMode, LockEnv};
use crate::proc::{Proc, INVALID_PROCNO};
use crate::sync::{AtomicU32, Ordering};
use crate::waitevent;

/// What this backend did in a group clear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupRole {
    /// Cleared `n` XIDs (its own included) under one acquisition.
    Leader(u32),
    /// A leader cleared our XID.
    Follower,
}

/// Clears `xid` of the calling proc through the group protocol. `clear`
/// runs with `lock` held exclusively, once per member.
pub fn group_clear(
    env: &LockEnv,
    lock: &LWLock,
    head: &AtomicU32,
    xid: u32,
    mut clear: impl FnMut(&Proc, u32),
) -> GroupRole {
    let me = &env.procs[env.me as usize];
    // On the list or leading it, from the first store to the last wake-up
    // (`crit`: a death in between is a crash restart).
    me.crit.enter(IN_GROUP_CLEAR);
    let role = clear_as_member_or_leader(env, me, lock, head, xid, &mut clear);
    me.crit.exit(IN_GROUP_CLEAR);
    role
}

fn clear_as_member_or_leader(
    env: &LockEnv,
    me: &Proc,
    lock: &LWLock,
    head: &AtomicU32,
    xid: u32,
    clear: &mut impl FnMut(&Proc, u32),
) -> GroupRole {
    me.group_clear_xid.store(xid, Ordering::Relaxed);
    me.group_clear_member.store(1, Ordering::Relaxed);
    // Release: our fields are visible to the leader that detaches the list
    // (pairs with its Acquire swap).
    let mut first = head.load(Ordering::Relaxed);
    loop {
        me.group_clear_next.store(first, Ordering::Relaxed);
        match head.compare_exchange_weak(first, env.me, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => break,
            Err(h) => first = h,
        }
    }
    if first != INVALID_PROCNO {
        wait_for_leader(env, me);
        return GroupRole::Follower;
    }
    lock.acquire(env, LWLockMode::Exclusive);
    // Acquire pairs with the members' Release pushes.
    let list = head.swap(INVALID_PROCNO, Ordering::Acquire);
    let mut n = 0;
    let mut cur = list;
    while cur != INVALID_PROCNO {
        let p = &env.procs[cur as usize];
        clear(p, p.group_clear_xid.load(Ordering::Relaxed));
        n += 1;
        cur = p.group_clear_next.load(Ordering::Relaxed);
    }
    lock.release(env);
    wake_members(env, list);
    GroupRole::Leader(n)
}

fn wait_for_leader(env: &LockEnv, me: &Proc) {
    let mut extra = 0;
    let prev = waitevent::swap_on(&me.wait_event_info, waitevent::PROCARRAY_GROUP_UPDATE);
    loop {
        me.sem.wait();
        // Acquire pairs with the leader's Release store of 0.
        if me.group_clear_member.load(Ordering::Acquire) == 0 {
            break;
        }
        // After every wake-up (the postmaster posts after marking the
        // generation ended; see the module header). Not counted: that
        // post was for this.
        if env.generation_ended_wait_over() {
            break;
        }
        extra += 1;
    }
    waitevent::swap_on(&me.wait_event_info, prev);
    for _ in 0..extra {
        me.sem.post();
    }
}

fn wake_members(env: &LockEnv, list: u32) {
    let mut cur = list;
    while cur != INVALID_PROCNO {
        let p = &env.procs[cur as usize];
        // Read the link before the member may run and reuse it.
        let next = p.group_clear_next.load(Ordering::Relaxed);
        p.group_clear_next.store(INVALID_PROCNO, Ordering::Relaxed);
        // Release pairs with the Acquire load in `wait_for_leader`.
        p.group_clear_member.store(0, Ordering::Release);
        if cur != env.me {
            p.sem.post();
        }
        cur = next;
    }
}
