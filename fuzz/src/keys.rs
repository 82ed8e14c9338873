//! Source names, event ids, keys, claim fences and fingerprints: each parser checked against
//! its documented grammar, written again here independently.

use idemgate_core::{ClaimToken, EventId, Fingerprint, Key, SourceName};

/// `[a-z0-9][a-z0-9._-]{0,63}`.
fn is_source_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|&c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-')
        })
}

/// 1 to 255 bytes of UTF-8 without control characters.
fn is_event_id(s: &str) -> bool {
    // 1 to 255 characters (not bytes: the rule a JSON Schema maxLength states).
    (1..=255).contains(&s.chars().count()) && !s.chars().any(char::is_control)
}

/// The input is up to three fields separated by `\n`: a source name, an event id (raw bytes),
/// and a claim fence, also read as a fingerprint.
pub fn run(data: &[u8]) {
    let mut fields = data.splitn(3, |&b| b == b'\n');
    let source = fields.next().unwrap_or_default();
    let id = fields.next().unwrap_or_default();
    let fence = fields.next().unwrap_or_default();

    let source_text = String::from_utf8_lossy(source);
    let name = SourceName::new(source_text.as_ref());
    assert_eq!(
        name.is_ok(),
        is_source_name(&source_text),
        "SourceName::new({source_text:?}) = {name:?}"
    );
    if let Err(e) = &name {
        assert!(e.to_string().contains("source name"), "{e}");
    }

    let by_bytes = EventId::from_bytes(id);
    match std::str::from_utf8(id) {
        Ok(text) => {
            let event_id = EventId::new(text);
            assert_eq!(
                event_id, by_bytes,
                "EventId::new and from_bytes disagree on {text:?}"
            );
            assert_eq!(
                event_id.is_ok(),
                is_event_id(text),
                "EventId::new({text:?}) = {event_id:?}"
            );
            if let Ok(e) = &event_id {
                assert_eq!(e.as_str(), text);
            }
            let key = Key::parse(&source_text, text);
            assert_eq!(key.is_ok(), name.is_ok() && event_id.is_ok(), "Key::parse");
            if let Ok(key) = key {
                assert_eq!(key.to_string(), format!("{source_text}:{text}"));
            }
        }
        Err(_) => assert!(by_bytes.is_err(), "EventId::from_bytes accepted non-UTF-8"),
    }

    let fence_text = String::from_utf8_lossy(fence);
    let key = Key::parse("fuzz", "evt_fuzz").expect("a valid key");
    if let Ok(token) = ClaimToken::from_fence(key.clone(), &fence_text) {
        assert!(token.attempt >= 1, "attempt 0 from {fence_text:?}");
        let again = ClaimToken::from_fence(key, &token.fence());
        assert_eq!(
            again.as_ref(),
            Ok(&token),
            "fence round trip of {fence_text:?}"
        );
    }
    match Fingerprint::from_hex(&fence_text) {
        Ok(fp) => assert_eq!(fp.to_hex(), fence_text.to_ascii_lowercase(), "fingerprint"),
        Err(e) => assert!(e.to_string().contains("fingerprint"), "{e}"),
    }
}
