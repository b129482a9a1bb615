//! How [`RedisStore`] meets a Redis that does not answer: each command has
//! [`COMMAND_TIMEOUT`], a failed connection opens the circuit (later calls fail at once), and a
//! background task closes it again once Redis answers a ping.

use std::sync::atomic::{AtomicBool, Ordering};

use super::redis_store::RedisStore;
use super::{COMMAND_TIMEOUT, RECHECK_EVERY, StoreError, StoreResult};

/// The circuit: whether the store answers, and whether a check is under way.
#[derive(Default)]
pub(super) struct Health {
    pub(super) down: AtomicBool,
    pub(super) checking: AtomicBool,
}

pub(super) fn redis_error(e: redis::RedisError) -> StoreError {
    StoreError(format!("Redis: {e}"))
}

/// A failure of the connection (not of a command), which opens the circuit.
fn connection_failed(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
}

/// One command or a pipeline, sent through [`RedisStore::query`].
#[derive(Clone, Copy)]
pub(super) enum Request<'a> {
    Cmd(&'a redis::Cmd),
    Pipe(&'a redis::Pipeline),
}

impl RedisStore {
    /// Sends `request` (again once, after a dropped connection, when it is `idempotent`), within
    /// [`COMMAND_TIMEOUT`]; fails at once while the circuit is open.
    pub(super) async fn query<T: redis::FromRedisValue>(
        &self,
        request: Request<'_>,
        idempotent: bool,
    ) -> StoreResult<T> {
        if self.health.down.load(Ordering::Acquire) {
            return Err(StoreError("unreachable (tried again every second)".into()));
        }
        let mut tries = if idempotent { 2 } else { 1 };
        loop {
            tries -= 1;
            let mut conn = self.conn.clone();
            let sent = async {
                match request {
                    Request::Cmd(cmd) => cmd.query_async::<T>(&mut conn).await,
                    Request::Pipe(pipe) => pipe.query_async::<T>(&mut conn).await,
                }
            };
            match tokio::time::timeout(COMMAND_TIMEOUT, sent).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(e)) if connection_failed(&e) && tries > 0 => {
                    tracing::info!("the cluster store dropped the connection ({e}); sending once more");
                }
                Ok(Err(e)) if connection_failed(&e) => {
                    // A command not sent again that met a connection dropped since its last use
                    // (Redis restarted) fails alone: the client reconnects for the next one.
                    if idempotent || !e.is_connection_dropped() {
                        self.trip(&e.to_string());
                    }
                    return Err(redis_error(e));
                }
                Ok(Err(e)) => return Err(redis_error(e)),
                Err(_) => {
                    let why = format!("no answer within {} ms", COMMAND_TIMEOUT.as_millis());
                    self.trip(&why);
                    return Err(StoreError(why));
                }
            }
        }
    }

    /// Opens the circuit and checks the store again in the background until it answers.
    pub(super) fn trip(&self, why: &str) {
        if !self.health.down.swap(true, Ordering::AcqRel) {
            tracing::warn!("the cluster store is unreachable ({why}): executions run unjournaled until it answers");
            metrics::gauge!("ptc_cluster_store_up").set(0.0);
        }
        if self.health.checking.swap(true, Ordering::AcqRel) {
            return;
        }
        let (health, conn) = (self.health.clone(), self.conn.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RECHECK_EVERY).await;
                let (mut conn, ping) = (conn.clone(), redis::cmd("PING"));
                if let Ok(Ok(_)) = tokio::time::timeout(COMMAND_TIMEOUT, ping.query_async::<String>(&mut conn)).await {
                    break;
                }
            }
            health.down.store(false, Ordering::Release);
            health.checking.store(false, Ordering::Release);
            tracing::info!("the cluster store answers again: executions are journaled again");
            metrics::gauge!("ptc_cluster_store_up").set(1.0);
        });
    }
}
