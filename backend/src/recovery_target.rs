//! Point-in-time recovery: where archive recovery stops, by PostgreSQL's
//! rules (xlogrecovery.c's recoveryStopsBefore / recoveryStopsAfter).
//!
//! A target is read from the settings (`recovery_target_lsn`, `_time`,
//! `_xid`, `_name`; at most one may be set, as PostgreSQL checks when it
//! loads them) and applies only to archive recovery (`recovery.signal`).
//! The startup process asks [`RecoveryTarget::stops_before`] for each
//! record it reads, before taking it, and [`RecoveryTarget::stops_after`]
//! once it took it; the first answer ends recovery:
//!
//! | target | stops before the record (not kept) | stops after the record (kept) |
//! | --- | --- | --- |
//! | lsn | inclusive off: the first record starting at or after the LSN | inclusive on: the same record |
//! | xid | inclusive off: the COMMIT or ABORT of that transaction | inclusive on: the same record |
//! | time | the first COMMIT or ABORT later than the time (inclusive on), or not earlier (off) | never |
//! | name | never | the RESTORE_POINT record of that name (the first one, whatever `inclusive` says) |
//!
//! So with a time target, commits at exactly the target time are kept
//! when inclusive, and a restore point is always kept. A record that ends
//! recovery "before" leaves the end of WAL at the end of the record before
//! it; "after", at its own end. The caller makes that the switch point of
//! the new timeline (or stops the server, per `recovery_target_action`);
//! the WAL after it stays the old timeline's.
//!
//! Invariant: a target never stops recovery before the checkpoint it
//! started from is read (the caller refuses such a stop, as PostgreSQL
//! refuses one before its consistent point), and a target that recovery
//! never reached is an error, not an end (PostgreSQL 14 and later).

use shmem::settings::{Settings, RESTORE_POINT_NAME_BYTES};
use shmem::variants::RecoveryTargetAction;
use walformat::{format_lsn, format_pg_timestamp, DecodedRecord, Lsn};

const _: () = assert!(RESTORE_POINT_NAME_BYTES == walformat::MAXFNAMELEN);

/// What recovery stops at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Lsn(Lsn),
    /// Microseconds since 2000-01-01 UTC, as `xact_time`.
    Time(i64),
    Xid(u32),
    /// A restore point's name, compared byte for byte.
    Name(String),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Lsn(lsn) => write!(f, "WAL location (LSN) \"{}\"", format_lsn(*lsn)),
            Target::Time(t) => write!(f, "{}", format_pg_timestamp(*t)),
            Target::Xid(xid) => write!(f, "XID {xid}"),
            Target::Name(name) => write!(f, "restore point \"{name}\""),
        }
    }
}

/// A recovery target with its settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryTarget {
    pub target: Target,
    /// `recovery_target_inclusive`.
    pub inclusive: bool,
    /// `recovery_target_action`.
    pub action: RecoveryTargetAction,
}

/// Recovery reached its target at a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reached {
    /// The record that decided.
    pub record: Lsn,
    /// Whether that record was kept (stopped after it).
    pub after: bool,
    /// The log line ("recovery stopping ...").
    pub message: String,
    /// The new timeline's history line reason (PostgreSQL's wording).
    pub reason: String,
}

/// The settings' names, in PostgreSQL's order for the error detail.
const TARGET_SETTINGS: [&str; 4] = [
    "recovery_target_lsn",
    "recovery_target_name",
    "recovery_target_time",
    "recovery_target_xid",
];

impl RecoveryTarget {
    /// The target the settings name, None when none is set; an error (as
    /// PostgreSQL words it) for an unreadable value or more than one
    /// target.
    pub fn from_settings(s: &Settings) -> Result<Option<RecoveryTarget>, String> {
        let values = [
            s.recovery_target_lsn.as_str(),
            s.recovery_target_name.as_str(),
            s.recovery_target_time.as_str(),
            s.recovery_target_xid.as_str(),
        ];
        let set: Vec<usize> = (0..values.len())
            .filter(|&i| !values[i].trim().is_empty())
            .collect();
        let i = match set[..] {
            [] => return Ok(None),
            [i] => i,
            _ => {
                return Err(format!(
                    "multiple recovery targets specified ({}); at most one of {} may be set",
                    set.iter()
                        .map(|&i| TARGET_SETTINGS[i])
                        .collect::<Vec<_>>()
                        .join(", "),
                    TARGET_SETTINGS.join(", ")
                ))
            }
        };
        let target = parse_target(TARGET_SETTINGS[i], values[i].trim()).ok_or_else(|| {
            format!(
                "invalid value for parameter \"{}\": \"{}\"",
                TARGET_SETTINGS[i], values[i]
            )
        })?;
        Ok(Some(RecoveryTarget {
            target,
            inclusive: s.recovery_target_inclusive,
            action: s.recovery_target_action,
        }))
    }

    /// Whether recovery stops before `r`, which it then does not keep.
    pub fn stops_before(&self, r: &DecodedRecord) -> Option<Reached> {
        match &self.target {
            Target::Lsn(lsn) if !self.inclusive && r.lsn >= *lsn => {
                Some(self.at_lsn(r, false, *lsn))
            }
            Target::Xid(xid) if !self.inclusive && xact_end(r).is_some() && r.xid == *xid => {
                Some(self.at_xact(r, false))
            }
            Target::Time(t) => {
                let (_, time) = xact_end(r)?;
                let past = if self.inclusive {
                    time > *t
                } else {
                    time >= *t
                };
                past.then(|| self.at_xact(r, false))
            }
            _ => None,
        }
    }

    /// Whether recovery stops after `r`, which it kept.
    pub fn stops_after(&self, r: &DecodedRecord) -> Option<Reached> {
        match &self.target {
            Target::Lsn(lsn) if self.inclusive && r.lsn >= *lsn => Some(self.at_lsn(r, true, *lsn)),
            Target::Xid(xid) if self.inclusive && xact_end(r).is_some() && r.xid == *xid => {
                Some(self.at_xact(r, true))
            }
            Target::Name(name) => {
                let (time, rp) = r.as_restore_point()?;
                (rp == name.as_bytes()).then(|| Reached {
                    record: r.lsn,
                    after: true,
                    message: format!(
                        "recovery stopping at restore point \"{name}\", time {}",
                        format_pg_timestamp(time)
                    ),
                    reason: format!("at restore point \"{name}\""),
                })
            }
            _ => None,
        }
    }

    fn at_lsn(&self, r: &DecodedRecord, after: bool, lsn: Lsn) -> Reached {
        let side = side(after);
        Reached {
            record: r.lsn,
            after,
            message: format!(
                "recovery stopping {side} WAL location (LSN) \"{}\" (record at {})",
                format_lsn(lsn),
                format_lsn(r.lsn)
            ),
            reason: format!("{side} LSN {}", format_lsn_short(lsn)),
        }
    }

    /// A stop at a COMMIT or ABORT record (xid and time targets).
    fn at_xact(&self, r: &DecodedRecord, after: bool) -> Reached {
        let (what, time) = xact_end(r).expect("a transaction end");
        let side = side(after);
        let reason = match self.target {
            Target::Time(t) => format!("{side} {}", format_pg_timestamp(t)),
            _ => format!("{side} transaction {}", r.xid),
        };
        Reached {
            record: r.lsn,
            after,
            message: format!(
                "recovery stopping {side} {what} of transaction {}, time {}",
                r.xid,
                format_pg_timestamp(time)
            ),
            reason,
        }
    }
}

fn side(after: bool) -> &'static str {
    if after {
        "after"
    } else {
        "before"
    }
}

/// `%X/%X`, as PostgreSQL writes an LSN into a history file's reason.
fn format_lsn_short(lsn: Lsn) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// ("commit" or "abort", `xact_time`) of a transaction's COMMIT or ABORT
/// record: the only records xid and time targets look at.
fn xact_end(r: &DecodedRecord) -> Option<(&'static str, i64)> {
    r.commit_time()
        .map(|t| ("commit", t))
        .or_else(|| r.abort_time().map(|t| ("abort", t)))
}

/// One target setting's value (`name` says which), None if unreadable.
fn parse_target(name: &str, value: &str) -> Option<Target> {
    Some(match name {
        "recovery_target_lsn" => Target::Lsn(walformat::parse_lsn(value).ok()?),
        "recovery_target_time" => Target::Time(walformat::parse_pg_timestamp(value)?),
        // txid_current()'s form: the epoch in the high 32 bits, which
        // PostgreSQL 15 drops (it keeps the 32-bit transaction ID).
        "recovery_target_xid" => Target::Xid(value.parse::<u64>().ok()? as u32),
        _ => Target::Name(value.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use walformat::{commit_record, decode_record_bytes, logical_message, restore_point_record};

    fn settings(sets: &[(&str, &str)]) -> Settings {
        let mut s = Settings::default();
        for (n, v) in sets {
            s.set(n, v).unwrap();
        }
        s
    }

    fn target(sets: &[(&str, &str)]) -> RecoveryTarget {
        RecoveryTarget::from_settings(&settings(sets))
            .unwrap()
            .unwrap()
    }

    fn decoded(lsn: Lsn, mut rec: walformat::RecordBuf) -> DecodedRecord {
        rec.finish(0);
        decode_record_bytes(lsn, rec.bytes()).unwrap()
    }

    fn commit(lsn: Lsn, xid: u32, time: i64) -> DecodedRecord {
        decoded(lsn, commit_record(xid, time))
    }

    /// (stops before, stops after) for `r`.
    fn decide(t: &RecoveryTarget, r: &DecodedRecord) -> (bool, bool) {
        (t.stops_before(r).is_some(), t.stops_after(r).is_some())
    }

    #[test]
    fn settings_give_at_most_one_readable_target() {
        assert_eq!(
            RecoveryTarget::from_settings(&Settings::default()),
            Ok(None)
        );
        let t = target(&[("recovery_target_lsn", "0/3000060")]);
        assert_eq!(t.target, Target::Lsn(0x300_0060));
        assert!(t.inclusive);
        assert_eq!(t.action, RecoveryTargetAction::Pause);
        let t = target(&[
            ("recovery_target_xid", "4294967300"),
            ("recovery_target_inclusive", "off"),
            ("recovery_target_action", "promote"),
        ]);
        assert_eq!((t.target, t.inclusive), (Target::Xid(4), false));
        assert_eq!(t.action, RecoveryTargetAction::Promote);
        let t = target(&[("recovery_target_time", "2000-01-01 00:00:01+00")]);
        assert_eq!(t.target, Target::Time(1_000_000));
        let e = RecoveryTarget::from_settings(&settings(&[
            ("recovery_target_name", "a"),
            ("recovery_target_xid", "7"),
        ]))
        .unwrap_err();
        assert!(e.starts_with("multiple recovery targets specified"), "{e}");
        for (name, bad) in [
            ("recovery_target_time", "tomorrow"),
            ("recovery_target_lsn", "3000060"),
            ("recovery_target_xid", "-1"),
        ] {
            let e = RecoveryTarget::from_settings(&settings(&[(name, bad)])).unwrap_err();
            assert_eq!(
                e,
                format!("invalid value for parameter \"{name}\": \"{bad}\"")
            );
        }
        assert!(Settings::default()
            .set("recovery_target_name", &"n".repeat(64))
            .is_err());
    }

    #[test]
    fn lsn_and_xid_targets_stop_at_their_record_by_inclusive() {
        let before = commit(0x100, 5, 10);
        let at = commit(0x200, 6, 20);
        for inclusive in [true, false] {
            let on = if inclusive { "on" } else { "off" };
            let t = target(&[
                ("recovery_target_lsn", "0/1F8"),
                ("recovery_target_inclusive", on),
            ]);
            assert_eq!(decide(&t, &before), (false, false));
            assert_eq!(decide(&t, &at), (!inclusive, inclusive), "lsn {on}");
            let t = target(&[
                ("recovery_target_xid", "6"),
                ("recovery_target_inclusive", on),
            ]);
            assert_eq!(decide(&t, &before), (false, false));
            assert_eq!(decide(&t, &at), (!inclusive, inclusive), "xid {on}");
            let r = t.stops_before(&at).or(t.stops_after(&at)).unwrap();
            let side = if inclusive { "after" } else { "before" };
            assert_eq!(r.reason, format!("{side} transaction 6"));
        }
        // An xid target ignores the transaction's other records.
        let msg = decoded(0x300, logical_message(6, true, "p", b"x"));
        assert_eq!(
            decide(&target(&[("recovery_target_xid", "6")]), &msg),
            (false, false)
        );
        let t = target(&[("recovery_target_lsn", "0/1F8")]);
        assert_eq!(t.stops_after(&at).unwrap().reason, "after LSN 0/1F8");
    }

    #[test]
    fn time_targets_stop_before_the_first_later_transaction_end() {
        let t = |inclusive: &str| {
            target(&[
                ("recovery_target_time", "2000-01-01 00:00:00.000020+00"),
                ("recovery_target_inclusive", inclusive),
            ])
        };
        for (time, on, off) in [(19, false, false), (20, false, true), (21, true, true)] {
            let r = commit(0x100, 5, time);
            assert_eq!(decide(&t("on"), &r), (on, false), "time {time}, inclusive");
            assert_eq!(
                decide(&t("off"), &r),
                (off, false),
                "time {time}, exclusive"
            );
        }
        let r = commit(0x100, 5, 21);
        assert_eq!(
            t("on").stops_before(&r).unwrap().reason,
            "before 2000-01-01 00:00:00.000020 UTC"
        );
    }

    #[test]
    fn name_targets_stop_after_their_restore_point() {
        let t = target(&[
            ("recovery_target_name", "rp"),
            ("recovery_target_inclusive", "off"),
        ]);
        let other = decoded(0x100, restore_point_record(1, "rp2").unwrap());
        let ours = decoded(0x200, restore_point_record(1, "rp").unwrap());
        assert_eq!(decide(&t, &other), (false, false));
        assert_eq!(decide(&t, &commit(0x180, 5, 1)), (false, false));
        assert_eq!(decide(&t, &ours), (false, true));
        assert_eq!(
            t.stops_after(&ours).unwrap().reason,
            "at restore point \"rp\""
        );
    }
}
