//! `SourceName::new`, `EventId::new` / `from_bytes`, `Key::parse`, `ClaimToken::from_fence`,
//! `Fingerprint::from_hex`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idemgate_fuzz::keys::run(data));
