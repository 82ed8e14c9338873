//! Every duration key of the configuration, as the configuration reads it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| idemgate_fuzz::config::run_duration(data));
