//! The library paths of `walbench tail` (`library`, `library-inserted`):
//! measured by the worker crate's `tail_latency` example (walbench cannot
//! link the worker crate, see that example's header), run against a walshm
//! server this module starts with the same settings as the other paths;
//! its JSON runs are taken over as they are. The example must be built:
//! `cargo build --release -p walshm-worker --example tail_latency`.
//!
//! Method (the example's): forked producer processes on an open-loop
//! schedule, latency from each message's due time; `library` reads
//! committed transactions from flushed WAL, `library-inserted` reads
//! messages once inserted, before they are durable. `max_rate` is the
//! rate a run delivered (the example's definition).

use super::servers::Server;
use super::{Latency, Options, Run};
use std::path::PathBuf;
use std::process::Command;

/// The `tail_latency` example next to walbench (target/PROFILE/examples).
fn example() -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = me.parent().ok_or("walbench has no directory")?;
    [
        dir.join("examples/tail_latency"),
        dir.join("../examples/tail_latency"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .ok_or_else(|| {
        format!(
            "the library paths need the tail_latency example next to walbench ({}): \
                 cargo build --release -p walshm-worker --example tail_latency",
            dir.join("examples").display()
        )
    })
}

fn number(v: &serde_json::Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or(0.0)
}

/// The runs of one library path.
pub fn runs(o: &Options, inserted: bool) -> Result<Vec<Run>, String> {
    let bin = example()?;
    let work = super::servers::work_dir(if inserted { "lib-ins" } else { "lib" })?;
    let server = Server::walshm(&crate::postmaster_path()?, &work, &o.sets)?;
    let json = work.join("runs.json");
    let rates: Vec<String> = o.rates.iter().map(u64::to_string).collect();
    let path = if inserted {
        "library-inserted"
    } else {
        "library"
    };
    eprint!("\r{path}: {} messages/s ...          ", rates.join(","));
    let out = Command::new(&bin)
        .arg("-D")
        .arg(&server.socket_dir)
        .args(["--mode", if inserted { "inserted" } else { "flushed" }])
        .args(["--rates", &rates.join(",")])
        .args(["--size", &o.size.to_string()])
        .args(["--seconds", &o.seconds.to_string()])
        .arg("--json")
        .arg(&json)
        .output()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    eprintln!("\r{path}: done                          ");
    if !out.status.success() {
        return Err(format!(
            "tail_latency failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = std::fs::read_to_string(&json).map_err(|e| format!("{}: {e}", json.display()))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("tail_latency's JSON: {e}"))?;
    let runs = doc["runs"]
        .as_array()
        .ok_or("tail_latency's JSON has no runs")?
        .iter()
        .map(|r| {
            let l = &r["latency_us"];
            let ret = &r["after_return_us"];
            Run {
                path: r["path"].as_str().unwrap_or(path).to_string(),
                rate: r["rate"].as_u64().unwrap_or(0),
                size: o.size,
                delivered: r["delivered"].as_u64().unwrap_or(0),
                lost: r["lost"].as_u64().unwrap_or(0),
                latency: Latency {
                    p50: number(l, "p50"),
                    p90: number(l, "p90"),
                    p99: number(l, "p99"),
                    p999: number(l, "p999"),
                    max: number(l, "max"),
                },
                after_return: ret.is_object().then(|| Latency {
                    p50: number(ret, "p50"),
                    p90: number(ret, "p90"),
                    p99: number(ret, "p99"),
                    p999: number(ret, "p999"),
                    max: number(ret, "max"),
                }),
                max_rate: number(r, "max_rate"),
            }
        })
        .collect();
    drop(server);
    let _ = std::fs::remove_dir_all(&work);
    Ok(runs)
}
