//! Variable waits (WAL insertion locks; see "Variable waits" in the module
//! header of `lwlock`): an exclusive holder publishes a 64-bit progress
//! value; `wait_for_var` waits until the lock is free or the value differs
//! from what the caller saw, `update_var` publishes and wakes
//! WAIT_UNTIL_FREE waiters without releasing, `release_clear_var` sets the
//! value and releases.
//!
//! Invariants: with `VarAccess::Atomic` the value is published with a
//! full barrier (`update_var`) or a Release store before the lock is seen
//! free (`release_clear_var`), and read with Acquire; with
//! `VarAccess::WaitListLock` it is read and written only under the
//! wait-list lock. A waiter in an ended generation counts the lock `Free`.

use super::{LWLock, LWLockMode, LockEnv, State, VarWait, Woken, LW_FLAG_RELEASE_OK};
use crate::crit::LWLOCK;
use crate::proc::INVALID_PROCNO;
use crate::sync::{AtomicU64, Ordering};
use crate::variants::VarAccess;

impl LWLock {
    /// Reads `var` as the variant requires.
    fn read_var(&self, env: &LockEnv, var: &AtomicU64) -> u64 {
        match env.var_access {
            // Acquire pairs with the swap in `update_var` and the Release
            // store in `release_clear_var`:
            // WAL the holder copied before advertising is visible.
            VarAccess::Atomic => var.load(Ordering::Acquire),
            VarAccess::WaitListLock => {
                let locked = self.wait_list_lock(env);
                let v = var.load(Ordering::Relaxed);
                if locked {
                    self.wait_list_unlock();
                }
                v
            }
        }
    }

    /// None if no wait is needed (Some(Free) / Some(Changed)), or None
    /// when the holder still has the lock and `var == oldval`.
    fn conflicts_with_var(&self, env: &LockEnv, var: &AtomicU64, oldval: u64) -> Option<VarWait> {
        // Acquire pairs with the Release fetch_sub in `release`.
        if !State(self.state.load(Ordering::Acquire)).is_exclusive() {
            return Some(VarWait::Free);
        }
        let v = self.read_var(env, var);
        if v != oldval {
            Some(VarWait::Changed(v))
        } else {
            None
        }
    }

    /// Waits until the lock is free or `var` differs from `oldval`.
    pub fn wait_for_var(&self, env: &LockEnv, var: &AtomicU64, oldval: u64) -> VarWait {
        env.crit().enter(LWLOCK);
        let mut extra = 0;
        let result = loop {
            if let Some(r) = self.conflicts_with_var(env, var, oldval) {
                break r;
            }
            if !self.queue_self(env, LWLockMode::WaitUntilFree) {
                // The generation ended: count the holder as finished.
                env.cut_short();
                break VarWait::Free;
            }
            self.state.fetch_or(LW_FLAG_RELEASE_OK, Ordering::Relaxed);
            if let Some(r) = self.conflicts_with_var(env, var, oldval) {
                extra += self.dequeue_self(env);
                break r;
            }
            match env.sleep_until_woken(self) {
                Woken::ByWaker(n) => extra += n,
                Woken::Ended(n) => {
                    extra += n;
                    env.cut_short();
                    break VarWait::Free;
                }
            }
        };
        env.repost(extra);
        env.crit().exit(LWLOCK);
        result
    }

    /// Publishes `val` in `var` and wakes WAIT_UNTIL_FREE waiters. The
    /// caller holds the lock exclusively.
    pub fn update_var(&self, env: &LockEnv, var: &AtomicU64, val: u64) {
        env.crit().enter(LWLOCK);
        if env.var_access == VarAccess::Atomic {
            // A full barrier: the value is visible before we look for
            // waiters (pairs with the Acquire load in `read_var`).
            var.swap(val, Ordering::AcqRel);
            // No "nobody waits" fast exit here: it would need a store-load
            // fence pairing with the waiter's HAS_WAITERS store (PostgreSQL
            // discussed it separately); page crossings are rare enough.
        }
        let mut wake = (INVALID_PROCNO, INVALID_PROCNO);
        if !self.wait_list_lock(env) {
            // The generation ended: publish, wake nobody (see `wakeup`).
            var.store(val, Ordering::Relaxed);
            env.crit().exit(LWLOCK);
            return;
        }
        if env.var_access == VarAccess::WaitListLock {
            var.store(val, Ordering::Relaxed);
        }
        let mut cur = self.head.load(Ordering::Relaxed);
        while cur != INVALID_PROCNO {
            let p = env.proc(cur);
            let next = p.lw_next.load(Ordering::Relaxed);
            if LWLockMode::from_u32(p.lw_wait_mode.load(Ordering::Relaxed))
                != LWLockMode::WaitUntilFree
            {
                break;
            }
            self.move_to_wakeup(env, cur, &mut wake);
            cur = next;
        }
        if wake.1 != INVALID_PROCNO {
            env.proc(wake.1)
                .lw_next
                .store(INVALID_PROCNO, Ordering::Relaxed);
        }
        self.wait_list_unlock();
        Self::wake_list(env, wake.0);
        env.crit().exit(LWLOCK);
    }

    /// Sets `var` to `val` and releases the lock.
    pub fn release_clear_var(&self, env: &LockEnv, var: &AtomicU64, val: u64) {
        match env.var_access {
            // Release pairs with the Acquire load in `read_var`; the
            // Release fetch_sub in `release` that follows orders this store
            // before the lock is seen free (pairs with the Acquire state
            // load in `conflicts_with_var` and the next holder's Acquire
            // compare-exchange), so a new holder's value cannot be
            // overwritten by ours. A plain store, not the swap
            // PostgreSQL uses: on x86 a swap is a second locked instruction
            // per insertion, and it must wait for the record's stores to
            // drain just as the release's fetch_sub then does again.
            VarAccess::Atomic => {
                var.store(val, Ordering::Release);
            }
            VarAccess::WaitListLock => {
                let locked = self.wait_list_lock(env);
                var.store(val, Ordering::Relaxed);
                if locked {
                    self.wait_list_unlock();
                }
            }
        }
        self.release(env);
    }
}
