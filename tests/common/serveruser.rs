//! Running PostgreSQL's tools and walshm's servers as the server's user:
//! `pg_ctl` refuses to run as root, and a server's Unix socket admits only
//! its own user, so as root the commands of a test run as `postgres`
//! (`setpriv`, which execs the program itself: a process group made for
//! the command holds the program, not a helper).

use super::{run_cmd, Out, TIMEOUT};
use std::path::Path;
use std::process::Command;

/// How to become the server's user: nothing, or `setpriv ...` as root.
pub struct ServerUser {
    prefix: Vec<String>,
}

impl ServerUser {
    /// None (after a loud skip notice naming `what`) when running as root
    /// without a `postgres` user; with WALSHM_REQUIRE_PG=1 that panics.
    pub fn find(what: &str) -> Option<ServerUser> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Some(ServerUser { prefix: Vec::new() });
        }
        let known = Command::new("id")
            .args(["-u", "postgres"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !known {
            assert!(
                std::env::var("WALSHM_REQUIRE_PG").as_deref() != Ok("1"),
                "running as root, {what} needs a \"postgres\" user, and WALSHM_REQUIRE_PG=1"
            );
            eprintln!(
                "\n********************************************************\n\
                 SKIPPED: running as root and no \"postgres\" user for {what}\n\
                 ********************************************************\n"
            );
            return None;
        }
        let prefix = [
            "setpriv",
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--",
        ];
        Some(ServerUser {
            prefix: prefix.map(String::from).to_vec(),
        })
    }

    /// `program ARGS...` as the server's user.
    pub fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut c = match self.prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(program);
                c
            }
            None => Command::new(program),
        };
        c.args(args);
        c
    }

    /// Runs `program ARGS...` as the server's user, with the usual limit.
    pub fn run(&self, program: &Path, args: &[&str]) -> Out {
        run_cmd(&mut self.command(program, args), TIMEOUT)
    }

    /// Lets the server's user own `dir` (as root).
    pub fn give(&self, dir: &Path) {
        if self.prefix.is_empty() {
            return;
        }
        let o = run_cmd(
            Command::new("chown").args(["-R", "postgres", dir.to_str().unwrap()]),
            TIMEOUT,
        );
        assert!(o.status.success(), "chown: {}", o.describe());
    }
}
