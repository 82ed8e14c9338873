//! One connection type over standalone Redis and Redis Cluster.

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};
use redis::{
    Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, TlsCertificates, Value,
};

use crate::config::Target;
use crate::tls::tls_reason;

/// A multiplexed connection (cheap to clone) that reconnects by itself.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Single(_) => "Conn::Single",
            Self::Cluster(_) => "Conn::Cluster",
        })
    }
}

/// One master, to send a command to (`SCAN` walks one node's keys).
#[derive(Debug, Clone)]
pub(crate) enum Node {
    /// The one server (standalone).
    Server,
    Cluster {
        host: String,
        port: u16,
    },
}

/// How long to wait, and how hard to retry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub connect: Duration,
    pub response: Duration,
    /// Reconnection attempts per outage before a command fails (standalone).
    pub retries: usize,
}

impl Conn {
    /// Connects now, with `certs` (the CA file and client certificate) for a `rediss://`
    /// target that has them.
    pub(crate) async fn connect(
        target: &Target,
        certs: Option<&TlsCertificates>,
        t: Timeouts,
    ) -> RedisResult<Self> {
        match target {
            Target::Standalone(url) => {
                ConnectionManager::new_with_config(client(url, certs)?, manager_config(t))
                    .await
                    .map(Self::Single)
            }
            Target::Cluster(nodes) => cluster_client(nodes, certs, t)?
                .get_async_connection_with_config(cluster_config(t))
                .await
                .map(Self::Cluster),
        }
    }

    /// A connection that connects on first use (and keeps trying on later uses): it never fails
    /// for an unreachable server. Must be called within a Tokio runtime.
    pub(crate) fn lazy(
        target: &Target,
        certs: Option<&TlsCertificates>,
        t: Timeouts,
    ) -> RedisResult<Self> {
        match target {
            Target::Standalone(url) => {
                ConnectionManager::new_lazy_with_config(client(url, certs)?, manager_config(t))
                    .map(Self::Single)
            }
            Target::Cluster(nodes) => Ok(Self::Cluster(
                cluster_client(nodes, certs, t)?
                    .get_pending_async_connection_with_config(cluster_config(t)),
            )),
        }
    }

    /// Runs `cmd` on every master (the one server, standalone) and returns each node's answer.
    pub(crate) async fn on_masters(
        &mut self,
        cmd: Cmd,
    ) -> RedisResult<Vec<(String, RedisResult<Value>)>> {
        match self {
            Self::Single(c) => {
                let answer = cmd.query_async::<Value>(c).await;
                Ok(vec![("the server".to_owned(), answer)])
            }
            Self::Cluster(c) => {
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let answer = c.route_command(cmd, routing).await?;
                let Value::Map(nodes) = answer else {
                    return Ok(vec![("the cluster".to_owned(), Ok(answer))]);
                };
                Ok(nodes
                    .into_iter()
                    .map(|(node, value)| {
                        let node = match node {
                            Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
                            other => format!("{other:?}"),
                        };
                        let value = match value {
                            Value::ServerError(e) => Err(e.into()),
                            v => Ok(v),
                        };
                        (node, value)
                    })
                    .collect())
            }
        }
    }
}

impl Conn {
    /// The masters, each to route commands to.
    pub(crate) async fn masters(&mut self) -> RedisResult<Vec<Node>> {
        if let Self::Single(_) = self {
            return Ok(vec![Node::Server]);
        }
        self.on_masters(redis::cmd("PING"))
            .await?
            .into_iter()
            .map(|(name, _)| {
                let (host, port) = name
                    .rsplit_once(':')
                    .and_then(|(h, p)| Some((h.to_owned(), p.parse().ok()?)))
                    .ok_or_else(|| {
                        RedisError::from((
                            ErrorKind::Client,
                            "cannot read a cluster node's address",
                            name.clone(),
                        ))
                    })?;
                Ok(Node::Cluster { host, port })
            })
            .collect()
    }

    /// Runs `cmd` on `node`.
    pub(crate) async fn on_node(&mut self, node: &Node, cmd: Cmd) -> RedisResult<Value> {
        match (self, node) {
            (Self::Cluster(c), Node::Cluster { host, port }) => {
                let routing = SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                };
                c.route_command(cmd, RoutingInfo::SingleNode(routing)).await
            }
            (c, _) => cmd.query_async(c).await,
        }
    }

    /// Runs `pipe` on `node` (its keys must all live there).
    pub(crate) async fn pipeline_on_node(
        &mut self,
        node: &Node,
        pipe: Pipeline,
    ) -> RedisResult<Vec<Value>> {
        match (self, node) {
            (Self::Cluster(c), Node::Cluster { host, port }) => {
                let routing = SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                };
                let count = pipe.len();
                c.route_pipeline(pipe, 0, count, routing).await
            }
            (c, _) => pipe.query_async(c).await,
        }
    }

    /// One `SCAN` step on `node`: the next cursor (0 when done) and the keys matching `pattern`.
    pub(crate) async fn scan_page(
        &mut self,
        node: &Node,
        cursor: u64,
        pattern: &str,
    ) -> RedisResult<(u64, Vec<String>)> {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000);
        Ok(redis::from_redis_value(self.on_node(node, cmd).await?)?)
    }

    /// `node`'s clock, in ms since the Unix epoch.
    pub(crate) async fn server_ms(&mut self, node: &Node) -> RedisResult<i64> {
        let (secs, micros): (i64, i64) =
            redis::from_redis_value(self.on_node(node, redis::cmd("TIME")).await?)?;
        Ok(secs * 1_000 + micros / 1_000)
    }
}

/// `text` as a `SCAN MATCH` pattern that matches only itself.
pub(crate) fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn manager_config(t: Timeouts) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(t.connect))
        .set_response_timeout(Some(t.response))
        .set_number_of_retries(t.retries)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(500))
}

pub(crate) fn client(url: &str, certs: Option<&TlsCertificates>) -> RedisResult<redis::Client> {
    match certs {
        Some(certs) => redis::Client::build_with_tls(url, certs.clone()),
        None => redis::Client::open(url),
    }
}

fn cluster_client(
    nodes: &[String],
    certs: Option<&TlsCertificates>,
    t: Timeouts,
) -> RedisResult<ClusterClient> {
    let builder = ClusterClient::builder(nodes.iter().map(String::as_str))
        .connection_timeout(t.connect)
        .response_timeout(t.response)
        .retries(u32::try_from(t.retries).unwrap_or(u32::MAX));
    // `certs` turns TLS on for every node; the configuration checked that the nodes are
    // `rediss://` when there are certificates.
    match certs {
        Some(certs) => builder.certs(certs.clone()),
        None => builder,
    }
    .build()
}

fn cluster_config(t: Timeouts) -> ClusterConfig {
    ClusterConfig::new()
        .set_connection_timeout(t.connect)
        .set_response_timeout(t.response)
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}
/// Why the TLS handshake failed, in words, when `err` is a TLS failure connecting to `target`.
///
/// A Cluster client keeps only the text of its nodes' errors, so for a Cluster the first seed
/// node is connected to alone, once, to hear the reason (only after a failure, and only for a
/// `rediss://` Cluster).
pub(crate) async fn tls_failure(
    target: &Target,
    certs: Option<&TlsCertificates>,
    connect_timeout: Duration,
    err: &redis::RedisError,
) -> Option<String> {
    if let Some(reason) = tls_reason(err) {
        return Some(reason);
    }
    let Target::Cluster(nodes) = target else {
        return None;
    };
    let first = nodes.first()?;
    let client = client(first, certs).ok()?;
    if !matches!(
        client.get_connection_info().addr(),
        redis::ConnectionAddr::TcpTls { .. }
    ) {
        return None;
    }
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(Some(connect_timeout));
    match client
        .get_multiplexed_async_connection_with_config(&config)
        .await
    {
        Ok(_) => None,
        Err(e) => tls_reason(&e),
    }
}
