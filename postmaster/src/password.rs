//! Where the TCP passwords come from, and what is kept of them: the login
//! password ([`LOGIN`]) and the replication role's ([`REPLICATION`], which
//! replication connections over TCP authenticate with; see
//! protocol::startup), each from its own file and variable.
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
//! `init`, in its setting by `start`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// A password kept only as a verifier: the setting holding the verifier
/// and the environment variable the plain password may be given in.
pub struct Secret {
    pub setting: &'static str,
    pub env: &'static str,
}

/// The login password (`--pwfile`).
pub const LOGIN: Secret = Secret {
    setting: "password",
    env: "WALSHM_PASSWORD",
};

/// The replication role's password (`--replication-pwfile`).
pub const REPLICATION: Secret = Secret {
    setting: "replication_password",
    env: "WALSHM_REPLICATION_PASSWORD",
};

/// The verifier for `secret` given by its file or its environment
/// variable; None when neither gives one. The file wins over the
/// environment (which is wiped either way).
pub fn verifier_from_inputs(
    secret: &Secret,
    pwfile: Option<&Path>,
) -> Result<Option<String>, String> {
    let from_env = take_env_password(secret.env);
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

/// Checks that the configured verifier of `secret` (its setting's
/// value) is well formed.
pub fn check_verifier(secret: &Secret, text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Ok(());
    }
    protocol::Verifier::parse(text)
        .map(|_| ())
        .map_err(|e| format!("setting \"{}\": {e}", secret.setting))
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

/// Reads environment variable `name`, overwrites its value in the
/// environment block and removes the variable.
fn take_env_password(name: &str) -> Option<String> {
    let value = std::env::var(name).ok();
    wipe_env_value(name);
    std::env::remove_var(name);
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
        let v = verifier_from_inputs(&LOGIN, Some(&p)).unwrap().unwrap();
        assert!(v.starts_with("SCRAM-SHA-256$4096:"), "{v}");
        assert!(!v.contains("hunter2"));
        check_verifier(&LOGIN, &v).unwrap();
        let e = check_verifier(&REPLICATION, "SCRAM-SHA-256$x").unwrap_err();
        assert!(e.contains("replication_password"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
