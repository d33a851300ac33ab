//! `postmaster waldump`: the project's own WAL reader, printing records the
//! way PostgreSQL's pg_waldump does, and where and why WAL ends; if valid
//! WAL follows that end (damage, not a torn tail), one more line says how
//! much and up to where (the startup process's look-ahead). WAL is read
//! along the control file's timeline and its history (older timelines'
//! segment files before each switch point).

use crate::cli::WaldumpOptions;
use backend::control::ControlFile;
use backend::timeline::Timeline;
use std::collections::BTreeMap;
use std::io::Write;
use walformat::{format_lsn, Geometry, WalReader};

pub fn run(opts: &WaldumpOptions) -> Result<(), String> {
    match dump(opts) {
        // A reader that stopped early (`| head`) is not an error.
        Err(DumpError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(DumpError::Output(e)) => Err(format!("could not write output: {e}")),
        Err(DumpError::Other(e)) => Err(e),
        Ok(()) => Ok(()),
    }
}

enum DumpError {
    Output(std::io::Error),
    Other(String),
}

impl From<String> for DumpError {
    fn from(s: String) -> Self {
        DumpError::Other(s)
    }
}

impl From<std::io::Error> for DumpError {
    fn from(e: std::io::Error) -> Self {
        DumpError::Output(e)
    }
}

fn dump(opts: &WaldumpOptions) -> Result<(), DumpError> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let dir = crate::datadir::check_datadir(&opts.datadir)?;
    let control = ControlFile::read(&dir).map_err(|e| e.to_string())?;
    let sys = control.wal_system().map_err(|e| e.to_string())?;
    let geo = sys.geo;
    let pg_wal = dir.join("pg_wal");
    let history = Timeline::read(&pg_wal, control.timeline).map_err(|e| e.to_string())?;
    let start = match opts.start {
        Some(s) => s,
        None => first_segment_start(&pg_wal, &geo, &history)?,
    };
    let mut reader = WalReader::open_across(
        &walformat::StdWalFiles,
        &pg_wal,
        geo,
        history.reader_history(),
        Some(control.system_identifier),
        start,
    )
    .map_err(|e| e.to_string())?;
    let (t, stop) = read_records(&mut reader, &mut out, opts.quiet)?;
    writeln!(
        out,
        "end of WAL at {}: {stop}; {} records, {} bytes from {}",
        format_lsn(reader.end_of_valid()),
        t.count,
        t.bytes,
        format_lsn(t.first.unwrap_or(start))
    )?;
    let end = reader.end_of_valid();
    let ahead = walformat::look_ahead(&pg_wal, sys, end);
    if let Ok(walformat::Lookahead { found: Some(f), .. }) = ahead {
        writeln!(
            out,
            "valid WAL follows the end (damage, not a torn tail): {} records, {} COMMIT, from {} (WAL segment {}, offset {}) up to {}",
            f.records,
            f.commits,
            format_lsn(f.first_record),
            f.first_file,
            f.first_offset,
            format_lsn(f.last_end)
        )?;
    }
    if opts.stats {
        print_stats(&mut out, &t)?;
    }
    out.flush()?;
    Ok(())
}

/// What the records read add up to.
#[derive(Default)]
struct Totals {
    /// Records and bytes per resource manager.
    per_rmgr: BTreeMap<&'static str, (u64, u64)>,
    count: u64,
    bytes: u64,
    /// The first record's LSN.
    first: Option<u64>,
}

/// Reads records to the end of valid WAL, printing each one (unless
/// `quiet`) as pg_waldump does. Returns the totals and why reading stopped.
fn read_records(
    reader: &mut WalReader,
    out: &mut impl Write,
    quiet: bool,
) -> Result<(Totals, String), DumpError> {
    let mut t = Totals::default();
    let stop = loop {
        match reader.next_record() {
            Ok(Some(r)) => {
                if !quiet {
                    writeln!(out,
                        "rmgr: {:<11} len (rec/tot): {:>6}/{:>6}, tx: {:>10}, lsn: {}, prev {}, desc: {}",
                        r.rmgr_name(),
                        r.rec_len(),
                        r.tot_len,
                        r.xid,
                        format_lsn(r.lsn),
                        format_lsn(r.prev),
                        r.describe()
                    )?;
                }
                t.first.get_or_insert(r.lsn);
                t.count += 1;
                t.bytes += r.tot_len as u64;
                let e = t.per_rmgr.entry(r.rmgr_name()).or_default();
                e.0 += 1;
                e.1 += r.tot_len as u64;
            }
            Ok(None) => break "clean end of WAL".to_string(),
            Err(e) => break format!("invalid record: {e}"),
        }
    };
    Ok((t, stop))
}

/// `--stats`: records and bytes per resource manager, then the total.
fn print_stats(out: &mut impl Write, t: &Totals) -> Result<(), DumpError> {
    writeln!(out, "{:<16} {:>12} {:>16}", "rmgr", "records", "bytes")?;
    for (name, (n, b)) in &t.per_rmgr {
        writeln!(out, "{name:<16} {n:>12} {b:>16}")?;
    }
    writeln!(out, "{:<16} {:>12} {:>16}", "total", t.count, t.bytes)?;
    Ok(())
}

/// Start of the oldest segment in pg_wal of `history`'s timelines.
fn first_segment_start(
    pg_wal: &std::path::Path,
    geo: &Geometry,
    history: &Timeline,
) -> Result<u64, String> {
    let mut lowest = None;
    for e in std::fs::read_dir(pg_wal)
        .map_err(|e| format!("could not read \"{}\": {e}", pg_wal.display()))?
    {
        let name = e.map_err(|e| e.to_string())?.file_name();
        if let Some((t, segno)) = geo.parse_file_name(&name.to_string_lossy()) {
            if history.contains(t) && history.timeline_of_segment(segno, geo.seg_size) == t {
                lowest = Some(lowest.map_or(segno, |l: u64| l.min(segno)));
            }
        }
    }
    lowest
        .map(|s| geo.seg_start(s))
        .ok_or_else(|| format!("no WAL segments in \"{}\"", pg_wal.display()))
}
