//! Wait events: what a process is waiting on, published in its proc slot
//! (PostgreSQL's `wait_event_info`, read by `pg_stat_activity`).
//!
//! Encoding (PostgreSQL's): one 32-bit word, the wait *type* in the high
//! byte and the event id in the low 24 bits; 0 means "not waiting". The
//! types keep PostgreSQL's values (LWLock 0x01, Activity 0x05, Client 0x06,
//! IPC 0x08, Timeout 0x09, IO 0x0A). An LWLock event's id is the lock's
//! tranche id, as in PostgreSQL, so that the name comes from the tranche.
//! Names are PostgreSQL's where PostgreSQL has the same wait; walshm's own
//! waits are listed in [`EVENTS`] with the reason in their comment.
//!
//! Who writes: only the process owning the slot, with a Relaxed store, just
//! before it blocks (semaphore sleep, spin delay, latch wait, socket read or
//! write, WAL write/fdatasync) and again after it; never on an uncontended
//! fast path. Readers (pg_stat_activity, walbench's sampler, `postmaster
//! status`) load it Relaxed: a sample is a snapshot, a stale value by a few
//! microseconds is fine, and a torn value is impossible (one word).
//!
//! A process finds its own slot through a thread-local pointer installed by
//! [`install`] when its per-process context is built (the spinlock code
//! has no other way to know who it is). The pointer is cleared when the
//! guard drops, so nothing outlives the mapping it points into.

use crate::sync::{AtomicU32, Ordering};
use std::cell::Cell;

/// Wait types (the high byte).
pub const PG_WAIT_LWLOCK: u32 = 0x0100_0000;
pub const PG_WAIT_ACTIVITY: u32 = 0x0500_0000;
pub const PG_WAIT_CLIENT: u32 = 0x0600_0000;
pub const PG_WAIT_IPC: u32 = 0x0800_0000;
pub const PG_WAIT_TIMEOUT: u32 = 0x0900_0000;
pub const PG_WAIT_IO: u32 = 0x0A00_0000;
const TYPE_MASK: u32 = 0xFF00_0000;
const ID_MASK: u32 = 0x00FF_FFFF;

const _: () = assert!(TYPE_MASK & ID_MASK == 0 && TYPE_MASK | ID_MASK == u32::MAX);

/// One encoded wait event (0 = none).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WaitEvent(pub u32);

impl WaitEvent {
    pub const NONE: WaitEvent = WaitEvent(0);

    /// The event `id` of wait type `ty` (a `PG_WAIT_*` constant).
    pub const fn new(ty: u32, id: u32) -> WaitEvent {
        WaitEvent(ty | (id & ID_MASK))
    }

    /// Sleeping for an LWLock of tranche `tranche`.
    pub const fn lwlock(tranche: u32) -> WaitEvent {
        WaitEvent::new(PG_WAIT_LWLOCK, tranche)
    }

    pub const fn type_bits(self) -> u32 {
        self.0 & TYPE_MASK
    }

    pub const fn id(self) -> u32 {
        self.0 & ID_MASK
    }

    pub const fn is_none(self) -> bool {
        self.0 == 0
    }

    /// PostgreSQL's `wait_event_type` column, None when not waiting.
    pub fn type_name(self) -> Option<&'static str> {
        Some(match self.type_bits() {
            0 => return None,
            PG_WAIT_LWLOCK => "LWLock",
            PG_WAIT_ACTIVITY => "Activity",
            PG_WAIT_CLIENT => "Client",
            PG_WAIT_IPC => "IPC",
            PG_WAIT_TIMEOUT => "Timeout",
            PG_WAIT_IO => "IO",
            _ => "???",
        })
    }

    /// PostgreSQL's `wait_event` column, None when not waiting.
    pub fn name(self) -> Option<&'static str> {
        if self.is_none() {
            return None;
        }
        if self.type_bits() == PG_WAIT_LWLOCK {
            return Some(tranche_name(self.id()));
        }
        Some(
            EVENTS
                .iter()
                .find(|(e, _)| *e == self)
                .map_or("???", |(_, n)| *n),
        )
    }

    /// "Type:Name" (walbench's key), None when not waiting.
    pub fn label(self) -> Option<String> {
        Some(format!("{}:{}", self.type_name()?, self.name()?))
    }
}

/// The name of LWLock tranche `tranche` (PostgreSQL's tranche names).
#[cfg(not(loom))]
pub fn tranche_name(tranche: u32) -> &'static str {
    use crate::segment::{NamedLock, TRANCHE_WAL_INSERT};
    match tranche {
        TRANCHE_WAL_INSERT => "WALInsert",
        t => NamedLock::from_code(t).map_or("???", NamedLock::name),
    }
}

#[cfg(loom)]
pub fn tranche_name(_tranche: u32) -> &'static str {
    "???"
}

macro_rules! wait_events {
    ($( $(#[$doc:meta])* $konst:ident = ($ty:ident, $id:literal, $name:literal); )*) => {
        $( $(#[$doc])* pub const $konst: WaitEvent = WaitEvent::new($ty, $id); )*
        /// Every non-LWLock event with its name.
        pub const EVENTS: &[(WaitEvent, &str)] = &[ $( ($konst, $name), )* ];
    };
}

wait_events! {
    /// The walwriter sleeping on its latch between rounds.
    WALWRITER_MAIN = (PG_WAIT_ACTIVITY, 1, "WalWriterMain");
    /// The checkpointer sleeping between checkpoints.
    CHECKPOINTER_MAIN = (PG_WAIT_ACTIVITY, 2, "CheckpointerMain");
    /// Reserved for the walsender (replication).
    WALSENDER_MAIN = (PG_WAIT_ACTIVITY, 3, "WalSenderMain");
    /// Reserved for the archiver.
    ARCHIVER_MAIN = (PG_WAIT_ACTIVITY, 4, "ArchiverMain");
    /// A connection backend waiting for the client's next message.
    CLIENT_READ = (PG_WAIT_CLIENT, 1, "ClientRead");
    /// A connection backend blocked writing to its client.
    CLIENT_WRITE = (PG_WAIT_CLIENT, 2, "ClientWrite");
    /// A group-clear follower waiting for its leader (seed 004).
    PROCARRAY_GROUP_UPDATE = (PG_WAIT_IPC, 1, "ProcArrayGroupUpdate");
    /// Reserved for synchronous replication's commit wait.
    SYNC_REP = (PG_WAIT_IPC, 2, "SyncRep");
    /// A backend waiting for a checkpoint it requested (PostgreSQL's name).
    CHECKPOINT_DONE = (PG_WAIT_IPC, 3, "CheckpointDone");
    /// Sleeping in a spin delay (PostgreSQL's Timeout:SpinDelay).
    SPIN_DELAY = (PG_WAIT_TIMEOUT, 1, "SpinDelay");
    /// write(2) of WAL pages.
    WAL_WRITE = (PG_WAIT_IO, 1, "WALWrite");
    /// fdatasync(2) of a WAL segment.
    WAL_SYNC = (PG_WAIT_IO, 2, "WALSync");
    /// Zero-filling a new WAL segment.
    WAL_INIT_WRITE = (PG_WAIT_IO, 3, "WALInitWrite");
    /// Syncing a new WAL segment.
    WAL_INIT_SYNC = (PG_WAIT_IO, 4, "WALInitSync");
    /// Reading WAL (recovery, replication).
    WAL_READ = (PG_WAIT_IO, 5, "WALRead");
    /// Writing the control file.
    CONTROL_FILE_WRITE_UPDATE = (PG_WAIT_IO, 6, "ControlFileWriteUpdate");
    /// Syncing the control file.
    CONTROL_FILE_SYNC_UPDATE = (PG_WAIT_IO, 7, "ControlFileSyncUpdate");
    /// A backend held back by `max_replication_lag` until the receivers'
    /// reported write positions advance (walshm's own: PostgreSQL has no
    /// flow control).
    REPLICATION_THROTTLE = (PG_WAIT_IPC, 13, "ReplicationThrottle");
    /// A process waiting for its turn to insert (`insert_concurrency_per_cpu`,
    /// walshm's own).
    INSERT_ADMISSION = (PG_WAIT_IPC, 14, "InsertAdmission");
}

thread_local! {
    /// This process's `wait_event_info` (null: not installed).
    static MINE: Cell<*const AtomicU32> = const { Cell::new(std::ptr::null()) };
}

/// A thread-local pointer to something in shared memory, installed for
/// as long as this guard lives (it borrows the target). Dropping the guard
/// clears the pointer if it is still this guard's, so the pointer only
/// ever names the target of a live guard (whatever the drop order).
pub struct Installed<'a, T: 'static> {
    key: &'static std::thread::LocalKey<Cell<*const T>>,
    target: *const T,
    _target: std::marker::PhantomData<&'a T>,
}

impl<'a, T: 'static> Installed<'a, T> {
    /// Points `key` at `target` until the guard drops.
    pub fn in_key(key: &'static std::thread::LocalKey<Cell<*const T>>, target: &'a T) -> Self {
        let target = target as *const T;
        key.with(|c| c.set(target));
        Installed {
            key,
            target,
            _target: std::marker::PhantomData,
        }
    }
}

impl<T: 'static> Drop for Installed<'_, T> {
    fn drop(&mut self) {
        self.key.with(|c| {
            if c.get() == self.target {
                c.set(std::ptr::null());
            }
        });
    }
}

/// Makes `slot` this thread's wait-event word until the guard drops.
pub fn install(slot: &AtomicU32) -> Installed<'_, AtomicU32> {
    Installed::in_key(&MINE, slot)
}

/// Publishes `ev` as this process's wait (if a slot is installed) and
/// returns what was there, to be given back to [`restore`].
#[inline]
pub fn report(ev: WaitEvent) -> WaitEvent {
    MINE.with(|c| {
        let p = c.get();
        if p.is_null() {
            return WaitEvent::NONE;
        }
        // SAFETY: the pointer was installed by an `Installed` guard that
        // borrows the slot and clears the pointer when it drops, so the
        // slot is alive here.
        let slot = unsafe { &*p };
        swap_on(slot, ev)
    })
}

/// Puts back what [`report`] returned (waits nest: a spin delay inside an
/// LWLock sleep, an LWLock wait inside the walwriter's round).
#[inline]
pub fn restore(previous: WaitEvent) {
    report(previous);
}

/// Runs `f` with `ev` published.
#[inline]
pub fn during<R>(ev: WaitEvent, f: impl FnOnce() -> R) -> R {
    let prev = report(ev);
    let r = f();
    restore(prev);
    r
}

/// Publishes `ev` in `slot` (the caller owns it); returns the old value.
#[cfg(not(loom))]
#[inline]
pub fn swap_on(slot: &AtomicU32, ev: WaitEvent) -> WaitEvent {
    // Only the owner writes: load + store, no read-modify-write needed.
    let old = slot.load(Ordering::Relaxed);
    slot.store(ev.0, Ordering::Relaxed);
    WaitEvent(old)
}

/// Under loom wait events are not published: they are no part of any lock
/// algorithm, and every modelled atomic access multiplies the
/// interleavings the models explore.
#[cfg(loom)]
#[inline]
pub fn swap_on(_slot: &AtomicU32, _ev: WaitEvent) -> WaitEvent {
    WaitEvent::NONE
}

/// Reads a slot's wait event (any process).
#[inline]
pub fn read(slot: &AtomicU32) -> WaitEvent {
    WaitEvent(slot.load(Ordering::Relaxed))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::segment::{NamedLock, TRANCHE_WAL_INSERT};

    #[test]
    fn encoding_keeps_postgres_type_bytes_and_names() {
        let named_locks = [
            (NamedLock::WalWrite, "WALWrite"),
            (NamedLock::ProcArray, "ProcArray"),
            (NamedLock::XidGen, "XidGen"),
            (NamedLock::WalBufMapping, "WALBufMapping"),
        ]
        .map(|(lock, name)| (WaitEvent::lwlock(lock as u32), "LWLock", name));
        let others = [
            (WaitEvent::lwlock(TRANCHE_WAL_INSERT), "LWLock", "WALInsert"),
            (WAL_SYNC, "IO", "WALSync"),
            (WAL_WRITE, "IO", "WALWrite"),
            (CLIENT_READ, "Client", "ClientRead"),
            (PROCARRAY_GROUP_UPDATE, "IPC", "ProcArrayGroupUpdate"),
            (SPIN_DELAY, "Timeout", "SpinDelay"),
            (WALWRITER_MAIN, "Activity", "WalWriterMain"),
        ];
        for (ev, ty, name) in named_locks.into_iter().chain(others) {
            assert_eq!(ev.type_name(), Some(ty), "{ev:?}");
            assert_eq!(ev.name(), Some(name), "{ev:?}");
            assert_eq!(ev.label().unwrap(), format!("{ty}:{name}"));
        }
        assert_eq!(WaitEvent::lwlock(2).0, 0x0100_0002);
        assert_eq!(WAL_SYNC.type_bits(), PG_WAIT_IO);
        assert_eq!(WaitEvent::NONE.type_name(), None);
        assert_eq!(WaitEvent::NONE.name(), None);
    }

    #[test]
    fn event_ids_are_unique() {
        for (i, (a, _)) in EVENTS.iter().enumerate() {
            assert!(EVENTS[i + 1..].iter().all(|(b, _)| a != b), "{a:?}");
        }
    }

    #[test]
    fn report_writes_only_the_installed_slot_and_nests() {
        let slot = AtomicU32::new(0);
        assert_eq!(report(WAL_SYNC), WaitEvent::NONE, "nothing installed");
        assert_eq!(read(&slot), WaitEvent::NONE);
        {
            let _g = install(&slot);
            let outer = report(WALWRITER_MAIN);
            let inner = report(SPIN_DELAY);
            assert_eq!(read(&slot), SPIN_DELAY);
            restore(inner);
            assert_eq!(read(&slot), WALWRITER_MAIN);
            during(WAL_WRITE, || assert_eq!(read(&slot), WAL_WRITE));
            restore(outer);
            assert_eq!(read(&slot), WaitEvent::NONE);
            report(CLIENT_READ);
        }
        assert_eq!(report(WAL_SYNC), WaitEvent::NONE, "uninstalled on drop");
        assert_eq!(read(&slot), CLIENT_READ);
    }
}
