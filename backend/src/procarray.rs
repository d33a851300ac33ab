//! Transaction ids and the ProcArray (PostgreSQL's varsup.c and
//! procarray.c, reduced to what a log needs).
//!
//! - `assign_xid`: under XidGenLock, take `next_full_xid`, skip the special
//!   XIDs 0..=2 on wraparound, and publish the XID in our proc *before*
//!   releasing XidGenLock, so that no snapshot can see a later XID as
//!   assigned while missing ours.
//! - `snapshot`: under ProcArrayLock shared, xmax = latestCompletedXid + 1;
//!   every member's XID below xmax is running; xmin the oldest of them.
//! - `end_transaction`: clear our XID and advance latestCompletedXid under
//!   ProcArrayLock exclusive. Two variants (seed 004):
//!   - `exclusive`: every backend takes the lock itself;
//!   - `group` (default): if the lock is not free at once, push ourselves on
//!     an atomic list (`group_first`, linked by proc number); the backend that
//!     found the list empty becomes the leader, takes the lock once, clears
//!     every member's XID, and wakes each through its semaphore. Followers
//!     sleep until their `group_clear_member` flag drops, absorbing and
//!     re-posting unrelated wake-ups (the semaphore is shared with LWLock
//!     waits).
//!
//! Invariant: once `end_transaction` returns, no snapshot taken afterwards
//! shows our XID as running (the clear happened under ProcArrayLock
//! exclusive, which a snapshot's shared acquisition orders after).

use crate::context::ProcContext;
use shmem::groupclear::{group_clear, GroupRole};
use shmem::lwlock::LWLockMode;
use shmem::proc::Proc;
use shmem::segment::NamedLock;
use shmem::stats::bump;
use shmem::sync::Ordering;
use shmem::variants::XidClear;
use shmem::Shmem;

/// PostgreSQL's FirstNormalTransactionId.
pub const FIRST_NORMAL_XID: u32 = 3;

/// `a` precedes `b` in modulo-2^32 XID order (TransactionIdPrecedes).
pub fn xid_precedes(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// A snapshot: XIDs running when it was taken.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub xmin: u32,
    pub xmax: u32,
    pub running: Vec<u32>,
}

impl Snapshot {
    /// Would this snapshot consider `xid` still running?
    pub fn is_running(&self, xid: u32) -> bool {
        !xid_precedes(xid, self.xmax) || self.running.contains(&xid)
    }
}

/// One process's handle on the ProcArray; borrows the process's context
/// (its proc slot and lock context).
pub struct ProcArray<'a> {
    ctx: &'a ProcContext<'a>,
    shm: &'a Shmem,
    me: u32,
    proc: &'a Proc,
    clear: XidClear,
}

impl<'a> ProcArray<'a> {
    pub fn new(ctx: &'a ProcContext<'a>) -> Self {
        ProcArray {
            ctx,
            shm: ctx.shm,
            me: ctx.procno,
            proc: ctx.me,
            clear: ctx.settings.xid_clear,
        }
    }

    /// Adds our proc to the ProcArray (backend start).
    pub fn join(&self) {
        let env = &self.ctx.env;
        let lock = self.shm.named_lock(NamedLock::ProcArray);
        lock.acquire(env, LWLockMode::Exclusive);
        let pa = self.shm.proc_array();
        let n = pa.num_members.load(Ordering::Relaxed) as usize;
        self.shm.proc_array_members()[n].store(self.me, Ordering::Relaxed);
        pa.num_members.store(n as u32 + 1, Ordering::Relaxed);
        lock.release(env);
    }

    /// Removes our proc from the ProcArray (backend exit).
    pub fn leave(&self) {
        self.leave_of(self.me);
    }

    /// Removes proc `procno` from the ProcArray (our own at exit, or a
    /// dead process's in its clean-up); nothing if it is not a member.
    pub fn leave_of(&self, procno: u32) {
        let env = &self.ctx.env;
        let lock = self.shm.named_lock(NamedLock::ProcArray);
        lock.acquire(env, LWLockMode::Exclusive);
        let pa = self.shm.proc_array();
        let members = self.shm.proc_array_members();
        let n = pa.num_members.load(Ordering::Relaxed) as usize;
        if let Some(i) = (0..n).find(|&i| members[i].load(Ordering::Relaxed) == procno) {
            members[i].store(members[n - 1].load(Ordering::Relaxed), Ordering::Relaxed);
            pa.num_members.store(n as u32 - 1, Ordering::Relaxed);
        }
        lock.release(env);
    }

    /// Assigns a new top-level XID, publishes it in our proc, and returns
    /// its full (epoch-extended) form.
    pub fn assign_xid(&self) -> u64 {
        let env = &self.ctx.env;
        let lock = self.shm.named_lock(NamedLock::XidGen);
        let xs = self.shm.xid_state();
        lock.acquire(env, LWLockMode::Exclusive);
        let mut full = xs.next_full_xid.load(Ordering::Relaxed);
        if (full as u32) < FIRST_NORMAL_XID {
            // Wrapped into the special XIDs: skip them.
            full += (FIRST_NORMAL_XID - full as u32) as u64;
        }
        xs.next_full_xid.store(full + 1, Ordering::Relaxed);
        let xid = full as u32;
        // Published before XidGenLock is released (the release orders it
        // before any later assignment a snapshot could see).
        self.proc.xid.store(xid, Ordering::Relaxed);
        crate::stoppoint::reached("xid_assign");
        lock.release(env);
        full
    }

    /// Takes a snapshot under ProcArrayLock shared (GetSnapshotData).
    pub fn snapshot(&self, into: &mut Snapshot) {
        let env = &self.ctx.env;
        let lock = self.shm.named_lock(NamedLock::ProcArray);
        let pa = self.shm.proc_array();
        let members = self.shm.proc_array_members();
        let procs = self.shm.procs();
        lock.acquire(env, LWLockMode::Shared);
        let latest = pa.latest_completed_xid.load(Ordering::Relaxed) as u32;
        let xmax = latest.wrapping_add(1).max(FIRST_NORMAL_XID);
        let mut xmin = xmax;
        into.running.clear();
        let n = pa.num_members.load(Ordering::Relaxed) as usize;
        for m in &members[..n] {
            let p = &procs[m.load(Ordering::Relaxed) as usize];
            // Relaxed: XIDs are published before XidGenLock/ProcArrayLock
            // releases that our shared acquisition is ordered after; a
            // concurrently assigned one is >= xmax and so not "running".
            let xid = p.xid.load(Ordering::Relaxed);
            if xid != 0 && xid_precedes(xid, xmax) {
                into.running.push(xid);
                if xid_precedes(xid, xmin) {
                    xmin = xid;
                }
            }
        }
        lock.release(env);
        into.xmin = xmin;
        into.xmax = xmax;
    }

    /// Clears our XID at transaction end (ProcArrayEndTransaction).
    pub fn end_transaction(&self, xid: u32) {
        let env = &self.ctx.env;
        let lock = self.shm.named_lock(NamedLock::ProcArray);
        let c = &self.shm.proc_stats(self.me).counters.flat;
        match self.clear {
            XidClear::Exclusive => {
                lock.acquire(env, LWLockMode::Exclusive);
                bump(&c.procarray_lock_acquisitions, 1);
                self.clear_locked(self.proc, xid);
                lock.release(env);
            }
            XidClear::Group => {
                if lock.conditional_acquire(env, LWLockMode::Exclusive) {
                    bump(&c.procarray_lock_acquisitions, 1);
                    self.clear_locked(self.proc, xid);
                    lock.release(env);
                } else if let GroupRole::Leader(n) = self.group_clear(xid) {
                    bump(&c.procarray_lock_acquisitions, 1);
                    bump(&c.group_clear_groups, 1);
                    bump(&c.group_clear_members, n as u64);
                }
            }
        }
        // Counted once cleared, like the acquisitions (so a window's edge
        // cuts both alike).
        bump(&c.xid_clears, 1);
    }

    /// Clears the XIDs of other procs' transactions, `(procno, xid)`, under
    /// one ProcArrayLock acquisition: the walwriter ends the transactions
    /// whose commit replies it sends (`crate::reply`), once they are
    /// durable and before their clients hear of it.
    pub fn end_transactions_of(&self, ended: &[(u32, u32)]) {
        let env = &self.ctx.env;
        let lock = self.shm.named_lock(NamedLock::ProcArray);
        let procs = self.shm.procs();
        let c = &self.shm.proc_stats(self.me).counters.flat;
        lock.acquire(env, LWLockMode::Exclusive);
        for &(procno, xid) in ended {
            self.clear_locked(&procs[procno as usize], xid);
        }
        lock.release(env);
        bump(&c.procarray_lock_acquisitions, 1);
        bump(&c.xid_clears, ended.len() as u64);
    }

    /// Caller holds ProcArrayLock exclusively.
    fn clear_locked(&self, p: &Proc, xid: u32) {
        p.xid.store(0, Ordering::Relaxed);
        let pa = self.shm.proc_array();
        let latest = pa.latest_completed_xid.load(Ordering::Relaxed);
        if latest == 0 || xid_precedes(latest as u32, xid) {
            pa.latest_completed_xid.store(xid as u64, Ordering::Relaxed);
        }
    }

    /// ProcArrayGroupClearXid (the protocol lives in shmem::groupclear,
    /// where loom checks it).
    fn group_clear(&self, xid: u32) -> GroupRole {
        let env = &self.ctx.env;
        let pa = self.shm.proc_array();
        let lock = self.shm.named_lock(NamedLock::ProcArray);
        group_clear(env, lock, &pa.group_first, xid, |p, x| {
            self.clear_locked(p, x)
        })
    }
}

/// Startup: restore the XID counter from the control file and the highest
/// XID recovery saw.
/// Whether at least `min` processes other than `me` have an XID
/// (PostgreSQL's MinimumActiveBackends, for commit_siblings): read without
/// ProcArrayLock, a hint only.
pub fn others_in_transaction(shm: &Shmem, me: u32, min: u32) -> bool {
    let active = assigned_xids(shm).filter(|&(procno, _)| procno != me);
    // min = 0: always true, as PostgreSQL's (commit_siblings = 0 means
    // commit_delay applies whatever else is running).
    active.take(min as usize).count() == min as usize
}

/// (proc number, XID) of every ProcArray member with an XID, read without
/// ProcArrayLock (Relaxed loads): what a caller makes of it must hold for
/// a racy answer (a hint, or re-checked).
pub fn assigned_xids(shm: &Shmem) -> impl Iterator<Item = (u32, u32)> + '_ {
    let members = shm.proc_array_members();
    let procs = shm.procs();
    let n = (shm.proc_array().num_members.load(Ordering::Relaxed) as usize).min(members.len());
    members[..n].iter().filter_map(move |m| {
        let procno = m.load(Ordering::Relaxed);
        let xid = procs.get(procno as usize)?.xid.load(Ordering::Relaxed);
        (xid != 0).then_some((procno, xid))
    })
}

pub fn restore_next_xid(shm: &Shmem, control_next: u64, max_seen: u32) {
    let mut next = control_next.max(FIRST_NORMAL_XID as u64);
    if max_seen != 0 {
        let epoch = next & !0xFFFF_FFFF;
        let mut candidate = epoch | (max_seen as u64 + 1);
        if candidate < next && xid_precedes(next as u32, max_seen.wrapping_add(1)) {
            candidate += 1 << 32;
        }
        next = next.max(candidate);
    }
    shm.xid_state().next_full_xid.store(next, Ordering::Relaxed);
    shm.proc_array()
        .latest_completed_xid
        .store(next - 1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xid_order_wraps() {
        assert!(xid_precedes(3, 4));
        assert!(!xid_precedes(4, 3));
        assert!(xid_precedes(u32::MAX - 1, 5));
        let s = Snapshot {
            xmin: 5,
            xmax: 10,
            running: vec![5, 7],
        };
        assert!(s.is_running(7) && s.is_running(10) && s.is_running(11));
        assert!(!s.is_running(6));
    }
}
