//! One keyed request, from its claim to its answer: what the tower layer and the gateway's
//! sidecar both run once a request is [`Keyed`](super::Keyed) and its body read.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use idemgate_core::store::ClaimStore;
use idemgate_core::{ClaimRequest, Key, RecordResult, RecordState};
use tokio::time::Instant;

use super::rules::{KeyRules, Refusal, replay};
use crate::dedup::{Dedup, Once, ProcessError};

/// How a keyed request ended, for metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The first request of its key: run, its response kept.
    Processed,
    /// Run, and its response gave the key back (a 5xx, a 429).
    Released,
    /// A retry answered with the kept response.
    Replayed,
    /// Refused by idemgate ([`Refusal`]): in flight, reused, not kept, store unavailable.
    Refused(&'static str),
}

impl Ending {
    /// Its stable name (`processed`, `released`, `replayed`, or the refusal's kind).
    pub fn name(self) -> &'static str {
        match self {
            Self::Processed => "processed",
            Self::Released => "released",
            Self::Replayed => "replayed",
            Self::Refused(kind) => kind,
        }
    }
}

/// How the call of a keyed request failed.
enum Failure<E> {
    /// It answered a status that gives the key back: passed on, the key released.
    Released(Response<Bytes>),
    /// It failed outright (transport, the service's own error): the key released.
    Call(E),
}

/// Answers the keyed request `claim`: claims it, runs `call` if the claim is won (once, however
/// many copies race), keeps its response with the completion or gives the key back as
/// [`KeyRules::release_on`] says, and answers a copy with the kept response, 409, 422 or 410.
/// With [`KeyRules::wait_for_first`], a copy whose first request is in flight waits for its
/// answer.
///
/// # Errors
/// `call`'s own error: the key was released.
pub async fn answer<F, Fut, E>(
    dedup: &Dedup,
    rules: &KeyRules,
    claim: ClaimRequest,
    call: F,
) -> Result<(Response<Full<Bytes>>, Ending), E>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Response<Bytes>, E>>,
{
    let deadline = rules.wait.map(|w| Instant::now() + w);
    let mut call = Some(call);
    loop {
        let release = rules.release;
        let pending = &mut call;
        let once = dedup
            .process_once_storing(claim.clone(), |_claimed| async move {
                let call = pending.take().expect("a won claim runs the call once");
                match call().await {
                    Ok(response) if release.releases(response.status()) => {
                        Err(Failure::Released(response))
                    }
                    Ok(response) => {
                        let kept =
                            rules.keep(response.status(), response.headers(), response.body());
                        Ok((response, kept))
                    }
                    Err(e) => Err(Failure::Call(e)),
                }
            })
            .await;
        let refusal = match once {
            Ok(Once::Processed(response)) => {
                return Ok((response.map(Full::new), Ending::Processed));
            }
            Err(ProcessError::Failed(Failure::Released(response))) => {
                return Ok((response.map(Full::new), Ending::Released));
            }
            Err(ProcessError::Failed(Failure::Call(e))) => return Err(e),
            Err(ProcessError::Store(e)) => {
                tracing::error!(source = %rules.source, error = %crate::ErrorChain(&e), "a keyed request could not be claimed");
                Refusal::StoreUnavailable
            }
            Ok(Once::Duplicate { first_seen, result }) => match (first_seen, result) {
                (_, Some(RecordResult::Stored(kept))) => {
                    return Ok((replay(&kept), Ending::Replayed));
                }
                // This process completes it this moment: its response is being kept.
                (None, _) => Refusal::InFlight {
                    retry_after: Duration::from_secs(1),
                },
                (first_seen, Some(RecordResult::Withheld { size })) => Refusal::NotKept {
                    first_seen,
                    size: Some(size),
                },
                // Completed without a response (or its record expired as it was read).
                (first_seen, _) => Refusal::NotKept {
                    first_seen,
                    size: None,
                },
            },
            Ok(Once::LateDuplicate { first_seen }) => Refusal::NotKept {
                first_seen: Some(first_seen),
                size: None,
            },
            Ok(Once::InFlight { retry_after }) => Refusal::InFlight { retry_after },
            Ok(Once::Conflict { first_seen }) => Refusal::Reused { first_seen },
        };
        if let (Refusal::InFlight { retry_after }, Some(deadline)) = (&refusal, deadline)
            && first_ends(dedup, &claim.key, *retry_after, deadline).await
        {
            // Claim again: a kept response is replayed, a released key is run by this copy, a
            // lapsed lease is taken over, as the store decides.
            continue;
        }
        let kind = refusal.kind();
        return Ok((refusal.into_response(), Ending::Refused(kind)));
    }
}

/// How often a copy waiting for its first request reads the key's record.
const WAIT_POLL: Duration = Duration::from_millis(50);

/// Waits, up to `deadline`, for the first request of `key` to end: `true` when it has (its
/// record is done, released or gone) or when its lease, `lease_left` from now by the store's
/// clock, has run out (a claim then lets the store decide); `false` at the deadline.
///
/// The wait only reads the record: no claim, so no write and no history row, until the first
/// request ended.
async fn first_ends(dedup: &Dedup, key: &Key, lease_left: Duration, deadline: Instant) -> bool {
    let lapses = Instant::now() + lease_left;
    loop {
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        tokio::time::sleep(WAIT_POLL.min(deadline - now)).await;
        if Instant::now() >= lapses {
            return true;
        }
        let read = tokio::time::timeout(dedup.store_wait(), dedup.store().record(key)).await;
        match read {
            Ok(Ok(record)) => match record {
                Some(record) if record.state == RecordState::Processing => {}
                _ => return true,
            },
            // The claim says what is wrong with the store.
            Ok(Err(_)) | Err(_) => return true,
        }
    }
}
