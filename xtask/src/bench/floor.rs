//! The capture's cost floor: what the hooks' own run time (the churn's `bpf_stats`) allows
//! against the explicit hop, computed from the same run's samples.
use std::collections::BTreeMap;

use serde_json::Value;

use super::stats::{median, Sample};

/// The churn's entry: every program's run time per connection, summed (ns).
pub const HOOKS_NS: &str = "churn: every hook, ns per connection";

/// Prefix of the entries [`floor`] adds (report.md gives them a table of their own).
pub const PREFIX: &str = "floor: ";

/// The explicit mode's median of `f` over the short-connection samples of `variant`.
fn explicit(samples: &[Sample], variant: &str, f: impl Fn(&Sample) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = samples
        .iter()
        .filter(|s| s.workload == "cps" && s.variant == variant && s.mode == "explicit")
        .filter_map(f)
        .collect();
    median(&v)
}

/// Adds the floor entries to `memory` when it has [`HOOKS_NS`] and the run has explicit
/// samples: the CPU the hooks alone add per 1,000 connections, and the connections/s ratio
/// eBPF / explicit they allow: at full concurrency both CPUs are busy, so conn/s scales with
/// 1 / CPU per connection (explicit's own, plus the hooks); at c=1 the hooks are on each
/// connection's critical path, so it scales with 1 / latency.
pub fn floor(samples: &[Sample], concurrency: usize, memory: &mut BTreeMap<String, Value>) {
    let Some(hooks_us) = memory
        .get(HOOKS_NS)
        .and_then(Value::as_f64)
        .map(|ns| ns / 1000.0)
    else {
        return;
    };
    let mut add = |k: String, v: Value| {
        memory.insert(format!("{PREFIX}{k}"), v);
    };
    add(
        "the hooks' own time per connection (churn), us".into(),
        Value::from(round2(hooks_us)),
    );
    add(
        "CPU per 1,000 connections, eBPF - explicit, from the hooks alone, ms".into(),
        Value::from(round2(hooks_us)),
    );
    let full = format!("c={concurrency}");
    // CPU ms per 1,000 connections is us per connection.
    if let Some(cpu_us) = explicit(samples, &full, |s| s.cpu_per_1000) {
        add(
            format!("conn/s eBPF / explicit the hooks allow at {full} (explicit: {cpu_us:.0} us of CPU per connection)"),
            Value::from(round3(cpu_us / (cpu_us + hooks_us))),
        );
    }
    if let Some(rate) = explicit(samples, "c=1", |s| Some(s.value)).filter(|r| *r > 0.0) {
        let latency_us = 1e6 / rate;
        add(
            format!("conn/s eBPF / explicit the hooks allow at c=1 (explicit: {latency_us:.0} us per connection)"),
            Value::from(round3(latency_us / (latency_us + hooks_us))),
        );
    }
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cps(variant: &str, round: usize, value: f64, cpu: f64) -> Sample {
        let mut s = Sample::new("cps", variant, "explicit", round, value, "conn/s", true);
        s.cpu_per_1000 = Some(cpu);
        s
    }

    #[test]
    fn the_floor_follows_the_explicit_hop_and_the_hooks() {
        let samples = [
            cps("c=1", 0, 4000.0, 300.0),
            cps("c=1", 1, 5000.0, 310.0),
            cps("c=1", 2, 6000.0, 320.0),
            cps("c=16", 0, 9000.0, 190.0),
            cps("c=16", 1, 9500.0, 195.0),
            cps("c=16", 2, 9900.0, 200.0),
        ];
        let mut m = BTreeMap::new();
        floor(&samples, 16, &mut m);
        assert!(m.is_empty(), "no churn entry, no floor: {m:?}");
        m.insert(HOOKS_NS.into(), Value::from(5000.0));
        floor(&samples, 16, &mut m);
        let get = |k: &str| {
            m.iter()
                .find(|(key, _)| key.starts_with(&format!("{PREFIX}{k}")))
                .and_then(|(_, v)| v.as_f64())
        };
        assert_eq!(get("the hooks' own time"), Some(5.0));
        assert_eq!(get("CPU per 1,000"), Some(5.0));
        // 195 / (195 + 5)
        assert_eq!(
            get("conn/s eBPF / explicit the hooks allow at c=16"),
            Some(0.975)
        );
        // 200 us per connection at 5,000/s: 200 / 205
        assert_eq!(
            get("conn/s eBPF / explicit the hooks allow at c=1"),
            Some(0.976)
        );
    }
}
