//! Loading a configuration as a user writes it: defaults that fit, and errors that name the key
//! as written, where it was written, and what to do.

use std::time::Duration;

use idemgate_gateway::Config;

/// Loads `text` from a file named `idemgate.toml` in a fresh directory; the error text on failure.
fn load(text: &str) -> Result<Config, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemgate.toml");
    std::fs::write(&path, text).unwrap();
    Config::load(Some(&path), "").map_err(|e| {
        let text = e.to_string();
        assert!(!text.contains("default."), "no figment profile: {text}");
        text
    })
}

const STRIPE: &str =
    "[[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\n";

#[test]
fn the_default_lease_fits_a_short_ttl() {
    let config = load(&format!(
        "{STRIPE}retry_window = \"2s\"\nqueue_lag = \"0s\"\nclock_skew = \"0s\"\nreplay_margin = \"1s\"\n"
    ))
    .unwrap();
    let policy = config.sources[0].policy(0).unwrap();
    assert_eq!(policy.ttl.ttl, Duration::from_secs(3));
    assert_eq!(policy.lease, Duration::from_secs(3));
    // With the usual TTL, the usual default.
    let config = load(STRIPE).unwrap();
    assert_eq!(
        config.sources[0].policy(0).unwrap().lease,
        Duration::from_secs(60)
    );
}

#[test]
fn an_explicit_lease_longer_than_the_ttl_names_both_figures_and_the_key() {
    let err = load(&format!(
        "{STRIPE}retry_window = \"2s\"\nqueue_lag = \"0s\"\nclock_skew = \"0s\"\nreplay_margin = \"1s\"\nlease = \"1m\"\n"
    ))
    .unwrap_err();
    for part in [
        "idemgate.toml (line 9)",
        "source \"stripe-live\"",
        "lease",
        "1m",
        "3s",
        "shorten lease",
    ] {
        assert!(err.contains(part), "{err:?} should say {part:?}");
    }
}

#[test]
fn unknown_keys_are_named_as_written_with_file_line_and_a_suggestion() {
    let err = load(&format!("{STRIPE}\n[store]\nsweep_intervall = \"60s\"\n")).unwrap_err();
    assert!(
        err.starts_with("store.sweep_intervall in ")
            && err.contains("idemgate.toml (line 7): unknown key; did you mean sweep_interval?"),
        "{err}"
    );
    let err = load(&format!(
        "{STRIPE}\n[[source]]\nname = \"gh\"\nprovider = \"github\"\nsecrets = [\"x\"]\nretry_windw = \"3d\"\n"
    ))
    .unwrap_err();
    assert!(
        err.starts_with("source \"gh\".retry_windw in ") && err.contains("(line 10)"),
        "sources by name, not index: {err}"
    );
    assert!(err.contains("did you mean retry_window?"), "{err}");
}

#[test]
fn bad_values_name_the_key_and_the_expectation() {
    let err = load(&format!("{STRIPE}lease = \"soon\"\n")).unwrap_err();
    assert!(
        err.starts_with("source \"stripe-live\".lease in ") && err.contains("(line 5)"),
        "{err}"
    );
    assert!(err.contains("such as 90s"), "{err}");
    let err = load("[limits]\nbody_limit = \"big\"\n").unwrap_err();
    assert!(err.starts_with("limits.body_limit in "), "{err}");
    assert!(err.contains("found string \"big\""), "{err}");
}

#[test]
fn the_example_configs_placeholders_are_refused_with_the_key_to_fill_in() {
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../idemgate.example.toml"
    ))
    .unwrap();
    let err = load(&example).unwrap_err();
    assert!(
        err.contains("source \"stripe-live\": secrets") && err.contains("placeholder"),
        "{err}"
    );
    // With a real secret, the token is next.
    let filled = example.replace("whsec_...", "whsec_real_secret_from_the_dashboard");
    let err = load(&filled).unwrap_err();
    assert!(
        err.contains("api_tokens") && err.contains("placeholder"),
        "{err}"
    );
    // Filled in, it loads as shipped.
    let filled = filled.replace(
        "change-me-to-a-long-random-token",
        "0123456789abcdef0123456789",
    );
    let config = load(&filled).unwrap();
    assert_eq!(config.sources.len(), 1);
}

#[test]
fn provider_none_without_an_event_id_says_what_to_add() {
    let config = Config::from_toml(
        "api_tokens = [\"worker-token-0123456789\"]\n[[source]]\nname = \"bus\"\nprovider = \"none\"\nretry_window = \"1h\"\n",
    )
    .unwrap();
    let err = idemgate_gateway::verifier(&config.sources[0])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("event_id_header = \"X-Event-Id\"")
            && err.contains("event_id_pointer = \"/id\""),
        "{err}"
    );
}

#[test]
fn instance_names_follow_the_rule() {
    assert!(load("instance = \"gw-1.eu_west\"\n").is_ok());
    for bad in ["", "has space", "a:b", &"x".repeat(65)] {
        let err = load(&format!("instance = {bad:?}\n")).unwrap_err();
        assert!(err.contains("instance") && err.contains("1 to 64"), "{err}");
    }
}

#[test]
fn zero_timeouts_and_connection_caps_are_refused() {
    let err = load("[limits]\nheader_timeout = \"0s\"\n").unwrap_err();
    assert!(
        err.contains("limits.header_timeout: must be above zero"),
        "{err}"
    );
    let err = load("[limits]\nmax_connections = 0\n").unwrap_err();
    assert!(err.starts_with("limits.max_connections in "), "{err}");
}

/// `[store.postgres]` is the PostgreSQL store's own settings type: a zero count is refused with
/// the key, the file and the line, never replaced by a default.
#[cfg(feature = "postgres")]
#[test]
fn a_zero_pool_size_is_refused_with_the_key_and_line() {
    let store = "[store]\nkind = \"postgres\"\nurl = \"postgres://db/app\"\n\n[store.postgres]\nschema = \"s\"\n";
    for key in ["pool_size", "batch_max", "sweep_batch"] {
        let err = load(&format!("{STRIPE}\n{store}{key} = 0\n")).unwrap_err();
        assert!(
            err.starts_with(&format!("store.postgres.{key} in "))
                && err.contains("idemgate.toml (line 12)")
                && err.contains("nonzero"),
            "{err}"
        );
    }
    let err = load(&format!("{STRIPE}\n{store}pool_sise = 4\n")).unwrap_err();
    assert!(
        err.starts_with("store.postgres.pool_sise in ") && err.contains("did you mean pool_size?"),
        "{err}"
    );
    let config = load(&format!(
        "{STRIPE}\n{store}pool_size = 3\nexpiry = \"partitioned\"\npartition_width = \"6h\"\n"
    ))
    .unwrap();
    let pg = &config.store.postgres;
    assert_eq!(pg.pool_size.get(), 3);
    assert_eq!(pg.partition_width, Duration::from_secs(6 * 3_600));
    assert_eq!(pg.schema, "s");
}

/// The sweep keys of `[store.postgres]` apply to every engine, in every build.
#[test]
fn the_sweep_keys_of_store_postgres_apply_to_every_engine() {
    let config = load(&format!(
        "{STRIPE}\n[store]\nkind = \"sqlite\"\n\n[store.postgres]\nsweep_batch = 7\nsweep_pause = \"1s\"\npartition_width = \"1h\"\n"
    ))
    .unwrap();
    let opts = config.store.sweep_options();
    assert_eq!(opts.batch.get(), 7);
    assert_eq!(opts.pause, Duration::from_secs(1));
    assert_eq!(opts.pacing, idemgate_core::sweep::Pacing::Adaptive);
}

#[test]
fn sweep_pacing_is_adaptive_or_fixed_and_anything_else_is_refused_by_name() {
    let store = "[store]\nkind = \"sqlite\"\n\n[store.postgres]\n";
    let config = load(&format!("{STRIPE}\n{store}sweep_pacing = \"fixed\"\n")).unwrap();
    assert_eq!(
        config.store.sweep_options().pacing,
        idemgate_core::sweep::Pacing::Fixed
    );
    let err = load(&format!("{STRIPE}\n{store}sweep_pacing = \"gentle\"\n")).unwrap_err();
    assert!(
        err.starts_with("store.postgres.sweep_pacing in ")
            && err.contains("gentle")
            && err.contains("adaptive"),
        "{err}"
    );
}

#[test]
fn inbox_sources_are_checked_at_load() {
    let inbox = format!("{STRIPE}mode = \"inbox\"\n");
    let e = load(&inbox).unwrap_err();
    assert!(
        e.contains("forward_url") && e.contains("inbox"),
        "an inbox needs somewhere to deliver: {e}"
    );
    let with_url = format!("{inbox}forward_url = \"http://127.0.0.1:9/hook\"\n");
    let config = load(&with_url).unwrap();
    let d = &config.sources[0].dispatch;
    assert_eq!(
        (d.concurrency.get(), d.max_attempts.get(), d.timeout),
        (4, 12, Duration::from_secs(10))
    );
    for (dispatch, says) in [
        ("concurrency = 0", "dispatch.concurrency"),
        ("max_attempts = 0", "dispatch.max_attempts"),
        (
            "backoff = \"10s\"\nmax_backoff = \"1s\"",
            "dispatch.max_backoff",
        ),
        ("timeout = \"0s\"", "dispatch.timeout"),
        ("timeout = \"soon\"", "not a duration"),
        ("retries = 3", "unknown key"),
    ] {
        let e = load(&format!("{with_url}[source.dispatch]\n{dispatch}\n")).unwrap_err();
        assert!(e.contains(says), "{dispatch}: {e}");
        assert!(e.contains("line"), "{dispatch}: located: {e}");
    }
    let e = load(&format!(
        "{with_url}[store]\nkind = \"redis\"\n[store.redis]\nurl = \"redis://127.0.0.1:6379\"\n"
    ))
    .unwrap_err();
    assert!(e.contains("needs a SQL store"), "{e}");
}

#[test]
fn https_forward_urls_take_a_tls_table_checked_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let ca = idemgate_tls::testing::TestCa::new("downstream CA");
    let ca_file = ca.write(dir.path(), "ca").display().to_string();
    let (cert, key) = ca.issue(&["idemgate"]).write(dir.path(), "client");
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let https = format!("{STRIPE}forward_url = \"https://hooks.internal.test/stripe\"\n");

    // Without [source.tls]: the system's authorities. With it: the keys as written.
    let config = load(&https).unwrap();
    let policy = config.sources[0].policy(0).unwrap();
    assert_eq!(policy.tls, Some(idemgate_tls::ClientTls::default()));
    let config = load(&format!(
        "{https}[source.tls]\nca_file = {ca_file:?}\nsystem_roots = false\nclient_cert = {cert:?}\nclient_key = {key:?}\n"
    ))
    .unwrap();
    let tls = config.sources[0].policy(0).unwrap().tls.unwrap();
    assert_eq!(tls.ca_file.as_deref(), Some(std::path::Path::new(&ca_file)));
    assert!(!tls.system_roots);
    assert_eq!(tls.verify, idemgate_tls::Verify::Full);
    // An http:// URL speaks no TLS.
    assert_eq!(
        load(&format!(
            "{STRIPE}forward_url = \"http://127.0.0.1:9/hook\"\n"
        ))
        .unwrap()
        .sources[0]
            .policy(0)
            .unwrap()
            .tls,
        None
    );

    let missing = dir.path().join("nowhere.pem").display().to_string();
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let not_pem = not_pem.display().to_string();
    for (table, says) in [
        (
            format!("ca_file = {missing:?}"),
            vec!["tls.ca_file", "cannot read the CA file", "nowhere.pem"],
        ),
        (
            format!("ca_file = {not_pem:?}"),
            vec!["tls.ca_file", "not.pem", "no usable PEM certificate"],
        ),
        (
            format!("client_cert = {cert:?}"),
            vec!["tls.client_key", "is needed with tls.client_cert"],
        ),
        (
            format!("client_key = {key:?}"),
            vec!["tls.client_cert", "is needed with tls.client_key"],
        ),
        (
            format!("client_cert = {cert:?}\nclient_key = {not_pem:?}"),
            vec!["tls.client_key", "not.pem", "private key"],
        ),
        (
            // The CA's certificate is not the client key's.
            format!("client_cert = {ca_file:?}\nclient_key = {key:?}"),
            vec!["tls.client_cert", "cannot be used with its key"],
        ),
        (
            "system_roots = false".to_owned(),
            vec!["tls.ca_file", "nothing would be trusted"],
        ),
        (
            "ca_fil = \"ca.pem\"".to_owned(),
            vec!["ca_fil", "unknown key", "did you mean ca_file?"],
        ),
    ] {
        let e = load(&format!("{https}[source.tls]\n{table}\n")).unwrap_err();
        assert!(e.contains("stripe-live"), "{table}: names the source: {e}");
        for part in says {
            assert!(e.contains(part), "{table}: {e:?} should say {part:?}");
        }
        assert!(e.contains("line"), "{table}: located: {e}");
    }

    // [source.tls] where no TLS is spoken would do nothing: refused.
    let e = load(&format!(
        "{STRIPE}forward_url = \"http://127.0.0.1:9/hook\"\n[source.tls]\nca_file = {ca_file:?}\n"
    ))
    .unwrap_err();
    assert!(
        e.contains("source \"stripe-live\": tls: is set but forward_url is http://"),
        "{e}"
    );
    let e = load(&format!("{STRIPE}[source.tls]\nca_file = {ca_file:?}\n")).unwrap_err();
    assert!(e.contains("no forward_url"), "{e}");
    // Other schemes are not URLs the gateway can send to.
    let e = load(&format!("{STRIPE}forward_url = \"ftp://127.0.0.1/hook\"\n")).unwrap_err();
    assert!(e.contains("has no scheme idemgate delivers to"), "{e}");
}

#[test]
fn broker_destinations_are_checked_at_load_naming_the_source_and_key_without_credentials() {
    // Good ones, with what they speak.
    let config = load(&format!(
        "{STRIPE}forward_url = \"nats://app:s3cret@127.0.0.1:4222/events.stripe\"\non_short_window = \"refuse\"\n"
    ))
    .unwrap();
    let policy = config.sources[0].policy(0).unwrap();
    let target = policy.destination.unwrap();
    assert_eq!(target.to_string(), "nats://127.0.0.1:4222/events.stripe");
    assert!(target.is_broker() && policy.tls.is_none());
    assert_eq!(
        policy.on_short_window,
        idemgate_gateway::config::OnShortWindow::Refuse
    );
    let config = load(&format!(
        "{STRIPE}forward_url = \"amqps://app:s3cret@rabbit.internal.test/prod?exchange=events&routing_key=stripe\"\n"
    ))
    .unwrap();
    let policy = config.sources[0].policy(0).unwrap();
    assert!(
        policy.tls.is_some(),
        "amqps:// speaks TLS, with [source.tls] or the system's roots"
    );

    for (url, extra, key, says) in [
        (
            "nats+x://h/a",
            "",
            "forward_url",
            "no scheme idemgate delivers to",
        ),
        (
            "nats://app:s3cret@h:4222",
            "",
            "forward_url",
            "names no subject",
        ),
        (
            "nats://app:s3cret@h:4222/events.*",
            "",
            "forward_url",
            "wildcard",
        ),
        ("nats://h:4222/events.>", "", "forward_url", "wildcard"),
        (
            "nats://h:4222/a..b",
            "",
            "forward_url",
            "not a NATS subject",
        ),
        ("nats://h:42x/a", "", "forward_url", "is not a number"),
        (
            "amqp://app:s3cret@h/v?routing_key=k",
            "",
            "forward_url",
            "names no exchange",
        ),
        (
            "amqp://app:s3cret@h/v?exchange=e",
            "",
            "forward_url",
            "names no routing_key",
        ),
        (
            "amqp://app:s3cret@h/v?exchange=e&routing_key=k&queue=q",
            "",
            "forward_url",
            "not a parameter",
        ),
        (
            "amqp://app:s3cret@h/v?exchange=e&routing_key=k",
            "on_short_window = \"refuse\"\n",
            "on_short_window",
            "RabbitMQ keeps no dedup window",
        ),
        (
            "http://127.0.0.1:9/hook",
            "on_short_window = \"warn\"\n",
            "on_short_window",
            "judges a broker destination's dedup window",
        ),
        (
            "nats://h/a",
            "on_short_window = \"never\"\n",
            "on_short_window",
            "warn",
        ),
        (
            "nats://app:s3cret@h/a",
            "[source.tls]\nsystem_roots = true\n",
            "tls",
            "speaks no TLS: use https://, tls:// or amqps://",
        ),
    ] {
        let e = load(&format!("{STRIPE}forward_url = {url:?}\n{extra}")).unwrap_err();
        assert!(e.contains("stripe-live"), "{url}: names the source: {e}");
        assert!(e.contains(key), "{url}: names {key}: {e}");
        assert!(e.contains(says), "{url}: {e:?} should say {says:?}");
        assert!(!e.contains("s3cret"), "{url}: credentials in {e}");
    }
}

#[test]
fn what_holds_together_but_is_risky_is_warned_of() {
    let config = load(
        "[[source]]\nname = \"topics\"\nprovider = \"sns\"\nallow_any_topic = true\n\
         [[source]]\nname = \"push\"\nprovider = \"pubsub\"\naudience = \"https://x/\"\nallow_any_service_account = true\n\
         [[source]]\nname = \"gh\"\nprovider = \"github\"\nsecrets = [\"s\"]\nbody_limit = 1048576\n\
         [[source]]\nname = \"gh-default\"\nprovider = \"github\"\nsecrets = [\"s\"]\n",
    )
    .unwrap();
    let warnings = config.warnings();
    assert_eq!(warnings.len(), 3, "{warnings:#?}");
    assert!(warnings[0].contains("\"topics\"") && warnings[0].contains("topic_arns"));
    assert!(warnings[1].contains("\"push\"") && warnings[1].contains("service_account"));
    assert!(
        warnings[2].contains("\"gh\"") && warnings[2].contains("25 MB"),
        "{}",
        warnings[2]
    );
    // GitHub's default limit is its 25 MB, and it claims payload fingerprints too.
    let sc = &config.sources[3];
    let scheme = idemgate_providers::Scheme::from_name("github").unwrap();
    assert_eq!(sc.body_limit(1 << 20, &scheme), 25 << 20);
    assert!(sc.dedupe_on_body());
    assert!(!config.sources[0].dedupe_on_body());
}
