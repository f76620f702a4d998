//! The workloads: short connections, keep-alive, bulk, rule scaling, enrollment, memory.
use std::{
    collections::BTreeMap,
    process::Command,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{bail, Context as _};
use redirect_testkit::probe::Load;
use serde_json::Value;

use super::{
    progress,
    scene::{self, Mode},
    stats::Sample,
    Bench, Params, Pod,
};

impl Bench {
    pub(super) fn cpu_now(&self, pod: &Pod) -> f64 {
        scene::cpu_ms(self.app_server.pid())
            + pod.proxy.as_ref().map_or(0.0, |p| scene::cpu_ms(p.pid()))
    }

    /// Runs one round: every mode once, in an order rotated by `round` so no mode always
    /// runs first, and reversed on odd rounds so each mode follows its neighbour in half the
    /// rounds and precedes it in the other half (eBPF sits next to explicit: whatever the slot
    /// after another run costs falls on both alike). `args` builds the probe-load arguments for
    /// a pod. Returns, per mode, the client's result and the CPU milliseconds of client, proxy
    /// and server during the run.
    fn run_round(
        &self,
        label: &str,
        modes: &[Mode],
        round: usize,
        args: impl Fn(&Pod) -> Vec<String>,
    ) -> anyhow::Result<Vec<(Mode, Load, f64)>> {
        let mut out = Vec::with_capacity(modes.len());
        for i in 0..modes.len() {
            let mode = modes[slot(modes.len(), round, i)];
            let pod = self.pods.iter().find(|p| p.mode == mode).context("pod")?;
            progress(&format!("{label} round {} {}", round + 1, mode.name()))?;
            let before = self.cpu_now(pod);
            let r = self.client(pod, &args(pod))?;
            let cpu = self.cpu_now(pod) - before + r.cpu_ms();
            out.push((mode, r, cpu));
        }
        Ok(out)
    }

    pub(super) fn cps_round(
        &mut self,
        workload: &str,
        variant: &str,
        modes: &[Mode],
        round: usize,
        p: &Params,
        c: usize,
    ) -> anyhow::Result<()> {
        let results = self.run_round(&format!("{workload} {variant}"), modes, round, |pod| {
            let args = [
                "cps",
                "--connect",
                &pod.target.to_string(),
                "--concurrency",
                &c.to_string(),
            ];
            let mut v: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
            v.extend(["--duration-ms".to_owned(), p.duration_ms.to_string()]);
            v
        })?;
        for (mode, r, cpu) in results {
            let Load::Cps {
                connections,
                errors,
                per_second,
                ..
            } = r
            else {
                bail!("{}: probe-load cps printed {r:?}", mode.name());
            };
            let conns = connections as f64;
            let mut s = Sample::new(
                workload,
                variant,
                mode.name(),
                round,
                per_second,
                "conn/s",
                true,
            );
            s.cpu_per_1000 = (conns > 0.0).then(|| cpu / conns * 1000.0);
            s.errors = errors;
            self.samples.push(s);
        }
        Ok(())
    }

    pub(super) fn keepalive_round(&mut self, round: usize, p: &Params) -> anyhow::Result<()> {
        let results = self.run_round("keepalive", &Mode::ALL, round, |pod| {
            [
                "keepalive",
                "--connect",
                &pod.target.to_string(),
                "--duration-ms",
                &p.duration_ms.to_string(),
            ]
            .map(String::from)
            .to_vec()
        })?;
        for (mode, r, _) in results {
            let Load::Keepalive {
                per_second: rps,
                p50_us,
                p90_us,
                p99_us,
                ..
            } = r
            else {
                bail!("{}: probe-load keepalive printed {r:?}", mode.name());
            };
            self.samples.push(Sample::new(
                "keepalive-rps",
                "c=1",
                mode.name(),
                round,
                rps,
                "req/s",
                true,
            ));
            for (q, v) in [("p50", p50_us), ("p90", p90_us), ("p99", p99_us)] {
                self.samples.push(Sample::new(
                    &format!("keepalive-{q}"),
                    "c=1",
                    mode.name(),
                    round,
                    v,
                    "us",
                    false,
                ));
            }
        }
        Ok(())
    }

    /// One keep-alive run of the eBPF pod while `bpf_stats` counts (inside the churn's window):
    /// how many hook runs its requests cost. Hooks run per connection, never per request, so
    /// any keep-alive gap to the explicit hop is not theirs; this is the measurement of that.
    pub(super) fn keepalive_hooks(&self, p: &Params) -> anyhow::Result<BTreeMap<String, Value>> {
        let pod = self
            .pods
            .iter()
            .find(|p| p.mode == Mode::Ebpf)
            .context("the eBPF pod")?;
        let before = self.hook_runs();
        let args = [
            "keepalive",
            "--connect",
            &pod.target.to_string(),
            "--duration-ms",
            &p.duration_ms.to_string(),
        ]
        .map(String::from);
        let Load::Keepalive { requests, .. } = self.client(pod, &args)? else {
            bail!("keep-alive hook count: probe-load keepalive printed no keepalive result");
        };
        let runs: u64 = self
            .hook_runs()
            .iter()
            .map(|(prog, (r, _))| r.saturating_sub(before.get(prog).map_or(0, |b| b.0)))
            .sum();
        let mut m = BTreeMap::new();
        m.insert(
            "keep-alive: hook runs over one connection of the eBPF pod, requests on it".into(),
            Value::from(format!("{runs}, {requests}")),
        );
        Ok(m)
    }

    pub(super) fn bulk_round(&mut self, round: usize, p: &Params) -> anyhow::Result<()> {
        let bytes = (p.bulk_mib * 1024 * 1024).to_string();
        let results = self.run_round("bulk", &Mode::ALL, round, |pod| {
            [
                "bulk",
                "--connect",
                &pod.target.to_string(),
                "--bytes",
                &bytes,
            ]
            .map(String::from)
            .to_vec()
        })?;
        let variant = format!("{} MiB", p.bulk_mib);
        for (mode, r, _) in results {
            let Load::Bulk {
                mib_per_second: v, ..
            } = r
            else {
                bail!("{}: probe-load bulk printed {r:?}", mode.name());
            };
            self.samples.push(Sample::new(
                "bulk",
                &variant,
                mode.name(),
                round,
                v,
                "MiB/s",
                true,
            ));
        }
        Ok(())
    }

    pub(super) fn set_rules(&mut self, n: usize) -> anyhow::Result<()> {
        let golden = self.golden.clone();
        for i in 0..self.pods.len() {
            match self.pods[i].mode {
                Mode::Ebpf => {
                    self.pods[i].attach = None; // detach the previous instance first
                    let cg = self.pods[i]
                        .cgroup
                        .as_ref()
                        .map(|c| c.path().to_owned())
                        .context("cgroup")?;
                    self.pods[i].attach = Some(self.attach(&cg, n)?);
                }
                m @ (Mode::IptablesLegacy | Mode::IptablesNft) => {
                    let restore = m.restore().context("restore")?;
                    self.pods[i].ns.restore(
                        restore,
                        &scene::sidecar_rules(&golden, &scene::exclusions(n)),
                    )?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    pub(super) fn enroll_once(&mut self, mode: Mode, subnet: u8) -> anyhow::Result<f64> {
        let ns = scene::netns(&format!("rbe{subnet}-"))?;
        let app_addr = scene::link(&ns, &self.app, subnet)?;
        let mut detector = ns.exec(self.bin.join("probe-load"));
        detector.args(["server", "--listen", "127.0.0.1:15001", "--greeting", "C"]);
        let _detector = scene::spawn("capture detector", detector, "listening")?;
        let node = if mode == Mode::Ebpf {
            let node = self.node_datapath()?;
            Some((
                node.node.pins.clone(),
                node.node.cgroup.child(&format!("rbe{subnet}"))?,
            ))
        } else {
            None
        };
        let mut prober = Command::new(self.bin.join("probe-load"));
        prober.arg("--netns").arg(ns.path());
        if let Some((_, cg)) = &node {
            prober.arg("--cgroup").arg(cg.path());
        }
        prober.args([
            "until-captured",
            "--connect",
            &app_addr.to_string(),
            "--timeout-ms",
            "15000",
        ]);
        // The clock starts once the prober is up and dialling (not during its start-up).
        let mut prober = scene::spawn("capture prober", prober, "probing")?;
        let t0 = SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros() as f64;
        match (&node, mode) {
            // What a node does per new pod: the shared datapath exists, the pod's policy is
            // written (the counterpart of one iptables-restore).
            (Some((dir, _)), Mode::Ebpf) => {
                self.istio_iptables(dir, &ns.path(), &["-u", "1337", "-i", "*"])?
            }
            (_, m) => ns.restore(
                m.restore().context("restore")?,
                &scene::sidecar_rules(&self.golden, &[]),
            )?,
        }
        prober.wait_exit(Duration::from_secs(30))?;
        let last = prober.lines().pop().unwrap_or_default();
        let result: Load =
            serde_json::from_str(&last).with_context(|| format!("prober output {last:?}"))?;
        let Load::UntilCaptured {
            captured: true,
            unix_us,
            ..
        } = result
        else {
            bail!("{}: the new namespace was never captured", mode.name());
        };
        if let Some((dir, _)) = &node {
            self.istio_iptables(dir, &ns.path(), &["--cleanup-only"])?;
        }
        Ok((unix_us.map_or(t0, |us| us as f64) - t0) / 1000.0)
    }
}

/// reversed on odd rounds.
/// The index of the mode that runs `i`th in round `round` of `n` modes: rotated by the round,
fn slot(n: usize, round: usize, i: usize) -> usize {
    let rotated = (i + round / 2) % n;
    if round % 2 == 1 {
        n - 1 - rotated
    } else {
        rotated
    }
}

#[cfg(test)]
mod tests {
    use super::slot;

    #[test]
    fn every_mode_runs_once_and_neighbours_swap() {
        let n = 5;
        let (mut after, mut before) = (0, 0);
        for round in 0..10 {
            let order: Vec<usize> = (0..n).map(|i| slot(n, round, i)).collect();
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(
                sorted,
                (0..n).collect::<Vec<_>>(),
                "round {round}: {order:?}"
            );
            let pos = |m: usize| order.iter().position(|x| *x == m).unwrap();
            // Modes 1 and 2 (explicit, ebpf) side by side.
            if pos(2) == pos(1) + 1 {
                after += 1;
            }
            if pos(1) == pos(2) + 1 {
                before += 1;
            }
        }
        assert_eq!(
            (after, before),
            (4, 4),
            "ebpf right after explicit as often as right before"
        );
        assert_eq!(slot(n, 0, 0), 0);
        assert_eq!(slot(n, 1, 0), 4);
    }
}
