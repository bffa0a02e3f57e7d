//! The names of every key and channel, in one place (the table in the crate docs).
//!
//! A session's keys carry the hash tag `{s:SID}`, so that on Redis Cluster they share one slot
//! (a script may touch all of them). The prefix holds no brace (checked by
//! [`FleetConfig::prefix`](crate::FleetConfig::prefix)), so the tag starts at the brace this module
//! writes and ends at the first `}` after it: in the session id itself when the id holds one, and
//! then still at the same place in every key of that session.

use std::fmt::Write;
use std::sync::Arc;

/// How many instance numbers there are (`0..4096`): a number shifted left by 40 bits stays below
/// 2^52, a safe integer in JavaScript.
pub const MAX_INSTANCES: u16 = 4096;

/// The key and channel names of one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Keys {
    prefix: Arc<str>,
}

impl Keys {
    /// The names under `prefix` (`mcx` by default).
    pub(crate) fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.into(),
        }
    }

    /// `PREFIX:instances`: the counter that hands out instance numbers.
    pub(crate) fn instances(&self) -> String {
        format!("{}:instances", self.prefix)
    }

    /// `PREFIX:inst:N`: instance `n`'s lease (`host:pid`).
    pub(crate) fn instance(&self, n: u16) -> String {
        format!("{}:inst:{n}", self.prefix)
    }

    /// `PREFIX:bus`: the channel of the messages for every instance.
    pub(crate) fn bus(&self) -> String {
        format!("{}:bus", self.prefix)
    }

    /// `PREFIX:inbox:N`: the channel of the messages for instance `n`.
    pub(crate) fn inbox(&self, n: u16) -> String {
        format!("{}:inbox:{n}", self.prefix)
    }

    /// `PREFIX:{s:SID}:`, the start of every key of session `sid`.
    fn session(&self, sid: &str) -> String {
        let mut key = String::with_capacity(self.prefix.len() + sid.len() + 12);
        // Writing to a String cannot fail.
        let _ = write!(key, "{}:{{s:{sid}}}:", self.prefix);
        key
    }

    /// `PREFIX:{s:SID}:state`: the session's `SessionState`, as JSON.
    pub(crate) fn state(&self, sid: &str) -> String {
        self.session(sid) + "state"
    }

    /// `PREFIX:{s:SID}:seq`: the session's event counter.
    pub(crate) fn seq(&self, sid: &str) -> String {
        self.session(sid) + "seq"
    }

    /// `PREFIX:{s:SID}:meta`: the session's streams (owner, pending ids, finished, ...).
    pub(crate) fn meta(&self, sid: &str) -> String {
        self.session(sid) + "meta"
    }

    /// `PREFIX:{s:SID}:ev:S`: the events of stream `stream` of session `sid`.
    pub(crate) fn events(&self, sid: &str, stream: u64) -> String {
        let mut key = self.events_base(sid);
        // Writing to a String cannot fail.
        let _ = write!(key, "{stream}");
        key
    }

    /// `PREFIX:{s:SID}:ch`: the channel of session `sid`'s events, as they are appended.
    pub(crate) fn channel(&self, sid: &str) -> String {
        self.session(sid) + "ch"
    }

    /// The `SCAN MATCH` pattern of every session's stream table: `PREFIX:{s:*}:meta`, with the
    /// prefix's glob characters escaped.
    pub(crate) fn meta_pattern(&self) -> String {
        let mut pattern = String::with_capacity(self.prefix.len() + 12);
        for c in self.prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        pattern + ":{s:*}:meta"
    }

    /// `PREFIX:{s:SID}:ev:`: the start of the key of each of the session's event streams; the
    /// stream id follows.
    pub(crate) fn events_base(&self, sid: &str) -> String {
        self.session(sid) + "ev:"
    }
}

/// The hash tag of `key` as Redis Cluster computes it: the text between the first `{` and the
/// first `}` after it, when that text is not empty; else the whole key.
#[cfg(test)]
fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_the_documented_one() {
        let keys = Keys::new("mcx");
        assert_eq!(keys.instances(), "mcx:instances");
        assert_eq!(keys.instance(7), "mcx:inst:7");
        assert_eq!(keys.bus(), "mcx:bus");
        assert_eq!(keys.inbox(4095), "mcx:inbox:4095");
        assert_eq!(keys.state("abc"), "mcx:{s:abc}:state");
        assert_eq!(keys.seq("abc"), "mcx:{s:abc}:seq");
        assert_eq!(keys.meta("abc"), "mcx:{s:abc}:meta");
        assert_eq!(keys.events_base("abc") + "42", "mcx:{s:abc}:ev:42");
        assert_eq!(keys.events("abc", 42), "mcx:{s:abc}:ev:42");
        assert_eq!(keys.channel("abc"), "mcx:{s:abc}:ch");
        assert_eq!(keys.meta_pattern(), "mcx:{s:*}:meta");
        assert_eq!(
            Keys::new("a*b?[c]").meta_pattern(),
            r"a\*b\?\[c\]:{s:*}:meta"
        );
        let other = Keys::new("app:mcp");
        assert_eq!(other.state("x"), "app:mcp:{s:x}:state");
        assert_eq!(other.instance(0), "app:mcp:inst:0");
    }

    /// Every key of a session has the same hash tag (one Cluster slot), different sessions have
    /// different tags, and a brace in the session id does not split them.
    #[test]
    fn a_sessions_keys_share_one_hash_tag() {
        let keys = Keys::new("mcx");
        for sid in ["abc", "0f9e-77", "a}b", "{x}", "}", "a{b"] {
            let all = [
                keys.state(sid),
                keys.seq(sid),
                keys.meta(sid),
                keys.events_base(sid) + "1",
                keys.events_base(sid) + "4294967296",
                keys.channel(sid),
            ];
            let tag = hash_tag(&all[0]);
            assert!(tag.starts_with("s:"), "{sid}: {tag}");
            for key in &all {
                assert_eq!(hash_tag(key), tag, "{key}");
            }
        }
        assert_ne!(hash_tag(&keys.state("a")), hash_tag(&keys.state("b")));
        assert_eq!(hash_tag(&keys.state("abc")), "s:abc");
        // The instance keys are not tagged: each is a slot of its own.
        assert_eq!(hash_tag(&keys.instance(3)), "mcx:inst:3");
    }

    /// The suffixes cannot be confused: a session id that looks like another key's tail gives
    /// other names.
    #[test]
    fn session_ids_cannot_name_another_sessions_keys() {
        let keys = Keys::new("mcx");
        assert_ne!(keys.state("a}:state"), keys.state("a"));
        assert_ne!(keys.meta("a}:ev:1"), keys.events_base("a") + "1");
        assert_ne!(keys.state("a}:meta"), keys.meta("a"));
    }

    #[test]
    fn the_hash_tag_rule_is_redis_clusters() {
        assert_eq!(hash_tag("{user1000}.following"), "user1000");
        assert_eq!(hash_tag("foo{}{bar}"), "foo{}{bar}");
        assert_eq!(hash_tag("foo{{bar}}zap"), "{bar");
        assert_eq!(hash_tag("foo{bar}{zap}"), "bar");
        assert_eq!(hash_tag("plain"), "plain");
    }
}
