//! Configuration: whole TOML files (the `config` target) and every duration key as the
//! configuration reads it (the `duration` target).

use std::time::Duration;

use idemgate_gateway::config::ConfigError;
use idemgate_gateway::error::ErrorChain;
use idemgate_gateway::{AnyStore, AppState, Config};

/// Parses `data` as a configuration file. Errors are fine (each must say something); a file that
/// parses must pass validation again, give every source a policy, and either build a gateway
/// state or refuse with an error. Nothing may panic.
pub fn run_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::from_toml(text) {
        Err(e) => assert_shown(&e),
        Ok(config) => {
            if let Err(e) = config.validate() {
                panic!("validate() refuses a config from_toml() accepted: {e}");
            }
            for (i, source) in config.sources.iter().enumerate() {
                let policy = match source.policy(i) {
                    Ok(p) => p,
                    Err(e) => panic!("source #{i} passed validation, then: {e}"),
                };
                assert!(
                    !policy.lease.is_zero() && policy.lease <= policy.ttl.ttl,
                    "source #{i}: lease {:?} outside (0, ttl {:?}]",
                    policy.lease,
                    policy.ttl.ttl
                );
                if let Err(e) = idemgate_gateway::verifier(source) {
                    assert_shown(&e);
                }
            }
            if let Err(e) = AppState::new(&config, AnyStore::memory(), None) {
                assert_shown(&e);
            }
        }
    }
}

fn assert_shown(e: &ConfigError) {
    let shown = ErrorChain(e).to_string();
    assert!(
        !shown.trim().is_empty(),
        "a ConfigError displays as nothing: {e:?}"
    );
}

/// A TOML basic string holding `text` exactly.
pub fn toml_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

type Read = fn(&Config) -> Option<Duration>;

/// A duration key: the TOML around it (`{}` is where the value goes), its name, and, for keys
/// with no rule beyond "a duration", where the parsed value lands.
struct DurationKey {
    toml: &'static str,
    key: &'static str,
    read: Option<Read>,
}

const SOURCE: &str = "[[source]]\nname = \"s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\n";

macro_rules! source_key {
    ($key:literal) => {
        DurationKey {
            toml: concat!(
                "[[source]]\nname = \"s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\n",
                $key,
                " = {}\n"
            ),
            key: $key,
            read: None,
        }
    };
}

/// The keys a build without store engines reads (the fuzz build has none): the engines' other
/// duration keys go through the same humantime-serde as these.
const KEYS: &[DurationKey] = &[
    DurationKey {
        toml: "[store]\nsweep_interval = {}\n",
        key: "sweep_interval",
        read: Some(|c| Some(c.store.sweep_interval)),
    },
    DurationKey {
        toml: "[store]\nhistory_retention = {}\n",
        key: "history_retention",
        read: Some(|c| Some(c.store.history_retention)),
    },
    DurationKey {
        toml: "[store]\nhistory_interval = {}\n",
        key: "history_interval",
        read: Some(|c| Some(c.store.history_interval)),
    },
    DurationKey {
        toml: "[history.archive]\nurl = \"file:///tmp/idemgate-fuzz-archive\"\nexport_after = {}\n",
        key: "export_after",
        read: Some(|c| c.history.archive.as_ref().map(|a| a.export_after)),
    },
    DurationKey {
        toml: "[store.postgres]\nsweep_pause = {}\n",
        key: "sweep_pause",
        read: Some(|c| Some(c.store.postgres.sweep_pause)),
    },
    DurationKey {
        toml: "[limits]\nrequest_timeout = {}\n",
        key: "request_timeout",
        read: Some(|c| Some(c.limits.request_timeout)),
    },
    DurationKey {
        toml: "[limits]\nshutdown_grace = {}\n",
        key: "shutdown_grace",
        read: Some(|c| Some(c.limits.shutdown_grace)),
    },
    // Range-checked keys: a duration outside the range is refused, naming the key.
    DurationKey {
        toml: "instance_lease = {}\n",
        key: "instance_lease",
        read: None,
    },
    DurationKey {
        toml: "window_audit_interval = {}\n",
        key: "window_audit_interval",
        read: None,
    },
    source_key!("retry_window"),
    source_key!("queue_lag"),
    source_key!("clock_skew"),
    source_key!("replay_margin"),
    source_key!("lease"),
    source_key!("forward_timeout"),
    source_key!("tolerance"),
    DurationKey {
        toml: "[[source]]\nname = \"s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\nttl_override = {}\nttl_override_reason = \"fuzz\"\n",
        key: "ttl_override",
        read: None,
    },
];

/// The first byte picks a duration key, the rest is its value. The configuration must agree with
/// `humantime::parse_duration` on what is a duration; a value it refuses gets an error naming
/// the key; a source's terms may be refused by its TTL rules, but nothing may panic.
pub fn run_duration(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Ok(value) = std::str::from_utf8(rest) else {
        return;
    };
    let key = &KEYS[usize::from(pick) % KEYS.len()];
    let toml = key.toml.replace("{}", &toml_string(value));
    let parsed = humantime::parse_duration(value);
    let loaded = Config::from_toml(&toml);
    match (&parsed, &loaded) {
        (Err(_), Ok(_)) => panic!("{}: {value:?} is no duration, yet it loads", key.key),
        (Err(_), Err(e)) => {
            let shown = ErrorChain(e).to_string();
            assert!(
                shown.contains(key.key),
                "{}: the error for {value:?} does not name the key: {shown}",
                key.key
            );
        }
        (Ok(d), Ok(config)) => {
            if let Some(read) = key.read {
                assert_eq!(read(config), Some(*d), "{}: {value:?}", key.key);
            }
            if key.toml.starts_with(SOURCE) {
                run_toml(toml.as_bytes());
            }
        }
        (Ok(d), Err(e)) => {
            let shown = ErrorChain(e).to_string();
            // Some keys refuse zero (a request timeout of nothing), naming themselves.
            if d.is_zero() && shown.contains(key.key) && shown.contains("above zero") {
                return;
            }
            assert!(
                key.read.is_none(),
                "{}: {value:?} is {d:?}, yet refused: {shown}",
                key.key
            );
        }
    }
}
