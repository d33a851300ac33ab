//! The WAL buffer pages' bytes: the one place where they are written and
//! read through raw pointers (the insert path, page initialisation, the
//! WAL writer, the WAL readers).
//!
//! Who may touch which bytes is the WAL insertion protocol's rule, not a
//! type's (see `backend::xlog`'s headers): an inserter writes only the
//! bytes of its own reservation, on a page that cannot be recycled before
//! its insertion lock is released; a page is initialised only under
//! WALBufMappingLock once it is written; the writer reads only bytes whose
//! insertions finished; a reader's copy may race with recycling and is
//! validated afterwards against `xlblocks` (a seqlock). The accessors below
//! are safe to call on that contract, as `Shmem::wal_page` always was; the
//! bounds of a page are checked in debug builds only (the insert path's
//! copy loop has no checks beyond its own arithmetic).
//!
//! Every accessor is `#[inline]`: on the insert path a [`WalPage`] is a
//! pointer in a register and `write` is one `memcpy`.

use crate::layout::WAL_PAGE;
use crate::Shmem;
use std::ptr::NonNull;

/// One WAL buffer page (or a local stand-in, [`WalPage::local`]): its
/// first byte.
#[derive(Clone, Copy, Debug)]
pub struct WalPage(NonNull<u8>);

impl WalPage {
    /// A local page standing in for a buffer page (`buf` is at least one
    /// page long and outlives every use of the handle, which its owner
    /// keeps with it).
    pub fn local(buf: &mut [u8]) -> WalPage {
        assert!(buf.len() >= WAL_PAGE);
        WalPage(NonNull::from(buf).cast())
    }

    /// Copies `src` into the page at `off`.
    #[inline]
    pub fn write(self, off: usize, src: &[u8]) {
        debug_assert!(off + src.len() <= WAL_PAGE);
        // SAFETY: the range lies in the page (the caller's arithmetic,
        // checked in debug builds) and is the caller's to write by the
        // insertion protocol (module header); `src` is local memory, so
        // the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.0.as_ptr().add(off), src.len()) };
    }

    /// Sets `len` bytes from `off` to `byte`.
    #[inline]
    pub fn fill(self, off: usize, len: usize, byte: u8) {
        debug_assert!(off + len <= WAL_PAGE);
        // SAFETY: as in `write`.
        unsafe { std::ptr::write_bytes(self.0.as_ptr().add(off), byte, len) };
    }

    /// The bytes `[off, off + len)` to build a record or a header in place.
    #[inline]
    pub fn bytes_mut<'a>(self, off: usize, len: usize) -> &'a mut [u8] {
        debug_assert!(off + len <= WAL_PAGE);
        // SAFETY: as in `write`: nobody else writes or reads these bytes
        // while the caller holds them (its reservation, or the page it
        // initialises under WALBufMappingLock).
        unsafe { std::slice::from_raw_parts_mut(self.0.as_ptr().add(off), len) }
    }
}

impl Shmem {
    /// WAL buffer page `i`, to write (see the module header for who may).
    #[inline]
    pub fn wal_page_mut(&self, i: usize) -> WalPage {
        // SAFETY: `wal_page` checks `i` and returns an address inside the
        // mapping, never null.
        WalPage(unsafe { NonNull::new_unchecked(self.wal_page(i)) })
    }

    /// `len` bytes of the buffer pages from page `first` on (contiguous:
    /// a run never wraps the ring), to write out; every insertion into
    /// them has finished, so they are stable while read.
    #[inline]
    pub fn wal_bytes(&self, first: usize, len: usize) -> &[u8] {
        assert!(first * WAL_PAGE + len <= self.layout().n_buffers as usize * WAL_PAGE);
        // SAFETY: the pages lie inside the mapping, which lives as long as
        // `self`; their bytes below `len` are final (the caller waited for
        // the insertions into them).
        unsafe { std::slice::from_raw_parts(self.wal_page(first), len) }
    }

    /// Copies the first `dst.len()` bytes of buffer page `i` into `dst`.
    /// The page may be recycled meanwhile: the copy is then garbage, and
    /// the caller, a seqlock reader, discards it after re-checking
    /// `xlblocks`.
    #[inline]
    pub fn copy_wal_page(&self, i: usize, dst: &mut [u8]) {
        assert!(dst.len() <= WAL_PAGE);
        // SAFETY: the page is inside the mapping (`wal_page` checks `i`),
        // `dst` is local memory of at most one page: valid and disjoint
        // ranges; a concurrent recycling only makes the bytes wrong, which
        // the caller detects.
        unsafe { std::ptr::copy_nonoverlapping(self.wal_page(i), dst.as_mut_ptr(), dst.len()) };
    }
}
