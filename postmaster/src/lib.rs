//! The postmaster: `init` creates a data directory, `start` runs the server
//! (shared memory, forked children, crash handling), `waldump` prints WAL,
//! `status` reads a running server, `settings` prints the settings table.
//!
//! The postmaster never takes a spinlock or LWLock and never waits on
//! anything in shared memory: a crashed child may leave those in any state.
//! It only creates the segment before forking, and reads counters (plain
//! atomic loads) for its reports.
//!
//! Where things live: `supervisor` (the state machine: signals, reaping,
//! crash restart, shutdown order), `children` (kinds of children, the
//! fork and exec, the server processes' bodies), `registry` (the
//! registration socket, worker slots, liveness channels), `supervised`
//! (`--worker` commands and their restart rules), `admission` (whether a client gets
//! a backend, refusals, caps), `report` (the workload summary, English and
//! JSON, and the checks that set the exit code), `listen` (sockets),
//! `datadir` (init, pid file, settings file), `cli`, `password`, `waldump`.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod admission;
mod children;
pub mod cli;
pub mod datadir;
pub mod listen;
pub mod password;
mod registry;
mod report;
pub mod restore;
pub mod status;
pub mod supervised;
pub mod supervisor;
pub mod waldump;

/// Entry point of the `postmaster` binary; returns the exit code.
pub fn main() -> i32 {
    // As PostgreSQL: whatever the caller's umask, nothing this program
    // creates (data directory files, sockets, lock files) is readable by
    // group or others; files are also created 0600 explicitly.
    shmem::sys::umask(0o077);
    let args: Vec<String> = std::env::args().skip(1).collect();
    match cli::parse(&args) {
        Ok(cli::Command::Version) => {
            print!("{}", cli::version_text());
            0
        }
        Ok(cli::Command::Completions { shell }) => {
            cli::completions(shell);
            0
        }
        Ok(cli::Command::Settings(opts)) => {
            if opts.markdown {
                print!("{}", cli::settings_markdown());
            } else {
                print!("{}", cli::settings_text());
            }
            0
        }
        Ok(cli::Command::Init(opts)) => report(datadir::init(&opts)),
        Ok(cli::Command::Start(opts)) => match supervisor::start(opts) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("postmaster: error: {e}");
                1
            }
        },
        Ok(cli::Command::Waldump(opts)) => report(waldump::run(&opts)),
        Ok(cli::Command::Status(opts)) => status::run(&opts),
        // Help and the version on stdout (0), usage errors on stderr (2).
        Err(e) => {
            let _ = e.print();
            e.exit_code()
        }
    }
}

fn report(r: Result<(), String>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("postmaster: error: {e}");
            1
        }
    }
}

/// A log line on stderr. Output errors (a closed pipe) are ignored: the
/// postmaster must keep supervising whatever happens to its terminal.
pub(crate) fn log(level: &str, msg: &str) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "postmaster[{}] {level}:  {msg}",
        std::process::id()
    );
}
