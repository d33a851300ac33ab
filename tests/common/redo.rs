//! The startup process's "redo done" lines in a server's stderr.

/// One "redo done at A: N records in T s; end of WAL at Y (REASON)" line of
/// the startup process.
#[derive(Debug, Clone)]
pub struct RedoDone {
    pub last_record: u64,
    pub records: u64,
    pub end_of_wal: u64,
    pub reason: String,
}

/// Every startup "redo done" line in a server's stderr, in order.
pub fn redo_lines(stderr: &str) -> Vec<RedoDone> {
    let mut v = Vec::new();
    for line in stderr.lines() {
        let Some((_, rest)) = line.split_once("redo done at ") else {
            continue;
        };
        let parse = || -> Option<RedoDone> {
            let (a, rest) = rest.split_once(": ")?;
            let n = rest.split_whitespace().next()?.parse().ok()?;
            let (_, rest) = rest.split_once("end of WAL at ")?;
            let (y, reason) = rest.split_once(' ')?;
            Some(RedoDone {
                last_record: walformat::parse_lsn(a).ok()?,
                records: n,
                end_of_wal: walformat::parse_lsn(y).ok()?,
                reason: reason
                    .trim()
                    .trim_start_matches('(')
                    .trim_end_matches(')')
                    .to_string(),
            })
        };
        v.push(parse().unwrap_or_else(|| panic!("cannot parse {line:?}")));
    }
    v
}
