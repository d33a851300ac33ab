//! `walbench worker-vs-builtin --worker-cmd CMD`: the library against the
//! built-in workloads in one command. For each client count it
//! measures the built-in `emit:SIZE` and then CMD run as that many
//! supervised workers (`postmaster start --worker`, given `--size SIZE`),
//! records/s each; then the built-in `emit-tx:SIZE` and CMD with `--tx`,
//! durable commits/s each (fsync on). It prints a table with the ratio
//! worker / built-in per row, measured in the same run.
//!
//! CMD is typically the worker crate's example:
//! `cargo build --release -p walshm-worker --example producer` then
//! `walbench worker-vs-builtin --worker-cmd target/release/examples/producer`.
//!
//! Invariants: both sides of a row use the same settings and window; the
//! worker side samples only the worker slots' counters (records inserted,
//! commits), the built-in side only the backends', so start-up and shutdown
//! never count; emit rows run with `fsync = off` (no flush is involved),
//! commit rows with the data directory's `fsync` (on by default).

use crate::cli;
use crate::point::{self, Measured, PointSpec};
use crate::postmaster_path;

/// `walbench worker-vs-builtin`'s options.
#[derive(clap::Args)]
pub struct Options {
    /// The worker program (and arguments); it gets --size SIZE [--tx]
    #[arg(long, value_name = "CMD")]
    pub worker_cmd: String,
    /// Comma-separated worker counts
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "2,16",
          value_parser = cli::client_count, action = clap::ArgAction::Set)]
    pub clients: Vec<u32>,
    /// Measured seconds per point
    #[arg(long, value_name = "S", default_value = "2", value_parser = cli::seconds)]
    pub seconds: f64,
    /// Message payload bytes
    #[arg(long, value_name = "N", default_value = "16")]
    pub size: usize,
    #[arg(long = "set", short = 'c', value_name = "NAME=VALUE", value_parser = cli::setting,
          help = cli::SET_HELP)]
    pub sets: Vec<String>,
}

pub fn run_mode(o: &Options) -> Result<(), String> {
    let rows = run(o)?;
    print!("{}", table(&rows));
    Ok(())
}

/// One row: what was compared, at how many clients, both rates.
pub struct Row {
    pub what: &'static str,
    pub clients: u32,
    pub builtin: f64,
    pub worker: f64,
}

impl Row {
    pub fn ratio(&self) -> f64 {
        self.worker / self.builtin
    }
}

/// Measures every row.
pub fn run(o: &Options) -> Result<Vec<Row>, String> {
    let postmaster = postmaster_path()?;
    let mut rows = Vec::new();
    let kinds: [(&'static str, String, Vec<String>); 2] = [
        (
            "records/s emit",
            format!("emit:{}", o.size),
            vec!["fsync=off".to_string()],
        ),
        ("commits/s emit-tx", format!("emit-tx:{}", o.size), vec![]),
    ];
    for (what, workload, extra) in &kinds {
        for &clients in &o.clients {
            let spec = |worker_cmd: Option<String>| PointSpec {
                workload: workload.clone(),
                clients,
                seconds: o.seconds,
                sets: extra.iter().chain(&o.sets).cloned().collect(),
                datadir: None,
                temp_base: std::env::temp_dir(),
                keep_at: None,
                worker_cmd,
            };
            let rate = |m: &Measured| {
                let n = if what.starts_with("records") {
                    m.records
                } else {
                    m.transactions
                };
                n as f64 / m.seconds
            };
            let b = point::measure(&postmaster, &spec(None))
                .map_err(|e| format!("built-in {workload} x{clients}: {e}"))?;
            let w = point::measure(&postmaster, &spec(Some(o.worker_cmd.clone())))
                .map_err(|e| format!("worker {workload} x{clients}: {e}"))?;
            let row = Row {
                what,
                clients,
                builtin: rate(&b),
                worker: rate(&w),
            };
            eprintln!(
                "{} x{}: built-in {:.0}, worker {:.0} ({:.2})",
                row.what,
                row.clients,
                row.builtin,
                row.worker,
                row.ratio()
            );
            rows.push(row);
        }
    }
    Ok(rows)
}

/// The comparison table.
pub fn table(rows: &[Row]) -> String {
    let mut s = format!(
        "{:<20} {:>8} {:>14} {:>14} {:>8}\n",
        "rate", "clients", "built-in", "worker", "ratio"
    );
    for r in rows {
        s.push_str(&format!(
            "{:<20} {:>8} {:>14.0} {:>14.0} {:>8.2}\n",
            r.what,
            r.clients,
            r.builtin,
            r.worker,
            r.ratio()
        ));
    }
    s
}
