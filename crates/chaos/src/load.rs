//! The senders: M events x K deliveries, signed as Stripe signs, retried as real senders retry.
//!
//! Events start one after another while at most `concurrency` are active; each event's K
//! deliveries start at random offsets within `spread` of its first (or, for a share of events,
//! all at once: a retry storm). A delivery is re-signed for every attempt (a fresh timestamp, as
//! every sender does) and retried on any non-2xx answer, a connection error or a timeout, after
//! an exponential backoff with full jitter capped at `backoff_cap`, until a 2xx or its deadline:
//! the scenario's (set once the faults are over, plus a settle time) or, where the scenario says,
//! the event's own retry window. Attempts go round-robin over the gateways. An inbox source's
//! `queued` (202) is an answer like any 2xx: the sender stops, the gateway delivers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::clock::Clock;
use crate::gateway::{SECRET, SOURCE};
use crate::http::Client;
use crate::rng::Rng;

#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub events: u32,
    pub deliveries: u32,
    /// Events active at once, at most.
    pub concurrency: usize,
    /// An event's deliveries start within this much of its first.
    pub spread: Duration,
    /// The share of events whose deliveries all start at the same instant.
    pub storm: f64,
    pub backoff_cap: Duration,
    /// How long a sender waits for an answer.
    pub request_timeout: Duration,
    /// A sender gives up on an event this long after its first delivery (its retry window).
    pub window: Option<Duration>,
    /// Events are paced so that starting them all takes at least this long.
    pub min_duration: Duration,
}

/// What a sender heard back, by `Idemgate-Outcome` (or what went wrong before an answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Forwarded,
    Duplicate,
    LateDuplicate,
    Conflict,
    Accepted,
    /// Inbox mode: claimed and queued (202); the dispatcher delivers it.
    Queued,
    InFlight,
    ForwardFailed,
    ForwardTimeout,
    ForwardUnreachable,
    StoreUnavailable,
    /// A broker destination did not take the event (503, `Retry-After`): the claim was released.
    DestinationUnavailable,
    /// Any other answer (named by its status in the summary).
    Other,
    ConnectError,
    Timeout,
}

impl Outcome {
    fn from_answer(header: &str) -> Self {
        match header {
            "forwarded" => Self::Forwarded,
            "duplicate" => Self::Duplicate,
            "late_duplicate" => Self::LateDuplicate,
            "conflict" => Self::Conflict,
            "accepted" => Self::Accepted,
            "queued" => Self::Queued,
            "in_flight" => Self::InFlight,
            "forward_failed" => Self::ForwardFailed,
            "forward_timeout" => Self::ForwardTimeout,
            "forward_unreachable" => Self::ForwardUnreachable,
            "store_unavailable" => Self::StoreUnavailable,
            "destination_unavailable" => Self::DestinationUnavailable,
            _ => Self::Other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Forwarded => "forwarded",
            Self::Duplicate => "duplicate",
            Self::LateDuplicate => "late_duplicate",
            Self::Conflict => "conflict",
            Self::Accepted => "accepted",
            Self::Queued => "queued",
            Self::InFlight => "in_flight",
            Self::ForwardFailed => "forward_failed",
            Self::ForwardTimeout => "forward_timeout",
            Self::ForwardUnreachable => "forward_unreachable",
            Self::StoreUnavailable => "store_unavailable",
            Self::DestinationUnavailable => "destination_unavailable",
            Self::Other => "other",
            Self::ConnectError => "connect-error",
            Self::Timeout => "timeout",
        }
    }
}

/// One attempt of one delivery and its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub event: u32,
    /// The gateway (index) it was sent to.
    pub gateway: u8,
    pub outcome: Outcome,
    /// The HTTP status (0 without an answer).
    pub status: u16,
    /// The claim's attempt, from a `forwarded` answer's body (0 otherwise).
    pub attempt: u32,
    /// The answer carried `Retry-After`.
    pub retry_after: bool,
    pub sent: u64,
    pub at: u64,
}

impl Answer {
    /// The sender is done with the delivery: any 2xx, `queued` (202) included, since the
    /// gateway then owns getting it to the downstream.
    pub fn acked(&self) -> bool {
        self.outcome == Outcome::Queued || (200..300).contains(&self.status)
    }
}

/// What the senders did, once they are all done.
#[derive(Debug, Default)]
pub struct Sent {
    pub answers: Vec<Answer>,
    /// The event of every delivery that gave up at its deadline without a 2xx.
    pub unacked: Vec<u32>,
}

#[derive(Debug)]
pub struct Senders {
    spec: LoadSpec,
    clock: Clock,
    client: Client,
    targets: Vec<(u8, SocketAddr)>,
    next_target: AtomicUsize,
    /// This run's event ids are `evt_{tag}_{n}`.
    tag: String,
    seed: u64,
    started: AtomicU32,
    deadline: AtomicU64,
    answers: Mutex<Vec<Answer>>,
    unacked: Mutex<Vec<u32>>,
}

impl Senders {
    pub fn new(
        spec: LoadSpec,
        clock: Clock,
        client: Client,
        targets: Vec<(u8, SocketAddr)>,
        tag: &str,
        seed: u64,
    ) -> Arc<Self> {
        Arc::new(Self {
            spec,
            clock,
            client,
            targets,
            next_target: AtomicUsize::new(0),
            tag: tag.to_owned(),
            seed,
            started: AtomicU32::new(0),
            deadline: AtomicU64::new(u64::MAX),
            answers: Mutex::default(),
            unacked: Mutex::default(),
        })
    }

    /// The share of events started so far.
    pub fn progress(&self) -> f64 {
        f64::from(self.started.load(Ordering::Relaxed)) / f64::from(self.spec.events.max(1))
    }

    /// Waits until `fraction` of the events have started.
    pub async fn reach(&self, fraction: f64) {
        while self.progress() < fraction.min(1.0) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Answers heard so far with `outcome` to attempts sent at or after `since` (run
    /// microseconds), while the load runs.
    pub fn heard(&self, outcome: Outcome, since: u64) -> usize {
        lock(&self.answers)
            .iter()
            .filter(|a| a.outcome == outcome && a.sent >= since)
            .count()
    }

    /// From now on, no delivery is retried after `at` (run microseconds).
    pub fn set_deadline(&self, at: u64) {
        self.deadline.store(at, Ordering::Relaxed);
    }

    /// Every event's deliveries, to the end; returns when the last delivery is done.
    pub async fn run(self: Arc<Self>) {
        let permits = Arc::new(Semaphore::new(self.spec.concurrency.max(1)));
        let mut events = JoinSet::new();
        let t0 = self.clock.now();
        let total = u64::from(self.spec.events.max(1));
        let pace = self.spec.min_duration.as_micros() as u64;
        for i in 0..self.spec.events {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                break;
            };
            let due = t0 + pace * u64::from(i) / total;
            let now = self.clock.now();
            if due > now {
                tokio::time::sleep(Duration::from_micros(due - now)).await;
            }
            self.started.store(i + 1, Ordering::Relaxed);
            let me = self.clone();
            events.spawn(async move {
                me.event(i).await;
                drop(permit);
            });
            while events.try_join_next().is_some() {}
        }
        while events.join_next().await.is_some() {}
    }

    /// What was sent and heard (call once [`Senders::run`] returned).
    pub fn take(&self) -> Sent {
        Sent {
            answers: std::mem::take(&mut *lock(&self.answers)),
            unacked: std::mem::take(&mut *lock(&self.unacked)),
        }
    }

    pub fn body(&self, event: u32) -> Bytes {
        body(&self.tag, event)
    }

    async fn event(self: Arc<Self>, event: u32) {
        let mut rng = Rng::stream(self.seed, 0xE7E7, u64::from(event));
        let storm = rng.chance(self.spec.storm);
        let first = self.clock.now();
        let window_end = self
            .spec
            .window
            .map_or(u64::MAX, |w| first + w.as_micros() as u64);
        let body = self.body(event);
        let mut deliveries = JoinSet::new();
        for d in 0..self.spec.deliveries {
            let offset = if storm || d == 0 {
                Duration::ZERO
            } else {
                rng.duration(Duration::ZERO, self.spec.spread)
            };
            let me = self.clone();
            let body = body.clone();
            deliveries.spawn(async move {
                tokio::time::sleep(offset).await;
                me.deliver(event, d, body, window_end).await;
            });
        }
        while deliveries.join_next().await.is_some() {}
    }

    async fn deliver(&self, event: u32, delivery: u32, body: Bytes, window_end: u64) {
        let mut rng = Rng::stream(
            self.seed,
            0xDE11,
            (u64::from(event) << 16) | u64::from(delivery),
        );
        for n in 0u32.. {
            let (gateway, addr) =
                self.targets[self.next_target.fetch_add(1, Ordering::Relaxed) % self.targets.len()];
            let sent = self.clock.now();
            let (outcome, status, attempt, retry_after) = self.send(addr, &body).await;
            let answer = Answer {
                event,
                gateway,
                outcome,
                status,
                attempt,
                retry_after,
                sent,
                at: self.clock.now(),
            };
            lock(&self.answers).push(answer);
            if answer.acked() {
                return;
            }
            let ceiling = Duration::from_millis(50)
                .saturating_mul(1 << n.min(16))
                .min(self.spec.backoff_cap);
            let backoff = rng.duration(Duration::from_millis(10).min(ceiling), ceiling);
            tokio::time::sleep(backoff).await;
            let end = self.deadline.load(Ordering::Relaxed).min(window_end);
            if self.clock.now() >= end {
                lock(&self.unacked).push(event);
                return;
            }
        }
    }

    /// One signed POST: the outcome, the status, a forwarded answer's attempt, and whether the
    /// answer carried `Retry-After`.
    async fn send(&self, addr: SocketAddr, body: &Bytes) -> (Outcome, u16, u32, bool) {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let signature = idemgate_providers::stripe::sign(SECRET.as_bytes(), ts, body);
        let req = hyper::Request::post(format!("http://{addr}/hooks/{SOURCE}"))
            .header("content-type", "application/json")
            .header("stripe-signature", signature)
            .body(Full::new(body.clone()));
        let Ok(req) = req else {
            return (Outcome::Other, 0, 0, false);
        };
        let exchange = async {
            let resp = self.client.request(req).await?;
            let status = resp.status().as_u16();
            let outcome = resp
                .headers()
                .get("idemgate-outcome")
                .and_then(|v| v.to_str().ok())
                .map_or(Outcome::Other, Outcome::from_answer);
            let retry_after = resp.headers().contains_key("retry-after");
            let bytes = resp.into_body().collect().await?.to_bytes();
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((status, outcome, retry_after, bytes))
        };
        match tokio::time::timeout(self.spec.request_timeout, exchange).await {
            Err(_) => (Outcome::Timeout, 0, 0, false),
            Ok(Err(_)) => (Outcome::ConnectError, 0, 0, false),
            Ok(Ok((status, outcome, retry_after, bytes))) => {
                let attempt = if outcome == Outcome::Forwarded {
                    serde_json::from_slice::<serde_json::Value>(&bytes)
                        .ok()
                        .and_then(|v| v.get("attempt")?.as_u64())
                        .unwrap_or(0) as u32
                } else {
                    0
                };
                (outcome, status, attempt, retry_after)
            }
        }
    }
}

/// The body of event `event` of the run tagged `tag`, as every delivery of it sends it.
pub fn body(tag: &str, event: u32) -> Bytes {
    Bytes::from(format!(
        r#"{{"id":"evt_{tag}_{event}","object":"event","type":"chaos.delivery","data":{{"object":{{"n":{event},"amount":4200}}}}}}"#
    ))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
