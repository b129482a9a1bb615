//! `Jobs`: the queue the Python client's tool threads take sync tools' calls from
//! (`_threads.py`). A thread that waits for a job spins first, yielding the CPU at each turn,
//! the GIL released, and only then sleeps: a thread asleep took about 40 µs to wake on this
//! kind of VM (a Python `SimpleQueue` ping-pong between two threads, 80 µs), and a sync tool's
//! round through `asyncio.to_thread` took four such wake-ups (538-589 µs for one more round,
//! against 105-158 µs from these threads: `benches/python/session_rounds.py`, docs/benchmarks.md).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::spin::Spin;

/// Reads (`Call.next`) waiting with the GIL released.
static READING: AtomicUsize = AtomicUsize::new(0);

/// How long a thread that saw a job waits for a read to release the GIL before it takes it.
const GIL_WAIT: Duration = Duration::from_micros(50);

/// A read waiting with the GIL released, counted in [`READING`] while it lives.
pub struct Reading(());

impl Reading {
    pub fn start() -> Self {
        READING.fetch_add(1, Ordering::AcqRel);
        Reading(())
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        READING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Jobs waiting for a thread, and how many threads wait for a job.
#[pyclass(frozen)]
pub struct Jobs {
    queue: Mutex<VecDeque<Py<PyAny>>>,
    ready: Condvar,
    /// Jobs queued and not yet taken: what a spinning thread watches, without the lock.
    queued: AtomicUsize,
    /// Threads inside `take`.
    waiting: AtomicUsize,
    /// Set by `close`: a `take` no longer waits.
    closed: AtomicBool,
}

#[pymethods]
impl Jobs {
    #[new]
    fn new() -> Self {
        Jobs {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            queued: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// Queues `job`: whether a thread waits that will take it (else the caller starts one).
    fn put(&self, job: Py<PyAny>) -> bool {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.push_back(job);
        let queued = self.queued.fetch_add(1, Ordering::AcqRel) + 1;
        // Under the lock: a thread counts itself out of `waiting` under it as it takes a job.
        let enough = self.waiting.load(Ordering::Acquire) >= queued;
        drop(queue);
        self.ready.notify_one();
        enough
    }

    /// The next job: taken at once, or within `spin_micros` (spinning), or within
    /// `wait_seconds` more (asleep); `None` if none came (the thread may end). The GIL is
    /// released while it waits.
    fn take(&self, py: Python<'_>, spin_micros: u64, wait_seconds: f64) -> Option<Py<PyAny>> {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let spin = Duration::from_micros(spin_micros);
        // A day at most: an `Instant` past the clock's range would panic.
        let wait = Duration::try_from_secs_f64(wait_seconds.min(86_400.0)).unwrap_or(Duration::ZERO);
        py.detach(|| {
            let idle = || self.queued.load(Ordering::Acquire) == 0 && !self.closed.load(Ordering::Acquire);
            let mut spinning = Spin::new(spin);
            while idle() && spinning.turn() {}
            if !idle() {
                // A job queued by the event loop's thread, which holds the GIL until its read
                // releases it: taking the GIL before that would put this thread to sleep.
                let mut waiting = Spin::new(GIL_WAIT);
                while READING.load(Ordering::Acquire) == 0 && waiting.turn() {}
            }
            let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            let deadline = Instant::now() + wait;
            let job = loop {
                if let Some(job) = queue.pop_front() {
                    self.queued.fetch_sub(1, Ordering::AcqRel);
                    break Some(job);
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() || self.closed.load(Ordering::Acquire) {
                    break None;
                }
                queue = self.ready.wait_timeout(queue, left).unwrap_or_else(|e| e.into_inner()).0;
            };
            // Counted out under the lock, with the job: this thread may wait for the GIL a
            // while before it runs the job, and a `put` meanwhile must not count on it.
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            job
        })
    }

    /// Ends every wait: from now on a `take` returns a job that is queued, or `None` at once.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let _queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        self.ready.notify_all();
    }

    /// Jobs queued and not yet taken.
    fn __len__(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }
}
