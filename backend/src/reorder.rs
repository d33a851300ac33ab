//! The reorder buffer of logical decoding (PostgreSQL's reorderbuffer.c,
//! reduced to what walshm's WAL holds: logical messages, COMMIT and
//! ABORT): it turns records in LSN order into what a consumer wants, the
//! transactional messages of committed transactions in commit order and
//! the non-transactional ones at their positions.
//!
//! Rules, as PostgreSQL's decode.c applies them:
//! - a transactional message is buffered under its XID until the
//!   transaction's COMMIT (then delivered with it, in LSN order) or ABORT
//!   (dropped);
//! - a transaction is delivered only when its COMMIT record *starts* at or
//!   after `start` (the slot's confirmed_flush or a later requested
//!   start: `SnapBuildXactNeedsSkip`), and only if it has messages (an
//!   empty transaction has nothing to replay);
//! - a non-transactional message is delivered when it starts at or after
//!   `start`;
//! - a CHECKPOINT_SHUTDOWN record drops every buffered transaction: it is
//!   written only when no transaction can be open (a clean shutdown, or
//!   the end-of-recovery checkpoint after a crash), so a transaction a
//!   crash cut off never commits and its messages are not kept forever.
//!
//! Restart point: [`Reorder::restart_point`] is the oldest WAL decoding
//! must read again to reproduce everything not yet delivered: the first
//! record of the oldest buffered transaction, else the position after the
//! last record seen. A slot confirmed up to a delivered commit may move
//! its restart_lsn to the restart point taken right after that commit
//! ([`Reorder::candidates`]).
//!
//! Memory: buffered messages are kept in memory (no spilling to disk); a
//! transaction is bounded by what a client can write in one transaction.

use std::collections::{HashMap, VecDeque};
use walformat::{
    DecodedRecord, Lsn, RM_XACT_ID, XLOG_XACT_ABORT, XLOG_XACT_COMMIT, XLOG_XACT_OPMASK,
};

/// One logical message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Start of its record.
    pub lsn: Lsn,
    pub transactional: bool,
    pub prefix: String,
    pub content: Vec<u8>,
}

/// A committed transaction with its messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    pub xid: u32,
    /// Start of its first record.
    pub first_lsn: Lsn,
    /// Start of its COMMIT record (PostgreSQL's final_lsn / commit_lsn).
    pub commit_lsn: Lsn,
    /// Where the COMMIT record ends (PostgreSQL's end_lsn).
    pub end_lsn: Lsn,
    /// The commit's time, microseconds since 2000-01-01.
    pub commit_time: i64,
    pub messages: Vec<Message>,
}

/// What decoding delivers, in delivery order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A non-transactional message.
    Message(Message),
    Transaction(Transaction),
}

impl Change {
    /// Where a consumer that has this change may confirm: the commit's end
    /// for a transaction, the message's start for a non-transactional one
    /// (as PostgreSQL's write location; resuming there delivers that
    /// message again).
    pub fn confirm_lsn(&self) -> Lsn {
        match self {
            Change::Message(m) => m.lsn,
            Change::Transaction(t) => t.end_lsn,
        }
    }
}

#[derive(Debug)]
struct Pending {
    first_lsn: Lsn,
    messages: Vec<Message>,
}

/// How many (commit end, restart point) pairs are remembered.
const MAX_CANDIDATES: usize = 1024;

/// The reorder buffer (see the module header).
#[derive(Debug)]
pub struct Reorder {
    start: Lsn,
    pending: HashMap<u32, Pending>,
    /// Where the record after the last one seen starts.
    position: Lsn,
    /// (end_lsn of a delivered commit, restart point right after it),
    /// oldest first.
    candidates: VecDeque<(Lsn, Lsn)>,
}

impl Reorder {
    /// Delivers what commits (or, for non-transactional messages, starts)
    /// at or after `start`; reading begins at `from` (the slot's
    /// restart_lsn).
    pub fn new(start: Lsn, from: Lsn) -> Reorder {
        Reorder {
            start,
            pending: HashMap::new(),
            position: from,
            candidates: VecDeque::new(),
        }
    }

    /// Takes the next record; what it completes, if anything (a filler
    /// record left for a dead process, `walformat::FILLER_PREFIX`,
    /// completes nothing).
    pub fn add(&mut self, rec: &DecodedRecord) -> Option<Change> {
        self.position = rec.next;
        if let Some((transactional, prefix, payload)) = rec.as_logical_message() {
            if is_filler(transactional, prefix) {
                return None;
            }
            let msg = Message {
                lsn: rec.lsn,
                transactional,
                prefix: prefix.to_string(),
                content: payload.to_vec(),
            };
            if transactional && rec.xid != 0 {
                self.pending
                    .entry(rec.xid)
                    .or_insert_with(|| Pending {
                        first_lsn: rec.lsn,
                        messages: Vec::new(),
                    })
                    .messages
                    .push(msg);
                return None;
            }
            return (rec.lsn >= self.start).then_some(Change::Message(msg));
        }
        if matches!(rec.as_checkpoint(), Some((_, true))) {
            self.pending.clear();
            return None;
        }
        if rec.rmid != RM_XACT_ID {
            return None;
        }
        match rec.info & XLOG_XACT_OPMASK {
            XLOG_XACT_COMMIT => self.commit(rec),
            XLOG_XACT_ABORT => {
                self.pending.remove(&rec.xid);
                None
            }
            _ => None,
        }
    }

    fn commit(&mut self, rec: &DecodedRecord) -> Option<Change> {
        let pending = self.pending.remove(&rec.xid)?;
        if rec.lsn < self.start || pending.messages.is_empty() {
            return None;
        }
        if self.candidates.len() == MAX_CANDIDATES {
            self.candidates.pop_front();
        }
        self.candidates.push_back((rec.next, self.restart_point()));
        Some(Change::Transaction(Transaction {
            xid: rec.xid,
            first_lsn: pending.first_lsn,
            commit_lsn: rec.lsn,
            end_lsn: rec.next,
            commit_time: rec.commit_time().unwrap_or(0),
            messages: pending.messages,
        }))
    }

    /// Where the record after the last one taken starts.
    pub fn position(&self) -> Lsn {
        self.position
    }

    /// The oldest WAL that must be read again to deliver everything not
    /// delivered yet (see the module header).
    pub fn restart_point(&self) -> Lsn {
        self.pending
            .values()
            .map(|p| p.first_lsn)
            .min()
            .unwrap_or(self.position)
            .min(self.position)
    }

    /// The restart point to keep once a consumer confirmed `confirmed`:
    /// that of the last delivered commit ending at or before it (older
    /// pairs are forgotten). None if no delivered commit ends there.
    pub fn restart_for(&mut self, confirmed: Lsn) -> Option<Lsn> {
        let mut best = None;
        while let Some(&(end, restart)) = self.candidates.front() {
            if end > confirmed {
                break;
            }
            best = Some(restart);
            self.candidates.pop_front();
        }
        best
    }

    /// Buffered transactions (for monitoring and tests).
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

/// A filler message: what the clean-up after a dead process wrote over
/// its unfinished record (`crate::abandoned`). Not a message of anyone's.
pub fn is_filler(transactional: bool, prefix: &str) -> bool {
    !transactional && prefix == walformat::FILLER_PREFIX
}

#[cfg(test)]
mod tests {
    use super::*;
    use walformat::{
        abort_record_into, commit_record, decode_record_bytes, logical_message, RecordBuf,
    };

    fn decoded(mut buf: RecordBuf, lsn: Lsn) -> DecodedRecord {
        buf.finish(0);
        let mut r = decode_record_bytes(lsn, buf.bytes()).expect("decodes");
        r.next = lsn + 0x40;
        r
    }

    fn msg(xid: u32, transactional: bool, text: &str, lsn: Lsn) -> DecodedRecord {
        decoded(
            logical_message(xid, transactional, "p", text.as_bytes()),
            lsn,
        )
    }

    fn commit(xid: u32, lsn: Lsn) -> DecodedRecord {
        decoded(commit_record(xid, 12345), lsn)
    }

    fn abort(xid: u32, lsn: Lsn) -> DecodedRecord {
        let mut buf = RecordBuf::new(0, 0, 0, &[]);
        abort_record_into(&mut buf, xid, 12345);
        decoded(buf, lsn)
    }

    fn texts(c: &Change) -> Vec<String> {
        match c {
            Change::Message(m) => vec![String::from_utf8_lossy(&m.content).into()],
            Change::Transaction(t) => t
                .messages
                .iter()
                .map(|m| String::from_utf8_lossy(&m.content).into())
                .collect(),
        }
    }

    /// The texts of what `r` delivers as `recs` are added, one list a
    /// delivery.
    fn delivered(r: &mut Reorder, recs: &[DecodedRecord]) -> Vec<Vec<String>> {
        recs.iter()
            .filter_map(|x| r.add(x))
            .map(|c| texts(&c))
            .collect()
    }

    #[test]
    fn commits_deliver_in_commit_order_and_aborts_vanish() {
        let mut r = Reorder::new(0, 0x100);
        let recs = [
            msg(10, true, "a1", 0x100),
            msg(11, true, "b1", 0x140),
            msg(0, false, "n", 0x180),
            msg(10, true, "a2", 0x1c0),
            msg(12, true, "c1", 0x200),
            commit(11, 0x240),
            abort(12, 0x280),
            commit(10, 0x2c0),
        ];
        let out = delivered(&mut r, &recs);
        assert_eq!(out, vec![vec!["n"], vec!["b1"], vec!["a1", "a2"]]);
        assert_eq!(r.pending(), 0);
    }

    #[test]
    fn start_skips_earlier_commits_and_messages() {
        let mut r = Reorder::new(0x200, 0x100);
        let recs = [
            msg(10, true, "a", 0x100),
            commit(10, 0x1c0),
            msg(0, false, "early", 0x1f0),
            msg(11, true, "b", 0x140),
            msg(0, false, "late", 0x200),
            commit(11, 0x240),
        ];
        let out = delivered(&mut r, &recs);
        assert_eq!(out, vec![vec!["late"], vec!["b"]]);
    }

    #[test]
    fn restart_point_follows_the_oldest_open_transaction() {
        let mut r = Reorder::new(0, 0x100);
        r.add(&msg(10, true, "a", 0x100));
        r.add(&msg(11, true, "b", 0x140));
        let t = r.add(&commit(11, 0x180)).expect("commit");
        assert_eq!(r.restart_point(), 0x100);
        r.add(&commit(10, 0x1c0)).expect("commit");
        assert_eq!(r.restart_point(), 0x200);
        assert_eq!(r.restart_for(t.confirm_lsn()), Some(0x100));
        assert_eq!(r.restart_for(0x200), Some(0x200));
        assert_eq!(r.restart_for(0x300), None);
    }

    #[test]
    fn a_shutdown_checkpoint_drops_what_a_crash_cut_off() {
        let mut r = Reorder::new(0, 0x100);
        r.add(&msg(10, true, "a", 0x100));
        r.add(&decoded(
            walformat::checkpoint_record(&Default::default(), true),
            0x140,
        ));
        assert_eq!(r.pending(), 0);
        assert_eq!(r.add(&commit(10, 0x180)), None);
    }
}
