//! The counting downstream: the HTTP server every gateway forwards to.
//!
//! Each gateway process forwards to its own path, `/hook/g{gateway}/r{incarnation}` (a restart is
//! a new incarnation), so every processing is tied to the process that forwarded it. The handler
//! runs in a task of its own: it finishes (and is recorded) even when the gateway that sent it
//! dies mid-request, as a real handler would. An event counts as processed each time the handler
//! answers 2xx.
//!
//! Faults are switched on and off by the scenarios: answering 500, hanging (then answering 503:
//! a handler that never finished is not a processing), and slow answers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use tokio::net::TcpListener;

use crate::clock::Clock;
use crate::rng::Rng;

/// Which gateway process forwarded a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Via {
    pub gateway: u8,
    pub incarnation: u16,
}

impl std::fmt::Display for Via {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "g{}/r{}", self.gateway, self.incarnation)
    }
}

/// One request the downstream handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Processing {
    pub event: u32,
    /// `Idemgate-Attempt`.
    pub attempt: u32,
    pub via: Via,
    /// When the request arrived and when the handler answered (run microseconds).
    pub received: u64,
    pub answered: u64,
    pub status: u16,
    /// A broker's copy (a message in a JetStream stream or a RabbitMQ queue), not a request to
    /// the downstream: where the broker keeps it.
    pub stored: Option<Stored>,
}

/// Where a broker keeps a message it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// Its position in the stream or the queue, from 1: the order the broker took the copies in.
    pub position: u64,
    /// `received` (and `answered`) is when the broker stored it (JetStream says so). RabbitMQ
    /// keeps no such time: its copies have `received` 0 and are ordered by position alone.
    pub timed: bool,
}

impl Processing {
    pub fn processed(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// How the handler behaves right now.
#[derive(Debug, Clone, Copy)]
pub struct Behavior {
    /// Answer this status (after `delay`) instead of processing.
    pub fail: Option<u16>,
    /// Hang this long, then answer 503.
    pub hang: Option<Duration>,
    /// How long a processing takes: uniform in this range.
    pub delay: (Duration, Duration),
}

impl Behavior {
    pub fn normal(delay: (Duration, Duration)) -> Self {
        Self {
            fail: None,
            hang: None,
            delay,
        }
    }
}

#[derive(Debug)]
struct State {
    clock: Clock,
    /// `evt_{tag}_` prefix of this run's event ids.
    prefix: String,
    seed: u64,
    behavior: Mutex<Behavior>,
    requests: AtomicU64,
    /// Requests of this run's events whose handler has not answered yet.
    in_hand: AtomicU64,
    /// When the last of them arrived or was answered (run microseconds).
    last: AtomicU64,
    records: Mutex<Vec<Processing>>,
    /// Requests that did not name one of this run's events or a gateway path.
    foreign: Mutex<Vec<String>>,
}

#[derive(Debug)]
pub struct Downstream {
    pub addr: SocketAddr,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Downstream {
    /// Listens on a free loopback port.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start(
        clock: Clock,
        tag: &str,
        seed: u64,
        behavior: Behavior,
    ) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            clock,
            prefix: format!("chaos:evt_{tag}_"),
            seed,
            behavior: Mutex::new(behavior),
            requests: AtomicU64::new(0),
            in_hand: AtomicU64::new(0),
            last: AtomicU64::new(0),
            records: Mutex::default(),
            foreign: Mutex::default(),
        });
        let shared = state.clone();
        let task = tokio::spawn(crate::http::serve(listener, move |req| {
            handle(shared.clone(), req)
        }));
        Ok(Self { addr, state, task })
    }

    pub fn set(&self, behavior: Behavior) {
        *lock(&self.state.behavior) = behavior;
    }

    /// Every request handled so far.
    pub fn records(&self) -> Vec<Processing> {
        lock(&self.state.records).clone()
    }

    pub fn foreign(&self) -> Vec<String> {
        lock(&self.state.foreign).clone()
    }

    /// No handler at work, and none arrived or answered for `for_at_least`.
    pub fn quiet(&self, for_at_least: Duration) -> bool {
        let s = &self.state;
        s.in_hand.load(Ordering::SeqCst) == 0
            && s.clock.now().saturating_sub(s.last.load(Ordering::SeqCst))
                >= for_at_least.as_micros() as u64
    }
}

impl Drop for Downstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let received = state.clock.now();
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let key = header("idempotency-key").unwrap_or_default();
    let attempt = header("idemgate-attempt").and_then(|a| a.parse().ok());
    let via = parse_via(req.uri().path());
    let event = key
        .strip_prefix(&state.prefix)
        .and_then(|n| n.parse::<u32>().ok());
    let (Some(event), Some(attempt), Some(via)) = (event, attempt, via) else {
        lock(&state.foreign).push(format!(
            "{} idempotency-key={key:?} attempt={attempt:?}",
            req.uri().path()
        ));
        return reply(400);
    };
    // The gateway sends the whole body; read it, as a handler would.
    if req.into_body().collect().await.is_err() {
        return reply(400);
    }
    state.in_hand.fetch_add(1, Ordering::SeqCst);
    state.last.fetch_max(received, Ordering::SeqCst);
    let behavior = *lock(&state.behavior);
    let n = state.requests.fetch_add(1, Ordering::Relaxed);
    let mut rng = Rng::stream(state.seed, 0xD0_57, n);
    let (status, wait) = match behavior {
        Behavior {
            hang: Some(hang), ..
        } => (503, hang),
        Behavior {
            fail: Some(code),
            delay,
            ..
        } => (code, rng.duration(delay.0, delay.1)),
        Behavior { delay, .. } => (200, rng.duration(delay.0, delay.1)),
    };
    // The handler's work runs on its own: a gateway that hangs up (or dies) does not stop it.
    let work = tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        let answered = state.clock.now();
        lock(&state.records).push(Processing {
            event,
            attempt,
            via,
            received,
            answered,
            status,
            stored: None,
        });
        state.last.fetch_max(answered, Ordering::SeqCst);
        state.in_hand.fetch_sub(1, Ordering::SeqCst);
        status
    });
    reply(work.await.unwrap_or(500))
}

fn reply(status: u16) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(b"{}")));
    *response.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    response
}

/// `/hook/g{gateway}/r{incarnation}`.
pub fn parse_via(path: &str) -> Option<Via> {
    let rest = path.strip_prefix("/hook/g")?;
    let (g, r) = rest.split_once("/r")?;
    Some(Via {
        gateway: g.parse().ok()?,
        incarnation: r.parse().ok()?,
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_the_gateway_process() {
        assert_eq!(
            parse_via("/hook/g2/r13"),
            Some(Via {
                gateway: 2,
                incarnation: 13
            })
        );
        assert_eq!(parse_via("/hook/g2"), None);
        assert_eq!(parse_via("/hooks/g2/r1"), None);
        assert_eq!(parse_via("/hook/gx/r1"), None);
    }
}
