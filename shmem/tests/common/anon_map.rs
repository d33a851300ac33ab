//! An anonymous shared mapping (`MAP_SHARED | MAP_ANONYMOUS`) for the
//! multi-process stress test and the examples: children forked after it is
//! made share it with the parent, so start/stop flags and small objects can
//! live there.
//!
//! Invariants: the kernel zero-fills it and aligns it to a page; it stays
//! mapped until the `AnonMap` is dropped, so nothing borrowed from it may
//! outlive its owner (children that `_exit` never drop it).

/// An owned anonymous shared mapping of `len` bytes.
pub struct AnonMap {
    ptr: *mut libc::c_void,
    len: usize,
}

impl AnonMap {
    /// Maps `len` zeroed bytes shared with children forked later; panics with
    /// the OS error if the kernel refuses (test and example code only).
    pub fn new(len: usize) -> AnonMap {
        // SAFETY: a fresh anonymous shared mapping; the kernel picks the
        // address (page-aligned) and zero-fills it; no existing memory is
        // touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(
            ptr,
            libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        AnonMap { ptr, len }
    }

    /// Start of the mapping (page-aligned, valid for `len` bytes while
    /// `self` lives).
    pub fn ptr(&self) -> *mut libc::c_void {
        self.ptr
    }
}

impl Drop for AnonMap {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping of `len` bytes; the owner's
        // borrows into it end with `self`.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}
