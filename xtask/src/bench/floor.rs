//! The capture's cost floor: what the hooks' own run time (the churn's `bpf_stats`) allows
//! against the explicit hop, and what the capture's whole CPU cost (eBPF's CPU per connection
//! over explicit's, measured in the same rounds) allows, computed from the same run's samples.
use std::collections::BTreeMap;

use serde_json::Value;

use super::stats::{median, Sample};

/// The churn's entry: every program's run time per connection, summed (ns).
pub(super) const HOOKS_NS: &str = "churn: every hook, ns per connection";

/// Prefix of the entries [`floor`] adds (report.md gives them a table of their own).
pub(super) const PREFIX: &str = "floor: ";

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
pub(super) fn floor(samples: &[Sample], concurrency: usize, memory: &mut BTreeMap<String, Value>) {
    measured(samples, concurrency, memory);
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
            format!(
                "conn/s eBPF / explicit the hooks allow at {full} (explicit: {cpu_us:.0} us of \
                CPU per connection)"
            ),
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

/// eBPF's CPU per connection over explicit's in the short-connection rounds of `variant`
/// (us; the median of per-round differences): the capture's whole cost, the kernel's work
/// around each program run and the release of socket storage included, which `bpf_stats`
/// (program instructions only) does not see.
fn whole_cost_us(samples: &[Sample], variant: &str) -> Option<f64> {
    let cpu = |mode: &str, round: usize| {
        samples
            .iter()
            .find(|s| {
                s.workload == "cps" && s.variant == variant && s.mode == mode && s.round == round
            })
            .and_then(|s| s.cpu_per_1000)
    };
    let diffs: Vec<f64> = samples
        .iter()
        .filter(|s| s.workload == "cps" && s.variant == variant && s.mode == "ebpf")
        .filter_map(|s| Some(s.cpu_per_1000? - cpu("explicit", s.round)?))
        .collect();
    median(&diffs)
}

/// The floor of the capture's whole measured cost at full concurrency, and the share of it
/// that the hooks' `bpf_stats` time covers (when the churn ran).
fn measured(samples: &[Sample], concurrency: usize, memory: &mut BTreeMap<String, Value>) {
    let full = format!("c={concurrency}");
    let (Some(whole_us), Some(cpu_us)) = (
        whole_cost_us(samples, &full),
        explicit(samples, &full, |s| s.cpu_per_1000),
    ) else {
        return;
    };
    let hooks_ns = memory.get(HOOKS_NS).and_then(Value::as_f64);
    let mut add = |k: String, v: Value| {
        memory.insert(format!("{PREFIX}{k}"), v);
    };
    add(
        format!(
            "the capture's whole CPU per connection at {full}, measured (eBPF - explicit, \
            median of per-round differences), us"
        ),
        Value::from(round2(whole_us)),
    );
    add(
        format!("conn/s eBPF / explicit that whole cost allows at {full}"),
        Value::from(round3(cpu_us / (cpu_us + whole_us.max(0.0)))),
    );
    if let Some(ns) = hooks_ns {
        if whole_us > 0.0 {
            add(
                format!("share of that whole cost the hooks' bpf_stats time covers at {full}"),
                Value::from(round3(ns / 1000.0 / whole_us)),
            );
        }
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

    /// The floor entry of `m` whose name starts with `k`.
    fn entry(m: &BTreeMap<String, Value>, k: &str) -> Option<f64> {
        m.iter()
            .find(|(key, _)| key.starts_with(&format!("{PREFIX}{k}")))
            .and_then(|(_, v)| v.as_f64())
    }

    fn cps(variant: &str, round: usize, value: f64, cpu: f64) -> Sample {
        mode_cps("explicit", variant, round, value, cpu)
    }

    fn mode_cps(mode: &str, variant: &str, round: usize, value: f64, cpu: f64) -> Sample {
        let mut s = Sample::new("cps", variant, mode, round, value, "conn/s", true);
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
        assert!(
            m.is_empty(),
            "no churn entry, no eBPF rounds, no floor: {m:?}"
        );
        m.insert(HOOKS_NS.into(), Value::from(5000.0));
        floor(&samples, 16, &mut m);
        let get = |k: &str| entry(&m, k);
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

    #[test]
    fn the_whole_cost_is_the_median_of_per_round_differences() {
        let samples = [
            cps("c=16", 0, 9000.0, 190.0),
            mode_cps("ebpf", "c=16", 0, 8800.0, 198.0),
            cps("c=16", 1, 9500.0, 195.0),
            mode_cps("ebpf", "c=16", 1, 9300.0, 205.0),
            cps("c=16", 2, 9900.0, 200.0),
            mode_cps("ebpf", "c=16", 2, 9700.0, 204.0),
        ];
        let mut m = BTreeMap::new();
        m.insert(HOOKS_NS.into(), Value::from(4000.0));
        floor(&samples, 16, &mut m);
        let get = |k: &str| entry(&m, k);
        // Differences 8, 10, 4: median 8 us, over explicit's median of 195 us.
        assert_eq!(
            get("the capture's whole CPU per connection at c=16"),
            Some(8.0)
        );
        assert_eq!(
            get("conn/s eBPF / explicit that whole cost allows"),
            Some(0.961)
        );
        assert_eq!(get("share of that whole cost"), Some(0.5));
    }
}
