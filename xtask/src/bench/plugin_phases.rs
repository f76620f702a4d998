//! Where an exec'd `redirect-cni ADD` spends its time, one at a time: the plugin logs each ADD
//! with its phases (`ADD done ... main_us=US cpu_us=US phases=read=US conf=US log=US netns=US
//! call=US`, microseconds since `main` began), joined by pod name to the bench's own timing
//! of the same exec (spawn to exit): `before main` is that time less `main` (the fork, the
//! exec, the loader, the runtime's start-up and the exit), `call` is the daemon's round trip,
//! `cpu` the process's own CPU time from its exec.
use std::collections::HashMap;

use anyhow::Context as _;

use super::{
    phases::{field_of, phases_of},
    stats::Sample,
    Bench,
};

const WORKLOAD: &str = "plugin phases";
const VARIANT: &str = "redirect-cni's own account of each exec'd ADD, one at a time";

/// The pod's name in an `ADD done` line (`pod=pod NAMESPACE/NAME ...`).
fn pod_of(line: &str) -> Option<&str> {
    let (_, rest) = line.split_once(" pod=pod ")?;
    let (_, name) = rest.split_whitespace().next()?.split_once('/')?;
    Some(name)
}

impl Bench {
    /// One sample per phase per exec'd ADD one at a time, with `before main`, `main`, `total`
    /// and `cpu`.
    pub(super) fn plugin_phases(&mut self) -> anyhow::Result<()> {
        let node = self.cni.as_ref().context("CNI node")?;
        let log = node.node.dir.join("cni.log");
        let text = std::fs::read_to_string(&log)
            .with_context(|| format!("reading the plugin's log {}", log.display()))?;
        let timed: HashMap<&str, f64> = node
            .exec_ms
            .iter()
            .map(|(pod, ms)| (pod.as_str(), *ms))
            .collect();
        let mut samples = Vec::new();
        for line in text.lines().filter(|l| l.contains("ADD done")) {
            let (Some(pod), Some(main), Some(cpu)) = (
                pod_of(line),
                field_of(line, "main_us"),
                field_of(line, "cpu_us"),
            ) else {
                continue;
            };
            let Some(ms) = timed.get(pod) else { continue };
            let total = (ms * 1000.0) as u64;
            let rows = [("before main", total.saturating_sub(main))]
                .into_iter()
                .chain(phases_of(line))
                .chain([("main", main), ("total", total), ("cpu", cpu)]);
            let n = samples.len();
            for (name, us) in rows {
                samples.push(Sample::new(
                    WORKLOAD,
                    VARIANT,
                    &format!("phase: {name}"),
                    n,
                    us as f64,
                    "us",
                    false,
                ));
            }
        }
        anyhow::ensure!(
            !samples.is_empty(),
            "the plugin logged no \"ADD done\" line with its phases for the ADDs timed one at a time ({})",
            log.display()
        );
        self.samples.extend(samples);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_line_is_read_for_its_pod_fields_and_phases() {
        let line = "2026-12-06T02:00:00.1Z  INFO redirect_cni::commands: ADD done \
                    pod=pod bench/pod-7 (uid uid-pod-7) answer=enrolled main_us=812 \
                    cpu_us=1400 phases=read=20 conf=31 log=60 netns=12 call=690";
        assert_eq!(super::pod_of(line), Some("pod-7"));
        assert_eq!(super::field_of(line, "main_us"), Some(812));
        assert_eq!(super::field_of(line, "cpu_us"), Some(1400));
        assert_eq!(
            super::phases_of(line),
            [
                ("read", 20),
                ("conf", 31),
                ("log", 60),
                ("netns", 12),
                ("call", 690)
            ]
        );
        assert_eq!(super::pod_of("ADD done answer=x"), None);
    }
}
