//! Where one operation's time went: named phases in the order they ran, each the microseconds
//! since the previous mark (an enrollment's log line carries them, so a slow one says why).
use std::{
    fmt,
    time::{Duration, Instant},
};

/// Marks of one operation.
#[derive(Debug, Clone)]
pub struct Phases {
    last: Instant,
    marks: Vec<(&'static str, u64)>,
}

impl Default for Phases {
    fn default() -> Self {
        Self::start()
    }
}

impl Phases {
    /// Starts timing now.
    #[must_use]
    pub fn start() -> Self {
        Self {
            last: Instant::now(),
            marks: Vec::new(),
        }
    }

    /// Ends phase `name` now: it took the time since the previous mark (or the start).
    pub fn mark(&mut self, name: &'static str) {
        let now = Instant::now();
        let us = u64::try_from(now.duration_since(self.last).as_micros()).unwrap_or(u64::MAX);
        self.marks.push((name, us));
        self.last = now;
    }

    /// Appends `other`'s phases (an inner operation's) after this one's; the next mark starts
    /// where `other`'s last ended. The moment between this one's last mark and `other`'s start
    /// (a call) is in neither, so the total can be a little under the wall time.
    pub fn extend(&mut self, other: Phases) {
        self.marks.extend(other.marks);
        self.last = other.last;
    }

    /// The phases, in order, with their microseconds.
    #[cfg(test)]
    #[must_use]
    fn marks(&self) -> &[(&'static str, u64)] {
        &self.marks
    }

    /// The sum of every phase, microseconds.
    #[must_use]
    pub fn total_us(&self) -> u64 {
        self.marks.iter().map(|(_, us)| us).sum()
    }
}

/// The calling thread's CPU time (user + system) at a start, to tell how much of an
/// operation's wall time the thread ran and how much it waited (for a CPU, a lock, I/O).
#[derive(Debug, Clone, Copy)]
pub struct ThreadCpu(Option<Duration>);

impl ThreadCpu {
    /// The calling thread's CPU time now (unknown if the clock cannot be read).
    #[must_use]
    pub fn now() -> Self {
        Self(thread_cpu())
    }

    /// Microseconds of CPU the calling thread (the one that called [`now`](Self::now)) used
    /// since then; `None` if either reading failed.
    #[must_use]
    pub fn used_us(&self) -> Option<u64> {
        let used = thread_cpu()?.checked_sub(self.0?)?;
        u64::try_from(used.as_micros()).ok()
    }
}

/// The calling thread's CPU time: `CLOCK_THREAD_CPUTIME_ID`, the scheduler's own count in
/// nanoseconds (`getrusage(RUSAGE_THREAD)` is tick-sampled: it reads 0 for most ADDs).
fn thread_cpu() -> Option<Duration> {
    use rustix::time::{clock_gettime_dynamic, ClockId, DynamicClockId};
    // The fallible call: rustix's `clock_gettime` panics where the clock cannot be read.
    let t = clock_gettime_dynamic(DynamicClockId::Known(ClockId::ThreadCPUTime)).ok()?;
    Some(Duration::new(
        u64::try_from(t.tv_sec).ok()?,
        u32::try_from(t.tv_nsec).ok()?,
    ))
}

impl fmt::Display for Phases {
    /// `name=us name=us ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, us)) in self.marks.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{name}={us}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_add_up_and_print_in_order() {
        let mut outer = Phases::start();
        outer.mark("resolve");
        let mut inner = Phases::start();
        std::thread::sleep(std::time::Duration::from_millis(2));
        inner.mark("write");
        outer.extend(inner);
        outer.mark("record");
        let names: Vec<_> = outer.marks().iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["resolve", "write", "record"]);
        assert!(outer.marks()[1].1 >= 2_000, "{outer}");
        assert_eq!(
            outer.total_us(),
            outer.marks().iter().map(|m| m.1).sum::<u64>()
        );
        assert!(outer.to_string().starts_with("resolve="), "{outer}");
    }

    #[test]
    fn thread_cpu_counts_work_and_not_sleep() {
        let cpu = ThreadCpu::now();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let slept = cpu.used_us().expect("the thread's CPU clock");
        assert!(slept < 20_000, "sleeping used {slept} us of CPU");
        let cpu = ThreadCpu::now();
        let t0 = Instant::now();
        let mut x = 0u64;
        while t0.elapsed() < std::time::Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let spun = cpu.used_us().expect("the thread's CPU clock");
        assert!(spun >= 10_000, "30 ms of spinning used {spun} us of CPU");
        // Finer than a scheduler tick: half a millisecond of work is seen as such.
        let cpu = ThreadCpu::now();
        let t0 = Instant::now();
        while t0.elapsed() < std::time::Duration::from_micros(500) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let short = cpu.used_us().expect("the thread's CPU clock");
        assert!(short >= 100, "0.5 ms of spinning used {short} us of CPU");
    }
}
