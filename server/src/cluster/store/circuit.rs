//! [`Circuit`]: the connection to Redis and how the store meets a Redis that does not answer:
//! each command has [`COMMAND_TIMEOUT`], a failed connection opens the circuit (later calls fail
//! at once), and a background task closes it again once Redis answers a ping. A request that
//! must decide whether to journal ([`Circuit::check_now`]) pings it itself when the last check is older
//! than [`RECHECK_INLINE_AFTER`]: a held-out run started an execution 1 s after Redis came back
//! and it ran unjournaled (the background ping had not come round yet), so its continuation
//! after its node died found nothing to replay.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{COMMAND_TIMEOUT, RECHECK_EVERY, StoreError, StoreResult};

/// How old the last check of an unreachable store must be before a request checks it again
/// on its own path (one at a time; the rest fail at once as before).
const RECHECK_INLINE_AFTER: Duration = Duration::from_millis(100);

/// The circuit: whether the store answers, whether a check is under way (in the background,
/// on a request's path), and when it was last checked.
#[derive(Default)]
struct Health {
    down: AtomicBool,
    checking: AtomicBool,
    inline: AtomicBool,
    checked: Mutex<Option<Instant>>,
}

impl Health {
    /// Marks a check made now; `true` if the last one is older than `age`.
    fn checked_before(&self, age: Duration) -> bool {
        let mut checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        let due = checked.is_none_or(|at| at.elapsed() >= age);
        if due {
            *checked = Some(Instant::now());
        }
        due
    }

    /// The store answered a ping: the circuit closes.
    fn up(&self) {
        if self.down.swap(false, Ordering::AcqRel) {
            tracing::info!("the cluster store answers again: executions are journaled again");
            metrics::gauge!("ptc_cluster_store_up").set(1.0);
        }
    }
}

pub(super) fn redis_error(e: redis::RedisError) -> StoreError {
    StoreError(format!("Redis: {e}"))
}

/// A failure of the connection (not of a command), which opens the circuit.
fn connection_failed(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
}

/// One command or a pipeline, sent through [`Circuit::query`].
#[derive(Clone, Copy)]
pub(super) enum Request<'a> {
    Cmd(&'a redis::Cmd),
    Pipe(&'a redis::Pipeline),
}

/// The store's connection (which reconnects by itself after a drop) and its circuit.
pub(super) struct Circuit {
    conn: redis::aio::ConnectionManager,
    health: Arc<Health>,
}

impl Circuit {
    /// A closed circuit over `conn`.
    pub(super) fn new(conn: redis::aio::ConnectionManager) -> Self {
        Circuit { conn, health: Arc::default() }
    }

    /// Whether the circuit is closed: the store answered its last command or check.
    pub(super) fn available(&self) -> bool {
        !self.health.down.load(Ordering::Acquire)
    }

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

    /// Whether the store answers now: at once while the circuit is closed; with it open, by a
    /// ping within [`COMMAND_TIMEOUT`] on this request's path when the last check is older
    /// than [`RECHECK_INLINE_AFTER`] and no other request is checking (closing the circuit if
    /// it answers), else `false` at once.
    pub(super) async fn check_now(&self) -> bool {
        let health = &self.health;
        if !health.down.load(Ordering::Acquire) {
            return true;
        }
        if health.inline.swap(true, Ordering::AcqRel) {
            return false;
        }
        let answered = health.checked_before(RECHECK_INLINE_AFTER) && ping(&self.conn).await;
        health.inline.store(false, Ordering::Release);
        if answered {
            health.up();
        }
        answered
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
            // Until it answers here, or a request's own check found it back.
            while health.down.load(Ordering::Acquire) {
                tokio::time::sleep(RECHECK_EVERY).await;
                if health.checked_before(Duration::ZERO) && ping(&conn).await {
                    health.up();
                }
            }
            health.checking.store(false, Ordering::Release);
        });
    }
}

/// Whether Redis answers a ping within [`COMMAND_TIMEOUT`].
async fn ping(conn: &redis::aio::ConnectionManager) -> bool {
    let (mut conn, ping) = (conn.clone(), redis::cmd("PING"));
    matches!(tokio::time::timeout(COMMAND_TIMEOUT, ping.query_async::<String>(&mut conn)).await, Ok(Ok(_)))
}
