//! What the fuzz targets share: the text form of a delivery and the checks run on each input.
//!
//! # Layout
//! - [`delivery`]: a delivery as text (directives, headers, a blank line, the body), built into
//!   a [`Verifier`](idemgate_providers::Verifier) and a request, run, and checked against the
//!   properties every scheme must keep. The `verify` and `generic` targets.
//! - [`config`]: TOML configuration and the durations in it. The `config` and `duration` targets.
//! - [`keys`]: source names, event ids, keys, claim fences, fingerprints. The `keys` target.
//!
//! Each check panics with a message naming the property it saw broken: libFuzzer reports a panic
//! as a crash and saves the input.

pub mod config;
pub mod delivery;
pub mod keys;
