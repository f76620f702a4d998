//! Waiting for a condition: poll until it holds or a deadline passes, and on timeout say what
//! was awaited (and what was seen last). Used instead of hand-written poll loops and of fixed
//! sleeps that really mean "until X".
use std::{
    fmt,
    sync::OnceLock,
    time::{Duration, Instant},
};

/// First pause between two polls; it doubles up to [`MAX_INTERVAL`].
const FIRST_INTERVAL: Duration = Duration::from_millis(5);
/// Longest pause between two polls.
const MAX_INTERVAL: Duration = Duration::from_millis(100);

/// A condition did not hold in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedOut {
    /// What was awaited.
    pub what: String,
    /// How long it was awaited.
    pub waited: Duration,
    /// What the last poll saw (empty when the condition is a plain boolean).
    pub last: String,
}

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "timed out after {:?} waiting for {}",
            self.waited, self.what
        )?;
        if !self.last.is_empty() {
            write!(f, "; last seen: {}", self.last)?;
        }
        Ok(())
    }
}

impl std::error::Error for TimedOut {}

/// `timeout` times `REDIRECT_TEST_TIMEOUT_SCALE` (a whole number, default 1): slow machines, such as
/// the emulated guests of `cargo xtask test --kernel`, stretch every wait with it.
pub fn scaled(timeout: Duration) -> Duration {
    static SCALE: OnceLock<u32> = OnceLock::new();
    let scale = *SCALE.get_or_init(|| {
        std::env::var("REDIRECT_TEST_TIMEOUT_SCALE")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&s| s >= 1)
            .unwrap_or(1)
    });
    timeout * scale
}

/// Polls `poll` until it returns `Ok` (its value is returned) or `timeout` has passed; the
/// `Err` of the last poll is kept for the timeout's message. Polls at least once.
pub fn eventually<T, E: fmt::Debug>(
    what: impl fmt::Display,
    timeout: Duration,
    mut poll: impl FnMut() -> Result<T, E>,
) -> Result<T, TimedOut> {
    let timeout = scaled(timeout);
    let start = Instant::now();
    let mut interval = FIRST_INTERVAL;
    loop {
        let last = match poll() {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let waited = start.elapsed();
        if waited >= timeout {
            return Err(TimedOut {
                what: what.to_string(),
                waited,
                last: format!("{last:?}"),
            });
        }
        std::thread::sleep(interval.min(timeout - waited));
        interval = (interval * 2).min(MAX_INTERVAL);
    }
}

/// [`eventually`] for a boolean condition.
pub fn until(
    what: impl fmt::Display,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
) -> Result<(), TimedOut> {
    eventually(what, timeout, || if cond() { Ok(()) } else { Err(Quiet) })
}

/// The "not yet" of a boolean condition: prints nothing.
struct Quiet;

impl fmt::Debug for Quiet {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        Ok(())
    }
}

/// Polls a boolean condition until it holds, or panics after the timeout with a message
/// naming what was awaited: `eventually!(Duration::from_secs(2), cond(), "what {}", x)`.
#[macro_export]
macro_rules! eventually {
    ($timeout:expr, $cond:expr, $($what:tt)+) => {
        if let Err(e) = $crate::wait::until(format!($($what)+), $timeout, || $cond) {
            panic!("{e}");
        }
    };
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[test]
    fn returns_the_value_once_the_condition_holds() {
        let n = Cell::new(0);
        let v = eventually("n to reach 3", Duration::from_secs(5), || {
            n.set(n.get() + 1);
            if n.get() >= 3 {
                Ok(n.get())
            } else {
                Err(n.get())
            }
        });
        assert_eq!(v, Ok(3));
    }

    #[test]
    fn a_timeout_names_what_was_awaited_and_the_last_value() {
        let e = eventually("the answer", Duration::from_millis(30), || {
            Err::<(), _>("still 41")
        })
        .expect_err("never holds");
        assert_eq!(e.what, "the answer");
        assert!(e.waited >= Duration::from_millis(30), "{e:?}");
        let text = e.to_string();
        assert!(
            text.starts_with("timed out after ") && text.contains("waiting for the answer"),
            "{text}"
        );
        assert!(text.ends_with("last seen: \"still 41\""), "{text}");
    }

    #[test]
    fn a_boolean_timeout_has_no_last_value() {
        let e = until("never", Duration::ZERO, || false).expect_err("never holds");
        assert!(e.to_string().ends_with("waiting for never"), "{e}");
        assert!(until("at once", Duration::ZERO, || true).is_ok());
    }

    #[test]
    fn the_macro_passes_and_panics_with_the_message() {
        eventually!(Duration::from_secs(1), true, "nothing {}", 1);
        let panic = std::panic::catch_unwind(|| {
            eventually!(Duration::from_millis(10), false, "the {} thing", "awaited");
        })
        .expect_err("must panic");
        let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(text.contains("waiting for the awaited thing"), "{text}");
    }
}
