//! Lanes: the threads in-process executions run on. Each lane is one thread driving a
//! current-thread tokio runtime, so an execution's tasks (its stream's pump, its driver, the
//! guest itself) hand work to each other on one thread, never waking another.
//!
//! What a round costs is then the two crossings between the Python thread and the lane. A
//! thread that has gone to sleep takes 100–200 µs to wake on this kind of VM (a tool round
//! through the in-process engine took 490 µs that way, against 33 µs of the guest's own), so
//! neither side sleeps at once: a lane that runs out of work spins for [`SPIN`] before it
//! parks, and a [`Wake`] (or a task woken from another thread) ends the spin at once; the
//! Python thread in turn waits for an answer by spinning, then asleep until the lane's message
//! wakes it (`Call.next`), the GIL released.
//!
//! Both spin by yielding the CPU at each turn (`sched_yield`), not by busy-waiting: the thread
//! they wait for may be queued on the same CPU, and a busy spin kept it there until the spin
//! ended. A session's `pass` after 5 ms of quiet took 732 µs in process with busy spins and
//! 428 µs with yielding ones (the client's whole call, medians of 150: `benches/python/quiet.py`,
//! 2026-11-29). A spin also ends once its yields keep giving the CPU away, on a machine busy
//! with other work (`spin.rs`).
//!
//! A new stateless execution goes to the lane with the fewest live calls; a session's
//! executions go to the lane its session was opened on, where its state lives.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;

use crate::spin::Spin;

/// How long a lane that ran out of work keeps its thread awake for the next message: a
/// little longer than a Python tool round's own work (about 30 µs of pydantic and protobuf),
/// so that a program's next round finds it awake; the CPU it costs is bounded by it.
pub const SPIN: Duration = Duration::from_micros(200);

/// Sessions whose lane is remembered: past this, the map starts again (a session then only
/// loses the lane it was on: its executions still reach it, through another thread).
const SESSIONS_REMEMBERED: usize = 10_000;

/// One thread running a current-thread runtime.
pub struct Lane {
    handle: Handle,
    wake: Wake,
    /// Calls placed on this lane and not yet dropped.
    live: Arc<AtomicUsize>,
}

/// Set by a writer after it has handed a lane a message: ends the lane's spin.
#[derive(Clone)]
pub struct Wake(Arc<AtomicBool>);

impl Wake {
    /// Tells the lane a message has been written to it.
    pub fn wake(&self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A call's hold on its lane: counts it live until dropped.
pub struct Placed {
    pub handle: Handle,
    pub wake: Wake,
    index: usize,
    live: Arc<AtomicUsize>,
}

impl Drop for Placed {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// All lanes of the process, and which session lives on which.
pub struct Lanes {
    lanes: Vec<Lane>,
    sessions: Mutex<HashMap<String, usize>>,
    /// Where the search for the least busy lane starts next.
    turn: AtomicUsize,
}

impl Lanes {
    /// `count` lanes (at least one), their threads started.
    pub fn start(count: usize, spin: Duration) -> std::io::Result<Self> {
        let lanes = (0..count.max(1)).map(|i| Lane::start(i, spin)).collect::<std::io::Result<Vec<_>>>()?;
        Ok(Lanes { lanes, sessions: Mutex::new(HashMap::new()), turn: AtomicUsize::new(0) })
    }

    /// A lane for a call: the one `session` lives on, else the least busy.
    pub fn place(&self, session: Option<&str>) -> Placed {
        let known = session.and_then(|s| self.sessions.lock().unwrap().get(s).copied());
        let index = known.unwrap_or_else(|| {
            // Ties go round: the lane that ran the last execution may still be making its
            // next warm instance.
            let n = self.lanes.len();
            let first = self.turn.fetch_add(1, Ordering::Relaxed);
            let least = (0..n)
                .map(|k| (first + k) % n)
                .min_by_key(|&i| self.lanes[i].live.load(Ordering::Relaxed))
                .unwrap_or(0);
            if let Some(session) = session {
                // A `Start` naming a session that is not live here opens it, on this lane.
                self.remember(session, least);
            }
            least
        });
        let lane = &self.lanes[index];
        lane.live.fetch_add(1, Ordering::Relaxed);
        Placed { handle: lane.handle.clone(), wake: lane.wake.clone(), index, live: lane.live.clone() }
    }

    /// Remembers that `session` was opened on `placed`'s lane.
    pub fn opened(&self, session: &str, placed: &Placed) {
        self.remember(session, placed.index);
    }

    /// Forgets a closed session.
    pub fn closed(&self, session: &str) {
        self.sessions.lock().unwrap().remove(session);
    }

    fn remember(&self, session: &str, index: usize) {
        let mut sessions = self.sessions.lock().unwrap();
        if sessions.len() >= SESSIONS_REMEMBERED {
            sessions.clear();
        }
        sessions.insert(session.to_string(), index);
    }

    /// Runs `future` on a lane (the one `session` lives on, else the least busy) and waits
    /// for it from any runtime.
    pub async fn run<F>(&self, session: Option<&str>, future: F) -> (F::Output, Placed)
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let placed = self.place(session);
        let out = placed.handle.spawn(future).await.expect("a lane's task panicked");
        (out, placed)
    }
}

impl Lane {
    fn start(index: usize, spin: Duration) -> std::io::Result<Self> {
        let woken = Arc::new(AtomicBool::new(false));
        let spun = woken.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .on_thread_park(move || {
                // Tasks woken from other threads (a blocking job's end, another runtime's
                // channel) wait in the runtime's global queue: they end the spin too.
                let queued = Handle::current().metrics();
                let mut spinning = Spin::new(spin);
                // A wake left from a message that came while the lane was busy says nothing
                // about the next: taken as one, it ended the spin at once, and the next
                // message had to wake the thread from its sleep (a futex wake every round,
                // 18 µs of the writer's `send` alone).
                spun.store(false, Ordering::Relaxed);
                while !spun.swap(false, Ordering::Acquire) && queued.global_queue_depth() == 0 && spinning.turn() {}
            })
            .build()?;
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name(format!("ptc-lane-{index}"))
            .spawn(move || runtime.block_on(std::future::pending::<()>()))?;
        Ok(Lane { handle, wake: Wake(woken), live: Arc::new(AtomicUsize::new(0)) })
    }
}
