//! A `/healthz` prober: asks one gateway every few hundred milliseconds while a fault lasts and
//! keeps each answer (its status and what the store component said), so a scenario can say
//! what the health check told an operator while the store's writes failed.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::Clock;
use crate::http::{self, Client};

/// One `/healthz` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// When it was asked and when it was answered (or given up on), in run microseconds.
    pub at: u64,
    pub answered: u64,
    /// 0: no answer within a second and a half.
    pub status: u16,
    /// The store component: its status, and its error if it has one.
    pub store: String,
}

#[derive(Debug)]
pub struct Prober {
    stop: watch::Sender<bool>,
    seen: Arc<Mutex<Vec<Probe>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Prober {
    /// Asks `addr`'s `/healthz` every `every`, from now until [`Prober::stop`].
    pub fn start(client: Client, clock: Clock, addr: SocketAddr, every: Duration) -> Self {
        let (stop, mut stopped) = watch::channel(false);
        let seen: Arc<Mutex<Vec<Probe>>> = Arc::default();
        let keep = seen.clone();
        let url = format!("http://{addr}/healthz");
        let task = tokio::spawn(async move {
            loop {
                let at = clock.now();
                let (status, store) =
                    match http::get(&client, &url, Duration::from_millis(1_500)).await {
                        Ok((status, body)) => (status, store_component(&body)),
                        Err(e) => (0, e),
                    };
                let answered = clock.now();
                lock(&keep).push(Probe {
                    at,
                    answered,
                    status,
                    store,
                });
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    _ = stopped.changed() => return,
                }
            }
        });
        Self { stop, seen, task }
    }

    /// Stops asking; every answer so far, in order.
    pub async fn stop(self) -> Vec<Probe> {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        std::mem::take(&mut *lock(&self.seen))
    }
}

/// The store component of a `/healthz` body: `ok`, or `down: {error}`.
pub fn store_component(body: &str) -> String {
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(body) else {
        return format!("(not JSON: {})", body.chars().take(80).collect::<String>());
    };
    let store = doc
        .get("components")
        .and_then(|c| c.as_array())
        .and_then(|c| {
            c.iter()
                .find(|c| c.get("name").and_then(|n| n.as_str()) == Some("store"))
        });
    let Some(store) = store else {
        return "(no store component)".to_owned();
    };
    let status = store.get("status").and_then(|s| s.as_str()).unwrap_or("?");
    match store.get("error").and_then(|e| e.as_str()) {
        Some(e) => format!("{status}: {e}"),
        None => status.to_owned(),
    }
}

/// The answers in `probes` asked and answered within `[from, to]`, by status, in order of
/// first appearance:
/// `503 x12 (down: it answers reads, but its writes fail ...), 200 x3 (ok)`.
pub fn summary(probes: &[Probe], from: u64, to: u64) -> String {
    let mut groups: Vec<(u16, usize, &str)> = Vec::new();
    for p in probes.iter().filter(|p| p.at >= from && p.answered <= to) {
        match groups.iter_mut().find(|(s, _, _)| *s == p.status) {
            Some((_, n, _)) => *n += 1,
            None => groups.push((p.status, 1, &p.store)),
        }
    }
    if groups.is_empty() {
        return "not asked".to_owned();
    }
    groups
        .iter()
        .map(|(status, n, store)| {
            let status = match status {
                0 => "no answer".to_owned(),
                s => s.to_string(),
            };
            let store: String = store.chars().take(200).collect();
            format!("{status} x{n} (store {store})")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_component_is_read() {
        let down = r#"{"type":"x","components":[{"name":"store","engine":"sqlite","status":"down","ms":1.0,"error":"it answers reads, but its writes fail (3 since 0s ago): disk full"}]}"#;
        assert_eq!(
            store_component(down),
            "down: it answers reads, but its writes fail (3 since 0s ago): disk full"
        );
        let ok = r#"{"status":"ok","store":"sqlite","store_ms":0.3,"components":[{"name":"store","engine":"sqlite","status":"ok","ms":0.3,"error":null}]}"#;
        assert_eq!(store_component(ok), "ok");
        assert_eq!(store_component("{}"), "(no store component)");
    }

    #[test]
    fn answers_are_grouped_by_status_within_the_span() {
        let p = |at, status: u16, store: &str| Probe {
            at,
            answered: at,
            status,
            store: store.to_owned(),
        };
        let probes = [
            p(1, 200, "ok"),
            p(5, 503, "down: full"),
            p(6, 503, "down: full"),
            p(7, 200, "ok"),
            p(20, 200, "ok"),
        ];
        assert_eq!(
            summary(&probes, 2, 10),
            "503 x2 (store down: full), 200 x1 (store ok)"
        );
        assert_eq!(summary(&probes, 30, 40), "not asked");
    }
}
