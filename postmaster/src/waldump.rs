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
    use std::io::Write;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let dir = crate::datadir::check_datadir(&opts.datadir)?;
    let control = ControlFile::read(&dir).map_err(|e| e.to_string())?;
    let geo = Geometry::new(control.seg_size).map_err(|e| e.to_string())?;
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
    let mut per_rmgr: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    let mut count = 0u64;
    let mut bytes = 0u64;
    let mut first = None;
    let stop = loop {
        match reader.next_record() {
            Ok(Some(r)) => {
                if !opts.quiet {
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
                first.get_or_insert(r.lsn);
                count += 1;
                bytes += r.tot_len as u64;
                let e = per_rmgr.entry(r.rmgr_name()).or_default();
                e.0 += 1;
                e.1 += r.tot_len as u64;
            }
            Ok(None) => break "clean end of WAL".to_string(),
            Err(e) => break format!("invalid record: {e}"),
        }
    };
    writeln!(
        out,
        "end of WAL at {}: {stop}; {count} records, {bytes} bytes from {}",
        format_lsn(reader.end_of_valid()),
        format_lsn(first.unwrap_or(start))
    )?;
    let end = reader.end_of_valid();
    let ahead = walformat::look_ahead(
        &pg_wal,
        geo,
        control.timeline,
        control.system_identifier,
        end,
    );
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
        writeln!(out, "{:<16} {:>12} {:>16}", "rmgr", "records", "bytes")?;
        for (name, (n, b)) in &per_rmgr {
            writeln!(out, "{name:<16} {n:>12} {b:>16}")?;
        }
        writeln!(out, "{:<16} {count:>12} {bytes:>16}", "total")?;
    }
    out.flush()?;
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
