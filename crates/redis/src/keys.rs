//! The key layout.
//!
//! Every key of one event shares the hash tag `{<source>/<escaped event id>}`, so each lives in
//! one Cluster slot:
//!
//! | key | holds |
//! |---|---|
//! | `<prefix>{<source>/<id>}:e` | store mode: the event, a hash of its record and capped history |
//! | `<prefix>{<source>/<id>}:r` | store mode: a completed record's result, expiring with the record |
//! | `<prefix>{<source>}:s` | store mode: the source's best-effort history stream |
//! | `<prefix>{<source>/<id>}:c:<store id>` | tier mode: the cached answer for a done record of the inner store with that id, or a tombstone |
//! | `<prefix>store_id` | store mode: this store's identity, created once (`SET NX`) |
//! | `<prefix>instance:{<instance>}` | store mode: an instance's latest boot and its start |
//!
//! Source names are `[a-z0-9._-]` (no `/`, no braces). Event ids are any printable UTF-8, so they
//! are escaped: bytes outside printable ASCII, and `{`, `}`, `%` and space, become `%XX`. The
//! escaping is injective (`%` itself is escaped), keeps ordinary ids readable in `redis-cli`, and
//! leaves no brace inside the tag. The prefix is validated to hold no brace either.

use idemgate_core::{InstanceName, Key, SourceName};

/// Builds the keys of one prefix.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    fn tagged(&self, key: &Key, suffix: &str) -> String {
        let id = key.event_id.as_str();
        let mut out =
            String::with_capacity(self.prefix.len() + key.source.as_str().len() + id.len() + 8);
        out.push_str(&self.prefix);
        out.push('{');
        out.push_str(key.source.as_str());
        out.push('/');
        escape_into(id, &mut out);
        out.push('}');
        out.push_str(suffix);
        out
    }

    /// The event: its record and history (store mode).
    pub(crate) fn event(&self, key: &Key) -> String {
        self.tagged(key, ":e")
    }

    /// A completed record's result (store mode), beside the event in its hash slot.
    pub(crate) fn result(&self, key: &Key) -> String {
        self.tagged(key, ":r")
    }

    /// `SCAN MATCH` pattern for every event key (store mode).
    pub(crate) fn events_pattern(&self) -> String {
        format!("{}{{*}}:e", crate::conn::glob_escape(&self.prefix))
    }

    /// `SCAN MATCH` pattern for every source's history stream (store mode).
    pub(crate) fn streams_pattern(&self) -> String {
        format!("{}{{*}}:s", crate::conn::glob_escape(&self.prefix))
    }

    /// The key of an event key of this prefix (its escaped id undone).
    pub(crate) fn key_of(&self, event_key: &str) -> Option<Key> {
        let tag = event_key
            .strip_prefix(&self.prefix)?
            .strip_prefix('{')?
            .strip_suffix("}:e")?;
        let (source, escaped) = tag.split_once('/')?;
        Key::parse(source, &unescape(escaped)?).ok()
    }

    /// The source of an event key or a stream key of this prefix.
    pub(crate) fn source_of(&self, key: &str) -> Option<SourceName> {
        let tag = key.strip_prefix(&self.prefix)?.strip_prefix('{')?;
        let end = tag.find(['/', '}'])?;
        SourceName::new(&tag[..end]).ok()
    }

    /// The cached answer (tier mode), of the inner store whose id gave `scope`
    /// ([`Keys::cache_scope`]).
    pub(crate) fn cache(&self, key: &Key, scope: &str) -> String {
        self.tagged(key, scope)
    }

    /// The suffix of an inner store's cache entries: `:c:` and its id, escaped like an event id
    /// (so no id can add a brace to the key).
    pub(crate) fn cache_scope(store_id: &str) -> String {
        let mut out = String::from(":c:");
        escape_into(store_id, &mut out);
        out
    }

    /// The store's identity (store mode).
    pub(crate) fn store_id(&self) -> String {
        format!("{}store_id", self.prefix)
    }

    /// An instance's boot counter (store mode). Instance names hold no braces.
    pub(crate) fn instance(&self, instance: &InstanceName) -> String {
        format!("{}instance:{{{}}}", self.prefix, instance.as_str())
    }

    /// The source's history stream (store mode).
    pub(crate) fn stream(&self, source: &SourceName) -> String {
        format!("{}{{{}}}:s", self.prefix, source.as_str())
    }
}

fn escape_into(id: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for b in id.bytes() {
        if b.is_ascii_graphic() && !matches!(b, b'{' | b'}' | b'%') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
}

/// Undoes [`escape_into`]; `None` for text it cannot have written.
fn unescape(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(source: &str, id: &str) -> Key {
        Key::parse(source, id).unwrap()
    }

    /// The hash tag Redis Cluster would compute for `key`.
    fn tag(key: &str) -> &str {
        let open = key.find('{').unwrap();
        let close = key[open + 1..].find('}').unwrap() + open + 1;
        &key[open + 1..close]
    }

    #[test]
    fn an_event_keeps_its_keys_in_one_slot() {
        let keys = Keys::new("idemgate:");
        let key = k("stripe", "evt_123");
        assert_eq!(keys.event(&key), "idemgate:{stripe/evt_123}:e");
        let scope = Keys::cache_scope("0123abcd");
        assert_eq!(
            keys.cache(&key, &scope),
            "idemgate:{stripe/evt_123}:c:0123abcd"
        );
        assert_eq!(tag(&keys.event(&key)), tag(&keys.cache(&key, &scope)));
        assert_eq!(
            Keys::cache_scope("a{b}"),
            ":c:a%7Bb%7D",
            "a store id cannot break the tag"
        );
        let gw = InstanceName::new("gw-1").unwrap();
        assert_eq!(keys.instance(&gw), "idemgate:instance:{gw-1}");
        assert!(
            !keys.instance(&gw).starts_with("idemgate:{"),
            "not an event key"
        );
        assert_eq!(keys.stream(&key.source), "idemgate:{stripe}:s");
        let source = key.source.clone();
        assert_eq!(keys.source_of(&keys.event(&key)), Some(source.clone()));
        assert_eq!(keys.source_of(&keys.stream(&source)), Some(source));
        assert_eq!(keys.source_of("other:{stripe}:s"), None);
        assert_eq!(Keys::new("a*[").events_pattern(), "a\\*\\[{*}:e");
    }

    #[test]
    fn ids_cannot_break_the_tag_or_collide() {
        let keys = Keys::new("p:");
        let nasty = ["a}b", "{x}", "a%7Db", "a b", "évé", "}:h", "a/b", "%"];
        let mut seen = std::collections::HashSet::new();
        for id in nasty {
            let key = k("s", id);
            let rec = keys.event(&key);
            assert_eq!(tag(&rec), tag(&keys.cache(&key, ":c:x")), "{id}");
            assert!(rec.ends_with("}:e"), "{rec}");
            assert_eq!(rec.matches(['{', '}']).count(), 2, "{rec}");
            assert_eq!(keys.key_of(&rec), Some(key.clone()), "{id} round-trips");
            assert!(seen.insert(rec), "{id} collides");
        }
        assert_eq!(keys.event(&k("s", "a}b")), "p:{s/a%7Db}:e");
        assert_eq!(keys.event(&k("s", "a%7Db")), "p:{s/a%257Db}:e");
    }
}
