//! One connection type over standalone Redis and Redis Cluster.

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{Cmd, RedisFuture, RedisResult, Value};

use crate::config::Target;

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

/// How long to wait, and how hard to retry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub connect: Duration,
    pub response: Duration,
    /// Reconnection attempts per outage before a command fails (standalone).
    pub retries: usize,
}

impl Conn {
    /// Connects now.
    pub(crate) async fn connect(target: &Target, t: Timeouts) -> RedisResult<Self> {
        match target {
            Target::Standalone(url) => {
                let client = redis::Client::open(url.as_str())?;
                ConnectionManager::new_with_config(client, manager_config(t))
                    .await
                    .map(Self::Single)
            }
            Target::Cluster(nodes) => cluster_client(nodes, t)?
                .get_async_connection_with_config(cluster_config(t))
                .await
                .map(Self::Cluster),
        }
    }

    /// A connection that connects on first use (and keeps trying on later uses): it never fails
    /// for an unreachable server. Must be called within a Tokio runtime.
    pub(crate) fn lazy(target: &Target, t: Timeouts) -> RedisResult<Self> {
        match target {
            Target::Standalone(url) => {
                let client = redis::Client::open(url.as_str())?;
                ConnectionManager::new_lazy_with_config(client, manager_config(t)).map(Self::Single)
            }
            Target::Cluster(nodes) => Ok(Self::Cluster(
                cluster_client(nodes, t)?
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

fn manager_config(t: Timeouts) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(t.connect))
        .set_response_timeout(Some(t.response))
        .set_number_of_retries(t.retries)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(500))
}

fn cluster_client(nodes: &[String], t: Timeouts) -> RedisResult<ClusterClient> {
    ClusterClient::builder(nodes.iter().map(String::as_str))
        .connection_timeout(t.connect)
        .response_timeout(t.response)
        .retries(u32::try_from(t.retries).unwrap_or(u32::MAX))
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
