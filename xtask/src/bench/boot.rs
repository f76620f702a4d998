//! The `boot` workload: a node's worst moment. After a reboot (or when a node joins) the
//! kubelet starts every pod at once, so every pod's CNI ADD is released together and each one
//! waits on the capture's: `redirect-cni ADD` for the node's 110 pods (the kubelet's default
//! `maxPods`) against the daemon, beside 110 `iptables-restore`s of Istio's rules into 110
//! namespaces (istio-cni's path), released the same way. Each pod's time runs from the common
//! release to its own ADD's exit (the last one is when the node's last pod is captured); every
//! pod is then checked to be captured with a real connect.
use anyhow::Context as _;
use serde_json::{json, Value};

use super::{
    scene::Mode,
    stats::{median, percentile, Sample},
    Bench,
};

/// The workload's name in the report (and for `--only`).
pub(super) const WORKLOAD: &str = "boot";

impl Bench {
    /// One round: for each mode in turn, `pods` pods made ready, their ADDs released at once,
    /// then each checked captured and removed.
    pub(super) fn boot_round(
        &mut self,
        round: usize,
        pods: usize,
        node_pods: usize,
    ) -> anyhow::Result<()> {
        self.cni_node(node_pods)?;
        let variant = format!("{pods} pods at once");
        let modes = [Mode::Ebpf, Mode::IptablesLegacy, Mode::IptablesNft];
        for k in 0..modes.len() {
            // The order turns each round, so no mode always follows the same one.
            let mode = modes[(k + round) % modes.len()];
            let made: Vec<_> = (0..pods)
                .map(|i| self.cni_pod(mode, i))
                .collect::<anyhow::Result<_>>()?;
            let cmds = made
                .iter()
                .map(|p| self.capture_cmd(mode, p, "ADD"))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let (released, runs) = super::cni::at_once(cmds)?;
            for (i, run) in runs.into_iter().enumerate() {
                let (_, exited) =
                    run.with_context(|| format!("{} ADD of pod {i} of {pods}", mode.name()))?;
                let ms = exited.saturating_duration_since(released).as_secs_f64() * 1000.0;
                self.samples.push(Sample::new(
                    WORKLOAD,
                    &variant,
                    mode.name(),
                    round * pods + i,
                    ms,
                    "ms",
                    false,
                ));
            }
            for pod in &made {
                self.assert_captured(mode, pod)?;
                self.cni_del(mode, pod)?;
            }
        }
        Ok(())
    }

    /// The workload's verdict: per mode p50, p99 and the last pod's time, and whether our p99
    /// is below iptables-legacy-restore's p50 (the target).
    pub(super) fn boot_summary(&self) -> Vec<(String, Value)> {
        let of = |mode: &str| -> Vec<f64> {
            self.samples
                .iter()
                .filter(|s| s.workload == WORKLOAD && s.mode == mode)
                .map(|s| s.value)
                .collect()
        };
        let mut out = serde_json::Map::new();
        for mode in [Mode::Ebpf, Mode::IptablesLegacy, Mode::IptablesNft] {
            let v = of(mode.name());
            out.insert(
                mode.name().to_owned(),
                json!({
                    "n": v.len(),
                    "p50_ms": median(&v),
                    "p99_ms": percentile(&v, 99.0),
                    "last_pod_ms": v.iter().copied().reduce(f64::max),
                }),
            );
        }
        let ours = percentile(&of(Mode::Ebpf.name()), 99.0);
        let legacy = median(&of(Mode::IptablesLegacy.name()));
        if let (Some(p99), Some(p50)) = (ours, legacy) {
            out.insert("ebpf_p99_over_iptables_legacy_p50".into(), json!(p99 / p50));
        }
        vec![("boot".to_owned(), Value::Object(out))]
    }
}
