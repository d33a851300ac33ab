//! walbench's one output path: a mode describes its results as `Value`s
//! (records of named fields) and tables of cells; this module renders them
//! as JSON, CSV and fixed-width or seed-style tables, and `publish` prints a
//! mode's tables and writes the files it was asked for (JSON, CSV, chart),
//! naming each.
//!
//! Invariants: a number is formatted once, by its `Value` (so a field reads
//! the same in JSON and CSV); JSON strings are escaped; an array of records
//! is written one record per line (`[\n  {..},\n  {..}\n]`), which the
//! documented JSON of both modes keeps; a missing value is `null` in JSON
//! and an empty CSV cell.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A value of a report field.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Str(String),
    Int(u64),
    /// A number with this many decimals.
    Fixed(f64, usize),
    /// A number in Rust's shortest form (`2`, `0.25`).
    Num(f64),
    Bool(bool),
    /// JSON `null`, an empty CSV cell.
    Null,
    /// `[a,b]` on one line.
    List(Vec<Value>),
    /// `[\n  a,\n  b\n]`: one element per line.
    Lines(Vec<Value>),
    Obj(Record),
    /// An object whose keys are only known at run time (wait events,
    /// per-tranche counters).
    Map(Vec<(String, Value)>),
}

/// Named fields, in output order.
pub type Record = Vec<(&'static str, Value)>;

impl Value {
    pub fn str(s: &str) -> Value {
        Value::Str(s.to_string())
    }

    /// An optional count (`None`: null).
    pub fn opt_int(v: Option<u64>) -> Value {
        v.map_or(Value::Null, Value::Int)
    }

    /// Optional nanoseconds as microseconds with 3 decimals.
    pub fn opt_us(ns: Option<u64>) -> Value {
        ns.map_or(Value::Null, |n| Value::Fixed(n as f64 / 1000.0, 3))
    }

    pub fn json(&self) -> String {
        match self {
            Value::Str(s) => json_str(s),
            Value::Obj(fields) => json_object(fields.iter().map(|(k, v)| (*k, v))),
            Value::Map(fields) => json_object(fields.iter().map(|(k, v)| (k.as_str(), v))),
            Value::List(v) => {
                let items: Vec<String> = v.iter().map(Value::json).collect();
                format!("[{}]", items.join(","))
            }
            Value::Lines(v) => {
                let items: String = v
                    .iter()
                    .map(|x| format!("\n  {}", x.json()))
                    .collect::<Vec<_>>()
                    .join(",");
                format!("[{items}\n]")
            }
            Value::Null => "null".into(),
            other => other.csv(),
        }
    }

    /// The value as a CSV cell (no quoting: walbench's names have no commas).
    pub fn csv(&self) -> String {
        match self {
            Value::Str(s) => s.clone(),
            Value::Int(n) => n.to_string(),
            Value::Fixed(x, d) => format!("{x:.d$}"),
            Value::Num(x) => x.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Null => String::new(),
            other => other.json(),
        }
    }
}

/// `{"k":v,...}`.
fn json_object<'a>(fields: impl Iterator<Item = (&'a str, &'a Value)>) -> String {
    let f: Vec<String> = fields
        .map(|(k, v)| format!("{}:{}", json_str(k), v.json()))
        .collect();
    format!("{{{}}}", f.join(","))
}

/// A JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A JSON document: `fields` as one object, newline-terminated.
pub fn json_document(fields: Record) -> String {
    format!("{}\n", Value::Obj(fields).json())
}

/// One CSV line: the fields of `record` named by `columns` (comma-separated
/// header), in that order; a column the record lacks is an empty cell.
pub fn csv_line(columns: &str, record: &Record) -> String {
    columns
        .split(',')
        .map(|c| {
            record
                .iter()
                .find(|(k, _)| *k == c)
                .map_or(String::new(), |(_, v)| v.csv())
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A column of a fixed-width table.
pub struct Column {
    pub head: &'static str,
    pub width: usize,
    pub left: bool,
    /// Spaces before the column (none before the first).
    pub gap: usize,
}

impl Column {
    pub const fn left(head: &'static str, width: usize) -> Column {
        Column {
            head,
            width,
            left: true,
            gap: 1,
        }
    }

    pub const fn right(head: &'static str, width: usize) -> Column {
        Column {
            head,
            width,
            left: false,
            gap: 1,
        }
    }

    pub const fn gap(self, gap: usize) -> Column {
        Column { gap, ..self }
    }
}

/// A fixed-width table: the header line, then one line per row, each cell
/// padded to its column (longer cells push the line to the right).
pub fn fixed_table(columns: &[Column], rows: &[Vec<String>]) -> String {
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (i, (c, cell)) in columns.iter().zip(cells).enumerate() {
            if i > 0 {
                s.push_str(&" ".repeat(c.gap));
            }
            let w = c.width;
            let _ = if c.left {
                write!(s, "{cell:<w$}")
            } else {
                write!(s, "{cell:>w$}")
            };
        }
        s.push('\n');
        s
    };
    let mut out = line(&mut columns.iter().map(|c| c.head));
    for r in rows {
        out.push_str(&line(&mut r.iter().map(String::as_str)));
    }
    out
}

/// The seeds' table: a name column and cells in `|`-separated columns as
/// wide as their widest cell; the first row is the header, ruled below.
pub fn seed_table(rows: &[(String, Vec<String>)]) -> String {
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let ncols = rows.first().map_or(0, |r| r.1.len());
    let mut widths = vec![0; ncols];
    for (_, cells) in rows {
        for (w, c) in widths.iter_mut().zip(cells) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    for (i, (name, cells)) in rows.iter().enumerate() {
        let _ = write!(out, " {name:<w0$} ");
        for (c, w) in cells.iter().zip(&widths) {
            let _ = write!(out, "| {c:>w$} ");
        }
        out.push('\n');
        if i == 0 {
            let _ = write!(out, "-{}-", "-".repeat(w0));
            for w in &widths {
                let _ = write!(out, "+-{}-", "-".repeat(*w));
            }
            out.push('\n');
        }
    }
    out
}

/// What a mode reports at the end of a run.
pub trait Report {
    /// The tables printed on stdout.
    fn text(&self) -> String;
    fn json(&self) -> String;
    /// Called only when the mode has a `--csv` file to write.
    fn csv(&self) -> String;
    /// The chart as SVG.
    fn svg(&self) -> String;
}

/// The files a run writes (each only when asked for).
#[derive(Clone, Debug, Default)]
pub struct Files {
    pub json: Option<PathBuf>,
    pub csv: Option<PathBuf>,
    /// `.svg`, or `.png` rendered.
    pub chart: Option<PathBuf>,
}

/// Prints `r`'s tables, then writes its JSON, CSV and chart where `files`
/// asks, naming each file written.
pub fn publish(r: &dyn Report, files: &Files) -> Result<(), String> {
    print!("{}", r.text());
    if let Some(p) = &files.json {
        write_file(p, r.json().as_bytes())?;
        println!("wrote {}", p.display());
    }
    if let Some(p) = &files.csv {
        write_file(p, r.csv().as_bytes())?;
        println!("wrote {}", p.display());
    }
    if let Some(p) = &files.chart {
        crate::chart::write(p, &r.svg())?;
        println!("wrote {}", p.display());
    }
    Ok(())
}

/// Writes an output file (JSON, CSV, chart), naming it in the error.
pub fn write_file(p: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(p, bytes).map_err(|e| format!("could not write \"{}\": {e}", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_render_alike_in_json_and_csv() {
        let r: Record = vec![
            ("name", Value::str("a\"b")),
            ("n", Value::Int(3)),
            ("x", Value::Fixed(1.23456, 2)),
            ("y", Value::Num(0.5)),
            ("ok", Value::Bool(true)),
            ("none", Value::opt_us(None)),
            ("us", Value::opt_us(Some(1500))),
            ("list", Value::List(vec![Value::Int(1), Value::Int(2)])),
        ];
        assert_eq!(
            Value::Obj(r.clone()).json(),
            "{\"name\":\"a\\\"b\",\"n\":3,\"x\":1.23,\"y\":0.5,\"ok\":true,\"none\":null,\"us\":1.500,\"list\":[1,2]}"
        );
        assert_eq!(
            csv_line("n,x,none,us,missing,ok", &r),
            "3,1.23,,1.500,,true"
        );
        assert_eq!(Value::Lines(vec![]).json(), "[\n]");
        assert_eq!(
            Value::Lines(vec![Value::Int(1), Value::Int(2)]).json(),
            "[\n  1,\n  2\n]"
        );
        assert_eq!(json_str("\u{1}"), "\"\\u0001\"");
    }

    #[test]
    fn tables_pad_their_columns() {
        let cols = [Column::left("a", 3), Column::right("b", 4).gap(2)];
        let t = fixed_table(&cols, &[vec!["x".into(), "12".into()]]);
        assert_eq!(t, "a       b\nx      12\n");
        let s = seed_table(&[
            ("head".into(), vec!["16".into()]),
            ("row".into(), vec!["1234".into()]),
        ]);
        assert_eq!(s, " head |   16 \n------+------\n row  | 1234 \n");
    }
}
