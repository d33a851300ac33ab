//! What SHOW, current_setting() and pg_settings answer for a session: the
//! parameters PostgreSQL always has (fixed values here), the session's own
//! (`synchronous_commit` with its transactional SET semantics, others as
//! set), and the server's settings.

use super::*;

/// Session parameters PostgreSQL always has and walshm answers with fixed
/// values: (name, value, vartype, category, description).
const BUILTIN_SETTINGS: &[(&str, &str, &str, &str, &str)] = &[
    (
        "application_name",
        "",
        "string",
        "Reporting and Logging / What to Log",
        "Sets the application name to be reported in statistics and logs.",
    ),
    (
        "block_size",
        "8192",
        "integer",
        "Preset Options",
        "Shows the size of a disk block.",
    ),
    (
        "client_encoding",
        "UTF8",
        "string",
        "Client Connection Defaults / Locale and Formatting",
        "Sets the client's character set encoding.",
    ),
    (
        "DateStyle",
        "ISO, MDY",
        "string",
        "Client Connection Defaults / Locale and Formatting",
        "Sets the display format for date and time values.",
    ),
    (
        "default_transaction_isolation",
        "read committed",
        "enum",
        "Client Connection Defaults / Statement Behavior",
        "Sets the transaction isolation level of each new transaction.",
    ),
    (
        "default_transaction_read_only",
        "off",
        "bool",
        "Client Connection Defaults / Statement Behavior",
        "Sets the default read-only status of new transactions.",
    ),
    (
        "in_hot_standby",
        "off",
        "bool",
        "Preset Options",
        "Shows whether hot standby is currently active.",
    ),
    (
        "integer_datetimes",
        "on",
        "bool",
        "Preset Options",
        "Shows whether datetimes are integer based.",
    ),
    (
        "IntervalStyle",
        "postgres",
        "enum",
        "Client Connection Defaults / Locale and Formatting",
        "Sets the display format for interval values.",
    ),
    (
        "is_superuser",
        "on",
        "bool",
        "Preset Options",
        "Shows whether the current user is a superuser.",
    ),
    (
        "server_encoding",
        "UTF8",
        "string",
        "Preset Options",
        "Shows the server (database) character set encoding.",
    ),
    (
        "server_version",
        DEFAULT_SERVER_VERSION,
        "string",
        "Preset Options",
        "Shows the server version.",
    ),
    (
        "server_version_num",
        "150000",
        "integer",
        "Preset Options",
        "Shows the server version as an integer.",
    ),
    (
        "standard_conforming_strings",
        "on",
        "bool",
        "Version and Platform Compatibility / Previous PostgreSQL Versions",
        "Causes '...' strings to treat backslashes literally.",
    ),
    (
        "TimeZone",
        "UTC",
        "string",
        "Client Connection Defaults / Locale and Formatting",
        "Sets the time zone for displaying and interpreting time stamps.",
    ),
    (
        "transaction_isolation",
        "read committed",
        "enum",
        "Client Connection Defaults / Statement Behavior",
        "Sets the current transaction's isolation level.",
    ),
    (
        "transaction_read_only",
        "off",
        "bool",
        "Client Connection Defaults / Statement Behavior",
        "Sets the current transaction's read-only status.",
    ),
    (
        "wal_block_size",
        "8192",
        "integer",
        "Preset Options",
        "Shows the block size in the write ahead log.",
    ),
    (
        "wal_level",
        "logical",
        "enum",
        "Write-Ahead Log / Settings",
        "Sets the level of information written to the WAL.",
    ),
];

/// The value of a builtin session parameter, by any-case name.
fn builtin_setting(lower: &str) -> Option<&'static str> {
    BUILTIN_SETTINGS
        .iter()
        .find(|b| b.0.eq_ignore_ascii_case(lower))
        .map(|b| b.1)
}

impl SessionSettings for Parameters {
    fn show(&self, session: &dyn Session, name: &str) -> Result<String, SqlError> {
        let lower = name.to_ascii_lowercase();
        if lower == "synchronous_commit" {
            let on = session.synchronous_commit();
            let shown_on = settings::parse_synchronous_commit(&self.sync_name)
                .map(|(b, _)| b)
                .unwrap_or(!on);
            return Ok(if shown_on == on {
                self.sync_name.clone()
            } else if on {
                "on".into()
            } else {
                "off".into()
            });
        }
        if let Some(v) = session.server_setting(&lower) {
            return Ok(v);
        }
        if let Some(v) = self.others.get(&lower) {
            return Ok(v.clone());
        }
        if lower == "wal_segment_size" {
            return Ok(format!("{}MB", session.wal_segment_size() >> 20));
        }
        builtin_setting(&lower)
            .map(str::to_string)
            .ok_or_else(|| unrecognized_parameter(name))
    }

    fn all(&self, session: &dyn Session) -> Vec<SettingRow> {
        let mut rows = session.server_settings();
        for row in &mut rows {
            if row.name == "synchronous_commit" {
                if let Ok(v) = self.show(session, &row.name) {
                    row.setting = v.clone();
                    row.shown = v;
                }
            }
        }
        let mut extra: Vec<(&str, String, &str, &str, &str)> = BUILTIN_SETTINGS
            .iter()
            .map(|b| {
                let value = self.show(session, b.0).unwrap_or_else(|_| b.1.to_string());
                (b.0, value, b.2, b.3, b.4)
            })
            .collect();
        extra.push((
            "wal_segment_size",
            format!("{}MB", session.wal_segment_size() >> 20),
            "integer",
            "Preset Options",
            "Shows the size of write ahead log segments.",
        ));
        for (name, value, vartype, category, desc) in extra {
            if rows.iter().any(|r| r.name.eq_ignore_ascii_case(name)) {
                continue;
            }
            rows.push(SettingRow {
                name: name.to_string(),
                setting: value.clone(),
                unit: None,
                category: category.to_string(),
                short_desc: desc.to_string(),
                context: if category == "Preset Options" {
                    "internal"
                } else {
                    "user"
                }
                .to_string(),
                vartype: vartype.to_string(),
                source: "default".to_string(),
                boot_val: value.clone(),
                reset_val: value.clone(),
                shown: value,
                ..SettingRow::default()
            });
        }
        rows.sort_by_key(|r| r.name.to_ascii_lowercase());
        rows
    }
}
