//! An archive on a local directory: a day written, confirmed, read back whole and looked up;
//! written again with fewer files; and every way its files can disagree with their manifest,
//! each named.

use idemgate_archive::{Archive, ArchiveConfig, ArchivedRow, Day};
use idemgate_core::{SourceName, Timestamp};

fn row(event: &str, at: Timestamp, outcome: &str) -> ArchivedRow {
    ArchivedRow {
        source: "stripe".into(),
        event_id: event.into(),
        outcome: outcome.into(),
        processed: outcome == "completed",
        attempt: Some(1),
        received_at: at,
        gap_ms: (outcome == "duplicate").then_some(1500),
        fingerprint: Some(vec![9; 32]),
        note: None,
    }
}

/// A day of `n` events, each claimed then completed.
fn day_rows(day: Day, n: usize) -> Vec<ArchivedRow> {
    (0..n)
        .flat_map(|i| {
            let at = Timestamp::from_millis(day.start().as_millis() + i as i64 * 10);
            let id = format!("evt_{i:06}");
            [row(&id, at, "claimed"), row(&id, at, "completed")]
        })
        .collect()
}

fn open(dir: &std::path::Path) -> Archive {
    Archive::open(&ArchiveConfig::at(format!("file://{}", dir.display()))).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_day_goes_in_and_comes_back() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = open(tmp.path());
    archive.probe().await.unwrap();
    let source = SourceName::new("stripe").unwrap();
    let day = Day::parse("2026-11-30").unwrap();
    let rows = day_rows(day, 50_000);
    let mut w = archive
        .day_writer(&source, day, "history_2026_11")
        .file_rows(40_000);
    w.push(rows.clone()).await.unwrap();
    let m = w.finish().await.unwrap();
    assert_eq!(m.rows, 100_000);
    assert_eq!(m.files.len(), 3, "40k rows a file");
    assert_eq!(m.files[0].name, "part-history_2026_11-0.parquet");
    let dir = tmp.path().join("source=stripe/day=2026-11-30");
    assert!(dir.join("_manifest.json").exists());
    assert!(dir.join("part-history_2026_11-2.parquet").exists());

    archive.confirm(&source, day, 100_000).await.unwrap();
    let e = archive
        .confirm(&source, day, 100_001)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("counts 100000 rows, the database 100001"), "{e}");
    let other = Day::parse("2026-11-29").unwrap();
    let e = archive
        .confirm(&source, other, 1)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing: the day was not exported"), "{e}");

    let mut back = archive.read_day(&source, day).await.unwrap();
    let mut want = rows.clone();
    let key = |r: &ArchivedRow| (r.event_id.clone(), r.received_at, r.outcome.clone());
    back.sort_by_key(key);
    want.sort_by_key(key);
    assert_eq!(back, want);

    assert_eq!(archive.days(&source).await.unwrap(), vec![day]);
    assert_eq!(archive.sources().await.unwrap(), vec![source.clone()]);
    let found = archive.lookup(&source, "evt_012345", None).await.unwrap();
    assert_eq!(found.rows.len(), 2);
    assert_eq!(found.rows[0].outcome, "claimed");
    assert_eq!(found.rows[1].outcome, "completed");
    assert_eq!((found.days, found.files), (1, 3));
    assert!(
        found.groups <= 2,
        "one row group (or a false positive more): {found:?}"
    );
    let none = archive.lookup(&source, "evt_nope", None).await.unwrap();
    assert!(none.rows.is_empty());
    let elsewhere = archive
        .lookup(&source, "evt_012345", Some((other, other)))
        .await
        .unwrap();
    assert_eq!(elsewhere.days, 0);

    // Written again with bigger files: the same rows, fewer files, the extra one removed.
    let mut w = archive.day_writer(&source, day, "history_2026_11");
    w.push(rows).await.unwrap();
    let m = w.finish().await.unwrap();
    assert_eq!(m.files.len(), 1);
    assert!(!dir.join("part-history_2026_11-1.parquet").exists());
    assert!(!dir.join("part-history_2026_11-2.parquet").exists());
    assert_eq!(archive.read_day(&source, day).await.unwrap().len(), 100_000);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_unlike_its_manifest_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = open(tmp.path());
    let source = SourceName::new("stripe").unwrap();
    let day = Day::parse("2026-11-30").unwrap();
    let mut w = archive.day_writer(&source, day, "sqlite");
    w.push(day_rows(day, 1_000)).await.unwrap();
    w.finish().await.unwrap();
    let file = tmp
        .path()
        .join("source=stripe/day=2026-11-30/part-sqlite-0.parquet");
    let good = std::fs::read(&file).unwrap();

    // A partial copy.
    std::fs::write(&file, &good[..good.len() / 2]).unwrap();
    let e = archive
        .read_day(&source, day)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("part-sqlite-0.parquet") && e.contains("a partial copy"),
        "{e}"
    );
    let e = archive
        .lookup(&source, "evt_000001", None)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("part-sqlite-0.parquet") && e.contains("a partial copy"),
        "{e}"
    );
    let e = archive
        .confirm(&source, day, 2_000)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("part-sqlite-0.parquet"), "{e}");

    // The same size, one byte changed.
    let mut changed = good.clone();
    changed[100] ^= 0xff;
    std::fs::write(&file, &changed).unwrap();
    let e = archive
        .read_day(&source, day)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("SHA-256 differs"), "{e}");

    // A manifest edited to say another day.
    std::fs::write(&file, &good).unwrap();
    let manifest = tmp
        .path()
        .join("source=stripe/day=2026-11-30/_manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, text.replace("2026-11-30", "2026-11-29")).unwrap();
    let e = archive
        .read_day(&source, day)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("_manifest.json") && e.contains("lies in the directory"),
        "{e}"
    );
    std::fs::write(&manifest, "{not json").unwrap();
    let e = archive
        .lookup(&source, "evt_000001", None)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("_manifest.json") && e.contains("not a manifest"),
        "{e}"
    );
}

#[tokio::test]
async fn bad_urls_are_refused_before_anything_is_written() {
    let e = Archive::open(&ArchiveConfig::at("ftp://host/x"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("history.archive.url:") && e.contains("unknown scheme"),
        "{e}"
    );
    let e = Archive::open(&ArchiveConfig::at("file:///proc/idemgate-archive"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot create /proc/idemgate-archive"), "{e}");
}
