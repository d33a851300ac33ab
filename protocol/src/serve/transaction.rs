//! Transaction state of a [`Connection`] and what ends a statement, a
//! transaction or the connection: errors and their consequences, implicit
//! transactions (one per Query message, or up to Sync), BEGIN/COMMIT/
//! ROLLBACK blocks, termination at a fast shutdown or a crash.
//!
//! Invariants: each `Session::begin()` is matched by exactly one
//! `commit()` or `rollback()` (the contract in `session.rs`); a failed
//! statement ends an implicit transaction and turns a block into `Failed`,
//! already rolled back in the Session; portals and transactional
//! parameters are settled at every transaction end.

use super::*;

impl<S: Read + Write> Connection<'_, S> {
    /// The connection ends on a failed write: roll back what is open (unless
    /// a crash forbids touching shared state) and hand the error to `serve`'s caller.
    pub(super) fn abandon(&mut self, e: io::Error) -> io::Error {
        if self.session.termination() != Some(Termination::Crash) {
            self.abort_for_exit();
        }
        e
    }

    /// A client message longer than the memory limit was discarded: ERROR
    /// 53200, then as after any error in its protocol (ReadyForQuery after
    /// a Query, skip to Sync in the extended protocol).
    pub(super) fn refuse_large_message(&mut self, tag: u8, len: usize, limit: usize) {
        if self.skipping {
            return;
        }
        self.fail(out_of_memory("a client message", len, limit));
        if tag == b'Q' {
            self.ready_for_query();
        } else {
            self.skipping = true;
        }
    }

    /// Sends an error (or notice) and applies its consequences.
    pub(super) fn fail(&mut self, e: SqlError) {
        self.out.error_or_notice(&e);
        if e.is_notice() {
            return;
        }
        self.abort_transaction();
        if e.is_fatal() {
            self.closing = true;
        }
    }

    /// Rolls back after a failed statement: an implicit transaction ends, a block becomes failed.
    pub(super) fn abort_transaction(&mut self) {
        match self.tx {
            TxState::Implicit => {
                self.tx = TxState::Idle;
                self.session_rollback();
            }
            TxState::Block => {
                self.tx = TxState::Failed;
                self.session_rollback();
            }
            TxState::Idle | TxState::Failed => {}
        }
    }

    pub(super) fn session_rollback(&mut self) {
        if let Err(e) = self.session.rollback() {
            self.out.error_or_notice(&SqlError {
                severity: "WARNING",
                ..e
            });
        }
        self.transaction_ended(false);
    }

    /// Drops portals and settles transactional parameters at the end of a transaction.
    pub(super) fn transaction_ended(&mut self, committed: bool) {
        self.portals.clear();
        if !self.params.sync_dirty {
            return;
        }
        let (on, name) = match self.params.sync_pending.take() {
            Some(pending) if committed => pending,
            _ => self.params.sync_committed.clone(),
        };
        self.session.set_synchronous_commit(on);
        self.session.set_synchronous_commit_level(&name);
        self.params.sync_name = name.clone();
        self.params.sync_committed = (on, name);
        self.params.sync_dirty = false;
    }

    /// Rolls back what is open when the connection ends (Terminate, EOF, fast shutdown).
    pub(super) fn abort_for_exit(&mut self) {
        if matches!(self.tx, TxState::Implicit | TxState::Block) {
            self.tx = TxState::Idle;
            let _ = self.session.rollback();
        }
        self.tx = TxState::Idle;
    }

    pub(super) fn terminate(&mut self, t: Termination) {
        match t {
            Termination::FastShutdown => {
                self.abort_for_exit();
                self.out.error_or_notice(&SqlError::fatal(
                    sqlstate::ADMIN_SHUTDOWN,
                    "terminating connection due to administrator command",
                ));
            }
            Termination::Crash => {
                // PostgreSQL's quickdie: a WARNING to the client, no cleanup at all.
                self.out.error_or_notice(&crash_notice());
            }
        }
        self.closing = true;
    }

    /// Commits the implicit transaction at the end of a Query message or at Sync.
    pub(super) fn commit_implicit(&mut self) {
        if self.tx != TxState::Implicit {
            return;
        }
        self.tx = TxState::Idle;
        let result = self.session.commit();
        self.transaction_ended(result.is_ok());
        if let Err(e) = result {
            self.fail(e);
        }
    }

    pub(super) fn ensure_transaction(&mut self) -> Result<(), SqlError> {
        if self.tx == TxState::Idle {
            self.session.begin()?;
            self.xact_start = unix_micros();
            self.tx = TxState::Implicit;
        }
        Ok(())
    }

    pub(super) fn begin_block(&mut self) -> Result<Outcome, SqlError> {
        match self.tx {
            TxState::Idle => {
                self.session.begin()?;
                self.xact_start = unix_micros();
                self.tx = TxState::Block;
            }
            TxState::Implicit => self.tx = TxState::Block,
            TxState::Block | TxState::Failed => self.out.error_or_notice(&SqlError::warning(
                sqlstate::ACTIVE_SQL_TRANSACTION,
                "there is already a transaction in progress",
            )),
        }
        Ok(Outcome::tag("BEGIN"))
    }

    /// COMMIT (commit = true) or ROLLBACK.
    pub(super) fn end_block(&mut self, commit: bool) -> Result<Outcome, SqlError> {
        let tag = if commit { "COMMIT" } else { "ROLLBACK" };
        match self.tx {
            TxState::Idle => {
                self.out.error_or_notice(&no_transaction_warning());
                Ok(Outcome::tag(tag))
            }
            TxState::Failed => {
                self.tx = TxState::Idle;
                self.transaction_ended(false);
                Ok(Outcome::tag("ROLLBACK"))
            }
            TxState::Implicit | TxState::Block => {
                if self.tx == TxState::Implicit {
                    self.out.error_or_notice(&no_transaction_warning());
                }
                self.tx = TxState::Idle;
                let result = if commit {
                    self.session.commit()
                } else {
                    self.session.rollback()
                };
                self.transaction_ended(commit && result.is_ok());
                result.map(|()| Outcome::tag(tag))
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TxState {
    /// No transaction.
    Idle,
    /// An implicit transaction (per Query message / until Sync) is open.
    Implicit,
    /// Inside BEGIN ... COMMIT.
    Block,
    /// Inside a block that failed: already rolled back in the Session.
    Failed,
}

impl TxState {
    pub(super) fn status_byte(self) -> u8 {
        match self {
            TxState::Idle | TxState::Implicit => b'I',
            TxState::Block => b'T',
            TxState::Failed => b'E',
        }
    }
}

pub(super) fn in_failed_transaction() -> SqlError {
    SqlError::error(
        sqlstate::IN_FAILED_SQL_TRANSACTION,
        "current transaction is aborted, commands ignored until end of transaction block",
    )
}

fn no_transaction_warning() -> SqlError {
    SqlError::warning(
        sqlstate::NO_ACTIVE_SQL_TRANSACTION,
        "there is no transaction in progress",
    )
}
