//! Running the programs walbench drives to completion (`postmaster init`,
//! pg_recvlogical, the PostgreSQL tools): one way to run one and to say
//! why it did not work, which is that it could not start or that it exited
//! unsuccessfully, with what it wrote to stderr.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `cmd` to completion. Errors: `"{could_not}: {error}"` when it does
/// not start, `"{failed}: {stderr}"` when it exits unsuccessfully.
pub fn output_checked(cmd: &mut Command, could_not: &str, failed: &str) -> Result<Output, String> {
    let out = cmd.output().map_err(|e| format!("{could_not}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{failed}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(out)
}

/// `postmaster init -D DIR ARGS` unless DIR already holds a data directory;
/// returns whether it initialized one.
pub fn init_if_needed(postmaster: &Path, dir: &Path, args: &[&str]) -> Result<bool, String> {
    if dir.join("global").join("pg_control").exists() {
        return Ok(false);
    }
    output_checked(
        Command::new(postmaster)
            .args(["init", "-D"])
            .arg(dir)
            .args(args),
        "could not run postmaster init",
        "postmaster init failed",
    )?;
    Ok(true)
}
