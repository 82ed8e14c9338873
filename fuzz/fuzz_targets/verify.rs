//! Every built-in provider's signature check and event-id extraction, fed arbitrary headers,
//! bodies and receive times, and correctly signed deliveries to mutate (see `src/delivery.rs`).
#![no_main]

use idemgate_fuzz::delivery::{Schemes, run};

libfuzzer_sys::fuzz_target!(|data: &[u8]| run(data, Schemes::BuiltIn));
