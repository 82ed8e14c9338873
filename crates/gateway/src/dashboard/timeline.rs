//! Deliveries over time: each source's last hour by minute and last day by half hour, counted by
//! the store, the buckets already complete kept between views.

use std::num::NonZeroU32;

use idemgate_core::{SourceName, StoreError, TimelineCounts};

use crate::AppState;
use crate::error::ErrorChain;

/// One source's deliveries over time: the last hour by minute, the last day by half hour.
#[derive(Debug)]
pub(super) struct Deliveries {
    pub(super) hour: Option<TimelineCounts>,
    pub(super) day: Option<TimelineCounts>,
}

/// The bucket widths and counts: the last hour by minute, the last day by half hour.
const MINUTE: NonZeroU32 = NonZeroU32::new(60).expect("non-zero");
const HALF_HOUR: NonZeroU32 = NonZeroU32::new(1_800).expect("non-zero");

/// `source`'s deliveries over time for a page. Each view starts a count behind the page
/// ([`start`]; one at a time per source): the first is the whole hour and day, on a long history
/// a while; later ones count only the last buckets again. The page waits for it until
/// `deadline`, then goes with the counts kept from the last count that ended, or without any
/// (`Ok(None)`: the page says the counts are coming).
///
/// # Errors
/// Why the store could not count, in words (the last count failed).
pub(super) async fn timeline(
    state: &AppState,
    source: &SourceName,
    deadline: tokio::time::Instant,
) -> Result<Option<Deliveries>, String> {
    let dash = &state.dashboard;
    start(state, source);
    loop {
        let ended = dash.counted.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        if !lock(&dash.counting).contains(source) {
            if let Some(why) = lock(&dash.count_errors).get(source).cloned() {
                return Err(why);
            }
            if lock(&dash.no_timeline).contains(source) {
                return Ok(Some(Deliveries {
                    hour: None,
                    day: None,
                }));
            }
            if has_counts(state, source) {
                return Ok(Some(kept(state, source)));
            }
        }
        if tokio::time::timeout_at(deadline, ended).await.is_err() {
            return Ok(has_counts(state, source).then(|| kept(state, source)));
        }
    }
}

/// Starts a count of `source`'s deliveries over time behind the pages (the first, or a recount
/// of the last buckets once counts are kept), unless one is running or the store keeps none.
pub(super) fn start(state: &AppState, source: &SourceName) {
    let dash = &state.dashboard;
    if lock(&dash.no_timeline).contains(source) || !lock(&dash.counting).insert(source.clone()) {
        return;
    }
    let task = (state.clone(), source.clone());
    state.tasks.spawn_once("dashboard timeline", async move {
        let (state, source) = &task;
        let dash = &state.dashboard;
        let _counting = Counting { dash, source };
        match read(state, source).await {
            Ok(d) => {
                if d.hour.is_none() && d.day.is_none() {
                    lock(&dash.no_timeline).insert(source.clone());
                }
                lock(&dash.count_errors).remove(source);
            }
            Err(why) => {
                lock(&dash.count_errors).insert(source.clone(), why);
            }
        }
    });
}

/// Held while a source's deliveries are counted: its drop takes the source out of `counting`
/// and wakes the pages waiting, however the count ends (a panic included).
struct Counting<'a> {
    dash: &'a super::kept::Dashboard,
    source: &'a SourceName,
}

impl Drop for Counting<'_> {
    fn drop(&mut self) {
        lock(&self.dash.counting).remove(self.source);
        self.dash.counted.notify_waiters();
    }
}

/// `source`'s counts as last kept.
fn kept(state: &AppState, source: &SourceName) -> Deliveries {
    let kept = lock(&state.dashboard.timelines);
    let of = |w: NonZeroU32| kept.get(&(source.clone(), w.get())).cloned();
    Deliveries {
        hour: of(MINUTE),
        day: of(HALF_HOUR),
    }
}

/// Whether both of `source`'s counts are kept.
fn has_counts(state: &AppState, source: &SourceName) -> bool {
    let kept = lock(&state.dashboard.timelines);
    [MINUTE, HALF_HOUR]
        .iter()
        .all(|w| kept.contains_key(&(source.clone(), w.get())))
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Both of `source`'s counts, from the store.
async fn read(state: &AppState, source: &SourceName) -> Result<Deliveries, String> {
    const HOUR_BUCKETS: NonZeroU32 = NonZeroU32::new(60).expect("non-zero");
    const DAY_BUCKETS: NonZeroU32 = NonZeroU32::new(48).expect("non-zero");
    let read = async {
        let (hour, day) = tokio::try_join!(
            counted(state, source, MINUTE, HOUR_BUCKETS),
            counted(state, source, HALF_HOUR, DAY_BUCKETS)
        )?;
        Ok::<_, StoreError>(Deliveries { hour, day })
    };
    read.await.map_err(|e| {
        tracing::warn!(source = %source, error = %ErrorChain(&e), "dashboard: cannot count history");
        ErrorChain(&e).to_string()
    })
}

/// `source`'s last `buckets` buckets of `bucket_secs`, counted again only from the bucket before
/// the one the last count ended in: buckets before it are complete (a row committed a moment
/// after its time is in the bucket recounted), so an open dashboard reads each row about three
/// times, not once per view. A count older than that, or a store clock that went back, is
/// counted whole.
async fn counted(
    state: &AppState,
    source: &SourceName,
    bucket_secs: NonZeroU32,
    buckets: NonZeroU32,
) -> Result<Option<TimelineCounts>, StoreError> {
    const RECOUNT: NonZeroU32 = NonZeroU32::new(3).expect("non-zero");
    let key = (source.clone(), bucket_secs.get());
    let cached = state
        .dashboard
        .timelines
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned();
    let fresh = match cached {
        Some(old) if buckets > RECOUNT => {
            let Some(recent) = state.store.timeline(source, bucket_secs, RECOUNT).await? else {
                return Ok(None);
            };
            // The recount must reach back over the cached count's last bucket, and the one
            // before it.
            let reaches = recent.start <= old.bucket_start(old.buckets.saturating_sub(2));
            if reaches && recent.now >= old.now {
                merge(&old, &recent, bucket_secs, buckets)
            } else {
                match state.store.timeline(source, bucket_secs, buckets).await? {
                    Some(t) => t,
                    None => return Ok(None),
                }
            }
        }
        _ => match state.store.timeline(source, bucket_secs, buckets).await? {
            Some(t) => t,
            None => return Ok(None),
        },
    };
    state
        .dashboard
        .timelines
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, fresh.clone());
    Ok(Some(fresh))
}

/// The window ending at `recent.now`: `recent`'s buckets where it has them, `old`'s before.
fn merge(
    old: &TimelineCounts,
    recent: &TimelineCounts,
    bucket_secs: NonZeroU32,
    buckets: NonZeroU32,
) -> TimelineCounts {
    let (start, _) = TimelineCounts::window(recent.now, bucket_secs, buckets);
    let width = i64::from(bucket_secs.get()) * 1_000;
    let index = |from: idemgate_core::Timestamp, i: u32| {
        (from.as_millis() + i64::from(i) * width - start.as_millis()).div_euclid(width)
    };
    let rows = old
        .counts
        .iter()
        .filter(|(i, _, _)| old.bucket_start(*i) < recent.start)
        .map(|(i, o, n)| (index(old.start, *i), *o, *n))
        .chain(
            recent
                .counts
                .iter()
                .map(|(i, o, n)| (index(recent.start, *i), *o, *n)),
        )
        .collect::<Vec<_>>();
    TimelineCounts::from_rows(recent.now, bucket_secs, buckets, rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use idemgate_core::{HistoryOutcome, Timestamp};

    fn n(v: u32) -> NonZeroU32 {
        NonZeroU32::new(v).unwrap()
    }

    /// Counts as the store would give them for rows at `at` (ms), seen at `now`.
    fn counts(now: i64, bucket: u32, buckets: u32, at: &[i64]) -> TimelineCounts {
        let (start, _) = TimelineCounts::window(Timestamp::from_millis(now), n(bucket), n(buckets));
        let width = i64::from(bucket) * 1_000;
        let mut rows: Vec<(i64, HistoryOutcome, u64)> = Vec::new();
        for t in at.iter().filter(|t| **t >= start.as_millis() && **t <= now) {
            let i = (t - start.as_millis()) / width;
            match rows.iter_mut().find(|r| r.0 == i) {
                Some(r) => r.2 += 1,
                None => rows.push((i, HistoryOutcome::Claimed, 1)),
            }
        }
        rows.sort_by_key(|r| r.0);
        TimelineCounts::from_rows(Timestamp::from_millis(now), n(bucket), n(buckets), rows)
    }

    #[test]
    fn a_recount_of_the_last_buckets_merges_into_the_earlier_count() {
        let t0 = 1_700_000_000_000i64;
        let mut rows: Vec<i64> = (0..200).map(|i| t0 - i * 17_000).collect();
        let old = counts(t0, 60, 60, &rows);
        // 70 s later, with new rows (one timestamped before t0 but committed after it).
        rows.extend([t0 + 1_000, t0 + 65_000, t0 - 500]);
        let now = t0 + 70_000;
        let recent = counts(now, 60, 3, &rows);
        let mut merged = merge(&old, &recent, n(60), n(60));
        let mut truth = counts(now, 60, 60, &rows);
        merged.counts.sort_by_key(|c| c.0);
        truth.counts.sort_by_key(|c| c.0);
        assert_eq!(merged, truth);
    }
}
