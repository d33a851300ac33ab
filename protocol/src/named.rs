//! A session's prepared statements or portals by name, with the unnamed
//! one ("") in a slot of its own: libpq's PQexecParams, and so `pgbench -M
//! extended`, uses only the unnamed statement and portal, several times a
//! transaction (Parse, Bind, Describe, Execute), and a slot spares each of
//! those a String allocation, a SipHash of the name and a probe.
//!
//! Invariant: the map behaves exactly as a `HashMap<String, T>` with the
//! same calls (at most one value per name, "" included); only where "" is
//! stored differs. Single-threaded (one per connection): no races.

use std::collections::HashMap;

/// Values by name; the unnamed one apart (see the module header).
pub(crate) struct Named<T> {
    unnamed: Option<T>,
    named: HashMap<String, T>,
}

impl<T> Default for Named<T> {
    fn default() -> Self {
        Named {
            unnamed: None,
            named: HashMap::new(),
        }
    }
}

impl<T> Named<T> {
    pub(crate) fn get(&self, name: &str) -> Option<&T> {
        if name.is_empty() {
            self.unnamed.as_ref()
        } else {
            self.named.get(name)
        }
    }

    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut T> {
        if name.is_empty() {
            self.unnamed.as_mut()
        } else {
            self.named.get_mut(name)
        }
    }

    pub(crate) fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Enters `value` under `name`, replacing what was there.
    pub(crate) fn insert(&mut self, name: &str, value: T) {
        if name.is_empty() {
            self.unnamed = Some(value);
        } else {
            self.named.insert(name.to_string(), value);
        }
    }

    pub(crate) fn remove(&mut self, name: &str) -> Option<T> {
        if name.is_empty() {
            self.unnamed.take()
        } else {
            self.named.remove(name)
        }
    }

    pub(crate) fn clear(&mut self) {
        self.unnamed = None;
        self.named.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_as_one_map_with_the_unnamed_entry_included() {
        let mut m = Named::default();
        assert!(!m.contains_key(""));
        m.insert("", 1);
        m.insert("s1", 2);
        assert_eq!(
            (m.get(""), m.get("s1"), m.get("s2")),
            (Some(&1), Some(&2), None)
        );
        m.insert("", 3);
        *m.get_mut("s1").unwrap() += 10;
        assert_eq!((m.get(""), m.get("s1")), (Some(&3), Some(&12)));
        assert_eq!(m.remove(""), Some(3));
        assert_eq!(m.remove(""), None);
        assert!(m.contains_key("s1"));
        m.insert("", 4);
        m.clear();
        assert!(!m.contains_key("") && !m.contains_key("s1"));
    }
}
