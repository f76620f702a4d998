//! Reads the guest console: per test binary its libtest summary, exit code, time and failed tests.
use std::time::Duration;

use super::qemu::MARK;

/// What one test binary did inside the guest.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Binary {
    pub name: String,
    pub passed: u32,
    pub failed: u32,
    pub ignored: u32,
    /// Names of the tests libtest reported as FAILED.
    pub failures: Vec<String>,
    /// Exit code; `None` when the binary never finished (guest hung, crashed or was killed).
    pub rc: Option<i32>,
    pub secs: f64,
}

/// What the whole guest run did.
#[derive(Debug, Default)]
pub(super) struct Report {
    pub binaries: Vec<Binary>,
    /// Lines /init printed about problems (a module that did not load, a mount that failed).
    pub init_errors: Vec<String>,
    /// /init reached its last line.
    pub done: bool,
}

fn number_before(text: &str, word: &str) -> u32 {
    let words: Vec<&str> = text
        .split([' ', ';', '.'])
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .find(|w| w[1] == word)
        .and_then(|w| w[0].parse().ok())
        .unwrap_or(0)
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key))
}

/// Parses the console written by the /init of `initramfs`.
pub(super) fn parse(console: &str) -> Report {
    let mut report = Report::default();
    let mut current: Option<(Binary, f64)> = None;
    for raw in console.lines() {
        let line = raw.trim_end_matches('\r');
        if let Some(rest) = line.strip_prefix(MARK) {
            let rest = rest.trim();
            let mut words = rest.split_whitespace();
            match words.next() {
                Some("begin") => {
                    let name = words.next().unwrap_or("?").to_owned();
                    let t = field(rest, "t=")
                        .and_then(|t| t.parse().ok())
                        .unwrap_or(0.0);
                    current = Some((
                        Binary {
                            name,
                            ..Binary::default()
                        },
                        t,
                    ));
                }
                Some("end") => {
                    if let Some((mut b, t0)) = current.take() {
                        b.rc = field(rest, "rc=").and_then(|v| v.parse().ok());
                        let t = field(rest, "t=").and_then(|t| t.parse().ok()).unwrap_or(t0);
                        b.secs = t - t0;
                        report.binaries.push(b);
                    }
                }
                Some("error") => report.init_errors.push(rest.to_owned()),
                Some("done") => report.done = true,
                _ => {}
            }
            continue;
        }
        let Some((b, _)) = current.as_mut() else {
            continue;
        };
        if let Some(rest) = line.strip_prefix("test result: ") {
            b.passed += number_before(rest, "passed");
            b.failed += number_before(rest, "failed");
            b.ignored += number_before(rest, "ignored");
        } else if let Some(name) = line
            .strip_prefix("test ")
            .and_then(|l| l.strip_suffix(" ... FAILED"))
        {
            b.failures.push(name.to_owned());
        }
    }
    if let Some((b, _)) = current {
        report.binaries.push(b);
    }
    report
}

/// `1m23s`.
pub(super) fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn reads_summaries_failures_and_hangs() {
        let console = "boot noise\n@@@ begin outbound t=10.50\nrunning 3 tests\n\
            test a ... ok\ntest b ... FAILED\r\ntest c ... ok\n\n\
            test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 3.1s\n\
            @@@ end outbound rc=101 t=20.75\n@@@ error insmod xt_CT\n@@@ begin daemon t=21.00\nrunning 1 test\n";
        let r = parse(console);
        assert_eq!(r.binaries.len(), 2);
        let o = &r.binaries[0];
        assert_eq!((o.passed, o.failed, o.rc), (2, 1, Some(101)));
        assert_eq!(o.failures, ["b"]);
        assert!((o.secs - 10.25).abs() < 1e-9);
        assert_eq!(r.binaries[1].rc, None);
        assert_eq!(r.init_errors, ["error insmod xt_CT"]);
        assert!(!r.done);
    }
}
