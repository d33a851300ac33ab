//! The workload report: what `postmaster start --workload KIND` tells its
//! user at shutdown, and the checks whose failure makes it exit non-zero.
//! The supervisor only calls in at two moments: before it removes a
//! generation's segment ([`Report::collect_generation`]) and when it is
//! done ([`Report::print_summary`], [`Report::lwlock_exit_code`]).
//!
//! Collection: each generation (one shared memory segment, ended by a fast
//! shutdown or by a crash) adds its per-proc counters to the per-worker
//! totals. Reading is plain atomic loads, never a lock, so a child that died
//! holding a lock cannot wedge the postmaster here. Worker `i` owns proc
//! slot `i` in every generation (`Shmem::reserve_fixed_procs`).
//!
//! The `lwlock` workload's invariant: workers increment a counter under an
//! exclusive LWLock and count each acquisition; readers under a shared lock
//! check that the two halves of the protected data agree.
//! - A generation that ended in a fast shutdown must show protected counter
//!   == exclusive acquisitions (summed over the workers) and no torn read.
//! - After a crash only torn reads are checked: a holder killed between
//!   updating the data and counting its acquisition leaves the two numbers
//!   apart without any broken exclusion.
//!
//! Output, at shutdown, on stdout: English lines for people (their wording
//! may change), then one line holding one JSON object for programs (tests
//! and tools read this line, never the English ones):
//!
//! ```text
//! {"walshm_summary":1,"workload":"emit-tx:16","backends":2,"elapsed_s":1.5,
//!  "crash_restarts":0,"per_backend":[{"records":..,"bytes":..,"transactions":..},..],
//!  "total":{..same keys..},"synchronous_commits":..,"wal_fdatasyncs":..,
//!  "commits_per_fdatasync":2.5|null,"snapshot_violations":0,
//!  "lwlock":null|{"ok":true,"checks":[{"generation":1,"protected_counter":..,
//!  "exclusive_acquisitions":..,"torn_reads":0,"ok":true}],
//!  "crashed_generations":[{"generation":2,"torn_reads":0}]},
//!  "supervised_workers":[{"name":"w","starts":2,"exec_failures":0,"restarts":1,"done":false}],
//!  "worker_slots":{"records":..,"bytes":..,"transactions":..}}
//! ```
//!
//! The summary is printed after a workload run, and after any run with
//! supervised workers (then `"workload":null`, no backends).
//! `supervised_workers` lists the `--worker` commands: processes started,
//! attempts whose exec failed, restarts after an exit 1, and whether it is
//! done (exited 0 after detaching). `worker_slots` sums the counters of
//! the worker proc slots (supervised and external workers) over the
//! generations.
//!
//! (one line in the output). `walshm_summary` is the format's version;
//! keys are only ever added. The line is `SummaryLine` written by
//! serde_json: keys in field order (`walshm_summary` first, which is how
//! readers find the line), a non-finite number as `null`.
//!
//! Exit code: a snapshot that showed an already committed XID as running,
//! or a broken lwlock invariant, makes the postmaster exit 1.

use backend::workload::Workload;
use serde::ser::{SerializeStruct, Serializer};
use serde::Serialize;
use shmem::sync::Ordering;
use shmem::Shmem;

/// Version of the JSON summary line (its first key).
pub const SUMMARY_VERSION: u32 = 1;

/// A report line on stdout (errors ignored, as for `log`).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// Counters of one worker, summed over generations. In JSON only
/// `records`, `bytes` and `transactions` (the other counts are summed into
/// the summary's own keys).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct WorkerTotals {
    pub records: u64,
    pub bytes: u64,
    pub transactions: u64,
    #[serde(skip)]
    pub lock_acquires: u64,
    #[serde(skip)]
    pub snapshot_violations: u64,
    #[serde(skip)]
    pub sync_commits: u64,
}

impl WorkerTotals {
    /// Adds proc `procno`'s counters (its WAL counts are in `shmem::stats`).
    fn add_counters(&mut self, shm: &Shmem, procno: u32) {
        let get = |a: &shmem::sync::AtomicU64| a.load(Ordering::Relaxed);
        let c = &shm.procs()[procno as usize].counters;
        let wal = &shm.proc_stats(procno).counters.flat;
        self.add(&WorkerTotals {
            records: get(&wal.wal_records),
            bytes: get(&wal.wal_bytes),
            transactions: get(&c.transactions),
            lock_acquires: get(&c.lock_acquires),
            snapshot_violations: get(&c.snapshot_violations),
            sync_commits: get(&c.sync_commits),
        });
    }

    fn add(&mut self, o: &WorkerTotals) {
        self.records += o.records;
        self.bytes += o.bytes;
        self.transactions += o.transactions;
        self.lock_acquires += o.lock_acquires;
        self.snapshot_violations += o.snapshot_violations;
        self.sync_commits += o.sync_commits;
    }

    /// "records R bytes B transactions T" (the English lines' tail).
    fn describe(&self) -> String {
        format!(
            "records {} bytes {} transactions {}",
            self.records, self.bytes, self.transactions
        )
    }
}

/// The exact lwlock check of a cleanly ended generation.
#[derive(Clone, Debug, PartialEq, Eq)]
struct LwlockCheck {
    generation: u64,
    counter: u64,
    exclusive: u64,
    torn: u64,
}

impl LwlockCheck {
    fn ok(&self) -> bool {
        self.counter == self.exclusive && self.torn == 0
    }

    fn describe(&self) -> String {
        format!(
            "lwlock check (generation {}): protected counter {}, exclusive acquisitions {}, torn reads {}",
            self.generation, self.counter, self.exclusive, self.torn
        )
    }
}

/// `{"generation","protected_counter","exclusive_acquisitions","torn_reads","ok"}`.
impl Serialize for LwlockCheck {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut o = s.serialize_struct("LwlockCheck", 5)?;
        o.serialize_field("generation", &self.generation)?;
        o.serialize_field("protected_counter", &self.counter)?;
        o.serialize_field("exclusive_acquisitions", &self.exclusive)?;
        o.serialize_field("torn_reads", &self.torn)?;
        o.serialize_field("ok", &self.ok())?;
        o.end()
    }
}

/// A generation that ended in a crash: only its torn reads are checked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
struct CrashedGeneration {
    generation: u64,
    torn_reads: u64,
}

/// What the supervisor knows of the run as a whole.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RunFacts {
    /// Seconds since the first generation was ready (or since start).
    pub elapsed_s: f64,
    pub crash_restarts: u32,
}

/// Everything the summary reports, gathered generation by generation.
pub(crate) struct Report {
    workload: Option<Workload>,
    workers: Vec<WorkerTotals>,
    wal_syncs: u64,
    lwlock_checks: Vec<LwlockCheck>,
    lwlock_crashed: Vec<CrashedGeneration>,
    /// The last lwlock failure, as the FATAL message names it.
    lwlock_mismatch: Option<String>,
    supervised: Vec<SupervisedFacts>,
    /// Counters of the worker proc slots, summed over generations.
    worker_slots: WorkerTotals,
}

/// What the summary says about one supervised worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct SupervisedFacts {
    pub name: String,
    pub starts: u32,
    pub exec_failures: u32,
    pub restarts: u32,
    pub done: bool,
}

impl SupervisedFacts {
    fn describe(&self) -> String {
        format!(
            "worker \"{}\": started {} time(s), {} failed exec(s), {} restart(s) after exit 1{}",
            self.name,
            self.starts,
            self.exec_failures,
            self.restarts,
            if self.done { ", done" } else { "" }
        )
    }
}

/// The summary's JSON line (module header), in key order.
#[derive(Serialize)]
struct SummaryLine<'a> {
    walshm_summary: u32,
    workload: Option<String>,
    backends: usize,
    elapsed_s: f64,
    crash_restarts: u32,
    per_backend: &'a [WorkerTotals],
    total: WorkerTotals,
    synchronous_commits: u64,
    wal_fdatasyncs: u64,
    commits_per_fdatasync: Option<f64>,
    snapshot_violations: u64,
    lwlock: Option<LwlockSection<'a>>,
    supervised_workers: &'a [SupervisedFacts],
    worker_slots: WorkerTotals,
}

/// The `lwlock` workload's checks in the summary.
#[derive(Serialize)]
struct LwlockSection<'a> {
    ok: bool,
    checks: &'a [LwlockCheck],
    crashed_generations: &'a [CrashedGeneration],
}

impl Report {
    pub fn new(workload: Option<Workload>, workers: u32) -> Report {
        Report {
            workload,
            workers: vec![WorkerTotals::default(); workers as usize],
            wal_syncs: 0,
            lwlock_checks: Vec::new(),
            lwlock_crashed: Vec::new(),
            lwlock_mismatch: None,
            supervised: Vec::new(),
            worker_slots: WorkerTotals::default(),
        }
    }

    /// The supervised workers' histories, for the summary.
    pub fn set_supervised(&mut self, workers: Vec<SupervisedFacts>) {
        self.supervised = workers;
    }

    /// Adds generation `generation`'s counters to the totals and runs its
    /// lwlock check; call before the segment is removed. `clean`: the
    /// generation ended in a fast shutdown, not a crash.
    pub fn collect_generation(&mut self, shm: &Shmem, generation: u64, clean: bool) {
        for (i, t) in self.workers.iter_mut().enumerate() {
            t.add_counters(shm, i as u32);
        }
        for i in 0..shm.max_workers() {
            self.worker_slots.add_counters(shm, shm.worker_procno(i));
        }
        self.wal_syncs += shm.xlog().write.syncs.load(Ordering::Relaxed);
        if self.workload == Some(Workload::Lwlock) {
            if clean {
                self.check_lwlock(shm, generation);
            } else {
                self.check_lwlock_after_crash(shm, generation);
            }
        }
    }

    /// The exact invariant of a cleanly ended generation.
    fn check_lwlock(&mut self, shm: &Shmem, generation: u64) {
        let area = shm.lock_test_area();
        let check = LwlockCheck {
            generation,
            counter: area.counter_value(),
            exclusive: (0..self.workers.len())
                .map(|i| {
                    shm.procs()[i]
                        .counters
                        .lock_acquires
                        .load(Ordering::Relaxed)
                })
                .sum(),
            torn: area.torn_reads.load(Ordering::Relaxed),
        };
        let line = check.describe();
        if check.ok() {
            say!("{line}: OK");
        } else {
            say!("{line}: MISMATCH");
            self.lwlock_mismatch = Some(line);
        }
        self.lwlock_checks.push(check);
    }

    /// Torn reads would still prove a broken lock; the counts cannot be
    /// compared after a SIGKILL.
    fn check_lwlock_after_crash(&mut self, shm: &Shmem, generation: u64) {
        let torn = shm.lock_test_area().torn_reads.load(Ordering::Relaxed);
        say!(
            "lwlock crash generation {generation}: torn reads {torn}; count check skipped (a killed holder may have updated the data without counting it)"
        );
        if torn > 0 {
            self.lwlock_mismatch = Some(format!("{torn} torn reads in generation {generation}"));
        }
        self.lwlock_crashed.push(CrashedGeneration {
            generation,
            torn_reads: torn,
        });
    }

    fn total(&self) -> WorkerTotals {
        let mut sum = WorkerTotals::default();
        for t in &self.workers {
            sum.add(t);
        }
        sum
    }

    fn commits_per_fdatasync(&self, sum: &WorkerTotals) -> Option<f64> {
        (self.wal_syncs > 0).then(|| sum.sync_commits as f64 / self.wal_syncs as f64)
    }

    /// Prints the summary of a workload run (nothing without a workload):
    /// the English lines, then the JSON line. Returns Some(1) if the run
    /// failed a check that is reported here (snapshot violations).
    pub fn print_summary(&self, run: RunFacts) -> Option<i32> {
        if self.workload.is_none() && self.supervised.is_empty() {
            return None;
        }
        let sum = self.total();
        say!(
            "walshm summary: workload {}, {} backend(s), {:.2} s, {} crash restart(s)",
            self.workload.map_or("none".into(), |w| w.to_string()),
            self.workers.len(),
            run.elapsed_s,
            run.crash_restarts
        );
        for w in &self.supervised {
            say!("{}", w.describe());
        }
        let transactional = self.workload.is_some_and(|w| w.is_transactional());
        for (i, t) in self.workers.iter().enumerate() {
            say!("backend {i}: {}", t.describe());
        }
        say!("total: {}", sum.describe());
        if transactional {
            let per_sync = self
                .commits_per_fdatasync(&sum)
                .map_or("-".into(), |r| format!("{r:.1}"));
            say!(
                "transactions: synchronous commits {}, WAL fdatasyncs {}, commits per fdatasync {per_sync}, snapshot violations {}",
                sum.sync_commits, self.wal_syncs, sum.snapshot_violations
            );
        }
        say!("{}", self.summary_json(self.workload, run));
        if transactional && sum.snapshot_violations > 0 {
            crate::log(
                "FATAL",
                "a snapshot showed an already committed XID as running",
            );
            return Some(1);
        }
        None
    }

    /// 1 (after a FATAL line naming it) if an lwlock check failed, else 0.
    pub fn lwlock_exit_code(&self) -> i32 {
        match &self.lwlock_mismatch {
            Some(m) => {
                crate::log("FATAL", &format!("LWLock mutual exclusion violated: {m}"));
                1
            }
            None => 0,
        }
    }

    /// The summary as one JSON object on one line (format: module header).
    fn summary_json(&self, w: Option<Workload>, run: RunFacts) -> String {
        let sum = self.total();
        let line = SummaryLine {
            walshm_summary: SUMMARY_VERSION,
            workload: w.map(|w| w.to_string()),
            backends: self.workers.len(),
            elapsed_s: run.elapsed_s,
            crash_restarts: run.crash_restarts,
            per_backend: &self.workers,
            total: sum,
            synchronous_commits: sum.sync_commits,
            wal_fdatasyncs: self.wal_syncs,
            commits_per_fdatasync: self.commits_per_fdatasync(&sum),
            snapshot_violations: sum.snapshot_violations,
            lwlock: (self.workload == Some(Workload::Lwlock)).then(|| LwlockSection {
                ok: self.lwlock_mismatch.is_none(),
                checks: &self.lwlock_checks,
                crashed_generations: &self.lwlock_crashed,
            }),
            supervised_workers: &self.supervised,
            worker_slots: self.worker_slots,
        };
        serde_json::to_string(&line).expect("the summary serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(records: u64, sync_commits: u64) -> WorkerTotals {
        WorkerTotals {
            records,
            bytes: records * 16,
            transactions: records / 2,
            sync_commits,
            ..WorkerTotals::default()
        }
    }

    fn parse(line: &str) -> serde_json::Value {
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    const RUN: RunFacts = RunFacts {
        elapsed_s: 1.25,
        crash_restarts: 2,
    };

    #[test]
    fn summary_line_is_one_json_object_with_every_count() {
        let mut r = Report::new(Some(Workload::EmitTx(16)), 2);
        r.workers = vec![worker(10, 5), worker(4, 2)];
        r.wal_syncs = 2;
        let line = r.summary_json(Some(Workload::EmitTx(16)), RUN);
        assert!(!line.contains('\n'));
        let j = parse(&line);
        assert_eq!(j["walshm_summary"], 1);
        assert_eq!(j["workload"], "emit-tx:16");
        assert_eq!(j["backends"], 2);
        assert_eq!(j["elapsed_s"], 1.25);
        assert_eq!(j["crash_restarts"], 2);
        assert_eq!(j["per_backend"][1]["records"], 4);
        assert_eq!(j["per_backend"][0]["bytes"], 160);
        assert_eq!(j["total"]["records"], 14);
        assert_eq!(j["total"]["transactions"], 7);
        assert_eq!(j["synchronous_commits"], 7);
        assert_eq!(j["wal_fdatasyncs"], 2);
        assert_eq!(j["commits_per_fdatasync"], 3.5);
        assert_eq!(j["snapshot_violations"], 0);
        assert!(j["lwlock"].is_null());
    }

    #[test]
    fn supervised_workers_and_worker_slots_are_in_the_summary_even_without_a_workload() {
        let mut r = Report::new(None, 0);
        r.set_supervised(vec![SupervisedFacts {
            name: "ingest \"1\"".into(),
            starts: 3,
            exec_failures: 1,
            restarts: 2,
            done: true,
        }]);
        r.worker_slots = worker(8, 0);
        let j = parse(&r.summary_json(None, RUN));
        assert!(j["workload"].is_null());
        assert_eq!(j["backends"], 0);
        let w = &j["supervised_workers"][0];
        assert_eq!(w["name"], "ingest \"1\"");
        assert_eq!(
            (w["starts"].as_u64(), w["exec_failures"].as_u64()),
            (Some(3), Some(1))
        );
        assert_eq!(
            (w["restarts"].as_u64(), w["done"].as_bool()),
            (Some(2), Some(true))
        );
        assert_eq!(j["worker_slots"]["records"], 8);
    }

    #[test]
    fn no_fdatasync_gives_null_ratio() {
        let r = Report::new(Some(Workload::Txid), 1);
        let j = parse(&r.summary_json(Some(Workload::Txid), RUN));
        assert!(j["commits_per_fdatasync"].is_null());
        assert_eq!(j["per_backend"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn lwlock_section_lists_checks_and_crashed_generations() {
        let mut r = Report::new(Some(Workload::Lwlock), 1);
        r.lwlock_crashed.push(CrashedGeneration {
            generation: 1,
            torn_reads: 0,
        });
        r.lwlock_checks.push(LwlockCheck {
            generation: 2,
            counter: 7,
            exclusive: 6,
            torn: 0,
        });
        r.lwlock_mismatch = Some("x".into());
        let j = parse(&r.summary_json(Some(Workload::Lwlock), RUN));
        let l = &j["lwlock"];
        assert_eq!(l["ok"], false);
        assert_eq!(l["checks"][0]["generation"], 2);
        assert_eq!(l["checks"][0]["protected_counter"], 7);
        assert_eq!(l["checks"][0]["exclusive_acquisitions"], 6);
        assert_eq!(l["checks"][0]["ok"], false);
        assert_eq!(l["crashed_generations"][0]["generation"], 1);
        assert_eq!(l["crashed_generations"][0]["torn_reads"], 0);
        assert_eq!(r.lwlock_exit_code(), 1);
    }

    #[test]
    fn strings_are_escaped_and_non_finite_numbers_are_null() {
        let mut r = Report::new(None, 0);
        let name = "a\"b\\c\nd\u{1}é";
        r.set_supervised(vec![SupervisedFacts {
            name: name.into(),
            starts: 1,
            exec_failures: 0,
            restarts: 0,
            done: false,
        }]);
        let run = RunFacts {
            elapsed_s: f64::NAN,
            ..RUN
        };
        let line = r.summary_json(None, run);
        assert!(line.starts_with("{\"walshm_summary\":1,"), "{line}");
        let j = parse(&line);
        assert_eq!(j["supervised_workers"][0]["name"], name);
        assert!(j["elapsed_s"].is_null());
    }
}
