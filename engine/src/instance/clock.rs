//! The component's monotonic clock, read by the host too: a hibernated execution keeps the
//! reading it stopped at, and a thaw on another server continues from it (each host's own
//! clock counts from its own start, so the guest's `time.monotonic()` would otherwise jump,
//! backwards as likely as forwards).

use std::time::Instant;

use wasmtime_wasi::HostMonotonicClock;

/// Nanoseconds since the execution's first instance was made: `from` plus this host's time
/// since `base`.
#[derive(Clone, Copy)]
pub(crate) struct Monotonic {
    base: Instant,
    from: u64,
}

impl Monotonic {
    /// A clock that reads `from` now and counts on from there.
    pub(crate) fn continuing(from: u64) -> Self {
        Monotonic { base: Instant::now(), from }
    }

    pub(crate) fn read(&self) -> u64 {
        self.from.saturating_add(self.base.elapsed().as_nanos() as u64)
    }
}

impl HostMonotonicClock for Monotonic {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        self.read()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_continued_clock_starts_where_the_other_stopped() {
        let first = Monotonic::continuing(0);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let stopped = first.read();
        assert!(stopped >= 2_000_000);
        let second = Monotonic::continuing(stopped);
        assert!(second.read() >= stopped);
    }
}
