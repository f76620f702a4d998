//! The rule that keeps the watcher from fighting another writer forever: at most `limit`
//! re-insertions within any `window`; the next one needed within it is not made, an error is
//! logged, and re-insertion pauses for `backoff` (then the count starts afresh).
use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

/// The rule's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Re-insertions allowed within `window`.
    pub limit: u32,
    /// The window.
    pub window: Duration,
    /// The pause after a fight is detected.
    pub backoff: Duration,
}

impl Default for Rule {
    fn default() -> Self {
        Self {
            limit: 5,
            window: Duration::from_secs(60),
            backoff: Duration::from_secs(300),
        }
    }
}

/// What the rule says about a re-insertion needed now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Go ahead.
    Allowed,
    /// The limit is reached: a fight; paused until then.
    Fight,
    /// Paused (a fight was detected earlier) for this long still.
    Paused(Duration),
}

/// The re-insertions seen.
#[derive(Debug, Clone)]
pub struct Tracker {
    rule: Rule,
    recent: VecDeque<Instant>,
    paused_until: Option<Instant>,
}

impl Tracker {
    /// A tracker for `rule`.
    pub fn new(rule: Rule) -> Self {
        Self {
            rule,
            recent: VecDeque::new(),
            paused_until: None,
        }
    }

    /// Its rule.
    pub fn rule(&self) -> Rule {
        self.rule
    }

    /// Asks for one re-insertion at `now`; an allowed one is counted.
    pub fn ask(&mut self, now: Instant) -> Verdict {
        if let Some(until) = self.paused_until {
            if now < until {
                return Verdict::Paused(until - now);
            }
            self.paused_until = None;
            self.recent.clear();
        }
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= self.rule.window)
        {
            self.recent.pop_front();
        }
        if self.recent.len() >= self.rule.limit as usize {
            self.paused_until = Some(now + self.rule.backoff);
            return Verdict::Fight;
        }
        self.recent.push_back(now);
        Verdict::Allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_then_fight_then_pause_then_afresh() {
        let rule = Rule {
            limit: 3,
            window: Duration::from_secs(10),
            backoff: Duration::from_secs(100),
        };
        let mut t = Tracker::new(rule);
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        for s in 0..3 {
            assert_eq!(t.ask(at(s)), Verdict::Allowed, "#{s}");
        }
        assert_eq!(t.ask(at(4)), Verdict::Fight);
        assert_eq!(t.ask(at(5)), Verdict::Paused(Duration::from_secs(99)));
        assert_eq!(t.ask(at(104)), Verdict::Allowed, "after the backoff");
        // Spread out beyond the window: never a fight.
        let mut slow = Tracker::new(rule);
        for s in 0..20 {
            assert_eq!(slow.ask(at(s * 4)), Verdict::Allowed, "#{s}");
        }
    }
}
