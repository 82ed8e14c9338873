//! The Lua scripts of store mode (`src/lua/`), and loading them on every node.

use redis::Script;

use crate::conn::Conn;
use crate::error::RedisError;

/// What every script starts with: the hash layout, reading and writing records and rows.
const COMMON: &str = include_str!("../lua/common.lua");

/// An operation's script: `common.lua`, then `body`, the operation's file. The file defines the
/// operation as a function of `KEYS` and `ARGV` and hands it to `register`; the script keeps it
/// and runs it.
fn operation_script(body: &str) -> Script {
    Script::new(&format!(
        "local run\nlocal function register(_, f)\n  run = f\nend\n{COMMON}\n{body}\nreturn run(KEYS, ARGV)\n"
    ))
}

/// Every script store mode runs, one per operation.
#[derive(Debug)]
pub(super) struct Scripts {
    pub(super) claim: Script,
    pub(super) finish: Script,
    pub(super) lookup: Script,
    pub(super) renew: Script,
    pub(super) abandon: Script,
    pub(super) boot: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        Self {
            claim: operation_script(include_str!("../lua/claim.lua")),
            finish: operation_script(include_str!("../lua/finish.lua")),
            lookup: operation_script(include_str!("../lua/lookup.lua")),
            renew: operation_script(include_str!("../lua/renew.lua")),
            abandon: operation_script(include_str!("../lua/abandon.lua")),
            boot: operation_script(include_str!("../lua/boot.lua")),
        }
    }

    /// `SCRIPT LOAD`s every script (on every node of a Cluster), so the first `EVALSHA` of each
    /// finds it.
    ///
    /// # Errors
    /// [`RedisError::Command`] when a node refuses one.
    pub(super) async fn load(&self, conn: &Conn) -> Result<(), RedisError> {
        let mut conn = conn.clone();
        for script in [
            &self.claim,
            &self.finish,
            &self.lookup,
            &self.renew,
            &self.abandon,
            &self.boot,
        ] {
            script
                .load_async(&mut conn)
                .await
                .map_err(RedisError::command("SCRIPT LOAD"))?;
        }
        Ok(())
    }
}
