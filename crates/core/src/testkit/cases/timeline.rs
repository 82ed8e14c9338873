//! The timeline case, for stores that implement [`Timeline`]. It counts under a source of its
//! own, so a store shared by cases running at once never mixes their rows.

use super::*;
use crate::key::SourceName;
use crate::store::Timeline;
use std::num::NonZeroU32;

/// Each history row lands in the bucket of its time by the store's clock, counted under its
/// outcome; other sources' rows are not counted; the window ends with the bucket holding now.
pub async fn timeline_counts_each_outcome_in_its_bucket<H>(h: &H)
where
    H: Harness,
    H::Store: Timeline,
{
    let store = h.store();
    let name = format!("timeline-{:016x}", crate::machine::nonce());
    let source = SourceName::new(name.clone()).expect("valid name");
    let one = NonZeroU32::new(1).expect("not zero");
    let buckets = NonZeroU32::new(600).expect("not zero");
    let a = Key::parse(&name, "evt_a").expect("valid key");
    let b = Key::parse(&name, "evt_b").expect("valid key");
    let token = claimed(&store, req(&a)).await;
    store.complete(&token).await.unwrap();
    claimed(&store, req(&b)).await;
    store.claim(req(&b)).await.unwrap(); // in flight
    let other = key("timeline-other");
    claimed(&store, req(&other)).await;
    // Past a bucket boundary: the repeat counts in a later bucket than the first receipt.
    h.advance(Duration::from_millis(1_100)).await;
    store.claim(req(&a)).await.unwrap(); // duplicate
    store.claim(req(&a)).await.unwrap(); // duplicate
    let t = store.timeline(&source, one, buckets).await.unwrap();
    assert_eq!(t.buckets, 600);
    assert_eq!(t.bucket, Duration::from_secs(1));
    assert!(
        t.bucket_start(599) <= t.now && t.now < t.bucket_start(599).plus(t.bucket),
        "the last bucket holds now: {t:?}"
    );
    assert_eq!(
        t.start.as_millis() % 1_000,
        0,
        "aligned to the width: {t:?}"
    );
    assert_eq!(t.total(HistoryOutcome::Claimed), 2, "{t:?}");
    assert_eq!(t.total(HistoryOutcome::Completed), 1, "{t:?}");
    assert_eq!(t.total(HistoryOutcome::InFlight), 1, "{t:?}");
    assert_eq!(t.total(HistoryOutcome::Duplicate), 2, "{t:?}");
    assert_eq!(
        t.counts.iter().map(|c| c.2).sum::<u64>(),
        6,
        "only this source's rows: {t:?}"
    );
    let bucket_of = |o: HistoryOutcome| {
        t.counts
            .iter()
            .filter(|c| c.1 == o)
            .map(|c| c.0)
            .max()
            .expect("counted")
    };
    let duplicates_at = bucket_of(HistoryOutcome::Duplicate);
    assert!(
        duplicates_at > bucket_of(HistoryOutcome::Claimed),
        "the repeat lands in a later bucket: {t:?}"
    );
    assert_eq!(t.count(duplicates_at, HistoryOutcome::Duplicate), 2);
    // A window of one short bucket holds only what happened in it.
    let last = store.timeline(&source, one, one).await.unwrap();
    assert_eq!(last.buckets, 1);
    assert!(last.total(HistoryOutcome::Claimed) == 0, "{last:?}");
    let unknown = SourceName::new(format!("timeline-none-{:016x}", crate::machine::nonce()))
        .expect("valid name");
    assert!(
        store
            .timeline(&unknown, one, buckets)
            .await
            .unwrap()
            .counts
            .is_empty()
    );
    // The most recent rows, newest first: the two duplicates of evt_a after the boundary, then
    // the earlier rows; at most the limit, and only this source's.
    let recent = store.recent(&source, n(3)).await.unwrap();
    assert_eq!(recent.len(), 3, "{recent:?}");
    assert!(
        recent.windows(2).all(|w| w[0].at >= w[1].at),
        "newest first: {recent:?}"
    );
    assert_eq!(
        recent[..2]
            .iter()
            .map(|r| (r.event_id.as_str(), r.outcome))
            .collect::<Vec<_>>(),
        [
            ("evt_a", HistoryOutcome::Duplicate),
            ("evt_a", HistoryOutcome::Duplicate)
        ]
    );
    let all = store.recent(&source, n(100)).await.unwrap();
    assert_eq!(all.len(), 6, "only this source's rows: {all:?}");
    assert!(store.recent(&unknown, n(10)).await.unwrap().is_empty());
}

fn n(limit: u32) -> NonZeroU32 {
    NonZeroU32::new(limit).expect("not zero")
}
