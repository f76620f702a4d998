//! Where one operation's time went: named phases in the order they ran, each the microseconds
//! since the previous mark (an enrollment's log line carries them, so a slow one says why).
use std::{fmt, time::Instant};

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
    #[must_use]
    pub fn marks(&self) -> &[(&'static str, u64)] {
        &self.marks
    }

    /// The sum of every phase, microseconds.
    #[must_use]
    pub fn total_us(&self) -> u64 {
        self.marks.iter().map(|(_, us)| us).sum()
    }
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
}
