//! The CRI workload: what our plugin adds to a pod's start on a real runtime. This build's
//! `probe-cri` (redirect-tests: xtask does not link the CRI client, whose build needs `protoc`)
//! boots a node of its own on Debian's containerd and times `RunPodSandbox` of meshed pods as
//! a kubelet calls it: with the primary conflist alone (Debian's bridge + host-local), then with
//! the DaemonSet's pod from the image running and our entry added (every sandbox checked to be
//! enrolled); one at a time and many at once. The two phases run one after the other (the
//! entry cannot come and go between rounds without the install-cni watcher putting it back),
//! so their ratio is of medians, not of per-round pairs.
use std::process::Command;

use anyhow::{bail, Context as _};

use super::{stats::Sample, Bench};

/// The workload's name in the report.
pub(super) const WORKLOAD: &str = "cri-run-pod-sandbox";

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| v[v.len() / 2])
}

impl Bench {
    /// Runs `probe-cri` and records its samples; returns the report's summary lines.
    pub(super) fn cri_workload(
        &mut self,
        serial: usize,
        parallel: usize,
        rounds: usize,
    ) -> anyhow::Result<Vec<(String, serde_json::Value)>> {
        let image = crate::image::for_tests()?
            .context("the cri workload needs the image (cargo xtask image, as root)")?;
        let out = Command::new(self.bin.join("probe-cri"))
            .args([serial, parallel, rounds].map(|n| n.to_string()))
            .env("REDIRECT_IMAGE", &image.tags[0])
            .env("REDIRECT_IMAGE_ARCHIVE", &image.archive)
            .output()
            .context("starting probe-cri")?;
        if !out.status.success() {
            bail!(
                "probe-cri failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut by: std::collections::BTreeMap<(String, String), Vec<f64>> = Default::default();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let v: serde_json::Value = serde_json::from_str(line)
                .with_context(|| format!("probe-cri printed {line:?}"))?;
            let (mode, variant) = (
                v["mode"].as_str().unwrap_or_default().to_owned(),
                v["variant"].as_str().unwrap_or_default().to_owned(),
            );
            let ms = v["ms"].as_f64().context("a sample without ms")?;
            let round = v["round"].as_u64().unwrap_or(0) as usize;
            self.samples.push(Sample::new(
                WORKLOAD, &variant, &mode, round, ms, "ms", false,
            ));
            by.entry((variant, mode)).or_default().push(ms);
        }
        let mut summary = Vec::new();
        let variants: std::collections::BTreeSet<String> =
            by.keys().map(|(v, _)| v.clone()).collect();
        for variant in variants {
            let of = |mode: &str| {
                by.get(&(variant.clone(), mode.to_owned()))
                    .cloned()
                    .and_then(median)
            };
            if let (Some(primary), Some(ours)) = (of("primary"), of("redirect")) {
                summary.push((
                    format!("RunPodSandbox {variant}: with our entry / primary alone (medians)"),
                    format!(
                        "{:.3} ({ours:.1} ms / {primary:.1} ms; ours adds {:.1} ms)",
                        ours / primary,
                        ours - primary
                    )
                    .into(),
                ));
            }
        }
        if summary.is_empty() {
            bail!("probe-cri printed no sample of both modes");
        }
        Ok(summary)
    }
}
