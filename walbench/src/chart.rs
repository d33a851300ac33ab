//! Hand-written SVG charts in the style of the seeds' graphs: TPS against
//! client count on a log axis, one line per variant with min–max whiskers,
//! a legend, and one panel per record size (reproduce adds one per size
//! for the experiment's mechanism counter).
//!
//! Invariants: the output is self-contained SVG 1.1 (no scripts, no external
//! fonts), every series is exactly one `<polyline>` (tests count them), and
//! every text is XML-escaped. A `.png` chart is that same SVG rendered by
//! resvg at twice its size on white, with the system's fonts (where the
//! machine has none, the PNG has lines and no text).

use std::fmt::Write as _;
use std::path::Path;

pub struct Point {
    pub x: f64,
    pub y: f64,
    pub lo: f64,
    pub hi: f64,
}

pub struct Series {
    pub name: String,
    pub points: Vec<Point>,
}

pub struct Panel {
    pub title: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

const COLORS: &[&str] = &[
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];
const PW: f64 = 460.0;
const PH: f64 = 320.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const HEADER: f64 = 60.0;

/// Writes `svg` to `p`, rendered to PNG when `p` ends in `.png`.
pub fn write(p: &Path, svg: &str) -> Result<(), String> {
    let bytes = if p.extension().is_some_and(|e| e == "png") {
        png(svg)?
    } else {
        svg.as_bytes().to_vec()
    };
    crate::report::write_file(p, &bytes)
}

/// A family for the charts' `sans-serif` among the installed fonts
/// (fontdb's default, Arial, is often missing on Linux): a common sans
/// family if present, else any.
fn sans_serif_family(fonts: &resvg::usvg::fontdb::Database) -> Option<String> {
    const PREFERRED: [&str; 5] = [
        "DejaVu Sans",
        "Liberation Sans",
        "Noto Sans",
        "Arial",
        "Helvetica",
    ];
    let installed: Vec<&str> = fonts
        .faces()
        .filter_map(|f| f.families.first().map(|(name, _)| name.as_str()))
        .collect();
    PREFERRED
        .iter()
        .find(|p| installed.contains(p))
        .map(|p| p.to_string())
        .or_else(|| installed.first().map(|n| n.to_string()))
}

/// Renders one of our SVG charts to PNG bytes (twice the SVG's size).
pub fn png(svg: &str) -> Result<Vec<u8>, String> {
    use resvg::{tiny_skia, usvg};
    const SCALE: f32 = 2.0;
    let mut opt = usvg::Options::default();
    let fonts = opt.fontdb_mut();
    fonts.load_system_fonts();
    if let Some(family) = sans_serif_family(fonts) {
        fonts.set_sans_serif_family(family);
    }
    let tree = usvg::Tree::from_str(svg, &opt)
        .map_err(|e| format!("could not read the chart's SVG: {e}"))?;
    let size = tree
        .size()
        .to_int_size()
        .scale_by(SCALE)
        .ok_or("chart too large")?;
    let mut pixmap =
        tiny_skia::Pixmap::new(size.width(), size.height()).ok_or("chart too large for a PNG")?;
    pixmap.fill(tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(SCALE, SCALE),
        &mut pixmap.as_mut(),
    );
    pixmap
        .encode_png()
        .map_err(|e| format!("could not encode the chart as PNG: {e}"))
}

pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" axis maximum and step for values up to `max`.
pub fn nice_axis(max: f64) -> (f64, f64) {
    let max = if max > 0.0 { max } else { 1.0 };
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    ((max / step).ceil() * step, step)
}

pub fn fmt_tick(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if v >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The whole chart: panels side by side (two per row).
pub fn svg(title: &str, subtitle: &str, panels: &[Panel]) -> String {
    let cols = panels.len().clamp(1, 2);
    let rows = panels.len().div_ceil(cols).max(1);
    let w = PW * 2.0;
    let h = HEADER + PH * rows as f64;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>\n\
         <text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}</text>\n\
         <text x=\"10\" y=\"42\" font-size=\"11\" fill=\"#555\">{}</text>\n",
        esc(title),
        esc(subtitle)
    );
    for (i, p) in panels.iter().enumerate() {
        let ox = PW * (i % cols) as f64;
        let oy = HEADER + PH * (i / cols) as f64;
        panel(&mut s, p, ox, oy);
    }
    s.push_str("</svg>\n");
    s
}

/// A panel's plot area in SVG coordinates and its scales: x on a log2 axis
/// from `lx` to `ly` (the log2 of the smallest and largest client count),
/// y linear from 0 (at `y0`, the bottom) to `ymax` (at `y1`, the top).
#[derive(Clone, Copy)]
struct Frame {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
    lx: f64,
    ly: f64,
    ymax: f64,
}

impl Frame {
    fn sx(&self, x: f64) -> f64 {
        if self.ly > self.lx {
            self.x0 + (x.max(1.0).log2() - self.lx) / (self.ly - self.lx) * (self.x1 - self.x0)
        } else {
            (self.x0 + self.x1) / 2.0
        }
    }

    fn sy(&self, y: f64) -> f64 {
        self.y0 - y / self.ymax * (self.y0 - self.y1)
    }
}

fn panel(s: &mut String, p: &Panel, ox: f64, oy: f64) {
    let pts = || p.series.iter().flat_map(|x| x.points.iter());
    let xmin = pts().map(|q| q.x).fold(f64::INFINITY, f64::min).max(1.0);
    let xmax = pts().map(|q| q.x).fold(0.0, f64::max).max(xmin);
    let (ymax, ystep) = nice_axis(pts().map(|q| q.hi.max(q.y)).fold(0.0, f64::max));
    let f = Frame {
        x0: ox + LEFT,
        x1: ox + PW - RIGHT,
        y0: oy + PH - BOTTOM,
        y1: oy + TOP,
        lx: xmin.log2(),
        ly: xmax.log2(),
        ymax,
    };
    let _ = writeln!(
        s,
        "<g class=\"panel\"><text x=\"{:.1}\" y=\"{:.1}\" font-weight=\"bold\" text-anchor=\"middle\">{}</text>",
        (f.x0 + f.x1) / 2.0,
        oy + 22.0,
        esc(&p.title)
    );
    axes(s, p, &f, ystep, ox);
    for (i, ser) in p.series.iter().enumerate() {
        series(s, i, ser, &f);
    }
    s.push_str("</g>\n");
}

/// The grid with y ticks every `ystep`, x ticks at the measured client
/// counts, the frame and the axis labels.
fn axes(s: &mut String, p: &Panel, f: &Frame, ystep: f64, ox: f64) {
    let Frame { x0, x1, y0, y1, .. } = *f;
    let ymax = f.ymax;
    // Grid and y ticks.
    let mut v = 0.0;
    while v <= ymax + ystep / 2.0 {
        let y = f.sy(v);
        let _ = writeln!(
            s,
            "<line x1=\"{x0:.1}\" y1=\"{y:.1}\" x2=\"{x1:.1}\" y2=\"{y:.1}\" stroke=\"#e5e5e5\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            x0 - 5.0,
            y + 4.0,
            fmt_tick(v)
        );
        v += ystep;
    }
    // X ticks at the measured client counts.
    let mut xs: Vec<f64> = p
        .series
        .iter()
        .flat_map(|x| x.points.iter())
        .map(|q| q.x)
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    for x in &xs {
        let px = f.sx(*x);
        let _ = writeln!(
            s,
            "<line x1=\"{px:.1}\" y1=\"{y0:.1}\" x2=\"{px:.1}\" y2=\"{:.1}\" stroke=\"#333\"/>\
             <text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            y0 + 4.0,
            y0 + 17.0,
            fmt_tick(*x)
        );
    }
    let _ = writeln!(
        s,
        "<rect x=\"{x0:.1}\" y=\"{y1:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"#333\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">clients (log scale)</text>\
         <text transform=\"translate({:.1},{:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        x1 - x0,
        y0 - y1,
        (x0 + x1) / 2.0,
        y0 + 35.0,
        ox + 14.0,
        (y0 + y1) / 2.0,
        esc(&p.y_label)
    );
}

/// Series `i`: its line, each point with its range bar, its legend entry.
fn series(s: &mut String, i: usize, ser: &Series, f: &Frame) {
    let (x1, y1) = (f.x1, f.y1);
    let color = COLORS[i % COLORS.len()];
    let line: Vec<String> = ser
        .points
        .iter()
        .map(|q| format!("{:.1},{:.1}", f.sx(q.x), f.sy(q.y)))
        .collect();
    let _ = writeln!(
        s,
        "<polyline class=\"series\" data-variant=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
        esc(&ser.name),
        line.join(" ")
    );
    for q in &ser.points {
        let (px, py) = (f.sx(q.x), f.sy(q.y));
        let _ = writeln!(
            s,
            "<line x1=\"{px:.1}\" y1=\"{:.1}\" x2=\"{px:.1}\" y2=\"{:.1}\" stroke=\"{color}\"/>\
             <circle cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"3\" fill=\"{color}\"><title>{} {} clients: {:.0} tps [{:.0}-{:.0}]</title></circle>",
            f.sy(q.lo),
            f.sy(q.hi),
            esc(&ser.name),
            q.x,
            q.y,
            q.lo,
            q.hi
        );
    }
    let lyy = y1 + 14.0 + 16.0 * i as f64;
    let _ = writeln!(
        s,
        "<line x1=\"{:.1}\" y1=\"{lyy:.1}\" x2=\"{:.1}\" y2=\"{lyy:.1}\" stroke=\"{color}\" stroke-width=\"2\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
        x1 - 130.0,
        x1 - 110.0,
        x1 - 105.0,
        lyy + 4.0,
        esc(&ser.name)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Width and height from a PNG's IHDR chunk.
    fn png_size(png: &[u8]) -> (u32, u32) {
        let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        (be(&png[16..20]), be(&png[20..24]))
    }

    #[test]
    fn png_is_the_svg_rendered_at_twice_its_size() {
        let panel = Panel {
            title: "16".into(),
            y_label: "tps".into(),
            series: vec![two_point_series("modern")],
        };
        let s = svg("title", "machine", &[panel]);
        let width = |attr: &str| -> u32 {
            let at = s.find(&format!(" {attr}=\"")).unwrap() + attr.len() + 3;
            s[at..].split('"').next().unwrap().parse().unwrap()
        };
        let png = png(&s).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
        assert_eq!(png_size(&png), (2 * width("width"), 2 * width("height")));
        let dir = std::env::temp_dir().join(format!("walbench-png-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.png");
        write(&path, &s).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), png);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A series with points at 1 and 4 clients, with whiskers.
    fn two_point_series(name: &str) -> Series {
        Series {
            name: name.into(),
            points: vec![
                Point {
                    x: 1.0,
                    y: 10.0,
                    lo: 9.0,
                    hi: 11.0,
                },
                Point {
                    x: 4.0,
                    y: 30.0,
                    lo: 25.0,
                    hi: 35.0,
                },
            ],
        }
    }

    #[test]
    fn svg_has_one_polyline_per_series_per_panel() {
        let series = two_point_series;
        let panels = vec![
            Panel {
                title: "16".into(),
                y_label: "tps".into(),
                series: vec![series("a<b"), series("c")],
            },
            Panel {
                title: "64".into(),
                y_label: "tps".into(),
                series: vec![series("a<b"), series("c")],
            },
        ];
        let s = svg("t & t", "m", &panels);
        assert!(s.starts_with("<svg"));
        assert!(s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 4);
        assert!(s.contains("a&lt;b") && s.contains("t &amp; t"));
        assert!(!s.contains("NaN"));
        // A single point and an empty panel draw without NaN.
        let one = vec![Panel {
            title: "x".into(),
            y_label: "y".into(),
            series: vec![Series {
                name: "s".into(),
                points: vec![Point {
                    x: 2.0,
                    y: 0.0,
                    lo: 0.0,
                    hi: 0.0,
                }],
            }],
        }];
        assert!(!svg("t", "m", &one).contains("NaN"));
        assert_eq!(nice_axis(0.0), (1.0, 0.2));
        assert_eq!(nice_axis(380_000.0), (400_000.0, 100_000.0));
        assert_eq!(fmt_tick(250_000.0), "250k");
    }
}
