//! The C ABI (`include/walshm.h`): the fixed contract of DESIGN.md
//! ("Worker API") plus declared additions (shutdown request, positions,
//! the reader).
//!
//! Rules every entry point keeps:
//! - no panic crosses the boundary: inputs are validated first, and the
//!   body runs under `catch_unwind` as a second line (with `panic = abort`
//!   that line cannot catch, so the first one must hold);
//! - a handle is checked before it is dereferenced: it must be one this
//!   library returned and has not freed (a registry of live handles), and
//!   carry its magic; anything else is an error, not undefined behaviour;
//! - a handle is used by one thread at a time: a concurrent call on the
//!   same handle is refused (a busy flag), not a data race;
//! - every handle gets a serial number when it is made; a reader opened on
//!   a worker remembers the worker's address and serial, so a worker freed
//!   and another attached at the same address (malloc reuses it) is not
//!   taken for the one whose mapping the reader borrows;
//! - failures return -1 (or NULL) and leave a NUL-terminated message in the
//!   handle, read with `walshm_error`.

use crate::{Error, Message, ReadMode, Reader, RecordKind, SlotReader, Worker};
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const WORKER_MAGIC: u64 = u64::from_le_bytes(*b"WALSHMwk");
const READER_MAGIC: u64 = u64::from_le_bytes(*b"WALSHMrd");

static NULL_HANDLE: &CStr = c"walshm: the handle is NULL";
static INVALID_HANDLE: &CStr =
    c"walshm: not a live walshm handle (never returned by walshm, or already freed)";
static EMPTY: &CStr = c"";

/// The live handles (workers and readers) of this process: address and
/// serial number.
static LIVE: Mutex<Vec<(usize, u64)>> = Mutex::new(Vec::new());
/// The serial number of the next handle.
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// Records a new handle under the next serial number.
fn register(addr: usize) {
    let serial = NEXT_SERIAL.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut live) = LIVE.lock() {
        live.push((addr, serial));
    }
}

fn unregister(addr: usize) -> bool {
    let Ok(mut live) = LIVE.lock() else {
        return false;
    };
    match live.iter().position(|&(a, _)| a == addr) {
        Some(i) => {
            live.swap_remove(i);
            true
        }
        None => false,
    }
}

fn is_live(addr: usize) -> bool {
    serial_of(addr).is_some()
}

/// The serial number of the live handle at `addr`.
fn serial_of(addr: usize) -> Option<u64> {
    let live = LIVE.lock().ok()?;
    live.iter().find(|&&(a, _)| a == addr).map(|&(_, s)| s)
}

/// What the handle checks need of a handle type.
trait Handle {
    const MAGIC: u64;
    fn magic(&self) -> u64;
    fn busy(&self) -> &AtomicBool;
    fn error(&self) -> &CStr;
    fn set_error(&mut self, e: CString);
}

/// `p` as a live handle of type `H`, or None (NULL, never returned by us,
/// freed, or a handle of the other type).
fn live<'a, H: Handle>(p: *const H) -> Option<&'a H> {
    if p.is_null() || !is_live(p as usize) {
        return None;
    }
    // SAFETY: `p` is in the registry: a `Box<H'>` we leaked and have not
    // freed, H' being one of the `#[repr(C)]` handle types, which all start
    // with their magic; the magic check below tells them apart before any
    // other field is used.
    let h = unsafe { &*p };
    (h.magic() == H::MAGIC).then_some(h)
}

/// `walshm_error` / `walshm_reader_error`.
fn error_of<H: Handle>(p: *const H) -> *const c_char {
    if p.is_null() {
        return NULL_HANDLE.as_ptr();
    }
    match live(p) {
        // Acquire pairs with the Release store that ends a call.
        Some(h) if !h.busy().load(Ordering::Acquire) => h.error().as_ptr(),
        _ => INVALID_HANDLE.as_ptr(),
    }
}

/// Takes a live, idle handle out of the registry and back into its box.
fn take_handle<H: Handle>(p: *mut H) -> Option<Box<H>> {
    let h = live(p)?;
    if h.busy().swap(true, Ordering::Acquire) || !unregister(p as usize) {
        return None;
    }
    // SAFETY: the handle came from Box::into_raw and is now out of the
    // registry: nobody else can reach it through this library.
    Some(unsafe { Box::from_raw(p) })
}

/// A worker handle.
#[allow(non_camel_case_types)]
#[repr(C)]
pub struct walshm_worker {
    magic: u64,
    busy: AtomicBool,
    worker: Worker,
    error: CString,
}

/// A reader handle.
#[allow(non_camel_case_types)]
#[repr(C)]
pub struct walshm_reader {
    magic: u64,
    busy: AtomicBool,
    /// The worker whose flush position bounds it (0: none) and that
    /// worker handle's serial number: the same handle must stay live.
    worker: usize,
    worker_serial: u64,
    source: Source,
    error: CString,
}

/// What a reader handle reads.
enum Source {
    /// Decoded records.
    Records(Box<Reader<'static>>),
    /// A slot's committed messages; the last one returned is kept (with
    /// its prefix NUL-terminated) while the caller may look at it.
    Slot {
        reader: Box<SlotReader<'static>>,
        current: Option<(Message, CString)>,
    },
}

/// `Handle` for a handle type with the fields `magic`, `busy`, `error`.
macro_rules! impl_handle {
    ($ty:ty, $magic:expr) => {
        impl Handle for $ty {
            const MAGIC: u64 = $magic;
            fn magic(&self) -> u64 {
                self.magic
            }
            fn busy(&self) -> &AtomicBool {
                &self.busy
            }
            fn error(&self) -> &CStr {
                &self.error
            }
            fn set_error(&mut self, e: CString) {
                self.error = e;
            }
        }
    };
}

impl_handle!(walshm_worker, WORKER_MAGIC);
impl_handle!(walshm_reader, READER_MAGIC);

/// A decoded record, as `walshm_reader_next` fills it in.
#[repr(C)]
pub struct walshm_record {
    pub lsn: u64,
    pub end: u64,
    pub xid: u32,
    /// WALSHM_RECORD_*.
    pub kind: c_int,
    /// NUL-terminated; valid until the next call on the reader.
    pub prefix: *const c_char,
    pub payload: *const u8,
    pub payload_len: usize,
}

pub const WALSHM_RECORD_OTHER: c_int = 0;
pub const WALSHM_RECORD_MESSAGE: c_int = 1;
pub const WALSHM_RECORD_MESSAGE_TX: c_int = 2;
pub const WALSHM_RECORD_COMMIT: c_int = 3;
pub const WALSHM_RECORD_ABORT: c_int = 4;

fn message_cstring(e: &dyn std::fmt::Display) -> CString {
    CString::new(e.to_string().replace('\0', " ")).unwrap_or_default()
}

/// Copies `msg` into `buf` (NUL-terminated, truncated to `len`).
///
/// # Safety
/// `buf` is NULL or points to `len` writable bytes.
unsafe fn write_errbuf(buf: *mut c_char, len: usize, msg: &str) {
    if buf.is_null() || len == 0 {
        return;
    }
    let n = msg.len().min(len - 1);
    // SAFETY: the caller promises `len` writable bytes at `buf`; we write
    // n + 1 <= len of them.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), buf as *mut u8, n);
        *buf.add(n) = 0;
    }
}

/// A C string argument as UTF-8, or the error naming it.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str, Error> {
    if p.is_null() {
        return Err(Error::InvalidArgument(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL, and NUL-terminated by the caller's promise.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| Error::BadPrefix)
}

/// The payload argument, or the error naming it.
///
/// # Safety
/// `data` is NULL or points to `len` readable bytes.
unsafe fn bytes_arg<'a>(data: *const u8, len: usize) -> Result<&'a [u8], Error> {
    if len == 0 {
        return Ok(&[]);
    }
    if data.is_null() {
        return Err(Error::InvalidArgument(format!(
            "data is NULL with a length of {len}"
        )));
    }
    if len > crate::MAX_PAYLOAD {
        return Err(Error::PayloadTooLarge(len));
    }
    // SAFETY: non-NULL, `len` readable bytes by the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts(data, len) })
}

/// Runs `f` on the live, idle handle `p` under `catch_unwind`: its code,
/// or -1 (bad or busy handle untouched; an `Err` or a panic stored as the
/// handle's message).
fn with_handle<H: Handle>(p: *mut H, f: impl FnOnce(&mut H) -> Result<c_int, CString>) -> c_int {
    if live(p).is_none() {
        return -1;
    }
    // SAFETY: a live handle (checked above), and the busy flag below makes
    // this call its only user.
    let h = unsafe { &mut *p };
    if h.busy().swap(true, Ordering::Acquire) {
        // Another thread is inside a call on this handle: touch nothing.
        return -1;
    }
    let rc = match catch_unwind(AssertUnwindSafe(|| f(&mut *h))) {
        Ok(Ok(rc)) => rc,
        Ok(Err(msg)) => {
            h.set_error(msg);
            -1
        }
        Err(_) => {
            h.set_error(c"walshm: internal error (panic caught)".into());
            -1
        }
    };
    // Release pairs with the Acquire swap above (the next caller sees what
    // this call wrote).
    h.busy().store(false, Ordering::Release);
    rc
}

/// Runs `f` on the worker behind `w`; 0 on success, -1 with a message.
fn with_worker(w: *mut walshm_worker, f: impl FnOnce(&mut Worker) -> Result<(), Error>) -> c_int {
    with_handle(w, |h| match f(&mut h.worker) {
        Ok(()) => {
            h.error = CString::default();
            Ok(0)
        }
        Err(e) => Err(message_cstring(&e)),
    })
}

/// The handle `make` builds from a successful `r`, or NULL with the
/// failure's message in `errbuf`.
///
/// # Safety
/// `errbuf` NULL or `errlen` writable bytes.
unsafe fn handle_or_errbuf<T, H>(
    r: std::thread::Result<Result<T, Error>>,
    errbuf: *mut c_char,
    errlen: usize,
    make: impl FnOnce(T) -> *mut H,
) -> *mut H {
    let msg = match r {
        Ok(Ok(v)) => return make(v),
        Ok(Err(e)) => e.to_string(),
        Err(_) => "walshm: internal error (panic caught)".to_string(),
    };
    // SAFETY: errbuf/errlen as the caller promised.
    unsafe { write_errbuf(errbuf, errlen, &msg) };
    std::ptr::null_mut()
}

/// Stores `v` through an optional out-pointer.
///
/// # Safety
/// `out` is NULL or points to a writable u64.
unsafe fn put(out: *mut u64, v: u64) {
    if !out.is_null() {
        // SAFETY: non-NULL and writable by the caller's promise.
        unsafe { out.write(v) };
    }
}

/// `walshm_emit` and `walshm_emit_tx`: validates the message arguments,
/// calls `f`, stores the LSN.
///
/// # Safety
/// `prefix` NULL or NUL-terminated, `data` NULL or `len` readable bytes,
/// `lsn` NULL or writable.
unsafe fn message_call(
    w: *mut walshm_worker,
    prefix: *const c_char,
    data: *const u8,
    len: usize,
    lsn: *mut u64,
    f: fn(&mut Worker, &str, &[u8]) -> Result<u64, Error>,
) -> c_int {
    with_worker(w, |wk| {
        // SAFETY: the caller's promises for prefix and data/len.
        let (prefix, data) = unsafe { (str_arg(prefix, "prefix")?, bytes_arg(data, len)?) };
        let at = f(wk, prefix, data)?;
        // SAFETY: lsn is NULL or writable.
        unsafe { put(lsn, at) };
        Ok(())
    })
}

/// `walshm_insert_lsn` and `walshm_flush_lsn`.
///
/// # Safety
/// `lsn` NULL or writable.
unsafe fn position_call(w: *mut walshm_worker, lsn: *mut u64, f: fn(&Worker) -> u64) -> c_int {
    with_worker(w, |wk| {
        // SAFETY: lsn is NULL or writable.
        unsafe { put(lsn, f(wk)) };
        Ok(())
    })
}

/// Attaches; NULL on failure with the message in `errbuf`.
///
/// # Safety
/// `data_dir` is NULL or NUL-terminated; `errbuf` NULL or `errlen` bytes.
#[no_mangle]
pub unsafe extern "C" fn walshm_attach(
    data_dir: *const c_char,
    errbuf: *mut c_char,
    errlen: usize,
) -> *mut walshm_worker {
    let r = catch_unwind(|| {
        let dir = if data_dir.is_null() {
            None
        } else {
            // SAFETY: non-NULL and NUL-terminated by the caller's promise.
            let s = unsafe { CStr::from_ptr(data_dir) };
            let s = s
                .to_str()
                .map_err(|_| Error::InvalidArgument("data_dir is not UTF-8".into()))?;
            Some(Path::new(s).to_path_buf())
        };
        Worker::attach(dir.as_deref())
    });
    let made = |worker| {
        let h = Box::into_raw(Box::new(walshm_worker {
            magic: WORKER_MAGIC,
            busy: AtomicBool::new(false),
            worker,
            error: CString::default(),
        }));
        register(h as usize);
        // SAFETY: errbuf/errlen as the caller promised.
        unsafe { write_errbuf(errbuf, errlen, "") };
        h
    };
    // SAFETY: errbuf/errlen as the caller promised.
    unsafe { handle_or_errbuf(r, errbuf, errlen, made) }
}

/// # Safety
/// Pointer arguments as `walshm.h` documents them.
#[no_mangle]
pub unsafe extern "C" fn walshm_emit(
    w: *mut walshm_worker,
    prefix: *const c_char,
    data: *const u8,
    len: usize,
    lsn: *mut u64,
) -> c_int {
    // SAFETY: the caller's promises, passed on.
    unsafe { message_call(w, prefix, data, len, lsn, Worker::emit) }
}

/// # Safety
/// `w` as `walshm.h` documents it.
#[no_mangle]
pub unsafe extern "C" fn walshm_begin(w: *mut walshm_worker) -> c_int {
    with_worker(w, |wk| wk.begin())
}

/// # Safety
/// Pointer arguments as `walshm.h` documents them.
#[no_mangle]
pub unsafe extern "C" fn walshm_emit_tx(
    w: *mut walshm_worker,
    prefix: *const c_char,
    data: *const u8,
    len: usize,
    lsn: *mut u64,
) -> c_int {
    // SAFETY: the caller's promises, passed on.
    unsafe { message_call(w, prefix, data, len, lsn, Worker::emit_tx) }
}

/// # Safety
/// Pointer arguments as `walshm.h` documents them.
#[no_mangle]
pub unsafe extern "C" fn walshm_commit(w: *mut walshm_worker, commit_lsn: *mut u64) -> c_int {
    with_worker(w, |wk| {
        let at = wk.commit()?;
        // SAFETY: commit_lsn is NULL or writable.
        unsafe { put(commit_lsn, at) };
        Ok(())
    })
}

/// # Safety
/// `w` as `walshm.h` documents it.
#[no_mangle]
pub unsafe extern "C" fn walshm_abort(w: *mut walshm_worker) -> c_int {
    with_worker(w, |wk| wk.abort())
}

/// # Safety
/// `w` as `walshm.h` documents it.
#[no_mangle]
pub unsafe extern "C" fn walshm_flush(w: *mut walshm_worker, lsn: u64) -> c_int {
    with_worker(w, |wk| wk.flush(lsn))
}

/// # Safety
/// Pointer arguments as `walshm.h` documents them.
#[no_mangle]
pub unsafe extern "C" fn walshm_insert_lsn(w: *mut walshm_worker, lsn: *mut u64) -> c_int {
    // SAFETY: lsn is NULL or writable, passed on.
    unsafe { position_call(w, lsn, Worker::insert_lsn) }
}

/// # Safety
/// Pointer arguments as `walshm.h` documents them.
#[no_mangle]
pub unsafe extern "C" fn walshm_flush_lsn(w: *mut walshm_worker, lsn: *mut u64) -> c_int {
    // SAFETY: lsn is NULL or writable, passed on.
    unsafe { position_call(w, lsn, Worker::flush_lsn) }
}

/// 1 if the server asked this supervised worker to stop, 0 if not, -1 for
/// a bad handle.
///
/// # Safety
/// `w` as `walshm.h` documents it.
#[no_mangle]
pub unsafe extern "C" fn walshm_shutdown_requested(w: *const walshm_worker) -> c_int {
    if live(w).is_none() {
        return -1;
    }
    c_int::from(crate::attach::shutdown_requested())
}

/// The message of the last failed call on `w` ("" after a success).
///
/// # Safety
/// `w` as `walshm.h` documents it.
#[no_mangle]
pub unsafe extern "C" fn walshm_error(w: *const walshm_worker) -> *const c_char {
    error_of(w)
}

/// Detaches and frees `w` (even when detaching reports an error).
///
/// # Safety
/// `w` as `walshm.h` documents it; not used after this call.
#[no_mangle]
pub unsafe extern "C" fn walshm_detach(w: *mut walshm_worker) -> c_int {
    let Some(mut h) = take_handle(w) else {
        return -1;
    };
    h.magic = 0;
    let r = catch_unwind(AssertUnwindSafe(move || h.worker.detach()));
    match r {
        Ok(Ok(())) => 0,
        _ => -1,
    }
}

// ----------------------------------------------------------------------
// Reader (addition beyond the fixed contract)
// ----------------------------------------------------------------------

fn new_reader_handle(worker: usize, source: Source) -> *mut walshm_reader {
    // No live handle at address 0 (no worker): serial 0, never handed out.
    let worker_serial = serial_of(worker).unwrap_or(0);
    let h = Box::into_raw(Box::new(walshm_reader {
        magic: READER_MAGIC,
        busy: AtomicBool::new(false),
        worker,
        worker_serial,
        source,
        error: CString::default(),
    }));
    register(h as usize);
    h
}

/// A reader bounded by `w`'s flush position; NULL on error (message in
/// `walshm_error(w)`). Close it before detaching `w`.
///
/// # Safety
/// `w` as `walshm.h` documents it.
#[no_mangle]
pub unsafe extern "C" fn walshm_reader_open(
    w: *mut walshm_worker,
    from: u64,
) -> *mut walshm_reader {
    // SAFETY: the caller's promise for `w`, passed on.
    unsafe { open_attached_reader(w, from, ReadMode::Flushed) }
}

/// A reader of records as soon as they are completely inserted, before
/// they are durable (`Worker::reader_inserted`); NULL on error (message in
/// `walshm_error(w)`). Close it before detaching `w`.
///
/// # Safety
/// `w` as `walshm.h` documents it.
#[no_mangle]
pub unsafe extern "C" fn walshm_reader_open_inserted(
    w: *mut walshm_worker,
    from: u64,
) -> *mut walshm_reader {
    // SAFETY: the caller's promise for `w`, passed on.
    unsafe { open_attached_reader(w, from, ReadMode::Inserted) }
}

/// `walshm_reader_open` and `walshm_reader_open_inserted`.
///
/// # Safety
/// `w` as `walshm.h` documents it.
unsafe fn open_attached_reader(
    w: *mut walshm_worker,
    from: u64,
    mode: ReadMode,
) -> *mut walshm_reader {
    let mut out = None;
    with_worker(w, |wk| {
        let r = wk.reader_in(from, mode)?;
        // SAFETY: the reader borrows the worker's mapping, which lives as
        // long as the worker handle; every reader call first checks that
        // the handle is still live (`walshm_reader_next`), and the header
        // requires closing readers before detaching.
        out = Some(unsafe { std::mem::transmute::<Reader<'_>, Reader<'static>>(r) });
        Ok(())
    });
    match out {
        Some(r) => new_reader_handle(w as usize, Source::Records(Box::new(r))),
        None => std::ptr::null_mut(),
    }
}

/// Creates slot `name` at the current end of WAL (`Worker::slot_create`);
/// its position into `*lsn` (if not NULL). 0 ok, -1 error (walshm_error).
///
/// # Safety
/// `w` as `walshm.h` documents it; `name` NUL-terminated; `lsn` NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn walshm_slot_create(
    w: *mut walshm_worker,
    name: *const c_char,
    lsn: *mut u64,
) -> c_int {
    with_worker(w, |wk| {
        // SAFETY: the caller's promise for `name`.
        let name = unsafe { str_arg(name, "name") }?;
        let at = wk.slot_create(name)?;
        // SAFETY: lsn is NULL or writable.
        unsafe { put(lsn, at) };
        Ok(())
    })
}

/// Drops slot `name`. 0 ok, -1 error (walshm_error).
///
/// # Safety
/// `w` as `walshm.h` documents it; `name` NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn walshm_slot_drop(w: *mut walshm_worker, name: *const c_char) -> c_int {
    with_worker(w, |wk| {
        // SAFETY: the caller's promise for `name`.
        let name = unsafe { str_arg(name, "name") }?;
        wk.slot_drop(name)
    })
}

/// A reader of slot `name`'s committed messages (`Worker::reader_slot`);
/// NULL on error (walshm_error(w)). Close it before detaching `w`.
///
/// # Safety
/// `w` as `walshm.h` documents it; `name` NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn walshm_reader_open_slot(
    w: *mut walshm_worker,
    name: *const c_char,
) -> *mut walshm_reader {
    let mut out = None;
    with_worker(w, |wk| {
        // SAFETY: the caller's promise for `name`.
        let name = unsafe { str_arg(name, "name") }?;
        let r = wk.reader_slot(name)?;
        // SAFETY: as in `open_attached_reader`: the slot reader borrows the
        // worker, which lives as long as its handle; every reader call
        // checks the handle first, and readers are closed before detaching.
        out = Some(unsafe { std::mem::transmute::<SlotReader<'_>, SlotReader<'static>>(r) });
        Ok(())
    });
    match out {
        Some(reader) => new_reader_handle(
            w as usize,
            Source::Slot {
                reader: Box::new(reader),
                current: None,
            },
        ),
        None => std::ptr::null_mut(),
    }
}

/// A slot reader's consumer has everything committed before `lsn` (a
/// record's `end`). 0 ok, -1 error (walshm_reader_error), also for a
/// reader not opened on a slot.
///
/// # Safety
/// `r` as `walshm.h` documents it.
#[no_mangle]
pub unsafe extern "C" fn walshm_reader_confirm(r: *mut walshm_reader, lsn: u64) -> c_int {
    with_handle(r, |h| {
        if h.worker != 0 && serial_of(h.worker) != Some(h.worker_serial) {
            return Err(c"walshm: the reader's worker was detached".into());
        }
        match &mut h.source {
            Source::Slot { reader, .. } => reader
                .confirm(lsn)
                .map(|_| 0)
                .map_err(|e| message_cstring(&e)),
            Source::Records(_) => {
                Err(c"walshm: not a slot reader (walshm_reader_open_slot)".into())
            }
        }
    })
}

/// A reader of `data_dir`'s WAL files (no server needed); NULL on error.
///
/// # Safety
/// `data_dir` NUL-terminated; `errbuf` NULL or `errlen` bytes.
#[no_mangle]
pub unsafe extern "C" fn walshm_reader_open_dir(
    data_dir: *const c_char,
    from: u64,
    errbuf: *mut c_char,
    errlen: usize,
) -> *mut walshm_reader {
    let r = catch_unwind(|| {
        // SAFETY: the caller's promise for data_dir.
        let dir = unsafe { str_arg(data_dir, "data_dir") }
            .map_err(|_| Error::InvalidArgument("data_dir is NULL or not UTF-8".into()))?;
        Reader::open(Path::new(dir), from)
    });
    // SAFETY: errbuf/errlen as the caller promised.
    unsafe {
        handle_or_errbuf(r, errbuf, errlen, |reader| {
            new_reader_handle(0, Source::Records(Box::new(reader)))
        })
    }
}

/// The next record into `*out`, waiting up to `timeout_ms` (0: no wait);
/// 1: a record, 0: none yet, -1: error (`walshm_reader_error`).
///
/// # Safety
/// `r` as `walshm.h` documents it; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn walshm_reader_next(
    r: *mut walshm_reader,
    out: *mut walshm_record,
    timeout_ms: u32,
) -> c_int {
    with_handle(r, |h| {
        if out.is_null() {
            return Err(c"walshm: out is NULL".into());
        }
        if h.worker != 0 && serial_of(h.worker) != Some(h.worker_serial) {
            return Err(c"walshm: the reader's worker was detached (a handle attached since is another attachment: open a new reader on it)".into());
        }
        let timeout = Duration::from_millis(timeout_ms as u64);
        // SAFETY: `out` is non-NULL and writable by the caller's promise.
        let out = unsafe { &mut *out };
        let filled = match &mut h.source {
            Source::Records(reader) => fill_next(reader, timeout, out),
            Source::Slot { reader, current } => fill_next_slot(reader, current, timeout, out),
        };
        filled.map(c_int::from).map_err(|e| message_cstring(&e))
    })
}

fn fill_next(
    reader: &mut Reader<'static>,
    timeout: Duration,
    out: &mut walshm_record,
) -> Result<bool, Error> {
    let Some(rec) = reader.next_wait(timeout)? else {
        return Ok(false);
    };
    out.lsn = rec.lsn;
    out.end = rec.end;
    out.xid = rec.xid;
    out.kind = match rec.kind {
        RecordKind::Message {
            transactional: false,
        } => WALSHM_RECORD_MESSAGE,
        RecordKind::Message {
            transactional: true,
        } => WALSHM_RECORD_MESSAGE_TX,
        RecordKind::Commit => WALSHM_RECORD_COMMIT,
        RecordKind::Abort => WALSHM_RECORD_ABORT,
        RecordKind::Other => WALSHM_RECORD_OTHER,
    };
    // A message's prefix is followed by its NUL inside the record data.
    out.prefix = if rec.prefix.is_empty() {
        EMPTY.as_ptr()
    } else {
        rec.prefix.as_ptr() as *const c_char
    };
    out.payload = rec.payload.as_ptr();
    out.payload_len = rec.payload.len();
    Ok(true)
}

/// A slot reader's next committed message as a WALSHM_RECORD_MESSAGE_TX
/// record whose `end` is its COMMIT's end (what to confirm).
fn fill_next_slot(
    reader: &mut SlotReader<'static>,
    current: &mut Option<(Message, CString)>,
    timeout: Duration,
    out: &mut walshm_record,
) -> Result<bool, Error> {
    let Some(m) = reader.next_wait(timeout)? else {
        return Ok(false);
    };
    let prefix = CString::new(m.prefix.as_str()).map_err(|_| Error::BadPrefix)?;
    let (m, prefix) = current.insert((m, prefix));
    out.lsn = m.lsn;
    out.end = m.commit_end;
    out.xid = m.xid;
    out.kind = WALSHM_RECORD_MESSAGE_TX;
    out.prefix = prefix.as_ptr();
    out.payload = m.payload.as_ptr();
    out.payload_len = m.payload.len();
    Ok(true)
}

/// The message of the reader's last failed call.
///
/// # Safety
/// `r` as `walshm.h` documents it.
#[no_mangle]
pub unsafe extern "C" fn walshm_reader_error(r: *const walshm_reader) -> *const c_char {
    error_of(r)
}

/// Frees a reader; -1 for a bad handle.
///
/// # Safety
/// `r` as `walshm.h` documents it; not used after this call.
#[no_mangle]
pub unsafe extern "C" fn walshm_reader_close(r: *mut walshm_reader) -> c_int {
    match take_handle(r) {
        Some(h) => {
            let worker_live = h.worker == 0 || serial_of(h.worker) == Some(h.worker_serial);
            match h.source {
                // A slot reader releases its slot through its worker: if
                // that was detached first (against the header's rule), the
                // reader is leaked rather than touch freed memory.
                Source::Slot { reader, .. } if !worker_live => std::mem::forget(reader),
                source => drop(source),
            }
            0
        }
        None => -1,
    }
}
