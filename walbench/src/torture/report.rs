//! The torture run's outcome: the final report on stdout, the JSON (its
//! keys `mode`, `cycles`, `acknowledged` and `lost` are a contract, see
//! DESIGN.md "Crash/restart testing"), and the history file kept with the
//! data directory for a bug report.
//!
//! JSON keys: `mode` ("kill" | "power-loss"), `cycles`, `acknowledged`
//! (acks checked), `lost`, `lost_lsns` (up to 100), `violations` (strings),
//! `passed`, `victims` (name -> kills), `recovery_ms` {`min`, `median`,
//! `max`}, `unverifiable` (acks in WAL checkpoints removed),
//! `records_checked`, `pg_waldump` ("agreed" | "disagreed" | "not run" |
//! "not installed"), `seconds`, `seed`, `workload`, `settings`, and in
//! power-loss mode `power_loss` {the rewriter's counts, `refused_starts`
//! (starts refused with exit 3; each is also a violation: a power loss
//! cannot leave valid WAL beyond the unsynced window) and
//! `synced_without_entry` (files fdatasynced before their directory entry
//! was durable)}.

use super::powerloss::Outcome;
use crate::report::{json_document, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use walformat::format_lsn;

/// One kill (or power loss) of the run.
#[derive(Clone, Debug)]
pub struct Event {
    pub cycle: u64,
    pub victim: &'static str,
    pub pid: i32,
    /// Seconds since the run started.
    pub at: f64,
    pub recovery_ms: Option<f64>,
    pub note: String,
}

/// Everything the report is made of.
#[derive(Debug, Default)]
pub struct Summary {
    pub power_loss: bool,
    pub cycles: u64,
    pub acknowledged: u64,
    pub lost: Vec<u64>,
    pub violations: Vec<String>,
    pub events: Vec<Event>,
    pub records_checked: u64,
    /// Acks in WAL segments removed by checkpoints (not checked at the end).
    pub unverifiable: u64,
    pub pg_waldump: Option<bool>,
    pub pg_waldump_installed: bool,
    pub seconds: f64,
    pub seed: u64,
    pub workload: String,
    pub settings: Vec<String>,
    pub rewrites: Outcome,
    /// Power-loss mode: starts refused (exit 3) because valid WAL beyond
    /// the unsynced window followed the first unreadable record; each is
    /// also a violation.
    pub refused_starts: u64,
}

impl Summary {
    pub fn passed(&self) -> bool {
        self.lost.is_empty() && self.violations.is_empty()
    }

    pub fn mode(&self) -> &'static str {
        if self.power_loss {
            "power-loss"
        } else {
            "kill"
        }
    }

    /// Kills per victim name.
    pub fn victims(&self) -> BTreeMap<&'static str, u64> {
        let mut m = BTreeMap::new();
        for e in &self.events {
            *m.entry(e.victim).or_insert(0) += 1;
        }
        m
    }

    /// Recovery times: (min, median, max) in ms.
    pub fn recovery(&self) -> Option<(f64, f64, f64)> {
        let mut v: Vec<f64> = self.events.iter().filter_map(|e| e.recovery_ms).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some((v[0], v[v.len() / 2], v[v.len() - 1]))
    }

    fn pg_waldump_word(&self) -> &'static str {
        match (self.pg_waldump, self.pg_waldump_installed) {
            (Some(true), _) => "agreed",
            (Some(false), _) => "disagreed",
            (None, true) => "not run",
            (None, false) => "not installed",
        }
    }

    /// The report for people.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "walbench torture ({} mode): {} cycles in {:.1} s, seed {}, workload {}",
            self.mode(),
            self.cycles,
            self.seconds,
            self.seed,
            self.workload
        );
        let victims: Vec<String> = self
            .victims()
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(s, "  kills by victim:  {}", victims.join(", "));
        let _ = writeln!(
            s,
            "  acknowledged commits checked: {}, lost: {}, in removed WAL (unchecked): {}; {} WAL records read, pg_waldump {}",
            self.acknowledged,
            self.lost.len(),
            self.unverifiable,
            self.records_checked,
            self.pg_waldump_word()
        );
        if let Some((lo, med, hi)) = self.recovery() {
            let _ = writeln!(
                s,
                "  recovery time (to \"ready to accept connections\"): min {lo:.0} ms, median {med:.0} ms, max {hi:.0} ms"
            );
        }
        if self.power_loss {
            let r = &self.rewrites;
            let _ = writeln!(
                s,
                "  unsynced writes at the power losses: {} kept, {} dropped, {} torn ({} sectors reverted); creations undone {}, renames undone {}, entry changes kept {}",
                r.writes_kept, r.writes_dropped, r.writes_torn, r.sectors_reverted,
                r.creates_undone, r.renames_undone, r.entries_kept
            );
            let _ = writeln!(
                s,
                "  starts refused after a power loss (violations; restarted with --discard-damaged-wal): {}",
                self.refused_starts
            );
        }
        for l in self.lost.iter().take(20) {
            let _ = writeln!(s, "  LOST: acknowledged commit at {}", format_lsn(*l));
        }
        for v in &self.violations {
            let _ = writeln!(s, "  VIOLATION: {v}");
        }
        let _ = writeln!(s, "  {}", if self.passed() { "PASSED" } else { "FAILED" });
        s
    }

    /// The JSON document.
    pub fn json(&self) -> String {
        let victims = self
            .victims()
            .into_iter()
            .map(|(k, n)| (k, Value::Int(n)))
            .collect();
        let recovery = match self.recovery() {
            Some((lo, med, hi)) => Value::Obj(vec![
                ("min", Value::Fixed(lo, 1)),
                ("median", Value::Fixed(med, 1)),
                ("max", Value::Fixed(hi, 1)),
            ]),
            None => Value::Null,
        };
        let strs = |v: &[String]| Value::List(v.iter().map(|x| Value::str(x)).collect());
        let lost_lsns = self
            .lost
            .iter()
            .take(100)
            .map(|l| Value::Str(format_lsn(*l)))
            .collect();
        let mut fields = vec![
            ("mode", Value::str(self.mode())),
            ("cycles", Value::Int(self.cycles)),
            ("acknowledged", Value::Int(self.acknowledged)),
            ("lost", Value::Int(self.lost.len() as u64)),
            ("lost_lsns", Value::List(lost_lsns)),
            ("violations", strs(&self.violations)),
            ("passed", Value::Bool(self.passed())),
            ("victims", Value::Obj(victims)),
            ("recovery_ms", recovery),
            ("unverifiable", Value::Int(self.unverifiable)),
            ("records_checked", Value::Int(self.records_checked)),
            ("pg_waldump", Value::str(self.pg_waldump_word())),
            ("seconds", Value::Fixed(self.seconds, 1)),
            ("seed", Value::Int(self.seed)),
            ("workload", Value::str(&self.workload)),
            ("settings", strs(&self.settings)),
        ];
        if self.power_loss {
            let r = &self.rewrites;
            fields.push((
                "power_loss",
                Value::Obj(vec![
                    ("journal_records", Value::Int(r.records)),
                    ("writes_kept", Value::Int(r.writes_kept)),
                    ("writes_dropped", Value::Int(r.writes_dropped)),
                    ("writes_torn", Value::Int(r.writes_torn)),
                    ("sectors_reverted", Value::Int(r.sectors_reverted)),
                    ("creates_undone", Value::Int(r.creates_undone)),
                    ("renames_undone", Value::Int(r.renames_undone)),
                    ("entries_kept", Value::Int(r.entries_kept)),
                    ("refused_starts", Value::Int(self.refused_starts)),
                    (
                        "synced_without_entry",
                        Value::Int(r.synced_without_entry.len() as u64),
                    ),
                ]),
            ));
        }
        json_document(fields)
    }
}

/// The history file: every kill and every ack, in time order.
pub fn history(events: &[Event], acks: &[(u64, f64, u64)]) -> String {
    let mut lines: Vec<(f64, String)> = events
        .iter()
        .map(|e| {
            let rec = e.recovery_ms.map_or("-".to_string(), |r| format!("{r:.1}"));
            (
                e.at,
                format!(
                    "{:.6} kill cycle={} victim={} pid={} recovery_ms={rec} {}",
                    e.at, e.cycle, e.victim, e.pid, e.note
                ),
            )
        })
        .collect();
    lines.extend(acks.iter().map(|(lsn, at, cycle)| {
        (
            *at,
            format!("{at:.6} ack {} cycle={cycle}", format_lsn(*lsn)),
        )
    }));
    lines.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut s = String::from("# walbench torture history: seconds since start, then the event\n");
    for (_, l) in lines {
        s.push_str(l.trim_end());
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(victim: &'static str, ms: f64) -> Event {
        Event {
            cycle: 1,
            victim,
            pid: 5,
            at: 1.0,
            recovery_ms: Some(ms),
            note: String::new(),
        }
    }

    #[test]
    fn json_has_the_contract_keys() {
        let s = Summary {
            cycles: 3,
            acknowledged: 10,
            lost: vec![0x100],
            events: vec![
                ev("backend", 30.0),
                ev("backend", 10.0),
                ev("postmaster", 20.0),
            ],
            ..Summary::default()
        };
        let j = s.json();
        for k in [
            "\"mode\":\"kill\"",
            "\"cycles\":3",
            "\"acknowledged\":10",
            "\"lost\":1",
            "\"lost_lsns\":[\"0/00000100\"]",
            "\"passed\":false",
            "\"victims\":{\"backend\":2,\"postmaster\":1}",
            "\"recovery_ms\":{\"min\":10.0,\"median\":20.0,\"max\":30.0}",
        ] {
            assert!(j.contains(k), "{k} in {j}");
        }
        assert!(s.text().contains("FAILED"));
    }

    #[test]
    fn history_is_in_time_order() {
        let mut e = ev("walwriter", 5.0);
        e.at = 2.0;
        let h = history(&[e], &[(0x10, 1.0, 1), (0x20, 3.0, 1)]);
        let lines: Vec<&str> = h.lines().skip(1).collect();
        assert!(lines[0].contains("ack 0/00000010"));
        assert!(lines[1].contains("victim=walwriter"));
        assert!(lines[2].contains("ack 0/00000020"));
    }
}
