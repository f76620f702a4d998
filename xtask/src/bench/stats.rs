//! Samples, medians and per-round ratios.
use serde::{Deserialize, Serialize};

/// One measurement of one mode in one round.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Sample {
    /// Workload (`cps`, `keepalive-rps`, `bulk`, `rules`, `enroll`, ...).
    pub workload: String,
    /// Variant within it (`c=1`, `rules=1000`, ...).
    pub variant: String,
    /// Mode (`direct`, `explicit`, `ebpf`, `iptables-legacy`, `iptables-nft`).
    pub mode: String,
    /// Round number; modes of one round ran back to back.
    pub round: usize,
    /// The value.
    pub value: f64,
    /// Its unit.
    pub unit: String,
    /// True when a higher value is better.
    pub higher_is_better: bool,
    /// CPU milliseconds (client + proxy + server) per 1,000 connections, where measured.
    pub cpu_per_1000: Option<f64>,
    /// Failed operations during the sample (should be 0).
    #[serde(default)]
    pub errors: u64,
}

impl Sample {
    /// A sample without CPU or error counts.
    pub(super) fn new(
        workload: &str,
        variant: &str,
        mode: &str,
        round: usize,
        value: f64,
        unit: &str,
        higher_is_better: bool,
    ) -> Self {
        Self {
            workload: workload.into(),
            variant: variant.into(),
            mode: mode.into(),
            round,
            value,
            unit: unit.into(),
            higher_is_better,
            cpu_per_1000: None,
            errors: 0,
        }
    }
}

/// Median of `v` (mean of the middle two for even lengths); `None` when empty.
pub(super) fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    Some(if s.len().is_multiple_of(2) {
        (s[m - 1] + s[m]) / 2.0
    } else {
        s[m]
    })
}

/// The `pct` percentile of `v` by nearest rank; `None` when empty.
pub(super) fn percentile(v: &[f64], pct: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((pct / 100.0) * s.len() as f64).ceil() as usize;
    Some(s[rank.clamp(1, s.len()) - 1])
}

/// Summary of one mode in one (workload, variant).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Summary {
    /// Mode.
    pub mode: String,
    /// Number of samples.
    pub n: usize,
    /// Median.
    pub median: f64,
    /// Minimum.
    pub min: f64,
    /// Maximum.
    pub max: f64,
    /// 99th percentile (nearest rank).
    #[serde(default)]
    pub p99: f64,
    /// Median over rounds of value / explicit's value in the same round.
    pub ratio_explicit: Option<f64>,
    /// Median over rounds of value / iptables-legacy's value in the same round.
    pub ratio_iptables_legacy: Option<f64>,
    /// Median CPU ms per 1,000 connections.
    pub cpu_per_1000: Option<f64>,
}

fn per_round_ratio(samples: &[&Sample], mode: &str, reference: &str) -> Option<f64> {
    let ratios: Vec<f64> = samples
        .iter()
        .filter(|s| s.mode == mode)
        .filter_map(|s| {
            samples
                .iter()
                .find(|r| r.mode == reference && r.round == s.round && r.value > 0.0)
                .map(|r| s.value / r.value)
        })
        .collect();
    median(&ratios)
}

/// Summaries per mode, in `modes` order, for the samples of one (workload, variant).
pub(super) fn summarise(samples: &[&Sample], modes: &[&str]) -> Vec<Summary> {
    modes
        .iter()
        .filter_map(|mode| {
            let values: Vec<f64> = samples
                .iter()
                .filter(|s| s.mode == *mode)
                .map(|s| s.value)
                .collect();
            let cpu: Vec<f64> = samples
                .iter()
                .filter(|s| s.mode == *mode)
                .filter_map(|s| s.cpu_per_1000)
                .collect();
            Some(Summary {
                mode: (*mode).to_owned(),
                n: values.len(),
                median: median(&values)?,
                min: values.iter().copied().fold(f64::INFINITY, f64::min),
                max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                p99: percentile(&values, 99.0)?,
                ratio_explicit: per_round_ratio(samples, mode, "explicit"),
                ratio_iptables_legacy: per_round_ratio(samples, mode, "iptables-legacy"),
                cpu_per_1000: median(&cpu),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(mode: &str, round: usize, value: f64) -> Sample {
        Sample::new("cps", "c=1", mode, round, value, "conn/s", true)
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        let hundred: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&hundred, 99.0), Some(99.0));
        assert_eq!(percentile(&hundred, 50.0), Some(50.0));
        assert_eq!(percentile(&[5.0], 99.0), Some(5.0));
        assert_eq!(percentile(&[], 99.0), None);
    }

    #[test]
    fn ratios_are_per_round() {
        let v = [
            s("explicit", 0, 100.0),
            s("ebpf", 0, 90.0),
            s("explicit", 1, 50.0),
            s("ebpf", 1, 50.0),
            s("ebpf", 2, 10.0),
        ];
        let refs: Vec<&Sample> = v.iter().collect();
        let sum = summarise(&refs, &["ebpf", "explicit", "direct"]);
        assert_eq!(sum.len(), 2, "modes without samples are left out");
        assert_eq!(
            sum[0].ratio_explicit,
            Some(0.95),
            "median of 0.9 and 1.0; round 2 has no reference"
        );
        assert_eq!((sum[0].min, sum[0].max, sum[0].n), (10.0, 90.0, 3));
        assert_eq!(sum[1].ratio_iptables_legacy, None);
    }
}
