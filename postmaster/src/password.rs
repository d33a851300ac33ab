//! Where the TCP password comes from, and what is kept of it.
//!
//! A plain password is never accepted on a command line (every local user
//! can read `/proc/PID/cmdline` of the postmaster and of each child) nor
//! written anywhere: it comes from a file readable by its owner only
//! (`init --pwfile FILE`, `start --pwfile FILE`; its first line, as
//! initdb's `--pwfile`) or from the `WALSHM_PASSWORD` environment variable,
//! which is wiped from this process's environment block (so that
//! `/proc/PID/environ` of the postmaster and of every child forked later
//! no longer shows it) and removed before any child is forked. Only the
//! SCRAM-SHA-256 verifier made from it is stored: in walshm.conf by
//! `init`, in the `password` setting by `start`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The environment variable a plain password may be given in.
pub const PASSWORD_ENV: &str = "WALSHM_PASSWORD";

/// The verifier for the password given by `--pwfile` or the environment;
/// None when neither gives one. `--pwfile` wins over the environment
/// (which is wiped either way).
pub fn verifier_from_inputs(pwfile: Option<&Path>) -> Result<Option<String>, String> {
    let from_env = take_env_password();
    let password = match pwfile {
        Some(p) => Some(read_pwfile(p)?),
        None => from_env,
    };
    match password {
        None => Ok(None),
        Some(p) if p.is_empty() => Err("the password is empty".into()),
        Some(p) => protocol::verifier_for_password(&p)
            .map(Some)
            .map_err(|e| format!("could not make a SCRAM verifier: {e}")),
    }
}

/// Checks that a configured `password` setting is a well-formed verifier.
pub fn check_verifier(text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Ok(());
    }
    protocol::Verifier::parse(text)
        .map(|_| ())
        .map_err(|e| format!("setting \"password\": {e}"))
}

/// The first line of `path`, which must be a regular file that neither
/// group nor others can read or write.
fn read_pwfile(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("could not read password file \"{}\": {e}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if !meta.is_file() {
        return Err(format!(
            "password file \"{}\" is not a regular file",
            path.display()
        ));
    }
    if mode & 0o077 != 0 {
        return Err(format!(
            "password file \"{}\" has group or world access (mode {mode:04o}); it must be readable by its owner only: chmod 0600 {}",
            path.display(),
            path.display()
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("could not read password file \"{}\": {e}", path.display()))?;
    Ok(text.lines().next().unwrap_or("").to_string())
}

/// Reads `WALSHM_PASSWORD`, overwrites its value in the environment block
/// and removes the variable.
fn take_env_password() -> Option<String> {
    let value = std::env::var(PASSWORD_ENV).ok();
    wipe_env_value(PASSWORD_ENV);
    std::env::remove_var(PASSWORD_ENV);
    value
}

/// Zeroes the value bytes of `name=` in place, wherever the environment
/// block holds it (for the variables a process starts with, that is the
/// memory `/proc/PID/environ` shows).
fn wipe_env_value(name: &str) {
    let prefix = format!("{name}=");
    // SAFETY: the postmaster is single-threaded here (nothing reads or
    // changes the environment concurrently); `environ` is a
    // NULL-terminated array of NUL-terminated strings owned by the C
    // library, and we only overwrite bytes before each string's NUL.
    unsafe {
        let mut entry = libc::environ;
        while !entry.is_null() && !(*entry).is_null() {
            let s = *entry;
            let len = libc::strlen(s);
            let bytes = std::slice::from_raw_parts_mut(s as *mut u8, len);
            if bytes.starts_with(prefix.as_bytes()) {
                bytes[prefix.len()..].fill(0);
            }
            entry = entry.add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pwfile_must_be_private() {
        let dir = std::env::temp_dir().join(format!("walshm-pw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("pw");
        std::fs::write(&p, "hunter2\nignored\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_pwfile(&p).unwrap_err();
        assert!(e.contains("0644"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_pwfile(&p).unwrap(), "hunter2");
        let v = verifier_from_inputs(Some(&p)).unwrap().unwrap();
        assert!(v.starts_with("SCRAM-SHA-256$4096:"), "{v}");
        assert!(!v.contains("hunter2"));
        check_verifier(&v).unwrap();
        assert!(check_verifier("SCRAM-SHA-256$x").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
