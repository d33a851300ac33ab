//! walbench's one output path: a mode describes its results as `Value`s
//! (records of named fields) and tables of cells; this module renders them
//! as JSON, CSV and fixed-width or seed-style tables, and `publish` prints a
//! mode's tables and writes the files it was asked for (JSON, CSV, chart),
//! naming each.
//!
//! Invariants: a number is rounded once, by its `Value` (so a field holds
//! the same number in JSON and CSV); serde_json writes every JSON key and
//! value (escaping, numbers: a `Fixed` number as the shortest form of its
//! rounded value, `1.5` for CSV's `1.500`; a non-finite one as `null`);
//! in a document an array of records is written one record per line
//! (`[\n  {..},\n  {..}\n]`, `RecordsPerLine`), which the documented JSON
//! of every mode keeps; a missing value is `null` in JSON and an empty CSV
//! cell.

use serde::ser::{Serialize, Serializer};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A value of a report field.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Str(String),
    Int(u64),
    /// A number with this many decimals.
    Fixed(f64, usize),
    /// A number as is: in CSV in Rust's shortest form (`2`, `0.25`), in
    /// JSON in serde_json's (`2.0`, `0.25`).
    Num(f64),
    Bool(bool),
    /// JSON `null`, an empty CSV cell.
    Null,
    /// `[a,b]`; in a document one element per line if they are objects.
    List(Vec<Value>),
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

    /// The value as compact JSON.
    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("a report value serializes")
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

/// `x` rounded to `decimals` decimals: the number that `{x:.decimals$}`
/// (the CSV cell) reads as.
fn rounded(x: f64, decimals: usize) -> f64 {
    format!("{x:.decimals$}").parse().unwrap_or(x)
}

/// Key order is the record's.
impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Str(x) => s.serialize_str(x),
            Value::Int(n) => s.serialize_u64(*n),
            Value::Fixed(x, d) => s.serialize_f64(rounded(*x, *d)),
            Value::Num(x) => s.serialize_f64(*x),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Null => s.serialize_unit(),
            Value::List(v) => s.collect_seq(v),
            Value::Obj(fields) => s.collect_map(fields.iter().map(|(k, v)| (*k, v))),
            Value::Map(fields) => s.collect_map(fields.iter().map(|(k, v)| (k, v))),
        }
    }
}

/// A JSON document: `fields` as one object, newline-terminated, each
/// element of an array of objects on a line of its own.
pub fn json_document(fields: Record) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, RecordsPerLine::default());
    Value::Obj(fields)
        .serialize(&mut ser)
        .expect("a report document serializes");
    out.push(b'\n');
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// serde_json's compact layout, except that an object that is an element
/// of an array starts a line (indented by two spaces), and such an array
/// ends on a line of its own: `{"runs":[\n  {..},\n  {..}\n]}`. An array
/// of other values (and an empty one) stays on one line.
///
/// The formatter only sees punctuation: `begin_array_value` marks that an
/// element starts, and `begin_object` finds the mark when the element is an
/// object (any other element clears it at `end_array_value`).
#[derive(Default)]
struct RecordsPerLine {
    /// One entry per open array: has it held an object?
    arrays: Vec<bool>,
    /// An element of the innermost array has begun and written nothing yet.
    element_starts: bool,
}

impl serde_json::ser::Formatter for RecordsPerLine {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.arrays.push(false);
        self.element_starts = false;
        w.write_all(b"[")
    }

    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.element_starts = true;
        if first {
            Ok(())
        } else {
            w.write_all(b",")
        }
    }

    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.element_starts = false;
        Ok(())
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        if self.arrays.pop() == Some(true) {
            w.write_all(b"\n")?;
        }
        w.write_all(b"]")
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        if std::mem::take(&mut self.element_starts) {
            if let Some(has_objects) = self.arrays.last_mut() {
                *has_objects = true;
            }
            w.write_all(b"\n  ")?;
        }
        w.write_all(b"{")
    }
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
            "{\"name\":\"a\\\"b\",\"n\":3,\"x\":1.23,\"y\":0.5,\"ok\":true,\"none\":null,\"us\":1.5,\"list\":[1,2]}"
        );
        assert_eq!(
            csv_line("n,x,none,us,missing,ok", &r),
            "3,1.23,,1.500,,true"
        );
        assert_eq!(Value::str("\u{1}").json(), "\"\\u0001\"");
        assert_eq!(Value::Fixed(f64::NAN, 1).json(), "null");
    }

    #[test]
    fn documents_put_each_record_of_an_array_on_a_line() {
        let rec = |n| Value::Obj(vec![("n", Value::Int(n)), ("l", Value::List(vec![]))]);
        let doc = json_document(vec![
            ("runs", Value::List(vec![rec(1), rec(2)])),
            ("names", Value::List(vec![Value::str("a"), Value::str("b")])),
            ("none", Value::List(vec![])),
            ("one", rec(3)),
        ]);
        assert_eq!(
            doc,
            "{\"runs\":[\n  {\"n\":1,\"l\":[]},\n  {\"n\":2,\"l\":[]}\n],\"names\":[\"a\",\"b\"],\"none\":[],\"one\":{\"n\":3,\"l\":[]}}\n"
        );
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
