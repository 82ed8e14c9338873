//! The history archive as users run it: `idemgate history export` on SQLite and PostgreSQL,
//! `lookup` finding what the store dropped, an export SIGKILLed half-way and run again, and the
//! gateway's retention job exporting before it drops (and dropping nothing while the archive
//! cannot be reached). History rows are written with old timestamps by the test (SQLite) or into
//! partitions of past months it creates (PostgreSQL).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

const DAY: i64 = 86_400_000;

fn idemgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(args)
        .env_remove("IDEMGATE_DATA_DIR")
        .env_remove("IDEMGATE_CONFIG")
        .output()
        .unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\n{}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn today_ms() -> i64 {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    now - now % DAY
}

fn day_text(ms: i64) -> String {
    let t = SystemTime::UNIX_EPOCH + Duration::from_millis(ms as u64);
    humantime::format_rfc3339(t).to_string()[..10].to_owned()
}

/// A migrated SQLite store in `dir/data` with `per_day` events (claimed, completed) on each of
/// the days `days_ago`.
fn sqlite_store(dir: &Path, days_ago: &[i64], per_day: usize) -> std::path::PathBuf {
    let data = dir.join("data");
    ok(&idemgate(&[
        "migrate",
        "--data-dir",
        data.to_str().unwrap(),
    ]));
    let mut db = rusqlite::Connection::open(data.join("idemgate.db")).unwrap();
    let tx = db.transaction().unwrap();
    {
        let mut insert = tx
            .prepare(
                "INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, gap_ms, fingerprint, note) \
                 VALUES (?1, ?2, ?3, ?4, 1, ?5, NULL, NULL, ?6)",
            )
            .unwrap();
        for &ago in days_ago {
            let start = today_ms() - ago * DAY;
            for i in 0..per_day {
                let at = start + (i as i64 * 37) % DAY;
                let id = format!("evt_{ago}_{i}");
                insert
                    .execute(rusqlite::params![
                        "stripe",
                        id,
                        "claimed",
                        0,
                        at,
                        None::<String>
                    ])
                    .unwrap();
                insert
                    .execute(rusqlite::params![
                        "stripe",
                        id,
                        "completed",
                        1,
                        at + 3,
                        Some("ok")
                    ])
                    .unwrap();
            }
        }
    }
    tx.commit().unwrap();
    data
}

fn count_sqlite(data: &Path) -> i64 {
    let db = rusqlite::Connection::open(data.join("idemgate.db")).unwrap();
    db.query_row("SELECT count(*) FROM history", [], |r| r.get(0))
        .unwrap()
}

/// Every manifest under `archive`: (relative day directory, rows).
fn manifests(archive: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for source in std::fs::read_dir(archive).unwrap().flatten() {
        if !source.path().is_dir() {
            continue;
        }
        for day in std::fs::read_dir(source.path()).unwrap().flatten() {
            let m = day.path().join("_manifest.json");
            if let Ok(text) = std::fs::read_to_string(&m) {
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                out.push((
                    format!(
                        "{}/{}",
                        source.file_name().to_string_lossy(),
                        day.file_name().to_string_lossy()
                    ),
                    v["rows"].as_u64().unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

/// Every Parquet file under `archive` with its bytes.
fn files(archive: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![archive.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                out.push((
                    p.strip_prefix(archive).unwrap().display().to_string(),
                    std::fs::read(&p).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn export_on_sqlite_then_lookup_finds_what_the_store_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let data = sqlite_store(dir.path(), &[12, 11, 10], 3_000);
    let archive = dir.path().join("archive");
    let to = format!("file://{}", archive.display());
    let data_dir = data.to_str().unwrap();
    let since = day_text(today_ms() - 20 * DAY);
    let until = day_text(today_ms());
    let args = [
        "history",
        "export",
        "--data-dir",
        data_dir,
        "--since",
        &since,
        "--until",
        &until,
        "--to",
        &to,
    ];

    let dry = ok(&idemgate(&[&args[..], &["--dry-run"]].concat()));
    assert!(dry.contains("would export 18000 rows in 3 days"), "{dry}");
    assert!(
        !archive.join("source=stripe").exists(),
        "a dry run writes nothing"
    );

    let out = ok(&idemgate(&args));
    assert!(out.contains("exported 18000 rows in 3 days"), "{out}");
    for ago in [12, 11, 10] {
        let d = day_text(today_ms() - ago * DAY);
        assert!(
            out.contains(&format!(
                "source=stripe/day={d}/part-sqlite-0.parquet: 6000 rows"
            )),
            "{out}"
        );
    }
    let first = files(&archive);
    assert_eq!(first.len(), 3);
    assert_eq!(manifests(&archive).iter().map(|m| m.1).sum::<u64>(), 18_000);

    // Run again: the same files, byte for byte (deterministic names, order and contents, the
    // manifest aside), and no row twice.
    ok(&idemgate(&args));
    assert_eq!(files(&archive), first);

    // The store lets the oldest day go; lookup finds it in the archive, and says so.
    let gone = today_ms() - 12 * DAY;
    rusqlite::Connection::open(data.join("idemgate.db"))
        .unwrap()
        .execute("DELETE FROM history WHERE received_at < ?1", [gone + DAY])
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&ok(&idemgate(&[
        "lookup",
        "--data-dir",
        data_dir,
        "stripe",
        "evt_12_77",
        "--archive",
        &to,
        "--json",
    ])))
    .unwrap();
    assert_eq!(v["found_in"], "archive", "{v}");
    let history = v["history"].as_array().unwrap();
    assert_eq!(history.len(), 2, "{v}");
    assert_eq!(history[0]["outcome"], "claimed");
    assert_eq!(history[1]["outcome"], "completed");
    assert_eq!(v["archive"]["days_read"], 3);
    assert!(
        v["archive"]["row_groups_read"].as_u64().unwrap() <= 2,
        "{v}"
    );
    let text = ok(&idemgate(&[
        "lookup",
        "--data-dir",
        data_dir,
        "stripe",
        "evt_12_77",
        "--archive",
        &to,
    ]));
    assert!(text.contains(&format!("from the archive {to}")), "{text}");
    // Still in the store: found there, the archive not asked.
    let v: serde_json::Value = serde_json::from_str(&ok(&idemgate(&[
        "lookup",
        "--data-dir",
        data_dir,
        "stripe",
        "evt_10_5",
        "--archive",
        &to,
        "--json",
    ])))
    .unwrap();
    assert_eq!(v["found_in"], "store");
    assert!(v.get("archive").is_none());

    // Bad input, each named.
    let bad = idemgate(&[
        "history",
        "export",
        "--data-dir",
        data_dir,
        "--since",
        &until,
        "--until",
        &since,
        "--to",
        &to,
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("is after --until"));
    let bad = idemgate(&[
        "history",
        "export",
        "--data-dir",
        data_dir,
        "--since",
        &since,
        "--until",
        &until,
        "--to",
        "gs://bucket/x",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("unknown scheme \"gs\""),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let bad = idemgate(&[
        "history",
        "export",
        "--data-dir",
        data_dir,
        "--since",
        &since,
        "--until",
        &until,
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no archive: pass --to"));
    let bad = idemgate(&[
        "history",
        "export",
        "--data-dir",
        data_dir,
        "--since",
        "2026-13-01",
        "--until",
        &until,
        "--to",
        &to,
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("is not a day (YYYY-MM-DD)"));
    // A manifest that no longer matches its file: lookup names the file.
    let (name, bytes) = &first[0];
    std::fs::write(archive.join(name), &bytes[..bytes.len() - 100]).unwrap();
    let bad = idemgate(&[
        "lookup",
        "--data-dir",
        data_dir,
        "stripe",
        "evt_12_77",
        "--archive",
        &to,
    ]);
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("part-sqlite-0.parquet") && err.contains("a partial copy"),
        "{err}"
    );
}

#[test]
fn an_export_killed_half_way_and_run_again_holds_every_row_once() {
    let dir = tempfile::tempdir().unwrap();
    // 2.2 M rows in a day: three files of up to 1 M.
    let data = sqlite_store(dir.path(), &[5], 1_100_000);
    let archive = dir.path().join("archive");
    let to = format!("file://{}", archive.display());
    let day = day_text(today_ms() - 5 * DAY);
    let args = [
        "history",
        "export",
        "--data-dir",
        data.to_str().unwrap(),
        "--since",
        &day,
        "--until",
        &day,
        "--to",
        &to,
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let first = archive.join(format!("source=stripe/day={day}/part-sqlite-0.parquet"));
    let deadline = Instant::now() + Duration::from_secs(120);
    while !first.exists() {
        assert!(Instant::now() < deadline, "no file written within 120 s");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the export ended before the kill"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        manifests(&archive).is_empty(),
        "killed before its manifest: the day is not exported"
    );
    let out = ok(&idemgate(&args));
    assert!(out.contains("exported 2200000 rows in 1 days"), "{out}");
    assert_eq!(
        manifests(&archive),
        vec![(format!("source=stripe/day={day}"), 2_200_000)]
    );
    assert_eq!(files(&archive).len(), 3);
    assert_eq!(count_sqlite(&data), 2_200_000);
}

/// Free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `/healthz`'s archive component: (status, error).
fn archive_health(port: u16) -> Option<(String, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let body = text.split_once("\r\n\r\n")?.1;
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let c = v["components"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == "archive")?
        .clone();
    Some((
        c["status"].as_str()?.to_owned(),
        c["error"].as_str().unwrap_or_default().to_owned(),
    ))
}

struct Serving(std::process::Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(config: &Path, port: u16) -> Serving {
    Serving(
        Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args([
                "serve",
                "--config",
                config.to_str().unwrap(),
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .env_remove("IDEMGATE_DATA_DIR")
            .env("IDEMGATE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn sqlite_retention_exports_before_it_deletes_and_keeps_everything_while_the_archive_is_away() {
    // Unreachable first: an S3 endpoint nobody listens on.
    let dir = tempfile::tempdir().unwrap();
    let data = sqlite_store(dir.path(), &[9, 8, 2], 500);
    let config = dir.path().join("idemgate.toml");
    let port = free_port();
    let store = format!(
        "[store]\npath = {:?}\nhistory_retention = \"3d\"\nhistory_interval = \"1s\"\n",
        data.display().to_string()
    );
    std::fs::write(
        &config,
        format!(
            "{store}[history.archive]\nurl = \"s3://archive/idemgate\"\nendpoint = \"http://127.0.0.1:{}\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\npath_style = true\n",
            free_port()
        ),
    )
    .unwrap();
    {
        let _gw = serve(&config, port);
        let mut seen = None;
        wait_for(
            "/healthz saying the archive holds the drop back",
            60,
            || {
                seen = archive_health(port);
                seen.as_ref().is_some_and(|(s, _)| s == "holding")
            },
        );
        let (_, why) = seen.unwrap();
        assert!(
            why.contains("kept in the database past its retention"),
            "{why}"
        );
        assert_eq!(
            count_sqlite(&data),
            3_000,
            "nothing dropped while the archive is away"
        );
    }

    // Reachable: the two days past the retention are exported, confirmed, then deleted; the
    // day within it is exported (it is closed) and kept.
    let archive = dir.path().join("archive");
    std::fs::write(
        &config,
        format!(
            "{store}[history.archive]\nurl = \"file://{}\"\n",
            archive.display()
        ),
    )
    .unwrap();
    let _gw = serve(&config, port);
    wait_for("history past the retention deleted", 60, || {
        count_sqlite(&data) == 1_000
    });
    let m = manifests(&archive);
    assert_eq!(m.len(), 3, "{m:?}");
    assert!(m.iter().all(|(_, rows)| *rows == 1_000), "{m:?}");
    wait_for("/healthz saying the archive is ok", 30, || {
        archive_health(port).is_some_and(|(s, _)| s == "ok")
    });
}

/// PostgreSQL: partitions of two past months created and filled by the test; exported, looked
/// up once gone; then the retention job with the archive away (partitions kept, the sweeper
/// running every second) and back (each partition dropped once its days are archived).
#[test]
fn postgres_export_and_retention_drop_partitions_only_once_archived() {
    let url = std::env::var("IDEMGATE_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://root@localhost/test".into());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let connected = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(5),
            tokio_postgres::connect(&url, tokio_postgres::NoTls),
        )
        .await
        .map_err(|_| "timed out".to_owned())
        .and_then(|r| r.map_err(|e| e.to_string()))
    });
    let Some((client, conn)) = idemgate_core::testkit::require_service(
        connected,
        "start PostgreSQL on 127.0.0.1:5432 (trust auth) or set IDEMGATE_TEST_POSTGRES",
    ) else {
        return;
    };
    rt.spawn(conn);
    let schema = format!("archive_test_{}", std::process::id());
    struct Drop_<'a>(
        &'a tokio::runtime::Runtime,
        &'a tokio_postgres::Client,
        String,
    );
    impl Drop for Drop_<'_> {
        fn drop(&mut self) {
            let _ = self.0.block_on(
                self.1
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.2)),
            );
        }
    }
    let _cleanup = Drop_(&rt, &client, schema.clone());
    let pg = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--postgres", &url, "--schema", &schema]);
        idemgate(&all)
    };
    ok(&pg(&["migrate"]));
    // Two past months (3 and 2 months back), 2,000 events each on two days of the month.
    let months: Vec<(String, i64)> = rt.block_on(async {
        let mut out = Vec::new();
        for back in [3, 2] {
            let row = client
                .query_one(
                    &format!(
                        "SELECT 'history_' || to_char(m, '\"y\"YYYY\"m\"MM') AS name, \
                                floor(extract(epoch FROM m) * 1000)::bigint AS start_ms \
                           FROM (SELECT date_trunc('month', now() AT TIME ZONE 'UTC' - interval '{back} months') AT TIME ZONE 'UTC' AS m) x"
                    ),
                    &[],
                )
                .await
                .unwrap();
            let (name, start): (String, i64) = (row.get("name"), row.get("start_ms"));
            client
                .batch_execute(&format!(
                    "SET search_path = {schema};
                     CREATE TABLE {name} PARTITION OF history
                         FOR VALUES FROM ('epoch'::timestamptz + {start} * interval '1 ms')
                                    TO (('epoch'::timestamptz + {start} * interval '1 ms') + interval '1 month');
                     INSERT INTO history (source, event_id, outcome, processed, attempt, received_at)
                     SELECT 'stripe', 'evt_{back}_' || g, o, o = 'completed', 1,
                            'epoch'::timestamptz + {start} * interval '1 ms'
                              + (g % 2 + 1) * interval '1 day' + g * interval '1 second'
                       FROM generate_series(1, 2000) g, (VALUES ('claimed'), ('completed')) v(o);
                     RESET search_path;"
                ))
                .await
                .unwrap();
            out.push((name, start));
        }
        out
    });
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    let to = format!("file://{}", archive.display());
    let since = day_text(months[0].1);
    let until = day_text(today_ms() - DAY);
    let out = ok(&pg(&[
        "history", "export", "--since", &since, "--until", &until, "--to", &to,
    ]));
    assert!(out.contains("exported 8000 rows in 4 days"), "{out}");
    assert!(
        out.contains(&format!("part-{}-0.parquet: 2000 rows", months[0].0)),
        "files are named after the partition: {out}"
    );
    assert_eq!(manifests(&archive).len(), 4);

    // Retention with the archive away: a 30-day retention puts both months past it; the
    // sweeper runs every second and keeps them, and so does the retention job.
    let config = dir.path().join("pg.toml");
    let store = format!(
        "[store]\nkind = \"postgres\"\nurl = {url:?}\nhistory_retention = \"30d\"\nhistory_interval = \"1s\"\nsweep_interval = \"1s\"\n[store.postgres]\nschema = {schema:?}\n"
    );
    std::fs::write(
        &config,
        format!(
            "{store}[history.archive]\nurl = \"s3://archive/x\"\nendpoint = \"http://127.0.0.1:{}\"\naccess_key_id = \"k\"\nsecret_access_key = \"s\"\npath_style = true\n",
            free_port()
        ),
    )
    .unwrap();
    let exists = |name: &str| -> bool {
        rt.block_on(client.query_one(
            "SELECT to_regclass($1) IS NOT NULL AS e",
            &[&format!("{schema}.{name}")],
        ))
        .unwrap()
        .get("e")
    };
    let port = free_port();
    {
        let _gw = serve(&config, port);
        wait_for(
            "/healthz saying the archive holds the drop back",
            60,
            || archive_health(port).is_some_and(|(s, _)| s == "holding"),
        );
        std::thread::sleep(Duration::from_secs(2)); // two more sweeps
        assert!(
            exists(&months[0].0) && exists(&months[1].0),
            "no partition dropped"
        );
    }
    // Back: each month's days are confirmed in the archive (exported above), then dropped.
    std::fs::write(&config, format!("{store}[history.archive]\nurl = {to:?}\n")).unwrap();
    let _gw = serve(&config, port);
    wait_for("both past months dropped", 60, || {
        !exists(&months[0].0) && !exists(&months[1].0)
    });
    assert_eq!(manifests(&archive).iter().map(|m| m.1).sum::<u64>(), 8_000);
    // And lookup finds a dropped event in the archive.
    let v: serde_json::Value = serde_json::from_str(&ok(&pg(&[
        "lookup",
        "stripe",
        "evt_3_17",
        "--archive",
        &to,
        "--json",
    ])))
    .unwrap();
    assert_eq!(v["found_in"], "archive", "{v}");
    assert_eq!(v["history"].as_array().unwrap().len(), 2);
}
