//! Inputs the fuzz targets (`fuzz/`, targets `config` and `duration`) found, kept as tests.
//! Configuration text must never panic the loader, whatever it holds.

use std::time::Duration;

use idemgate_gateway::Config;

/// Found by `duration`: `forward_timeout = "18446744073709551615s"` on a source without a
/// `lease`. The default lease is twice the forward timeout, and that doubling overflowed:
/// "overflow when multiplying duration by scalar", a panic in `Config::from_toml`. It now
/// saturates, and the default lease is then cut to the source's TTL.
#[test]
fn a_huge_forward_timeout_is_not_a_panic() {
    for timeout in ["18446744073709551615s", "584542046090y"] {
        let toml = format!(
            "[[source]]\nname = \"s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\nforward_timeout = \"{timeout}\"\n"
        );
        let config = Config::from_toml(&toml).unwrap();
        let policy = config.sources[0].policy(0).unwrap();
        assert_eq!(policy.lease, policy.ttl.ttl, "{timeout}");
    }
    // Below the overflow, the doubling still applies.
    let toml = "[[source]]\nname = \"s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\nforward_timeout = \"45s\"\n";
    let config = Config::from_toml(toml).unwrap();
    assert_eq!(
        config.sources[0].policy(0).unwrap().lease,
        Duration::from_secs(90)
    );
}
