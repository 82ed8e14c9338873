//! `Config::from_toml` on arbitrary text, then validation, every source's policy and verifier,
//! and the gateway state built from it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idemgate_fuzz::config::run_toml(data));
