//! Replication lag measurement (the idea of PostgreSQL's walsender.c
//! LagTracker, written anew): pg_stat_replication's write_lag, flush_lag
//! and replay_lag.
//!
//! The walsender records a sample (end LSN, time) each time it has sent
//! WAL up to a new flush position: the time approximates when that WAL was
//! flushed locally. When the receiver reports a write, flush or apply
//! position, the lag of that kind is the time from the newest sample the
//! position has reached to the time the report was processed.
//!
//! Each of the three kinds reads the samples through its own tail, so the
//! buffer holds what the slowest kind has not reached yet. Between two
//! samples (a position stuck inside a burst of WAL) the local flush time is
//! interpolated, so that a receiver that stopped moving shows a growing
//! lag instead of its last value. A kind whose position crossed no new
//! sample and cannot be interpolated has no new measurement (`None`): the
//! caller keeps the last value, as PostgreSQL does.
//!
//! Invariants: samples are in strictly increasing LSN order; each tail is
//! at or behind the head; when the buffer is full, the oldest sample is
//! dropped and tails pointing at it move forward (the lag of a very slow
//! reader is then measured against a later sample: shorter, never
//! negative). Times are microseconds; a clock that went backwards gives no
//! measurement rather than a negative lag.

/// Samples kept (PostgreSQL keeps 8192 as well).
pub const CAPACITY: usize = 8192;

/// The three positions a receiver reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Write = 0,
    Flush = 1,
    Apply = 2,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Sample {
    lsn: u64,
    time: i64,
}

/// One walsender's lag tracker (process-local).
pub struct LagTracker {
    buf: Vec<Sample>,
    /// Next slot to write.
    head: usize,
    /// Per kind: the next sample it has not reached.
    tails: [usize; 3],
    /// Per kind: the last sample it reached (time 0: none since it was
    /// caught up).
    last_read: [Sample; 3],
    last_lsn: u64,
}

impl Default for LagTracker {
    fn default() -> Self {
        LagTracker {
            buf: vec![Sample::default(); CAPACITY],
            head: 0,
            tails: [0; 3],
            last_read: [Sample::default(); 3],
            last_lsn: 0,
        }
    }
}

fn next(i: usize) -> usize {
    (i + 1) % CAPACITY
}

impl LagTracker {
    /// WAL up to `lsn` has been sent at `now`: records a sample unless
    /// `lsn` is not beyond the last one.
    pub fn record(&mut self, lsn: u64, now: i64) {
        if lsn <= self.last_lsn {
            return;
        }
        self.last_lsn = lsn;
        let after = next(self.head);
        if self.tails.contains(&after) {
            self.drop_oldest(after);
        }
        self.buf[self.head] = Sample { lsn, time: now };
        self.head = after;
    }

    /// The buffer is full: the sample at `after` is the oldest; tails at
    /// it move one forward (onto the sample after it).
    fn drop_oldest(&mut self, after: usize) {
        for (tail, last) in self.tails.iter_mut().zip(self.last_read.iter_mut()) {
            if *tail == after {
                *last = self.buf[after];
                *tail = next(after);
            }
        }
    }

    /// The receiver reported position `lsn` of `kind` at `now`: the lag in
    /// microseconds, or None when there is no new measurement.
    pub fn read(&mut self, kind: Kind, lsn: u64, now: i64) -> Option<i64> {
        if lsn == 0 {
            // The receiver reports no such position (pg_receivewal's
            // apply): no measurement, the column stays NULL.
            return None;
        }
        let k = kind as usize;
        let mut crossed = None;
        while self.tails[k] != self.head && self.buf[self.tails[k]].lsn <= lsn {
            let s = self.buf[self.tails[k]];
            crossed = Some(s.time);
            self.last_read[k] = s;
            self.tails[k] = next(self.tails[k]);
        }
        let caught_up = self.tails[k] == self.head;
        if caught_up {
            self.last_read[k].time = 0;
        }
        let time = match crossed {
            Some(t) => t,
            None if caught_up => return None,
            None => self.estimate_between(k, lsn),
        };
        (time <= now).then_some(now - time)
    }

    /// `lsn` lies before the next sample of kind `k`: the local flush time
    /// interpolated between the last sample reached and the next one, or
    /// the next one's time when none was reached since catching up.
    fn estimate_between(&self, k: usize, lsn: u64) -> i64 {
        let ahead = self.buf[self.tails[k]];
        let prev = self.last_read[k];
        if prev.time == 0 || ahead.lsn <= prev.lsn {
            return ahead.time;
        }
        let span = (ahead.lsn - prev.lsn) as f64;
        let part = (lsn.saturating_sub(prev.lsn)) as f64 / span;
        prev.time + (part * (ahead.time - prev.time) as f64) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tracker that recorded `samples` (LSN, time) in order.
    fn tracker(samples: &[(u64, i64)]) -> LagTracker {
        let mut t = LagTracker::default();
        for &(lsn, now) in samples {
            t.record(lsn, now);
        }
        t
    }

    #[test]
    fn a_report_crossing_a_sample_measures_from_its_time() {
        let mut t = tracker(&[(100, 1_000), (200, 2_000)]);
        assert_eq!(t.read(Kind::Write, 150, 2_500), Some(1_500));
        assert_eq!(t.read(Kind::Write, 200, 3_000), Some(1_000));
        // Caught up, nothing new: no measurement.
        assert_eq!(t.read(Kind::Write, 200, 9_000), None);
        // The kinds read independently.
        assert_eq!(t.read(Kind::Flush, 200, 4_000), Some(2_000));
        assert_eq!(t.read(Kind::Apply, 0, 4_000), None);
    }

    #[test]
    fn a_stuck_position_shows_a_growing_interpolated_lag() {
        let mut t = tracker(&[(100, 1_000), (300, 3_000)]);
        assert_eq!(t.read(Kind::Flush, 100, 1_500), Some(500));
        // Half way to the next sample: flushed locally around 2_000.
        assert_eq!(t.read(Kind::Flush, 200, 5_000), Some(3_000));
        assert_eq!(t.read(Kind::Flush, 200, 8_000), Some(6_000));
        // A new burst after catching up: the first future sample's time.
        let mut u = tracker(&[(100, 1_000)]);
        assert_eq!(u.read(Kind::Write, 50, 1_200), Some(200));
    }

    #[test]
    fn a_full_buffer_drops_the_oldest_and_a_backwards_clock_measures_nothing() {
        let mut t = LagTracker::default();
        for i in 1..=(CAPACITY as u64 + 10) {
            t.record(i * 10, i as i64 * 100);
        }
        let lag = t.read(Kind::Write, 10, 10_000_000).unwrap();
        assert!(lag > 0 && lag < 10_000_000, "{lag}");
        let mut u = tracker(&[(10, 5_000)]);
        assert_eq!(u.read(Kind::Write, 10, 4_000), None);
        u.record(5, 6_000);
        assert_eq!(u.last_lsn, 10, "samples only move forward");
    }
}
