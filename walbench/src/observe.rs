//! What a point shows beside throughput: the backends' wait-event profile
//! over the measured window and the mechanism counters per transaction
//! (both read from the server's shared memory, `shmem::stats`).
//!
//! Sampling: every millisecond of the window, walbench's own process reads
//! each live backend's wait-event word (one Relaxed load per slot, no lock)
//! and counts it; a share is the count of one "Type:Name" over all backend
//! observations, so the shares sum to the fraction of time backends spent
//! waiting (the rest they were running). Mechanism counters are the delta
//! of the per-process sums between the window's start and end.
//!
//! Contract (DESIGN.md "Inspection"): each run's JSON holds `wait_events`
//! ("Type:Name" -> share, 0..1) and `per_tx` (counter -> value per
//! transaction) with at least the keys of [`PER_TX_CONTRACT`].

use crate::report::{Record, Value};
use shmem::stats::{self, MechanismTotals, WaitSamples, NUM_TRANCHES};
use shmem::Shmem;
use std::time::{Duration, Instant};

/// The `per_tx` keys every run has.
pub const PER_TX_CONTRACT: [&str; 5] = [
    "lwlock_sleeps",
    "procarray_lock_acquisitions",
    "waitlist_lock_acquisitions",
    "waitlist_entries_scanned",
    "fdatasyncs",
];

/// CSV columns carrying the contract counters (`per_tx_<key>`).
pub const PER_TX_CSV: [&str; 5] = [
    "per_tx_lwlock_sleeps",
    "per_tx_procarray_lock_acquisitions",
    "per_tx_waitlist_lock_acquisitions",
    "per_tx_waitlist_entries_scanned",
    "per_tx_fdatasyncs",
];

const _: () = assert!(PER_TX_CONTRACT.len() == PER_TX_CSV.len());

/// Between two samples of the proc slots.
const SAMPLE_EVERY: Duration = Duration::from_millis(1);

/// What a point's window showed besides its throughput.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// "Type:Name" -> share of backend observations, largest first.
    pub wait_events: Vec<(String, f64)>,
    /// Backend slot observations taken.
    pub wait_samples: u64,
    /// Mechanism counters summed over processes, window delta.
    pub mechanism: MechanismTotals,
}

/// Sleeps through a window of `seconds`, sampling the backends' wait
/// events every millisecond; returns the samples.
pub fn sample_window(shm: &Shmem, seconds: f64) -> WaitSamples {
    let mut samples = WaitSamples::default();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    loop {
        stats::sample_wait_events(shm, &mut samples);
        let now = Instant::now();
        if now >= deadline {
            return samples;
        }
        std::thread::sleep(SAMPLE_EVERY.min(deadline - now));
    }
}

impl Observed {
    pub fn new(samples: &WaitSamples, before: &MechanismTotals, after: &MechanismTotals) -> Self {
        Observed {
            wait_events: samples.shares(),
            wait_samples: samples.samples,
            mechanism: after.minus(before),
        }
    }

    /// Every counter per transaction: the named sums, then acquisitions
    /// and sleeps per LWLock tranche (`lwlock_sleeps.WALWrite`, ...).
    pub fn per_tx(&self, transactions: u64) -> Vec<(String, f64)> {
        let tx = transactions.max(1) as f64;
        let mut v: Vec<(String, f64)> = self
            .mechanism
            .named()
            .into_iter()
            .map(|(k, n)| (k.to_string(), n as f64 / tx))
            .collect();
        for slot in 0..NUM_TRANCHES {
            let t = &self.mechanism.lwlock[slot];
            let name = shmem::waitevent::tranche_name(stats::slot_tranche(slot));
            v.push((
                format!("lwlock_acquisitions.{name}"),
                t.acquisitions as f64 / tx,
            ));
            v.push((format!("lwlock_sleeps.{name}"), t.sleeps as f64 / tx));
        }
        v
    }

    /// The ratios that state a mechanism directly (None: no divisor).
    pub fn ratios(&self) -> Vec<(String, Option<f64>)> {
        self.mechanism
            .ratios()
            .into_iter()
            .map(|(k, r)| (k.to_string(), r))
            .collect()
    }

    /// The value of counter `key`: a ratio's, or a per-transaction one.
    pub fn value(&self, key: &str, transactions: u64) -> Option<f64> {
        if let Some((_, r)) = self.ratios().into_iter().find(|(k, _)| k == key) {
            return r;
        }
        self.per_tx(transactions)
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// The `n` largest waits, compactly: `LWLock:WALWrite 41% IO:WALSync 9%`
    /// (`-` when backends never waited).
    pub fn top_waits(&self, n: usize) -> String {
        if self.wait_events.is_empty() {
            return "-".into();
        }
        self.wait_events
            .iter()
            .take(n)
            .map(|(k, s)| format!("{k} {:.0}%", s * 100.0))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The run fields: `wait_events`, `wait_samples`, `per_tx`,
    /// `mechanism_ratios` (JSON objects), and the CSV's flat columns.
    pub fn fields(&self, transactions: u64) -> Record {
        let per_tx = self.per_tx(transactions);
        let mut r: Record = vec![
            (
                "wait_events",
                Value::Map(
                    self.wait_events
                        .iter()
                        .map(|(k, s)| (k.clone(), Value::Fixed(*s, 4)))
                        .collect(),
                ),
            ),
            ("wait_samples", Value::Int(self.wait_samples)),
            (
                "per_tx",
                Value::Map(
                    per_tx
                        .iter()
                        .map(|(k, v)| (k.clone(), Value::Fixed(*v, 6)))
                        .collect(),
                ),
            ),
            (
                "mechanism_ratios",
                Value::Map(
                    self.ratios()
                        .into_iter()
                        .map(|(k, v)| (k, v.map_or(Value::Null, |x| Value::Fixed(x, 4))))
                        .collect(),
                ),
            ),
            ("wait_top", Value::Str(self.top_waits(3).replace(',', ";"))),
        ];
        for (key, column) in PER_TX_CONTRACT.iter().zip(PER_TX_CSV) {
            let v = per_tx.iter().find(|(k, _)| k == key).map_or(0.0, |x| x.1);
            r.push((column, Value::Fixed(v, 6)));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed() -> Observed {
        let mut after = MechanismTotals::default();
        after.lwlock[1].acquisitions = 40;
        after.lwlock[1].sleeps = 4;
        after.flat.waitlist_entries_scanned = 30;
        after.flat.waitlist_dequeues = 10;
        after.flat.procarray_lock_acquisitions = 5;
        after.flat.xid_clears = 20;
        let mut samples = WaitSamples {
            samples: 4,
            ..Default::default()
        };
        samples
            .counts
            .insert(shmem::waitevent::WaitEvent::lwlock(1), 3);
        Observed::new(&samples, &MechanismTotals::default(), &after)
    }

    #[test]
    fn per_tx_has_the_contract_keys_and_divides_by_transactions() {
        let o = observed();
        let per_tx = o.per_tx(20);
        for k in PER_TX_CONTRACT {
            assert!(per_tx.iter().any(|(x, _)| x == k), "{k}");
        }
        let get = |k: &str| per_tx.iter().find(|(x, _)| x == k).unwrap().1;
        assert_eq!(get("lwlock_sleeps"), 0.2);
        assert_eq!(get("lwlock_sleeps.ProcArray"), 0.2);
        assert_eq!(get("lwlock_acquisitions.ProcArray"), 2.0);
        assert_eq!(
            o.value("waitlist_entries_scanned_per_dequeue", 20),
            Some(3.0)
        );
        assert_eq!(
            o.value("procarray_lock_acquisitions_per_commit", 20),
            Some(0.25)
        );
        assert_eq!(o.value("waitlist_entries_scanned", 20), Some(1.5));
        assert_eq!(o.value("nope", 20), None);
        assert_eq!(o.wait_events, vec![("LWLock:ProcArray".to_string(), 0.75)]);
        assert_eq!(o.top_waits(3), "LWLock:ProcArray 75%");
    }

    #[test]
    fn fields_render_as_json_objects() {
        let j = Value::Obj(observed().fields(20)).json();
        assert!(
            j.contains("\"wait_events\":{\"LWLock:ProcArray\":0.75}"),
            "{j}"
        );
        assert!(
            j.contains("\"per_tx\":{\"lwlock_acquisitions\":2.0,"),
            "{j}"
        );
        assert!(j.contains("\"per_tx_waitlist_entries_scanned\":1.5"), "{j}");
        assert!(j.contains("\"commits_per_fdatasync\":null"), "{j}");
    }
}
