//! The Lua of store mode (`src/lua/`), and running it: as a Redis function library where the
//! server has Functions (Redis 7.0 and later), else as one script per operation.
//!
//! Each operation's file defines the operation as a function of `KEYS` and `ARGV` and hands it
//! to `register` (with `{'no-writes'}` when it writes nothing), after `common.lua`'s helpers.
//! The library is all of them behind a `register` that calls `redis.register_function`: it is
//! loaded once per server (`FUNCTION LOAD`, on every master of a Cluster; replicas and the
//! server's own persistence keep it), and a call (`FCALL`) runs only its operation's function.
//! The fallback script of an operation is `common.lua` and its file behind a `register` that
//! keeps the function, then a line that runs it: every call (`EVALSHA`) defines every helper
//! again, which costs about a microsecond of server time.
//!
//! The library's name and its functions' hold a hash of the Lua, so instances of two idemgate
//! versions sharing one Redis (a rolling upgrade) each call their own. A server that lost the
//! library (restarted without persistence, `FUNCTION FLUSH`, a new Cluster node) answers
//! "Function not found": it is loaded again and the call made again, as a script's `NOSCRIPT`
//! is. A server that refuses `FUNCTION LOAD` (before 7.0, or a service or ACL without it) runs
//! the scripts instead, for good.

use std::sync::atomic::{AtomicBool, Ordering};

use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ToRedisArgs};
use tracing::{info, warn};

use crate::conn::Conn;
use crate::error::RedisError;

/// What every operation's Lua starts with: the hash layout, reading and writing records and rows.
const COMMON: &str = include_str!("../lua/common.lua");

/// Each operation: its name in the library and its file.
const OPERATIONS: [(&str, &str); 6] = [
    ("claim", include_str!("../lua/claim.lua")),
    ("finish", include_str!("../lua/finish.lua")),
    ("lookup", include_str!("../lua/lookup.lua")),
    ("renew", include_str!("../lua/renew.lua")),
    ("abandon", include_str!("../lua/abandon.lua")),
    ("boot", include_str!("../lua/boot.lua")),
];

/// One operation: the function that runs it, and the script that does when Functions cannot.
#[derive(Debug)]
pub(super) struct Operation {
    function: String,
    script: Script,
}

/// Every operation of store mode, and how they run.
#[derive(Debug)]
pub(super) struct Scripts {
    pub(super) claim: Operation,
    pub(super) finish: Operation,
    pub(super) lookup: Operation,
    pub(super) renew: Operation,
    pub(super) abandon: Operation,
    pub(super) boot: Operation,
    /// The library's source, for `FUNCTION LOAD`.
    library: String,
    /// Whether the operations run as functions (decided when loading).
    functions: AtomicBool,
}

/// One call of an operation: its keys and arguments, as `KEYS` and `ARGV`.
#[derive(Debug, Default)]
pub(super) struct Call {
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Call {
    pub(super) fn key(&mut self, key: impl ToRedisArgs) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    pub(super) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }
}

/// "ERR Function not found": the server has no such function (any more).
fn function_not_found(e: &redis::RedisError) -> bool {
    e.code() == Some("ERR")
        && e.detail()
            .is_some_and(|d| d.starts_with("Function not found"))
}

/// An error the server answered (rather than a connection that failed): for `FUNCTION LOAD`, a
/// server without Functions or a user not allowed them.
fn refused(e: &redis::RedisError) -> bool {
    matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
}

impl Scripts {
    pub(super) fn new() -> Self {
        let body: String = OPERATIONS
            .iter()
            .map(|(_, file)| format!("{file}\n"))
            .collect();
        // The library with `@HASH@` where its hash goes; the hash covers all of it.
        let template = format!(
            "#!lua name=idemgate_@HASH@\n\
             local function register(name, f, flags)\n  \
               redis.register_function{{function_name = 'idemgate_@HASH@_' .. name, \
                 callback = f, flags = flags or {{}}}}\n\
             end\n{COMMON}\n{body}"
        );
        let hash = Script::new(&template).get_hash()[..16].to_owned();
        let library = template.replace("@HASH@", &hash);
        let [claim, finish, lookup, renew, abandon, boot] =
            OPERATIONS.map(|(name, file)| Operation {
                function: format!("idemgate_{hash}_{name}"),
                script: Script::new(&format!(
                    "local run\nlocal function register(_, f)\n  run = f\nend\n{COMMON}\n{file}\n\
                 return run(KEYS, ARGV)\n"
                )),
            });
        Self {
            claim,
            finish,
            lookup,
            renew,
            abandon,
            boot,
            library,
            functions: AtomicBool::new(false),
        }
    }

    /// `FUNCTION LOAD`s the library (on every master of a Cluster); a server that refuses it gets
    /// the scripts (`SCRIPT LOAD`) instead, and keeps them.
    ///
    /// # Errors
    /// [`RedisError::Command`] when the connection fails, or a node refuses a script.
    pub(super) async fn load(&self, conn: &Conn) -> Result<(), RedisError> {
        match self.load_library(conn).await {
            Ok(()) => {
                self.functions.store(true, Ordering::Relaxed);
                Ok(())
            }
            Err(e) if refused(&e) => {
                info!(error = %e, "the server does not take function libraries: store mode runs its Lua as scripts (EVALSHA)");
                self.functions.store(false, Ordering::Relaxed);
                self.load_scripts(conn).await
            }
            Err(e) => Err(RedisError::command("FUNCTION LOAD")(e)),
        }
    }

    async fn load_library(&self, conn: &Conn) -> RedisResult<()> {
        let mut conn = conn.clone();
        // REPLACE: the name is the code's hash, so a library of that name is this one.
        redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(&self.library)
            .query_async::<redis::Value>(&mut conn)
            .await
            .map(drop)
    }

    async fn load_scripts(&self, conn: &Conn) -> Result<(), RedisError> {
        let mut conn = conn.clone();
        for op in [
            &self.claim,
            &self.finish,
            &self.lookup,
            &self.renew,
            &self.abandon,
            &self.boot,
        ] {
            op.script
                .load_async(&mut conn)
                .await
                .map_err(RedisError::command("SCRIPT LOAD"))?;
        }
        Ok(())
    }

    /// Whether the operations run as functions (else as scripts).
    pub(super) fn functions(&self) -> bool {
        self.functions.load(Ordering::Relaxed)
    }

    /// Runs `op` with `call`'s keys and arguments: `FCALL`, loading the library again for a
    /// server that lost it, or `EVALSHA` (loading the script for a server that lacks it).
    pub(super) async fn run<T: FromRedisValue>(
        &self,
        conn: &Conn,
        op: &Operation,
        call: &Call,
    ) -> RedisResult<T> {
        let mut conn = conn.clone();
        if self.functions() {
            let mut fcall = Cmd::new();
            fcall
                .arg("FCALL")
                .arg(&op.function)
                .arg(call.keys.len())
                .arg(&call.keys)
                .arg(&call.args);
            match fcall.query_async(&mut conn).await {
                Err(e) if function_not_found(&e) => match self.load_library(&conn).await {
                    Ok(()) => return fcall.query_async(&mut conn).await,
                    Err(e) if refused(&e) => {
                        warn!(error = %e, "the server lost the function library and refuses it again: store mode runs its Lua as scripts (EVALSHA) from now on");
                        self.functions.store(false, Ordering::Relaxed);
                    }
                    Err(e) => return Err(e),
                },
                answer => return answer,
            }
        }
        let mut inv = op.script.prepare_invoke();
        inv.key(&call.keys).arg(&call.args);
        inv.invoke_async(&mut conn).await
    }
}
