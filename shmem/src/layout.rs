//! The layout of the shared-memory segment, declared as data.
//!
//! Every region is one row of [`REGIONS`] (written once, in the
//! `declare_regions!` call below): its name, its element type and how many
//! elements it holds, read from the segment's dimensions. The row's
//! alignment is a 128-byte line (so no two regions share one), or the
//! element type's own alignment when that is larger (WAL pages: 4096).
//! [`Layout::compute`] places the rows in order, each at the next offset
//! aligned for it; `Shmem`'s accessors find a region by its [`Region`] name.
//! Adding a region is one row here plus its accessor in `segment`.
//!
//! Production regions come first; the test-only group (state that only a
//! test workload uses) follows them, declared apart so that it never sits
//! between production regions.
//!
//! The regions, in order (`Layout::diagram()` writes this block; a test
//! checks that the two agree):
//!
//! ```text
//! production:
//!   Header            ShmemHeader x 1                    align 128
//!   ProcGlobal        ProcGlobal x 1                     align 128
//!   NamedLocks        PaddedLWLock x NUM_NAMED_LOCKS     align 128
//!   Procs             Proc x max_procs                   align 128
//!   InsertLocks       WalInsertLock x n_insert_locks     align 128  stride insert_lock_stride
//!   XLogCtl           XLogCtl x 1                        align 128
//!   XlBlocks          AtomicU64 x n_buffers              align 128
//!   PrevLinks         PrevLink x n_prevlinks             align 128
//!   XidState          XidState x 1                       align 128
//!   ProcArray         ProcArrayShared x 1                align 128
//!   ProcArrayMembers  AtomicU32 x max_procs              align 128
//!   Histograms        LatencyHistogram x max_procs       align 128
//!   Replication       ReplCtl x 1                        align 128
//!   SyncRepWaiters    SyncRepWaiter x max_procs          align 128
//!   ProcStats         ProcStats x max_procs              align 128
//!   Admission         Admission x 1                      align 128
//!   AdmissionWaiters  AdmissionWaiter x max_procs        align 128
//!   WalPages          WalPage x n_buffers                align 4096
//! test-only:
//!   LockTest          LockTestArea x 1                   align 128
//! ```
//!
//! Dimensions: `max_procs` = backends + auxiliary processes + worker
//! slots (`max_worker_processes`, after the auxiliary ones);
//! `insert_lock_stride` is 128 (one lock per line, seed 001's padded form)
//! or 32 (packed); `n_prevlinks` is 0 unless `wal_reservation = atomic`,
//! then sized by `prevlink::slots_for` from its in-flight bound.
//!
//! Invariants (tested below): regions appear in declaration order, each
//! aligned as its row says, none overlapping the next, all inside `total`.

use crate::admission::{Admission, AdmissionWaiter};
use crate::histogram::LatencyHistogram;
use crate::locktest::LockTestArea;
use crate::prevlink::PrevLink;
use crate::proc::Proc;
use crate::procarray::{ProcArrayShared, XidState};
use crate::segment::{PaddedLWLock, ProcGlobal, ShmemHeader, NUM_AUX_PROCS, NUM_NAMED_LOCKS};
use crate::settings::Settings;
use crate::stats::ProcStats;
use crate::sync::{AtomicU32, AtomicU64};
use crate::variants::{LockLayout, Reservation};
use crate::walsnd::{ReplCtl, SyncRepWaiter};
use crate::xlogctl::{PaddedWalInsertLock, WalInsertLock, XLogCtl};
use std::fmt::Write as _;
use std::mem::{align_of, size_of};

/// Bytes of one WAL buffer page.
pub const WAL_PAGE: usize = 8192;
/// Alignment of every region (a cache line pair on x86: no false sharing
/// between regions).
const LINE: usize = 128;

/// One WAL buffer page (its alignment lets a page be mapped and advised on
/// its own).
#[repr(C, align(4096))]
pub struct WalPage(pub [u8; WAL_PAGE]);

/// Which group a region belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// Used by the runtime.
    Production,
    /// Used only by a test workload (`lwlock`).
    TestOnly,
}

/// One declared region.
pub struct RegionSpec {
    pub region: Region,
    pub group: Group,
    /// Element type, as declared.
    pub elem: &'static str,
    /// Dimension that counts the elements, as declared.
    pub count_name: &'static str,
    /// Bytes between elements (the type's size, or a dimension).
    pub stride: fn(&Layout) -> usize,
    /// Elements, from the layout's dimensions.
    pub count: fn(&Layout) -> usize,
    /// Alignment of the region's start.
    pub align: usize,
    /// Dimension that overrides the stride, if any (for the diagram).
    pub stride_name: Option<&'static str>,
}

/// Region alignment for an element type.
const fn region_align<T>() -> usize {
    if align_of::<T>() > LINE {
        align_of::<T>()
    } else {
        LINE
    }
}

/// The element count of a row: `1`, a parenthesized constant, or a
/// dimension field of `Layout`.
macro_rules! region_count {
    (1, $l:ident) => {
        1
    };
    (($e:expr), $l:ident) => {
        $e
    };
    ($field:ident, $l:ident) => {
        $l.$field as usize
    };
}

/// The bytes between elements of a row: its type's size, or a dimension.
macro_rules! region_stride {
    ($elem:ty, $l:ident) => {
        size_of::<$elem>()
    };
    ($elem:ty, $stride:ident, $l:ident) => {
        $l.$stride
    };
}

macro_rules! region_stride_name {
    () => {
        None
    };
    ($stride:ident) => {
        Some(stringify!($stride))
    };
}

/// Declares the regions once: the `Region` enum and the `REGIONS` table.
macro_rules! declare_regions {
    ($( $group:ident { $(
        $(#[$doc:meta])*
        $region:ident: $elem:ty, x $count:tt $(, stride $stride:ident)?;
    )* } )*) => {
        /// The name of each region (its index in [`REGIONS`]).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Region { $( $( $(#[$doc])* $region, )* )* }

        /// Every region, in layout order.
        pub const REGIONS: &[RegionSpec] = &[ $( $( RegionSpec {
            region: Region::$region,
            group: Group::$group,
            elem: stringify!($elem),
            count_name: stringify!($count),
            stride: |_l| region_stride!($elem $(, $stride)?, _l),
            count: |_l| region_count!($count, _l),
            align: region_align::<$elem>(),
            stride_name: region_stride_name!($($stride)?),
        }, )* )* ];
    };
}

declare_regions! {
    Production {
        /// Magic, version, size, generation, dimensions, settings.
        Header: ShmemHeader, x 1;
        /// Free list of backend proc slots.
        ProcGlobal: ProcGlobal, x 1;
        /// Individually named LWLocks, one per line.
        NamedLocks: PaddedLWLock, x (NUM_NAMED_LOCKS);
        /// PGPROC slots: backends, auxiliary processes, then workers.
        Procs: Proc, x max_procs;
        /// WAL insertion locks, padded or packed (seed 001).
        InsertLocks: WalInsertLock, x n_insert_locks, stride insert_lock_stride;
        /// Insert position, write/flush results, buffer map state.
        XLogCtl: XLogCtl, x 1;
        /// End LSN of the page held in each WAL buffer.
        XlBlocks: AtomicU64, x n_buffers;
        /// The lock-free reservation's xl_prev hand-off (`prevlink`).
        PrevLinks: PrevLink, x n_prevlinks;
        /// The XID counter.
        XidState: XidState, x 1;
        /// ProcArray header: latest completed XID, members, group list.
        ProcArray: ProcArrayShared, x 1;
        /// ProcArray member proc numbers.
        ProcArrayMembers: AtomicU32, x max_procs;
        /// Per-process transaction latency histograms.
        Histograms: LatencyHistogram, x max_procs;
        /// Walsenders, replication slots, the sync-rep queue.
        Replication: ReplCtl, x 1;
        /// Each proc's sync-rep wait.
        SyncRepWaiters: SyncRepWaiter, x max_procs;
        /// Per-process activity and mechanism counters (`stats`).
        ProcStats: ProcStats, x max_procs;
        /// Tokens and queue of `insert_concurrency_per_cpu` (walshm's own).
        Admission: Admission, x 1;
        /// Each proc's place in the admission queue.
        AdmissionWaiters: AdmissionWaiter, x max_procs;
        /// The WAL buffer pages.
        WalPages: WalPage, x n_buffers;
    }
    TestOnly {
        /// Plain data under the Test LWLock (the `lwlock` workload's
        /// oracle).
        LockTest: LockTestArea, x 1;
    }
}

pub const NUM_REGIONS: usize = REGIONS.len();

/// Where one region lies, and its elements (computed once, so that the
/// accessors on the insert path read fields, not the table).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    pub off: usize,
    pub len: usize,
    pub count: usize,
    pub stride: usize,
}

/// The segment's dimensions and the placement of every region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub max_backends: u32,
    /// Proc slots for attached workers (`max_worker_processes`).
    pub max_workers: u32,
    pub max_procs: u32,
    pub n_insert_locks: u32,
    pub insert_lock_stride: usize,
    pub n_buffers: u32,
    pub n_prevlinks: u32,
    placements: [Placement; NUM_REGIONS],
    pub total: usize,
}

fn align_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

impl Layout {
    /// Computes the layout for `settings` with room for `max_backends`.
    pub fn compute(settings: &Settings, max_backends: u32) -> Layout {
        let max_workers = settings.max_worker_processes;
        let mut l = Layout {
            max_backends,
            max_workers,
            max_procs: max_backends + NUM_AUX_PROCS + max_workers,
            n_insert_locks: settings.wal_insert_locks,
            insert_lock_stride: match settings.insert_lock_layout {
                LockLayout::Padded => size_of::<PaddedWalInsertLock>(),
                LockLayout::Packed => size_of::<WalInsertLock>(),
            },
            n_buffers: settings.wal_buffers,
            n_prevlinks: match settings.wal_reservation {
                Reservation::Spinlock => 0,
                Reservation::Atomic => crate::prevlink::slots_for(settings.wal_insert_locks),
            },
            placements: [Placement::default(); NUM_REGIONS],
            total: 0,
        };
        let mut off = 0;
        for spec in REGIONS {
            off = align_up(off, spec.align);
            let (count, stride) = ((spec.count)(&l), (spec.stride)(&l));
            let len = count * stride;
            l.placements[spec.region as usize] = Placement {
                off,
                len,
                count,
                stride,
            };
            off += len;
        }
        l.total = align_up(off, 4096);
        l
    }

    /// The proc number of the first worker slot.
    pub fn first_worker_procno(&self) -> u32 {
        self.max_backends + NUM_AUX_PROCS
    }

    /// Where `region` lies.
    #[inline]
    pub fn placement(&self, region: Region) -> Placement {
        self.placements[region as usize]
    }

    /// Elements of `region` and the bytes between them.
    #[inline]
    pub fn elements(&self, region: Region) -> (usize, usize) {
        let p = self.placement(region);
        (p.count, p.stride)
    }

    /// The declared regions, one line each (the module header shows it).
    pub fn diagram() -> String {
        let mut out = String::new();
        let mut group = None;
        for spec in REGIONS {
            if group != Some(spec.group) {
                group = Some(spec.group);
                out.push_str(match spec.group {
                    Group::Production => "production:\n",
                    Group::TestOnly => "test-only:\n",
                });
            }
            let what = format!(
                "{} x {}",
                spec.elem,
                spec.count_name.trim_matches(['(', ')'])
            );
            let line = format!(
                "  {:<18}{what:<35}align {}",
                format!("{:?}", spec.region),
                spec.align
            );
            out.push_str(&line);
            if let Some(s) = spec.stride_name {
                let _ = write!(out, "  stride {s}");
            }
            out.push('\n');
        }
        out
    }

    /// Offsets and sizes of this layout's regions (diagnostics).
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for spec in REGIONS {
            let p = self.placement(spec.region);
            let _ = writeln!(
                out,
                "{:<18}offset {:>10}  bytes {:>10}",
                format!("{:?}", spec.region),
                p.off,
                p.len
            );
        }
        let _ = writeln!(out, "total {} bytes", self.total);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layouts() -> Vec<Layout> {
        let mut out = Vec::new();
        for layout in [LockLayout::Padded, LockLayout::Packed] {
            for reservation in [Reservation::Spinlock, Reservation::Atomic] {
                let s = Settings {
                    insert_lock_layout: layout,
                    wal_reservation: reservation,
                    ..Settings::default()
                };
                out.push(Layout::compute(&s, 10));
                out.push(Layout::compute(&s, 0));
            }
        }
        out
    }

    #[test]
    fn regions_are_declared_in_enum_order() {
        for (i, spec) in REGIONS.iter().enumerate() {
            assert_eq!(spec.region as usize, i, "{:?}", spec.region);
        }
        let first_test = REGIONS
            .iter()
            .position(|s| s.group == Group::TestOnly)
            .unwrap();
        assert!(
            REGIONS[first_test..]
                .iter()
                .all(|s| s.group == Group::TestOnly),
            "test-only regions come after every production region"
        );
    }

    #[test]
    fn regions_are_aligned_do_not_overlap_and_fit() {
        for l in layouts() {
            assert_eq!(l.placement(Region::Header).off, 0);
            let mut end = 0;
            for spec in REGIONS {
                let p = l.placement(spec.region);
                assert!(p.off >= end, "{:?} overlaps its predecessor", spec.region);
                assert!(p.off.is_multiple_of(spec.align), "{:?}", spec.region);
                assert!(p.off.is_multiple_of(LINE), "{:?}", spec.region);
                let (n, stride) = ((spec.count)(&l), (spec.stride)(&l));
                assert_eq!(l.elements(spec.region), (n, stride), "{:?}", spec.region);
                assert_eq!(p.len, n * stride, "{:?}", spec.region);
                end = p.off + p.len;
            }
            assert!(end <= l.total && l.total.is_multiple_of(4096));
        }
    }

    #[test]
    fn the_module_diagram_lists_every_region_as_declared() {
        let source = include_str!("layout.rs");
        let mut in_block = false;
        let mut documented = String::new();
        for line in source.lines() {
            let Some(doc) = line.strip_prefix("//!") else {
                continue;
            };
            let doc = doc.strip_prefix(' ').unwrap_or(doc);
            match (in_block, doc.trim()) {
                (false, "```text") => in_block = true,
                (true, "```") => break,
                (true, _) => {
                    documented.push_str(doc);
                    documented.push('\n');
                }
                _ => {}
            }
        }
        let generated = Layout::diagram();
        assert_eq!(
            documented, generated,
            "update the diagram in layout.rs's header to:\n{generated}"
        );
        for spec in REGIONS {
            assert!(documented.contains(&format!("  {:?} ", spec.region)));
        }
    }

    #[test]
    fn prev_link_table_exists_only_with_the_lock_free_reservation() {
        let spin = Layout::compute(&Settings::default(), 10);
        assert_eq!(spin.n_prevlinks, 0);
        assert_eq!(spin.placement(Region::PrevLinks).len, 0);
        let s = Settings {
            wal_reservation: Reservation::Atomic,
            ..Settings::default()
        };
        let atomic = Layout::compute(&s, 10);
        assert_eq!(
            atomic.n_prevlinks,
            crate::prevlink::slots_for(s.wal_insert_locks)
        );
        assert_eq!(
            atomic.placement(Region::PrevLinks).len,
            atomic.n_prevlinks as usize * size_of::<PrevLink>()
        );
        assert!(atomic.total - spin.total <= 4096 + atomic.placement(Region::PrevLinks).len);
    }

    #[test]
    fn variants_change_the_insert_lock_stride() {
        let mut s = Settings::default();
        let padded = Layout::compute(&s, 10);
        s.insert_lock_layout = LockLayout::Packed;
        let packed = Layout::compute(&s, 10);
        assert_eq!(padded.insert_lock_stride, 128);
        assert_eq!(packed.insert_lock_stride, 32);
        assert_eq!(padded.elements(Region::InsertLocks), (8, 128));
        assert!(packed.total <= padded.total);
        assert_eq!(
            padded.max_procs,
            10 + NUM_AUX_PROCS + s.max_worker_processes
        );
        assert_eq!(padded.first_worker_procno(), 10 + NUM_AUX_PROCS);
        assert_eq!(padded.placement(Region::WalPages).off % 4096, 0);
    }
}
