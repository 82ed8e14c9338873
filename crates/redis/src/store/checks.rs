//! The start-up checks of store mode, on every master: no evicting `maxmemory-policy` (unless
//! allowed), and a warning for a server that keeps nothing on disk.

use std::collections::HashMap;

use tracing::warn;

use crate::conn::Conn;
use crate::error::RedisError;

/// Refuses an evicting `maxmemory-policy` on any master, unless `allow_eviction` (then a warning);
/// warns of a server that keeps nothing on disk. When `CONFIG` is disabled the checks warn and
/// pass.
///
/// # Errors
/// [`RedisError::EvictingPolicy`], or [`RedisError::Command`] when the masters cannot be asked.
pub(super) async fn check_server(conn: &Conn, allow_eviction: bool) -> Result<(), RedisError> {
    for (node, policy) in config_get(conn, "maxmemory-policy").await? {
        match policy {
            None => warn!(
                %node,
                "cannot read maxmemory-policy (CONFIG disabled or renamed?): idemgate cannot check that Redis never evicts its records"
            ),
            Some(p) if p == "noeviction" => {}
            Some(policy) if allow_eviction => warn!(
                %node,
                %policy,
                "Redis runs an evicting maxmemory-policy and allow_eviction is set: an evicted record lets its event's next delivery through as new"
            ),
            Some(policy) => return Err(RedisError::EvictingPolicy { node, policy }),
        }
    }
    let appendonly: HashMap<_, _> = config_get(conn, "appendonly").await?.into_iter().collect();
    for (node, save) in config_get(conn, "save").await? {
        let aof = appendonly.get(&node).cloned().flatten();
        if aof.as_deref() == Some("no") && save.as_deref() == Some("") {
            warn!(
                %node,
                "Redis keeps nothing on disk (appendonly no, save \"\"): a restart forgets every claim, and deliveries in flight may then be processed twice"
            );
        }
    }
    Ok(())
}

/// `CONFIG GET name` on every master: `None` where it cannot be read.
async fn config_get(conn: &Conn, name: &str) -> Result<Vec<(String, Option<String>)>, RedisError> {
    let mut conn = conn.clone();
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg(name);
    let answers = conn
        .on_masters(cmd)
        .await
        .map_err(RedisError::command("CONFIG GET"))?;
    Ok(answers
        .into_iter()
        .map(|(node, answer)| {
            let value = answer
                .ok()
                .and_then(|v| redis::from_redis_value::<HashMap<String, String>>(v).ok())
                .and_then(|mut m| m.remove(name));
            (node, value)
        })
        .collect())
}
