//! Signal dispositions and masks, in one place.
//!
//! Two kinds of handler exist, and neither runs anything but
//! async-signal-safe code:
//! - loops that poll (the postmaster's, an attached worker's, the probe's)
//!   use signal-hook (`signal_hook::flag`, `signal_hook::low_level::pipe`):
//!   it installs with SA_RESTART, which suits them (their waits are `poll`,
//!   which a signal always ends, or short sleeps);
//! - server children whose waits a signal must end (`recv` on the client
//!   socket, `ppoll`, a futex sleep) install here, without SA_RESTART:
//!   [`set_flag`] (store `true` to a static flag), [`interrupt_only`] (an
//!   empty handler: its only effect is EINTR), [`exit_on`] (write a
//!   prepared message, then `_exit`). signal-hook's SA_RESTART would make
//!   an interrupted `recv` carry on waiting for the client instead of
//!   noticing a shutdown or a cancel.
//!
//! Fork rule: a forked child inherits its parent's handlers (signal-hook's
//! among them), and must reset them right after `fork`
//! ([`reset_inherited`]) with every signal still blocked ([`block_all`]
//! before the fork, [`unblock_all`] once its own handlers are in place),
//! or a SIGTERM meant for the child runs the parent's handler in it.
//!
//! The handler tables are indexed by signal number; each entry is written
//! before its handler is installed (the installing `sigaction` orders it
//! for the handler) and read only by the handler.

use super::Signal;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, SigmaskHow};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicUsize, Ordering};

/// Signals the postmaster and the server children handle: what a child
/// resets to the default right after `fork`.
pub const INHERITED: [Signal; 9] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGHUP,
    Signal::SIGCHLD,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGPIPE,
    Signal::SIGALRM,
];

const NSIG: usize = 65;

/// The mask in force before [`block_all`], to give to [`restore`].
pub struct SavedMask(SigSet);

/// Blocks every signal; returns the previous mask.
pub fn block_all() -> SavedMask {
    let mut old = SigSet::empty();
    let _ = nix::sys::signal::sigprocmask(
        SigmaskHow::SIG_SETMASK,
        Some(&SigSet::all()),
        Some(&mut old),
    );
    SavedMask(old)
}

/// Puts back the mask [`block_all`] saved.
pub fn restore(saved: &SavedMask) {
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&saved.0), None);
}

/// Unblocks every signal. Async-signal-safe.
pub fn unblock_all() {
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
}

/// Blocks `sig` (it stays pending until unblocked, e.g. inside
/// [`super::fd::ppoll_readable`]).
pub fn block(sig: Signal) {
    let mut set = SigSet::empty();
    set.add(sig);
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None);
}

/// The current mask without `sig` (the mask to wait with).
pub(crate) fn mask_without(sig: Signal) -> SigSet {
    let mut cur = SigSet::thread_get_mask().unwrap_or_else(|_| SigSet::empty());
    cur.remove(sig);
    cur
}

fn install(sig: Signal, handler: SigHandler, flags: SaFlags) {
    let action = SigAction::new(handler, flags, SigSet::empty());
    // SAFETY: every handler passed here is SIG_DFL, SIG_IGN, one of this
    // module's (they only touch atomics and make async-signal-safe calls:
    // write, _exit), or one whose caller of the unsafe `set_handler`
    // vouched for it.
    let _ = unsafe { nix::sys::signal::sigaction(sig, &action) };
}

/// Puts `sigs` back to their default disposition. Async-signal-safe.
pub fn set_default(sigs: &[Signal]) {
    for &sig in sigs {
        install(sig, SigHandler::SigDfl, SaFlags::empty());
    }
}

/// A forked child's first step: every handler in [`INHERITED`] back to
/// the default (see the module header). Async-signal-safe.
pub fn reset_inherited() {
    set_default(&INHERITED);
}

/// Ignores `sig`.
pub fn ignore(sig: Signal) {
    install(sig, SigHandler::SigIgn, SaFlags::empty());
}

/// Whether `sig` is at its default disposition (nobody handles or
/// ignores it).
pub fn is_default(sig: Signal) -> bool {
    let mut old = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: a null new action only reads the current one into `old`, a
    // valid out-pointer (zeroed is a valid sigaction).
    let r = unsafe { libc::sigaction(sig as libc::c_int, std::ptr::null(), old.as_mut_ptr()) };
    // SAFETY: zero-initialised above, and filled by the kernel on success.
    r == 0 && unsafe { old.assume_init() }.sa_sigaction == libc::SIG_DFL
}

static FLAGS: [AtomicPtr<AtomicBool>; NSIG] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; NSIG];

extern "C" fn on_flag(sig: libc::c_int) {
    let flag = FLAGS[sig as usize].load(Ordering::Relaxed);
    if !flag.is_null() {
        // SAFETY: only [`set_flag`] stores here, a `&'static AtomicBool`.
        unsafe { (*flag).store(true, Ordering::Relaxed) };
    }
}

/// `sig` stores `true` to `flag` (no SA_RESTART: it also ends a wait).
pub fn set_flag(sig: Signal, flag: &'static AtomicBool) {
    FLAGS[sig as usize].store(
        flag as *const AtomicBool as *mut AtomicBool,
        Ordering::Relaxed,
    );
    install(sig, SigHandler::Handler(on_flag), SaFlags::empty());
}

extern "C" fn on_interrupt(_: libc::c_int) {}

/// `sig` only interrupts what this process waits in (EINTR, or the end of
/// a `ppoll` that unblocks it), nothing else.
pub fn interrupt_only(sig: Signal) {
    install(sig, SigHandler::Handler(on_interrupt), SaFlags::empty());
}

/// The exit code of [`exit_on`] per signal, and whether it writes the
/// message first ([`WITH_MESSAGE`]).
static EXIT_CODES: [AtomicI32; NSIG] = [const { AtomicI32::new(0) }; NSIG];
const WITH_MESSAGE: i32 = 1 << 30;

/// The descriptor and bytes [`exit_on`] writes (prepared before any
/// signal, see [`set_exit_message`]).
static MSG_FD: AtomicI32 = AtomicI32::new(-1);
static MSG: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static MSG_LEN: AtomicUsize = AtomicUsize::new(0);

/// Registers the message that an [`exit_on`] handler with `message` set
/// writes to `fd` before it exits (e.g. a client's "terminating
/// connection" error).
pub fn set_exit_message(fd: i32, msg: Vec<u8>) {
    let msg: &'static mut [u8] = Box::leak(msg.into_boxed_slice());
    // Relaxed: both are published by the Release store of MSG_FD below,
    // which the handler loads first.
    MSG_LEN.store(msg.len(), Ordering::Relaxed);
    MSG.store(msg.as_mut_ptr(), Ordering::Relaxed);
    // Release pairs with the Acquire load of MSG_FD in `on_exit`.
    MSG_FD.store(fd, Ordering::Release);
}

extern "C" fn on_exit(sig: libc::c_int) {
    let entry = EXIT_CODES[sig as usize].load(Ordering::Relaxed);
    if entry & WITH_MESSAGE != 0 {
        // Acquire pairs with the Release store in `set_exit_message`; the
        // loads after it are ordered by it, so they are Relaxed.
        let fd = MSG_FD.load(Ordering::Acquire);
        let msg = MSG.load(Ordering::Relaxed);
        if fd >= 0 && !msg.is_null() {
            // SAFETY: `msg` points to a leaked buffer of MSG_LEN bytes that
            // is never freed.
            let bytes = unsafe { std::slice::from_raw_parts(msg, MSG_LEN.load(Ordering::Relaxed)) };
            let _ = super::fd::write(fd, bytes);
        }
    }
    super::exit_now(entry & !WITH_MESSAGE);
}

/// `sig` ends this process with `_exit(code)`, after writing the message
/// of [`set_exit_message`] (if any) when `message` is set.
pub fn exit_on(sig: Signal, code: i32, message: bool) {
    let entry = code | if message { WITH_MESSAGE } else { 0 };
    EXIT_CODES[sig as usize].store(entry, Ordering::Relaxed);
    install(sig, SigHandler::Handler(on_exit), SaFlags::empty());
}

/// Installs `handler` for `sig` (no SA_RESTART).
///
/// # Safety
/// `handler` must only make async-signal-safe calls and touch memory that
/// stays valid for as long as it is installed.
pub unsafe fn set_handler(sig: Signal, handler: extern "C" fn(libc::c_int)) {
    install(sig, SigHandler::Handler(handler), SaFlags::empty());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_handler_sets_its_flag_and_defaults_read_back() {
        static GOT: AtomicBool = AtomicBool::new(false);
        assert!(is_default(Signal::SIGUSR2) || !is_default(Signal::SIGUSR2));
        set_flag(Signal::SIGUSR2, &GOT);
        assert!(!is_default(Signal::SIGUSR2));
        super::super::raise(Signal::SIGUSR2);
        assert!(GOT.load(Ordering::Relaxed));
        ignore(Signal::SIGUSR2);
        set_default(&[Signal::SIGUSR2]);
        assert!(is_default(Signal::SIGUSR2));
    }
}
