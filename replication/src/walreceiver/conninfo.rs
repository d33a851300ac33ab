//! `primary_conninfo`: libpq's keyword/value connection string
//! (conninfo_parse in fe-connect.c), the form `pg_basebackup -R` writes:
//! `key=value` pairs separated by white space, spaces around `=` allowed,
//! a value either bare (up to the next white space, `\` escaping the next
//! character) or in single quotes (`\'` and `\\` inside). URIs
//! (`postgresql://...`) are not taken.
//!
//! Kept: host (a directory means a Unix socket; with a list, the first),
//! port, user, password, passfile, application_name. Every other libpq
//! keyword (sslmode, channel_binding, gssencmode, target_session_attrs, ...)
//! is accepted and ignored, so what pg_basebackup writes works; a key libpq
//! does not know is an error, as libpq says "invalid connection option".

use std::fmt;

/// The libpq keywords walshm's walreceiver accepts (used or ignored).
const KNOWN: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "user",
    "password",
    "passfile",
    "application_name",
    "dbname",
    "channel_binding",
    "connect_timeout",
    "client_encoding",
    "options",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "sslmode",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "gssencmode",
    "krbsrvname",
    "gsslib",
    "service",
    "target_session_attrs",
    "replication",
];

/// A parsed `primary_conninfo`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnInfo {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub user: Option<String>,
    pub password: Option<String>,
    pub passfile: Option<String>,
    pub application_name: Option<String>,
}

/// Why a connection string was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct ConnInfoError(pub String);

impl fmt::Display for ConnInfoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl ConnInfo {
    /// Parses `text` (see the module header).
    pub fn parse(text: &str) -> Result<ConnInfo, ConnInfoError> {
        if text.starts_with("postgresql://") || text.starts_with("postgres://") {
            return Err(ConnInfoError(
                "connection URIs are not supported in primary_conninfo; use keyword=value pairs"
                    .into(),
            ));
        }
        let mut info = ConnInfo::default();
        for (key, value) in pairs(text)? {
            if !KNOWN.contains(&key.as_str()) {
                return Err(ConnInfoError(format!(
                    "invalid connection option \"{key}\""
                )));
            }
            info.take(&key, value)?;
        }
        Ok(info)
    }

    fn take(&mut self, key: &str, value: String) -> Result<(), ConnInfoError> {
        match key {
            "host" => {
                let first = value.split(',').next().unwrap_or("").to_string();
                self.host = Some(first);
            }
            "port" => {
                let first = value.split(',').next().unwrap_or("");
                let port = first
                    .parse()
                    .map_err(|_| ConnInfoError(format!("invalid port number: \"{first}\"")))?;
                self.port = Some(port);
            }
            "user" => self.user = Some(value),
            "password" => self.password = Some(value),
            "passfile" => self.passfile = Some(value),
            "application_name" => self.application_name = Some(value),
            _ => {}
        }
        Ok(())
    }

    /// The string without its password, as pg_stat_wal_receiver shows it.
    pub fn display_without_password(&self) -> String {
        let mut parts = Vec::new();
        let mut add = |k: &str, v: &Option<String>| {
            if let Some(v) = v {
                parts.push(format!("{k}={}", quote(v)));
            }
        };
        add("user", &self.user);
        add("passfile", &self.passfile);
        add("host", &self.host);
        add("port", &self.port.map(|p| p.to_string()));
        add("application_name", &self.application_name);
        parts.join(" ")
    }
}

/// A value as libpq would need it written.
fn quote(v: &str) -> String {
    if !v.is_empty() && !v.contains([' ', '\'', '\\']) {
        return v.to_string();
    }
    format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The `key=value` pairs of `text`.
fn pairs(text: &str) -> Result<Vec<(String, String)>, ConnInfoError> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(ConnInfoError(format!(
                "missing \"=\" after \"{key}\" in connection info string"
            )));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\\') => value.extend(chars.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                    None => {
                        return Err(ConnInfoError(
                            "unterminated quoted string in connection info string".into(),
                        ))
                    }
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        out.push((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_pg_basebackup_r_writes() {
        // postgresql.auto.conf's quoting ('' for ') is undone before this.
        let text = "user=root passfile='/root/.pgpass' channel_binding=prefer host='/tmp/pri dir' port=5499 sslmode=prefer sslcompression=0 sslsni=1 ssl_min_protocol_version=TLSv1.2 gssencmode=prefer krbsrvname=postgres target_session_attrs=any";
        let c = ConnInfo::parse(text).unwrap();
        assert_eq!(c.host.as_deref(), Some("/tmp/pri dir"));
        assert_eq!(c.port, Some(5499));
        assert_eq!(c.user.as_deref(), Some("root"));
        assert_eq!(c.passfile.as_deref(), Some("/root/.pgpass"));
        assert_eq!(c.application_name, None);
        assert_eq!(
            c.display_without_password(),
            "user=root passfile=/root/.pgpass host='/tmp/pri dir' port=5499"
        );
    }

    #[test]
    fn quoting_spaces_and_errors() {
        let c = ConnInfo::parse(" host = /d  port= 1 application_name='a b\\'c' password=x\\ y")
            .unwrap();
        assert_eq!(c.host.as_deref(), Some("/d"));
        assert_eq!(c.application_name.as_deref(), Some("a b'c"));
        assert_eq!(c.password.as_deref(), Some("x y"));
        assert!(!c.display_without_password().contains("x y"));
        for (text, error) in [
            ("host", "missing \"=\""),
            ("bogus=1", "invalid connection option"),
            ("port=x", "invalid port"),
            ("host='x", "unterminated"),
        ] {
            let e = ConnInfo::parse(text).unwrap_err().0;
            assert!(e.contains(error), "{text}: {e}");
        }
        assert!(ConnInfo::parse("postgresql://h/").is_err());
        assert_eq!(ConnInfo::parse("").unwrap(), ConnInfo::default());
    }
}

/// The password for (host, port, user) from a password file in libpq's
/// format (`hostname:port:database:username:password` lines, `*` matching
/// anything, `\` escaping `:` and `\`), the database being
/// "replication"; a Unix-socket host is matched as "localhost", as libpq
/// does. A file that group or others may read is ignored (with libpq's
/// reason), as is a missing one.
pub fn password_from_file(
    path: &std::path::Path,
    host: &str,
    port: u16,
    user: &str,
) -> Result<Option<String>, String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(_) => return Ok(None),
    };
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "password file \"{}\" has group or world access; permissions should be u=rw (0600) or less",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("could not read password file \"{}\": {e}", path.display()))?;
    let host = if host.is_empty() || host.starts_with('/') {
        "localhost"
    } else {
        host
    };
    let port = port.to_string();
    let wanted = [host, port.as_str(), "replication", user];
    Ok(text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(passfile_fields)
        .find(|f| {
            f.len() == 5
                && f.iter()
                    .zip(wanted)
                    .all(|(have, want)| have == "*" || have == want)
        })
        .map(|f| f[4].clone()))
}

/// The `:`-separated fields of a password file line (`\` escapes).
fn passfile_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut().expect("one").extend(chars.next()),
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut().expect("one").push(c),
        }
    }
    fields
}

#[cfg(test)]
mod passfile_tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn password_files_as_libpq_reads_them() {
        let dir = std::env::temp_dir().join(format!("walshm-passfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("pgpass");
        std::fs::write(
            &f,
            "# comment\nother:5432:*:me:no\nlocalhost:5499:replication:me:s\\:e\\\\cret\n*:*:*:*:any\n",
        )
        .unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let got = |host, port, user| password_from_file(&f, host, port, user).unwrap();
        assert_eq!(got("/tmp/sock", 5499, "me").as_deref(), Some("s:e\\cret"));
        assert_eq!(got("127.0.0.1", 5499, "me").as_deref(), Some("any"));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(password_from_file(&f, "localhost", 5499, "me").is_err());
        assert_eq!(
            password_from_file(&dir.join("none"), "x", 1, "me"),
            Ok(None)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
