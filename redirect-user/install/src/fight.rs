//! The rule that keeps the watcher from fighting another writer forever: at most `limit`
//! re-insertions within any `window`; the next one needed within it is not made, an error is
//! logged, and re-insertion slows down for `backoff` (then the count starts afresh): one every
//! `slow` at most, each an alarm. Never none: while our entry is out, new pods start
//! uncaptured until the daemon's reconcile finds them.
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
    /// How long re-insertion stays slow after a fight is detected.
    pub backoff: Duration,
    /// Meanwhile, at most one re-insertion every `slow`.
    pub slow: Duration,
}

impl Default for Rule {
    fn default() -> Self {
        Self {
            limit: 5,
            window: Duration::from_secs(60),
            backoff: Duration::from_secs(300),
            slow: Duration::from_secs(30),
        }
    }
}

/// What the rule says about a re-insertion needed now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Go ahead.
    Allowed,
    /// The limit is reached: a fight; slow until then.
    Fight,
    /// Slow (a fight was detected earlier), and the last re-insertion was less than `slow`
    /// ago: not now; the slow phase lasts this long still.
    Paused(Duration),
    /// Slow, and `slow` has passed since the last re-insertion: go ahead, with an alarm.
    Slow,
}

/// The re-insertions seen.
#[derive(Debug, Clone)]
pub(crate) struct Tracker {
    rule: Rule,
    recent: VecDeque<Instant>,
    paused_until: Option<Instant>,
    /// The last re-insertion (or the fight) while slow.
    slow_last: Option<Instant>,
}

impl Tracker {
    /// A tracker for `rule`.
    pub(crate) fn new(rule: Rule) -> Self {
        Self {
            rule,
            recent: VecDeque::new(),
            paused_until: None,
            slow_last: None,
        }
    }

    /// Its rule.
    pub(crate) fn rule(&self) -> Rule {
        self.rule
    }

    /// Asks for one re-insertion at `now`; an allowed one is counted.
    pub(crate) fn ask(&mut self, now: Instant) -> Verdict {
        if let Some(until) = self.paused_until {
            if now < until {
                if self
                    .slow_last
                    .is_none_or(|t| now.duration_since(t) >= self.rule.slow)
                {
                    self.slow_last = Some(now);
                    return Verdict::Slow;
                }
                return Verdict::Paused(until - now);
            }
            self.paused_until = None;
            self.slow_last = None;
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
            self.slow_last = Some(now);
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
            slow: Duration::from_secs(30),
        };
        let mut t = Tracker::new(rule);
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        for s in 0..3 {
            assert_eq!(t.ask(at(s)), Verdict::Allowed, "#{s}");
        }
        assert_eq!(t.ask(at(4)), Verdict::Fight);
        assert_eq!(t.ask(at(5)), Verdict::Paused(Duration::from_secs(99)));
        // Slow, never stopped: one every 30 s of the backoff.
        assert_eq!(t.ask(at(34)), Verdict::Slow);
        assert_eq!(t.ask(at(40)), Verdict::Paused(Duration::from_secs(64)));
        assert_eq!(t.ask(at(64)), Verdict::Slow);
        assert_eq!(t.ask(at(104)), Verdict::Allowed, "after the backoff");
        // Spread out beyond the window: never a fight.
        let mut slow = Tracker::new(rule);
        for s in 0..20 {
            assert_eq!(slow.ask(at(s * 4)), Verdict::Allowed, "#{s}");
        }
    }
}
