//! A session's cache of analyzed statement texts (PostgreSQL's plan-cache
//! idea): a client that sends the same text again, as `pgbench -M simple`
//! and `-M extended` do on every transaction, skips lexing, parsing and
//! analysis and runs the analyzed statements it got the first time.
//!
//! Why the results are identical: lexing and parsing depend only on the
//! text and `session_memory_limit` (fixed for the server's life), and
//! `analyze` only on the statement, the Parse message's declared parameter
//! types and the protocol (simple or extended); none of them reads session
//! state, settings or shared memory, which are read when the statement
//! runs. So nothing a session does can change what a text analyzes to, and
//! the cache needs no invalidation. Only texts whose every statement was
//! parsed and analyzed without error are entered: a text that fails is
//! parsed again each time and fails with the same message and SQLSTATE,
//! at the same point of its Query message.
//!
//! Memory is bounded by fixed counts: at most `MAX_ENTRIES` texts, each at
//! most `MAX_TEXT_BYTES` long, each with at most `MAX_VARIANTS` sets of
//! declared parameter types; when full, the oldest text is dropped first.

use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use crate::sql::analyze::Analyzed;

/// Most texts a session keeps.
pub(crate) const MAX_ENTRIES: usize = 64;

/// Longer texts are never cached (parsed every time).
pub(crate) const MAX_TEXT_BYTES: usize = 8 * 1024;

/// Most sets of declared parameter types (Parse) kept for one text.
const MAX_VARIANTS: usize = 4;

/// What one text analyzed to, per protocol.
#[derive(Default)]
struct Entry {
    /// As a simple Query message: its statements in order.
    simple: Option<Rc<[Rc<Analyzed>]>>,
    /// As a Parse message, per declared parameter type OIDs.
    extended: Vec<(Box<[u32]>, Rc<Analyzed>)>,
}

/// The cache (see the module header).
#[derive(Default)]
pub(crate) struct PlanCache {
    entries: HashMap<Rc<str>, Entry>,
    /// Texts in the order they were entered (oldest first).
    order: VecDeque<Rc<str>>,
}

impl PlanCache {
    /// The statements `text` analyzed to as a simple Query message.
    pub(crate) fn simple(&self, text: &str) -> Option<Rc<[Rc<Analyzed>]>> {
        self.entries.get(text)?.simple.clone()
    }

    /// What `text` analyzed to in a Parse message declaring `declared`,
    /// with the cached text (to share instead of copying it).
    pub(crate) fn extended(&self, text: &str, declared: &[u32]) -> Option<(Rc<Analyzed>, Rc<str>)> {
        let (key, entry) = self.entries.get_key_value(text)?;
        let (_, analyzed) = entry.extended.iter().find(|(d, _)| **d == *declared)?;
        Some((analyzed.clone(), key.clone()))
    }

    /// Enters a simple Query text whose statements all analyzed.
    pub(crate) fn insert_simple(&mut self, text: &str, statements: Vec<Rc<Analyzed>>) {
        if let Some(entry) = self.entry(text) {
            entry.simple = Some(statements.into());
        }
    }

    /// Enters a Parse text that analyzed; returns the cached text.
    pub(crate) fn insert_extended(
        &mut self,
        text: &str,
        declared: &[u32],
        analyzed: Rc<Analyzed>,
    ) -> Option<Rc<str>> {
        let key = self.key(text)?;
        let entry = self.entries.get_mut(text)?;
        if entry.extended.len() >= MAX_VARIANTS {
            entry.extended.remove(0);
        }
        entry.extended.push((declared.into(), analyzed));
        Some(key)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entry for `text`, made (evicting the oldest) if needed; None
    /// for a text too long to cache.
    fn entry(&mut self, text: &str) -> Option<&mut Entry> {
        self.key(text)?;
        self.entries.get_mut(text)
    }

    /// The cached key for `text`, entered (evicting the oldest) if new.
    fn key(&mut self, text: &str) -> Option<Rc<str>> {
        if text.len() > MAX_TEXT_BYTES {
            return None;
        }
        if let Some((key, _)) = self.entries.get_key_value(text) {
            return Some(key.clone());
        }
        if self.entries.len() >= MAX_ENTRIES {
            if let Some(oldest) = self.order.pop_front() {
                self.entries.remove(&oldest);
            }
        }
        let key: Rc<str> = Rc::from(text);
        self.entries.insert(key.clone(), Entry::default());
        self.order.push_back(key.clone());
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::analyze::Kind;
    use crate::sql::parser::Utility;

    fn plan(kind: Kind) -> Rc<Analyzed> {
        Rc::new(Analyzed {
            kind,
            param_types: Vec::new(),
        })
    }

    #[test]
    fn keeps_simple_and_extended_apart_and_per_declared_types() {
        let mut c = PlanCache::default();
        assert!(c.simple("BEGIN").is_none());
        c.insert_simple("BEGIN", vec![plan(Kind::Utility(Utility::Begin))]);
        assert_eq!(
            c.simple("BEGIN").unwrap()[0].kind,
            Kind::Utility(Utility::Begin)
        );
        assert!(c.extended("BEGIN", &[]).is_none(), "simple only so far");
        c.insert_extended("BEGIN", &[25], plan(Kind::Utility(Utility::Commit)));
        assert!(c.extended("BEGIN", &[]).is_none(), "other declared types");
        let (a, text) = c.extended("BEGIN", &[25]).unwrap();
        assert_eq!(
            (a.kind.clone(), &*text),
            (Kind::Utility(Utility::Commit), "BEGIN")
        );
        assert!(c.simple("begin").is_none(), "keyed by the exact text");
    }

    #[test]
    fn is_bounded_by_entry_count_text_length_and_variants() {
        let mut c = PlanCache::default();
        for i in 0..MAX_ENTRIES + 10 {
            c.insert_simple(&format!("SELECT {i}"), vec![plan(Kind::Empty)]);
        }
        assert_eq!(c.len(), MAX_ENTRIES);
        assert!(c.simple("SELECT 0").is_none(), "the oldest went first");
        assert!(c.simple(&format!("SELECT {}", MAX_ENTRIES + 9)).is_some());
        let long = "x".repeat(MAX_TEXT_BYTES + 1);
        c.insert_simple(&long, vec![plan(Kind::Empty)]);
        assert!(c.simple(&long).is_none(), "too long to cache");
        assert_eq!(c.len(), MAX_ENTRIES);
        for oid in 0..MAX_VARIANTS as u32 + 2 {
            c.insert_extended("SELECT $1", &[oid], plan(Kind::Empty));
        }
        assert!(
            c.extended("SELECT $1", &[0]).is_none(),
            "oldest variant dropped"
        );
        assert!(c
            .extended("SELECT $1", &[MAX_VARIANTS as u32 + 1])
            .is_some());
    }
}
