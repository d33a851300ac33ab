//! Parse (and analysis) cost per statement on the simple-protocol hot
//! path, for the parser decision recorded in `protocol/src/sql/parser.rs`.
//! A command, not a timed test: `cargo run --release -p protocol --example
//! parse_bench`. Prints the best of 5 runs of 400k parses, in ns.

use protocol::sql::{analyze, parse_statements};
use std::hint::black_box;
use std::time::Instant;

const STATEMENTS: &[&str] = &[
    "SELECT pg_logical_emit_message(false, 'test', repeat('x', 16))",
    "SELECT 1",
    "SELECT wait_event_type, wait_event, count(*) FROM pg_stat_activity GROUP BY 1, 2 ORDER BY 3 DESC",
];

/// Best nanoseconds per call of `f` over 5 runs of `n` calls.
fn best_ns(n: u32, f: &mut dyn FnMut()) -> f64 {
    for _ in 0..n / 20 {
        f();
    }
    (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(n)
        })
        .fold(f64::MAX, f64::min)
}

fn main() {
    for sql in STATEMENTS {
        let parse = best_ns(400_000, &mut || {
            let _ = black_box(parse_statements(black_box(sql)));
        });
        let both = best_ns(400_000, &mut || {
            if let Ok(s) = parse_statements(black_box(sql)) {
                let _ = black_box(analyze(&s[0], &[], false));
            }
        });
        println!("{parse:8.0} ns parse {both:8.0} ns parse+analyze  {sql}");
    }
}
