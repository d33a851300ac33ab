//! The summary `postmaster start --workload` prints at shutdown (its JSON
//! line), parsed.

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub records: u64,
    pub bytes: u64,
    pub transactions: u64,
}

/// The summary `postmaster start --workload` prints at shutdown, read from
/// its JSON line (`{"walshm_summary":1,...}`), never from the English lines.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub total: Counts,
    pub backends: Vec<Counts>,
    pub crash_restarts: u64,
    /// The exact lwlock checks (cleanly ended generations): true for OK.
    pub lwlock_checks: Vec<bool>,
    /// The same checks in full.
    pub lwlock_details: Vec<LwlockCheck>,
    /// (generation, torn reads) of each lwlock generation that crashed.
    pub lwlock_crashed: Vec<(u64, u64)>,
    pub tx: TxLine,
}

/// One exact lwlock check: protected counter, exclusive acquisitions and
/// torn reads of a generation that ended in a fast shutdown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LwlockCheck {
    pub generation: u64,
    pub counter: u64,
    pub exclusive: u64,
    pub torn: u64,
    pub ok: bool,
}

/// The key that marks the summary's JSON line.
const SUMMARY_KEY: &str = "{\"walshm_summary\":";

fn u64_at(v: &serde_json::Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("summary: {key:?} is not a count in {v}"))
}

fn counts_of(v: &serde_json::Value) -> Counts {
    Counts {
        records: u64_at(v, "records"),
        bytes: u64_at(v, "bytes"),
        transactions: u64_at(v, "transactions"),
    }
}

/// The summary's JSON object, or None if stdout holds no summary line.
pub fn summary_json(stdout: &str) -> Option<serde_json::Value> {
    let line = stdout.lines().find(|l| l.starts_with(SUMMARY_KEY))?;
    let v: serde_json::Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("summary line is not JSON ({e}): {line}"));
    assert_eq!(v["walshm_summary"], 1, "summary format version");
    Some(v)
}

fn lwlock_of(v: &serde_json::Value) -> (Vec<LwlockCheck>, Vec<(u64, u64)>) {
    let list = |key: &str| v[key].as_array().cloned().unwrap_or_default();
    let checks = list("checks")
        .iter()
        .map(|c| LwlockCheck {
            generation: u64_at(c, "generation"),
            counter: u64_at(c, "protected_counter"),
            exclusive: u64_at(c, "exclusive_acquisitions"),
            torn: u64_at(c, "torn_reads"),
            ok: c["ok"].as_bool().expect("lwlock check ok"),
        })
        .collect();
    let crashed = list("crashed_generations")
        .iter()
        .map(|c| (u64_at(c, "generation"), u64_at(c, "torn_reads")))
        .collect();
    (checks, crashed)
}

/// Parses the summary `postmaster start` prints on stdout at shutdown.
pub fn parse_summary(stdout: &str) -> Summary {
    let v = summary_json(stdout).unwrap_or_else(|| panic!("no summary line in stdout:\n{stdout}"));
    let backends: Vec<Counts> = v["per_backend"]
        .as_array()
        .expect("per_backend")
        .iter()
        .map(counts_of)
        .collect();
    assert_eq!(backends.len() as u64, u64_at(&v, "backends"));
    let (lwlock_details, lwlock_crashed) = lwlock_of(&v["lwlock"]);
    let sum = Summary {
        total: counts_of(&v["total"]),
        crash_restarts: u64_at(&v, "crash_restarts"),
        lwlock_checks: lwlock_details.iter().map(|c| c.ok).collect(),
        lwlock_details,
        lwlock_crashed,
        tx: TxLine {
            sync_commits: u64_at(&v, "synchronous_commits"),
            fdatasyncs: u64_at(&v, "wal_fdatasyncs"),
            per_fdatasync: v["commits_per_fdatasync"].as_f64(),
            snapshot_violations: u64_at(&v, "snapshot_violations"),
        },
        backends,
    };
    let add = sum.backends.iter().fold(Counts::default(), |a, c| Counts {
        records: a.records + c.records,
        bytes: a.bytes + c.bytes,
        transactions: a.transactions + c.transactions,
    });
    assert_eq!(add, sum.total, "backend counts do not add up to the total");
    sum
}

/// The summary's transaction counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct TxLine {
    pub sync_commits: u64,
    pub fdatasyncs: u64,
    /// None when there was no fdatasync.
    pub per_fdatasync: Option<f64>,
    pub snapshot_violations: u64,
}

pub fn parse_tx_line(stdout: &str) -> TxLine {
    parse_summary(stdout).tx
}
