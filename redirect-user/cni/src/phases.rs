//! Where one run of the plugin spends its time, for its `ADD done` log line: microseconds per
//! phase since `main` began (`read`, `conf`, `log`, `netns`, `call`), the whole of `main`, and
//! the process's CPU time since its exec (the loader's and the runtime's start-up included), so
//! a slow ADD says whether it was the plugin, the daemon's answer, or the exec before `main`.
use std::{fmt::Write as _, time::Instant};

use rustix::time::{clock_gettime_dynamic, ClockId, DynamicClockId};

/// Marks taken in order; each phase is the time since the previous mark.
#[derive(Debug)]
pub(crate) struct Phases {
    start: Instant,
    last: Instant,
    marks: Vec<(&'static str, u128)>,
}

impl Phases {
    /// Starts the clock (first thing in `main`).
    pub(crate) fn start() -> Self {
        let now = Instant::now();
        Self {
            start: now,
            last: now,
            marks: Vec::with_capacity(8),
        }
    }

    /// Ends phase `name` now.
    pub(crate) fn mark(&mut self, name: &'static str) {
        let now = Instant::now();
        self.marks
            .push((name, now.duration_since(self.last).as_micros()));
        self.last = now;
    }

    /// `name=us` pairs, space-separated, in order.
    pub(crate) fn field(&self) -> String {
        let mut out = String::new();
        for (i, (name, us)) in self.marks.iter().enumerate() {
            let _ = write!(out, "{}{name}={us}", if i == 0 { "" } else { " " });
        }
        out
    }

    /// Microseconds since `main` began.
    pub(crate) fn main_us(&self) -> u128 {
        self.start.elapsed().as_micros()
    }
}

/// The process's CPU time so far (user and system, every thread, from its exec), in
/// microseconds; `None` when the clock cannot be read.
pub(crate) fn cpu_us() -> Option<u64> {
    // The fallible call: rustix's `clock_gettime` panics where the clock cannot be read.
    let t = clock_gettime_dynamic(DynamicClockId::Known(ClockId::ProcessCPUTime)).ok()?;
    let us = t.tv_sec * 1_000_000 + t.tv_nsec / 1_000;
    u64::try_from(us).ok()
}

#[cfg(test)]
mod tests {
    use super::Phases;

    #[test]
    fn phases_are_named_in_order_and_add_up_to_at_most_main() {
        let mut p = Phases::start();
        p.mark("read");
        // Busy for 2 ms (CPU time too), not asleep.
        let busy = std::time::Instant::now();
        while busy.elapsed() < std::time::Duration::from_millis(2) {}
        p.mark("call");
        let field = p.field();
        let parts: Vec<(&str, u128)> = field
            .split(' ')
            .map(|kv| {
                let (k, v) = kv.split_once('=').expect("name=us");
                (k, v.parse().expect("microseconds"))
            })
            .collect();
        assert_eq!(
            parts.iter().map(|p| p.0).collect::<Vec<_>>(),
            ["read", "call"]
        );
        assert!(parts[1].1 >= 2_000, "{field}");
        assert!(parts.iter().map(|p| p.1).sum::<u128>() <= p.main_us());
        assert!(super::cpu_us().is_some_and(|us| us >= 2_000));
    }
}
