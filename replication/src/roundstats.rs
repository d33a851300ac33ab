//! Where a walsender's streaming round spends its time: local
//! flush -> send -> the receiver's report -> release of the synchronous
//! commits it covers. One `RoundStats` per walsender (process-local, no
//! shared state); the walsender logs its summary when the stream ends, and
//! `scripts/replication-bench.sh` prints it next to each synchronous point.
//!
//! What is measured, in CLOCK_MONOTONIC nanoseconds:
//! * flush -> send: from the last advance of the local flush position
//!   (`ReplCtl::flushed_at_ns`, stored by the flusher) to the start of the
//!   send that carries it; counted once per flush advance, and only when
//!   the advance came before the send started (a send that found no new
//!   flush stamp measures nothing);
//! * send: the time inside the socket writes of one batch (on 2 shared
//!   cores mostly the receiver, woken by the write, running first);
//! * send -> report: the flush lag the lag tracker measured for each report
//!   that reached a new sample (`lagtracker`), in microseconds;
//! * release: the time of one release pass that released any commit, and
//!   how many it released (a histogram by powers of two).
//!
//! Invariant: every mean divides a sum by the count of the samples summed
//! (0 when there are none); nothing here ever affects what is sent or
//! released.

/// Histogram buckets of commits per release pass: 1, 2-3, 4-7, ..., 64+.
const BUCKETS: usize = 7;

/// The running sums of one walsender's rounds.
#[derive(Debug, Default, Clone)]
pub struct RoundStats {
    sends: u64,
    sent_bytes: u64,
    send_ns: u64,
    flush_to_send_ns: u64,
    flush_to_send_count: u64,
    /// The last flush stamp a send was measured from.
    last_flush_stamp: u64,
    report_us: u64,
    reports: u64,
    release_passes: u64,
    released: u64,
    release_ns: u64,
    per_pass: [u64; BUCKETS],
}

fn mean(sum: u64, count: u64) -> f64 {
    if count == 0 {
        0.0
    } else {
        sum as f64 / count as f64
    }
}

impl RoundStats {
    /// One batch of `bytes` sent from `started` to `ended`; `flushed_at`
    /// is the flush stamp read just before the send started.
    pub fn sent(&mut self, flushed_at: u64, started: u64, ended: u64, bytes: u64) {
        self.sends += 1;
        self.sent_bytes += bytes;
        self.send_ns += ended.saturating_sub(started);
        if flushed_at != self.last_flush_stamp && flushed_at != 0 && flushed_at <= started {
            self.flush_to_send_ns += started - flushed_at;
            self.flush_to_send_count += 1;
            self.last_flush_stamp = flushed_at;
        }
    }

    /// The receiver's report measured a flush lag of `us` microseconds.
    pub fn reported(&mut self, us: i64) {
        if us >= 0 {
            self.report_us += us as u64;
            self.reports += 1;
        }
    }

    /// A release pass released `n` commits in `ns` nanoseconds (passes
    /// that released none are not counted).
    pub fn released(&mut self, n: u64, ns: u64) {
        if n == 0 {
            return;
        }
        self.release_passes += 1;
        self.released += n;
        self.release_ns += ns;
        let bucket = (63 - n.leading_zeros() as usize).min(BUCKETS - 1);
        self.per_pass[bucket] += 1;
    }

    /// Were any rounds measured at all?
    pub fn is_empty(&self) -> bool {
        self.sends == 0
    }

    /// The log line's text.
    pub fn summary(&self) -> String {
        format!(
            "streaming rounds: {} sends (mean {:.1} kB, {:.0} us in the socket writes), \
             flush to send {:.0} us, send to flush report {:.0} us ({} reports), \
             {} release passes of {:.1} commits in {:.0} us (passes by commits 1, 2-3, 4-7, 8-15, 16-31, 32-63, 64+: {:?})",
            self.sends,
            mean(self.sent_bytes, self.sends) / 1024.0,
            mean(self.send_ns, self.sends) / 1e3,
            mean(self.flush_to_send_ns, self.flush_to_send_count) / 1e3,
            mean(self.report_us, self.reports),
            self.reports,
            self.release_passes,
            mean(self.released, self.release_passes),
            mean(self.release_ns, self.release_passes) / 1e3,
            self.per_pass,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_to_send_counts_each_flush_stamp_once() {
        let mut r = RoundStats::default();
        r.sent(1_000, 3_000, 4_000, 2048);
        // The same stamp again (no new flush): the send counts, the
        // flush-to-send time does not.
        r.sent(1_000, 5_000, 7_000, 2048);
        // A stamp newer than the send's start measures nothing either.
        r.sent(9_000, 8_000, 8_500, 0);
        assert_eq!(r.sends, 3);
        assert_eq!((r.flush_to_send_ns, r.flush_to_send_count), (2_000, 1));
        assert_eq!(r.send_ns, 1_000 + 2_000 + 500);
        assert!(r.summary().contains("3 sends (mean 1.3 kB"));
    }

    #[test]
    fn release_passes_fill_the_histogram_by_powers_of_two() {
        let mut r = RoundStats::default();
        for n in [0, 1, 2, 3, 4, 17, 64, 500] {
            r.released(n, 10_000);
        }
        assert_eq!(r.release_passes, 7);
        assert_eq!(r.per_pass, [1, 2, 1, 0, 1, 0, 2]);
        assert!(r
            .summary()
            .contains("7 release passes of 84.4 commits in 10 us"));
        r.reported(-1);
        r.reported(300);
        assert_eq!((r.report_us, r.reports), (300, 1));
    }

    #[test]
    fn an_empty_summary_has_no_division_by_zero() {
        let r = RoundStats::default();
        assert!(r.is_empty());
        assert!(r.summary().contains("0 sends (mean 0.0 kB"));
    }
}
