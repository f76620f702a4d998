//! Prometheus text rendering of the BPF decision counters (for `redirect attach --metrics-file`).
use std::{fmt::Write as _, path::Path};

use crate::{
    counters::CounterValue,
    error::{Error, Result},
};

/// Renders counters and map fill levels in the Prometheus text exposition format.
pub fn render(counters: &[CounterValue], tracked: usize, pending: usize) -> String {
    let mut out = String::new();
    let name = "redirect_bpf_decisions_total";
    let _ = writeln!(
        out,
        "# HELP {name} Decisions taken by the BPF capture programs.\n# TYPE {name} counter"
    );
    for c in counters {
        let _ = writeln!(out, "{name}{{decision=\"{}\"}} {}", c.name, c.value);
    }
    for (name, help, value) in [
        (
            "redirect_bpf_tracked_connections",
            "Redirected connections being tracked for SO_ORIGINAL_DST.",
            tracked,
        ),
        (
            "redirect_bpf_pending_connects",
            "Connects rewritten but not yet started.",
            pending,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    }
    out
}

/// Writes `text` to `path` atomically (temporary file + rename), readable by everyone so an
/// unprivileged proxy can merge it.
pub fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).map_err(|e| Error::io("writing", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io("renaming into", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_valid_families() {
        let text = render(
            &[CounterValue {
                name: "redirected",
                value: 3,
            }],
            1,
            0,
        );
        assert!(text.contains("# TYPE redirect_bpf_decisions_total counter\n"));
        assert!(text.contains("redirect_bpf_decisions_total{decision=\"redirected\"} 3\n"));
        assert!(text.contains("redirect_bpf_tracked_connections 1\n"));
        assert!(text.ends_with("redirect_bpf_pending_connects 0\n"));
    }
}
