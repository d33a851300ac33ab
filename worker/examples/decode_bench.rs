//! Reader throughput: decodes every record of a data directory's WAL files
//! (no server needed) and prints records, bytes of WAL covered and GB/s.
//!
//! ```text
//! decode_bench -D DIR
//! ```
//!
//! Make WAL to read with, for example, `postmaster start -D DIR --workers 2
//! --workload emit:1024 --set fsync=off --set wal_keep_size=100000` for a
//! few seconds.

use std::time::Instant;

/// Decodes every record of a data directory's WAL files.
#[derive(clap::Parser)]
#[command(name = "decode_bench")]
struct Args {
    /// The data directory whose WAL to read
    #[arg(short = 'D', value_name = "DIR")]
    dir: std::path::PathBuf,
}

fn main() {
    let dir = <Args as clap::Parser>::parse().dir;
    let mut r = match walshm::Reader::open(&dir, 0) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("decode_bench: {e}");
            std::process::exit(1);
        }
    };
    let t = Instant::now();
    let (mut records, mut payload) = (0u64, 0u64);
    let mut first = None;
    let mut last = 0;
    loop {
        match r.next_record() {
            Ok(Some(rec)) => {
                records += 1;
                payload += rec.payload.len() as u64;
                first.get_or_insert(rec.lsn);
                last = rec.end;
            }
            Ok(None) => break,
            Err(e) => {
                eprintln!("decode_bench: {e}");
                std::process::exit(1);
            }
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let wal = last - first.unwrap_or(last);
    println!(
        "{records} records, {:.1} MB of WAL ({:.1} MB payload) in {secs:.3} s: {:.2} GB/s",
        wal as f64 / 1e6,
        payload as f64 / 1e6,
        wal as f64 / secs / 1e9
    );
}
