//! `--profile`: the capture's whole kernel cost per connection. `perf record -a -g` samples the
//! eBPF pod's short connections and the explicit hop's in turn; the busy samples per connection
//! of the two give the capture's whole cost, and each eBPF sample whose call chain passes through
//! one of our hooks (or the release of socket storage) is sorted by hook and by where it was.
use std::{collections::BTreeMap, net::SocketAddr, path::Path, process::Command};

use anyhow::{bail, Context as _};
use redirect_testkit::{probe::Load, Cgroup, Netns};
use serde_json::Value;

use super::{
    footprint, progress,
    scene::Mode,
    stacks::{parse, Sorted},
    stats::median,
    Bench, Params,
};

/// Report keys of this workload start with this.
pub(crate) const PREFIX: &str = "profile: ";
/// Sampling frequency, per CPU.
pub(super) const HZ: u64 = 2999;
/// Each mode's sampled run.
pub(super) const RUN_MS: u64 = 5000;
/// Rounds; each samples explicit and eBPF once, the order swapped every round.
pub(super) const ROUNDS: usize = 3;

/// What one profiled run measures: a client in `ns` (and `cgroup`) dialling `target`.
pub(super) struct Subject<'a> {
    pub label: &'a str,
    pub ns: &'a Netns,
    pub cgroup: Option<&'a Path>,
    pub target: SocketAddr,
}

/// Subjects profiled in turn: per subject, busy microseconds per connection of each round,
/// the samples in our hooks, and the connections.
#[derive(Debug, Default)]
pub(super) struct Profiled {
    busy: Vec<Vec<f64>>,
    sorted: Vec<Sorted>,
    conns: Vec<u64>,
}

impl Profiled {
    /// Microseconds per connection of subject `i`'s samples in our hooks.
    pub(super) fn hooks_us(&self, i: usize) -> f64 {
        us(self.sorted[i].total()) / self.conns[i].max(1) as f64
    }

    /// Median busy microseconds per connection of subject `i`.
    pub(super) fn busy_us(&self, i: usize) -> Option<f64> {
        median(&self.busy[i])
    }
}

impl Bench {
    /// The profile rounds of explicit and eBPF at `p.concurrency`; report entries keyed with
    /// [`PREFIX`].
    pub(super) fn profile_workload(&self, p: &Params) -> anyhow::Result<BTreeMap<String, Value>> {
        let ours: Vec<String> = footprint::runs_of(&self.attach_status().unwrap_or_default())
            .into_keys()
            .collect();
        if ours.is_empty() {
            bail!("profile: the eBPF pod's `redirect status --json` lists no program");
        }
        let subject = |mode: Mode| -> anyhow::Result<Subject<'_>> {
            let pod = self.pods.iter().find(|p| p.mode == mode).context("pod")?;
            Ok(Subject {
                label: mode.name(),
                ns: &pod.ns,
                cgroup: pod.cgroup.as_ref().map(Cgroup::path),
                target: pod.target,
            })
        };
        let pr = self.profile(
            &[subject(Mode::Explicit)?, subject(Mode::Ebpf)?],
            &ours,
            p.concurrency,
        )?;
        let busy = [pr.busy[0].clone(), pr.busy[1].clone()];
        let mut m = pr.sorted[1].report(&busy, pr.conns[1], p.concurrency);
        m.insert(
            format!("{PREFIX}the same hook frames per explicit connection (no program attached: the release of sockets)"),
            Value::from(format!("{:.2} us", pr.hooks_us(0))),
        );
        Ok(m)
    }

    /// [`ROUNDS`] sampled short-connection runs of each subject at concurrency `c`, the order
    /// rotated every round; samples in programs named in `ours` are the hooks'.
    pub(super) fn profile(
        &self,
        subjects: &[Subject<'_>],
        ours: &[String],
        c: usize,
    ) -> anyhow::Result<Profiled> {
        let file = self.scratch.join("perf.data");
        let n = subjects.len();
        let mut pr = Profiled {
            busy: vec![Vec::new(); n],
            sorted: (0..n).map(|_| Sorted::default()).collect(),
            conns: vec![0; n],
        };
        for round in 0..ROUNDS {
            for k in 0..n {
                let i = (k + round) % n;
                let subject = &subjects[i];
                progress(&format!(
                    "profile round {}/{ROUNDS} {}",
                    round + 1,
                    subject.label
                ))?;
                let (conns, samples) = self.profiled_run(subject, c, &file)?;
                let stacks = parse(&samples);
                let n_busy = stacks.iter().filter(|s| !s.idle()).count();
                pr.busy[i].push(us(n_busy as u64) / conns.max(1) as f64);
                pr.conns[i] += conns;
                for s in &stacks {
                    pr.sorted[i].add(s, ours);
                }
            }
        }
        let _ = std::fs::remove_file(&file);
        Ok(pr)
    }

    /// One sampled short-connection run of `subject`: (connections, `perf script` text). The
    /// client runs under `perf record -a`, which samples every CPU for exactly its life.
    fn profiled_run(
        &self,
        subject: &Subject<'_>,
        c: usize,
        file: &Path,
    ) -> anyhow::Result<(u64, String)> {
        let mut cmd = Command::new("perf");
        cmd.args(["record", "-a", "-g", "-q", "-F", &HZ.to_string(), "-o"])
            .arg(file)
            .arg("--")
            .arg(self.bin.join("probe-load"))
            .arg("--netns")
            .arg(subject.ns.path());
        if let Some(cg) = subject.cgroup {
            cmd.arg("--cgroup").arg(cg);
        }
        cmd.args(["cps", "--connect", &subject.target.to_string()])
            .args(["--concurrency", &c.to_string()])
            .args(["--duration-ms", &RUN_MS.to_string()]);
        let out = cmd
            .output()
            .context("running `perf record` (Debian: apt-get install linux-perf)")?;
        if !out.status.success() {
            bail!(
                "perf record of {} ({}): {}",
                subject.label,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let load: Load = serde_json::from_str(text.lines().last().unwrap_or_default())
            .with_context(|| format!("probe-load output under perf {text:?}"))?;
        let Load::Cps { connections, .. } = load else {
            bail!("profile: probe-load printed {load:?}");
        };
        let out = Command::new("perf")
            .args(["script", "-F", "comm,tid,ip,sym", "-i"])
            .arg(file)
            .output()
            .context("perf script")?;
        Ok((
            connections,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ))
    }
}

/// Microseconds `n` samples stand for.
pub(super) fn us(n: u64) -> f64 {
    n as f64 * 1e6 / HZ as f64
}
