//! Spinning that gives way on a busy machine. Every spin in this module's users (a read waiting
//! for the engine's message, a lane waiting for its next one, a tool thread for its next job)
//! yields the CPU at each turn: on an idle CPU the yield finds no one else and the spinner sees
//! what it waits for within a µs or two of its arrival. On a CPU that other threads want, each
//! yield hands it to one of them, and the spinner waits in the run queue behind them, a time
//! slice each, however soon its message comes; a thread asleep is instead woken ahead of them.
//! Measured in one run, alternating, with a `cargo build` on both CPUs: a session's `pass` in
//! process took 3.99 ms with the Python client's spins, 1.70 ms with none. So a spin ends as
//! soon as its yields have given the CPU away twice (the thread's involuntary context switches,
//! `getrusage(RUSAGE_THREAD)`), and its thread sleeps until woken.

use std::time::{Duration, Instant};

/// Yields between two looks at the thread's context switches (a `getrusage` costs about as
/// much as a yield that finds no one).
const TURNS_PER_LOOK: u32 = 8;

/// Yields that gave the CPU away, within one spin, that end it.
const SWITCHES_MOST: libc::c_long = 2;

/// One spin of at most `budget`.
pub(crate) struct Spin {
    start: Instant,
    budget: Duration,
    turns: u32,
    /// The thread's involuntary context switches before its first yield.
    switched: libc::c_long,
}

impl Spin {
    pub(crate) fn new(budget: Duration) -> Self {
        Spin { start: Instant::now(), budget, turns: 0, switched: 0 }
    }

    /// Yields the CPU once and says whether to look again: false once the budget is spent or
    /// the yields keep giving the CPU to other threads.
    pub(crate) fn turn(&mut self) -> bool {
        if self.budget.is_zero() || self.start.elapsed() >= self.budget {
            return false;
        }
        if self.turns == 0 {
            // Counted at the first turn, not when the spin is made: most waits (a read asked
            // not to spin, a lane woken before its spin starts) never turn, and pay no call.
            self.switched = involuntary_switches();
        }
        std::thread::yield_now();
        self.turns += 1;
        if self.turns.is_multiple_of(TURNS_PER_LOOK) && involuntary_switches() - self.switched >= SWITCHES_MOST {
            return false;
        }
        true
    }
}

/// The calling thread's involuntary context switches so far (a yield that ran another thread
/// counts as one); 0 where the kernel will not say.
#[cfg(target_os = "linux")]
fn involuntary_switches() -> libc::c_long {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `getrusage` writes the struct it is given, which lives for the call.
    let done = unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) };
    if done != 0 {
        return 0;
    }
    // SAFETY: initialised (zeroed, then filled by the call that succeeded).
    unsafe { usage.assume_init() }.ru_nivcsw
}

/// Elsewhere there is no per-thread count: a spin runs its whole budget, as before.
#[cfg(not(target_os = "linux"))]
fn involuntary_switches() -> libc::c_long {
    0
}
