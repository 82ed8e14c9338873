//! `[[api]]`, the Idempotency-Key sidecar, as a user writes it: what loads, and each bad key
//! refused with the api, the key, the line, and what to write instead.

use idemgate_gateway::Config;

/// Loads `text` from a file named `idemgate.toml` in a fresh directory; the error text on failure.
fn load(text: &str) -> Result<Config, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemgate.toml");
    std::fs::write(&path, text).unwrap();
    Config::load(Some(&path), "").map_err(|e| e.to_string())
}

const API: &str = "[[api]]\nname = \"payments\"\nlisten = \"127.0.0.1:8081\"\nupstream = \"http://127.0.0.1:9000\"\nroutes = [\"POST /payments\", \"PATCH /orders/*\"]\nretry_window = \"24h\"\n";

#[test]
fn an_api_loads_with_a_key_lifetime_from_its_retry_contract() {
    let config = load(API).unwrap();
    let policy = config.apis[0].policy().unwrap();
    // 24 h of retries plus the contract's default queue lag, clock skew and replay margin.
    assert!(policy.rules.ttl() > std::time::Duration::from_secs(86_400));
    assert_eq!(policy.upstream.to_string(), "http://127.0.0.1:9000/");
    let method = axum::http::Method::PATCH;
    assert!(policy.rules.route(&method, "/orders/42").is_some());
    assert!(policy.rules.route(&method, "/orders").is_none());
}

#[test]
fn each_bad_key_is_named_at_its_line() {
    for (change, key, says) in [
        (
            "routes = [\"POST /payments\", \"PATCH /orders/*\"]",
            "routes = [\"POST payments\"]",
            "the path starts with /",
        ),
        (
            "routes = [\"POST /payments\", \"PATCH /orders/*\"]",
            "routes = [\"POST /orders/ord*\"]",
            "* stands for a whole segment",
        ),
        (
            "routes = [\"POST /payments\", \"PATCH /orders/*\"]",
            "routes = [\"GET /payments\"]",
            "idempotent already",
        ),
        (
            "routes = [\"POST /payments\", \"PATCH /orders/*\"]",
            "routes = []",
            "list the routes",
        ),
        (
            "upstream = \"http://127.0.0.1:9000\"",
            "upstream = \"ftp://127.0.0.1:9000\"",
            "http:// or https://",
        ),
        (
            "upstream = \"http://127.0.0.1:9000\"",
            "upstream = \"not a url\"",
            "not a URL",
        ),
        (
            "upstream = \"http://127.0.0.1:9000\"",
            "upstream = \"http://127.0.0.1:9000/?x=1\"",
            "no query",
        ),
        (
            "retry_window = \"24h\"",
            "queue_lag = \"1m\"",
            "retry_window: required",
        ),
        (
            "listen = \"127.0.0.1:8081\"",
            "listen = \"8081\"",
            "is not host:port",
        ),
        (
            "listen = \"127.0.0.1:8081\"",
            "listen = \"127.0.0.1:8080\"",
            "is also listen",
        ),
        ("name = \"payments\"", "name = \"pay ments\"", "name:"),
    ] {
        let text = API.replace(change, key);
        let err = load(&text).unwrap_err();
        assert!(err.contains("api \"") && err.contains(says), "{key}: {err}");
        assert!(
            err.contains("idemgate.toml (line "),
            "{key}: located: {err}"
        );
    }
    for (extra, says) in [
        (
            "principal = \"cookie\"\n",
            "not one of \"none\", \"bearer\" and \"header:NAME\"",
        ),
        (
            "principal = \"header:bad header\"\n",
            "is not a header name",
        ),
        (
            "release_on = [\"3xx\"]\n",
            "not one of \"5xx\", \"429\" and \"4xx\"",
        ),
        ("fingerprint_headers = [\"a b\"]\n", "is not a header name"),
        ("lease = \"5s\"\n", "not longer than upstream_timeout"),
        ("bogus = 1\n", "bogus"),
    ] {
        let err = load(&format!("{API}{extra}")).unwrap_err();
        assert!(err.contains(says), "{extra}: {err}");
    }
    // [api.tls]: only where TLS is spoken, whole, and with files that can be read.
    let https = API.replace("http://127.0.0.1:9000", "https://127.0.0.1:9000");
    for (text, says) in [
        (
            format!("{API}[api.tls]\nsystem_roots = true\n"),
            "tls: is set but upstream is http://",
        ),
        (
            format!("{https}[api.tls]\nclient_cert = \"/x.pem\"\n"),
            "tls.client_key: is needed with tls.client_cert",
        ),
        (
            format!("{https}[api.tls]\nsystem_roots = false\n"),
            "tls.ca_file: is needed with tls.system_roots = false",
        ),
        (
            format!("{https}[api.tls]\nca_file = \"/no/such/ca.pem\"\n"),
            "tls.ca_file",
        ),
    ] {
        let err = load(&text).unwrap_err();
        assert!(
            err.contains("api \"payments\"") && err.contains(says),
            "{text}: {err}"
        );
    }
    // An api named as a source: each keeps its keys under its own name.
    let err = load(&format!(
        "[[source]]\nname = \"payments\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\n{API}"
    ))
    .unwrap_err();
    assert!(
        err.contains("is the name of a source or of another api"),
        "{err}"
    );
}
