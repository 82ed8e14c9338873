//! `generic-hmac` in all its settings and `none`: header names, encodings, prefixes, timestamp
//! headers, signed_payload templates, event ids from a header or a JSON pointer.
#![no_main]

use idemgate_fuzz::delivery::{Schemes, run};

libfuzzer_sys::fuzz_target!(|data: &[u8]| run(data, Schemes::Configurable));
