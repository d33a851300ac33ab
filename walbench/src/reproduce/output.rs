//! What `walbench reproduce` prints and writes: the seed-style table (rows
//! variant_N_clients, a column per size, new / old ratio rows), the same
//! table for the experiment's mechanism counter (the one that shows the
//! seed's mechanism on any machine), the per-point details with the
//! backends' top wait events, the JSON document (each run with
//! `wait_events`, `per_tx`, `mechanism_ratios`, `mechanism_counter` and
//! `mechanism_value`), the CSV and the chart panels.
//!
//! Invariants: one record per point (`run_record`) feeds both the JSON
//! runs and the CSV lines, so a field reads the same in both; the JSON keeps
//! the plain mode's `runs` keys and adds its own; ratio rows and the
//! `ratios` array appear only when both the new and the old variant ran.

use super::{size_label, sizes_or_none, Options, Summary};
use crate::chart;
use crate::machine::Machine;
use crate::report::{self, Column, Record, Value};

/// One run of `walbench reproduce`, ready to print and write.
pub struct Reproduced<'a> {
    o: &'a Options,
    machine: &'a Machine,
    s: &'a [Summary],
}

impl<'a> Reproduced<'a> {
    pub fn new(o: &'a Options, machine: &'a Machine, s: &'a [Summary]) -> Self {
        Reproduced { o, machine, s }
    }
}

impl report::Report for Reproduced<'_> {
    fn text(&self) -> String {
        table(self.o, self.s) + &details(self.s)
    }

    fn json(&self) -> String {
        json(self.o, self.machine, self.s)
    }

    fn csv(&self) -> String {
        csv(self.o, self.s)
    }

    fn svg(&self) -> String {
        chart::svg(
            &chart_title(self.o),
            &self.machine.describe(),
            &panels(self.o, self.s),
        )
    }
}

fn chart_title(o: &Options) -> String {
    let e = o.experiment;
    format!("walbench reproduce {} ({}): {}", e.name, e.seed, e.title)
}

/// The names of the new and the old variant, when both ran.
fn new_old(o: &Options) -> Option<(&'static str, &'static str)> {
    let (new, old) = o.experiment.new_and_old();
    let ran = |v| o.variants.iter().any(|x| std::ptr::eq(*x, v));
    (ran(new) && ran(old)).then_some((new.name, old.name))
}

fn find<'a>(s: &'a [Summary], v: &str, size: Option<usize>, c: u32) -> Option<&'a Summary> {
    s.iter()
        .find(|x| x.variant == v && x.size == size && x.clients == c)
}

/// new / old at one point, when both were measured.
fn ratio(s: &[Summary], new: &str, old: &str, size: Option<usize>, c: u32) -> Option<f64> {
    let (a, b) = (find(s, new, size, c)?, find(s, old, size, c)?);
    Some(a.tps() / b.tps().max(1e-9))
}

fn cell(x: &Summary, repeat: u32) -> String {
    if repeat > 1 {
        format!("{:.0} [{:.0}-{:.0}]", x.tps(), x.tps_min(), x.tps_max())
    } else {
        format!("{:.0}", x.tps())
    }
}

/// The first row of a seed-style table: the sizes (or the workload).
fn header_row(o: &Options) -> (String, Vec<String>) {
    let head = if o.sizes.is_empty() {
        "workload"
    } else {
        "message_size_b"
    };
    let sizes = sizes_or_none(o);
    (head.into(), sizes.iter().map(|z| size_label(*z)).collect())
}

/// The seed-style table: rows variant_N_clients, columns sizes, ratio rows.
pub fn table(o: &Options, s: &[Summary]) -> String {
    let sizes = sizes_or_none(o);
    let what = if o.experiment.derived() {
        "transactions/s (derived: records / records per transaction)"
    } else {
        "transactions/s"
    };
    let mut rows = vec![header_row(o)];
    for &c in &o.clients {
        for v in &o.variants {
            let cells = sizes
                .iter()
                .map(|&z| find(s, v.name, z, c).map_or("-".into(), |x| cell(x, o.repeat)))
                .collect();
            rows.push((format!("{}_{c}_clients", v.name), cells));
        }
        if let Some((new, old)) = new_old(o) {
            let cells = sizes
                .iter()
                .map(|&z| ratio(s, new, old, z, c).map_or("-".into(), |r| format!("{r:.2}")))
                .collect();
            rows.push((format!("ratio_{c}_clients ({new}/{old})"), cells));
        }
    }
    format!(
        "\n{what}\n{}{}",
        report::seed_table(&rows),
        mechanism_table(o, s)
    )
}

/// The experiment's mechanism counter at one point (median run).
fn mechanism_value(o: &Options, x: &Summary) -> Option<f64> {
    let m = x.median();
    m.observed
        .value(o.experiment.mechanism.counter, x.transactions_of(m))
}

/// `v` with four significant digits (a ratio near 1 shows its change in
/// the fourth decimal on a small machine).
fn four_digits(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let decimals = (3 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
    format!("{v:.decimals$}")
}

/// The mechanism counter in the seed table's shape: one row per variant
/// and client count, one column per size.
fn mechanism_table(o: &Options, s: &[Summary]) -> String {
    let mech = &o.experiment.mechanism;
    let sizes = sizes_or_none(o);
    let mut rows = vec![header_row(o)];
    for &c in &o.clients {
        for v in &o.variants {
            let cells = sizes
                .iter()
                .map(|&z| {
                    find(s, v.name, z, c)
                        .and_then(|x| mechanism_value(o, x))
                        .map_or("-".into(), four_digits)
                })
                .collect();
            rows.push((format!("{}_{c}_clients", v.name), cells));
        }
    }
    format!(
        "\nmechanism: {} (expected: {})\n{}",
        mech.counter,
        mech.expect,
        report::seed_table(&rows)
    )
}

fn us(ns: Option<u64>) -> String {
    ns.map_or("-".into(), |n| format!("{:.1}", n as f64 / 1000.0))
}

const DETAIL_COLUMNS: [Column; 12] = [
    Column::left("variant", 20),
    Column::right("workload", 11),
    Column::right("clients", 7),
    Column::right("tps", 12),
    Column::right("records/s", 12),
    Column::right("MB/s", 12),
    Column::right("p50 us", 11),
    Column::right("p99 us", 9),
    Column::right("rec/tx", 9),
    Column::right("cpu", 6),
    Column::right("mem MB", 8),
    Column::left("top waits (share of backend samples)", 36).gap(2),
];

/// Per-point details: records/s, bytes/s, latency, CPU and memory.
pub fn details(s: &[Summary]) -> String {
    let rows: Vec<Vec<String>> = s
        .iter()
        .map(|x| {
            let m = x.median();
            vec![
                x.variant.clone(),
                x.workload.clone(),
                x.clients.to_string(),
                format!("{:.0}", x.tps()),
                format!("{:.0}", m.records as f64 / m.seconds),
                format!("{:.1}", m.bytes as f64 / m.seconds / 1e6),
                us(m.latency_ns_p50),
                us(m.latency_ns_p99),
                x.per_tx.to_string(),
                format!("{:.2}", m.cpu_cores),
                format!("{:.0}", m.mem_bytes as f64 / 1e6),
                m.observed.top_waits(3),
            ]
        })
        .collect();
    format!(
        "\n{}latency: one workload iteration (one record for emit, one transaction for txid), \
         sampled 1 in 8; cpu: cores busy in the server's processes; waits: \
         backends' wait events sampled every 1 ms\n",
        report::fixed_table(&DETAIL_COLUMNS, &rows)
    )
}

/// One point's fields, in the JSON's order; the CSV picks its columns
/// from them.
fn run_record(o: &Options, x: &Summary) -> Record {
    let m = x.median();
    let tps_runs = x
        .runs
        .iter()
        .map(|r| Value::Fixed(x.tps_of(r), 1))
        .collect();
    let mut r = vec![
        ("variant", Value::str(&x.variant)),
        ("workload", Value::str(&x.workload)),
        ("size", Value::opt_int(x.size.map(|s| s as u64))),
        ("clients", Value::Int(x.clients.into())),
        ("seconds", Value::Fixed(m.seconds, 3)),
        ("transactions", Value::Int(x.transactions_of(m))),
        ("tps", Value::Fixed(x.tps(), 1)),
        ("tps_min", Value::Fixed(x.tps_min(), 1)),
        ("tps_max", Value::Fixed(x.tps_max(), 1)),
        ("tps_runs", Value::List(tps_runs)),
        ("latency_us_p50", Value::opt_us(m.latency_ns_p50)),
        ("latency_us_p99", Value::opt_us(m.latency_ns_p99)),
        ("records", Value::Int(m.records)),
        ("bytes", Value::Int(m.bytes)),
        (
            "records_per_s",
            Value::Fixed(m.records as f64 / m.seconds, 1),
        ),
        ("bytes_per_s", Value::Fixed(m.bytes as f64 / m.seconds, 1)),
        ("records_per_transaction", Value::Int(x.per_tx)),
        ("transactions_derived", Value::Bool(x.derived)),
        ("wal_syncs", Value::Int(m.wal_syncs)),
        ("wal_writes", Value::Int(m.wal_writes)),
        ("preinit_pages", Value::Int(m.preinit_pages)),
        ("backend_init_pages", Value::Int(m.backend_init_pages)),
        ("buffer_full_waits", Value::Int(m.buffer_full_waits)),
        ("records_at_exit", Value::Int(m.records_at_exit)),
        ("cpu_cores", Value::Fixed(m.cpu_cores, 3)),
        (
            "mechanism_counter",
            Value::str(o.experiment.mechanism.counter),
        ),
        (
            "mechanism_value",
            mechanism_value(o, x).map_or(Value::Null, |v| Value::Fixed(v, 6)),
        ),
        ("mem_mb", Value::Fixed(m.mem_bytes as f64 / 1e6, 1)),
        ("repeat", Value::Int(x.runs.len() as u64)),
        ("cores", Value::Int(crate::machine::cores() as u64)),
    ];
    r.extend(m.observed.fields(x.transactions_of(m)));
    r
}

fn machine_record(m: &Machine) -> Value {
    Value::Obj(vec![
        ("cpu_model", Value::str(&m.cpu_model)),
        ("cores", Value::Int(m.cores as u64)),
        ("mem_total_mb", Value::Int(m.mem_total_mb)),
        ("kernel", Value::str(&m.kernel)),
        ("data_dir", Value::str(&m.data_dir)),
        ("data_fs", Value::str(&m.data_fs)),
    ])
}

/// `{"size","clients","new","old","ratio"}` for each point where both the
/// new and the old variant ran.
fn ratios(o: &Options, s: &[Summary]) -> Vec<Value> {
    let Some((new, old)) = new_old(o) else {
        return vec![];
    };
    let mut v = vec![];
    for z in sizes_or_none(o) {
        for &c in &o.clients {
            if let Some(r) = ratio(s, new, old, z, c) {
                v.push(Value::Obj(vec![
                    ("size", Value::opt_int(z.map(|b| b as u64))),
                    ("clients", Value::Int(c.into())),
                    ("new", Value::str(new)),
                    ("old", Value::str(old)),
                    ("ratio", Value::Fixed(r, 4)),
                ]));
            }
        }
    }
    v
}

/// The JSON document: the plain mode's `runs` schema, extended.
pub fn json(o: &Options, machine: &Machine, s: &[Summary]) -> String {
    let e = o.experiment;
    let mut settings = e.base_assignments();
    settings.extend(o.sets.iter().cloned());
    report::json_document(vec![
        ("reproduce", Value::str(e.name)),
        ("seed", Value::str(e.seed)),
        ("title", Value::str(e.title)),
        ("repeat", Value::Int(o.repeat.into())),
        ("seconds_per_point", Value::Num(o.seconds)),
        (
            "settings",
            Value::List(settings.iter().map(|x| Value::str(x)).collect()),
        ),
        ("note", Value::str(e.note)),
        ("machine", machine_record(machine)),
        (
            "runs",
            Value::List(s.iter().map(|x| Value::Obj(run_record(o, x))).collect()),
        ),
        ("ratios", Value::List(ratios(o, s))),
    ])
}

pub const CSV_HEADER: &str = "experiment,variant,workload,size,clients,repeat,seconds,transactions,tps,tps_min,tps_max,records,records_per_s,bytes_per_s,records_per_transaction,transactions_derived,latency_us_p50,latency_us_p99,cpu_cores,mem_mb,wal_syncs,mechanism_counter,mechanism_value,wait_top,per_tx_lwlock_sleeps,per_tx_procarray_lock_acquisitions,per_tx_waitlist_lock_acquisitions,per_tx_waitlist_entries_scanned,per_tx_fdatasyncs";

/// The CSV: `CSV_HEADER`, then one line per point.
pub fn csv(o: &Options, s: &[Summary]) -> String {
    let mut out = format!("{CSV_HEADER}\n");
    for x in s {
        let mut r = vec![("experiment", Value::str(o.experiment.name))];
        r.extend(run_record(o, x));
        out.push_str(&report::csv_line(CSV_HEADER, &r));
        out.push('\n');
    }
    out
}

/// Chart panels: throughput per size, then the mechanism counter per size;
/// one series per variant.
pub fn panels(o: &Options, s: &[Summary]) -> Vec<chart::Panel> {
    let mut p = tps_panels(o, s);
    p.extend(mechanism_panels(o, s));
    p
}

/// The panel title of a size.
fn panel_title(z: Option<usize>) -> String {
    match z {
        Some(b) => format!("{b}-byte records"),
        None => "txid".to_string(),
    }
}

/// One panel per size with the mechanism counter against clients.
fn mechanism_panels(o: &Options, s: &[Summary]) -> Vec<chart::Panel> {
    let counter = o.experiment.mechanism.counter;
    panels_of(
        o,
        s,
        |z| format!("{}: {counter}", panel_title(z)),
        counter,
        |x| {
            let y = mechanism_value(o, x)?;
            Some(chart::Point {
                x: x.clients as f64,
                y,
                lo: y,
                hi: y,
            })
        },
    )
}

fn tps_panels(o: &Options, s: &[Summary]) -> Vec<chart::Panel> {
    let y_label = if o.experiment.derived() {
        "transactions/s (derived)"
    } else {
        "transactions/s"
    };
    panels_of(o, s, panel_title, y_label, |x| {
        Some(chart::Point {
            x: x.clients as f64,
            y: x.tps(),
            lo: x.tps_min(),
            hi: x.tps_max(),
        })
    })
}

/// One panel per size, one series per variant, a point per client count
/// where `point` gives one.
fn panels_of(
    o: &Options,
    s: &[Summary],
    title: impl Fn(Option<usize>) -> String,
    y_label: &str,
    point: impl Fn(&Summary) -> Option<chart::Point>,
) -> Vec<chart::Panel> {
    sizes_or_none(o)
        .into_iter()
        .map(|z| chart::Panel {
            title: title(z),
            y_label: y_label.into(),
            series: o
                .variants
                .iter()
                .map(|v| chart::Series {
                    name: v.name.to_string(),
                    points: o
                        .clients
                        .iter()
                        .filter_map(|&c| find(s, v.name, z, c))
                        .filter_map(&point)
                        .collect(),
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_csv_column_is_a_field_of_the_run_record() {
        let x = Summary {
            variant: "a".into(),
            workload: "txid".into(),
            size: None,
            clients: 1,
            per_tx: 1,
            derived: false,
            runs: vec![crate::point::Measured {
                seconds: 1.0,
                ..Default::default()
            }],
        };
        let o = super::super::tests::parse("lwlock-queue").unwrap();
        let mut r = vec![("experiment", Value::str("e"))];
        r.extend(run_record(&o, &x));
        for c in CSV_HEADER.split(',') {
            assert!(r.iter().any(|(k, _)| *k == c), "{c} not in the record");
        }
    }
}
