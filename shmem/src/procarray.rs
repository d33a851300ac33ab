//! Shared transaction state: the XID counter and the ProcArray (plain
//! `#[repr(C)]` data; the algorithms live in `backend::procarray`).
//!
//! Lock inventory:
//! - XidGen (named LWLock): `next_full_xid`, and the store of a new XID into
//!   the assigning proc's `xid` (so a snapshot never misses an assigned,
//!   running XID).
//! - ProcArray (named LWLock): `members`/`num_members` (exclusive to change,
//!   shared to scan), `latest_completed_xid`, and clearing a proc's `xid` at
//!   transaction end (exclusive). Snapshots take it shared.
//! - `group_first`: lock-free list head (proc numbers linked through
//!   `Proc::group_clear_next`) of backends waiting for a group leader to
//!   clear their XIDs under one exclusive ProcArrayLock acquisition (seed
//!   004). INVALID_PROCNO when empty.

use crate::sync::{AtomicU32, AtomicU64};

#[repr(C, align(128))]
pub struct XidState {
    /// Next 64-bit transaction id to assign (epoch in the high half).
    pub next_full_xid: AtomicU64,
}

#[repr(C, align(128))]
pub struct ProcArrayShared {
    /// Highest XID known to have ended (full form).
    pub latest_completed_xid: AtomicU64,
    pub num_members: AtomicU32,
    /// Head of the group XID clear list.
    pub group_first: AtomicU32,
}
