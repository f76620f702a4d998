//! The workloads of scale: a node datapath's load time, program by program; one pod's connection
//! rate and enrollment time with 2 and with 100 namespaces enrolled, and the map memory each
//! namespace adds; a long churn of connections, after which every connection map is back to
//! where it started and the loader's memory has not grown.
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{bail, Context as _};
use redirect_testkit::{probe::Load, Cgroup, Netns};
use serde_json::Value;

use super::{
    floor, progress,
    scene::{self, Mode},
    stats::{median, Sample},
    Bench, Params, Pod,
};

/// The connection maps a churn must leave as it found them.
const CONNECTION_MAPS: [&str; 3] = ["TRACKED", "INBOUND", "LOCAL_CONNECTS"];

impl Bench {
    /// Creates a node datapath from nothing (maps, every program verified, links, one policy)
    /// and records the process's time and each program's verification (the loader's debug
    /// line), then removes it.
    pub(super) fn load_round(&mut self, round: usize) -> anyhow::Result<()> {
        progress(&format!("load round {}", round + 1))?;
        let cg = Cgroup::new("rbl-")?;
        let ns = scene::netns("rbl-")?;
        let dir = PathBuf::from(format!("/sys/fs/bpf/redirect-bench-load-{}", self.id));
        let t0 = Instant::now();
        let out = Command::new(self.bin.join("redirect"))
            .arg("istio-iptables")
            .arg("--bpffs")
            .arg(&dir)
            .arg("--cgroup")
            .arg(cg.path())
            .arg("--netns")
            .arg(ns.path())
            .args(["-u", "1337", "-i", "*", "-b", "*"])
            .env("RUST_LOG", "redirect_datapath::attach::plan=debug")
            .output()?;
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        let cleanup = self.istio_iptables(&dir, &ns.path(), &["--cleanup-only"]);
        let _ = std::fs::remove_dir_all(&dir);
        if !out.status.success() {
            bail!(
                "creating a node datapath: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        cleanup?;
        let verified = verify_times(&String::from_utf8_lossy(&out.stderr));
        if verified.is_empty() {
            bail!("the loader logged no program verification");
        }
        let variant = "node datapath created: maps, programs, links, one policy";
        let push = |b: &mut Self, mode: &str, v: f64| {
            b.samples
                .push(Sample::new("load", variant, mode, round, v, "ms", false));
        };
        push(self, "ebpf", ms);
        let longest = verified.iter().map(|(_, ms)| *ms).fold(0.0, f64::max);
        push(self, "verify: longest program (all in parallel)", longest);
        for (program, ms) in verified {
            push(self, &format!("verify: {program}"), ms);
        }
        Ok(())
    }

    /// One pod of the node datapath (its proxy, its policy), measured with 2 and with
    /// `p.namespaces` namespaces enrolled (the bootstrap one and the measured pod included),
    /// round by round; the enrollment of the 3rd and of the last namespace timed each round
    /// (the CLI path: one `redirect istio-iptables`).
    pub(super) fn namespaces_workload(
        &mut self,
        p: &Params,
    ) -> anyhow::Result<BTreeMap<String, Value>> {
        let scaled = p.namespaces;
        let (dir, cg) = {
            let node = self.node_datapath()?;
            (node.node.pins.clone(), node.node.cgroup.child("rbs-pod")?)
        };
        let ns = scene::netns("rbs-")?;
        let target = scene::link(&ns, &self.app, 90)?;
        let proxy = self.proxy(&ns, Some(cg.path()), &[])?;
        self.istio_iptables(&dir, &ns.path(), &["-u", "1337", "-i", "*"])?;
        let pod = Pod {
            attach: None,
            proxy: Some(proxy),
            cgroup: Some(cg),
            mode: Mode::Ebpf,
            target,
            ns,
        };
        let fillers = (0..scaled - 2)
            .map(|i| scene::netns(&format!("rbs{i}-")))
            .collect::<anyhow::Result<Vec<Netns>>>()?;
        let few = "ebpf node: 2 namespaces enrolled";
        let last_label = format!("ebpf node: the {scaled}th namespace");
        let many = format!("ebpf node: {scaled} namespaces enrolled");
        let cps = format!("one pod's connections, c=1, {} ms", p.duration_ms);
        let mut memlock = (0, 0);
        let mut ratios = (Vec::new(), Vec::new());
        for round in 0..p.rounds {
            progress(&format!("namespaces round {}/{}", round + 1, p.rounds))?;
            let before = self.pod_cps(&pod, p)?;
            memlock.0 = memlock_of(&dir);
            let mut times = Vec::new();
            for f in &fillers {
                let t0 = Instant::now();
                self.istio_iptables(&dir, &f.path(), &["-u", "1337", "-i", "*", "-b", "*"])?;
                times.push(t0.elapsed().as_secs_f64() * 1000.0);
            }
            memlock.1 = memlock_of(&dir);
            let after = self.pod_cps(&pod, p)?;
            for f in &fillers {
                self.istio_iptables(&dir, &f.path(), &["--cleanup-only"])?;
            }
            let (first, last) = (times[0], times[times.len() - 1]);
            for (variant, mode, v, unit, higher) in [
                (cps.as_str(), few, before, "conn/s", true),
                (cps.as_str(), many.as_str(), after, "conn/s", true),
                (
                    "enrollment, CLI",
                    "ebpf node: the 3rd namespace",
                    first,
                    "ms",
                    false,
                ),
                ("enrollment, CLI", last_label.as_str(), last, "ms", false),
            ] {
                self.samples.push(Sample::new(
                    "namespaces",
                    variant,
                    mode,
                    round,
                    v,
                    unit,
                    higher,
                ));
            }
            ratios.0.push(after / before.max(1e-9));
            ratios.1.push(last / first.max(1e-9));
        }
        let mut m = BTreeMap::new();
        let per_pod = memlock.1.saturating_sub(memlock.0) / (scaled as u64 - 2);
        m.insert(
            "node datapath memlock (default sizing), 2 namespaces enrolled, bytes".into(),
            Value::from(memlock.0),
        );
        m.insert(
            format!("node datapath memlock (default sizing), {scaled} namespaces enrolled, bytes"),
            Value::from(memlock.1),
        );
        m.insert(
            "node datapath memlock per enrolled namespace (sidecar policy, -b '*'), bytes".into(),
            Value::from(per_pod),
        );
        m.insert(
            format!("namespaces: one pod's conn/s with {scaled} / with 2 enrolled (median of per-round ratios)"),
            Value::from(round3(median(&ratios.0))),
        );
        m.insert(
            format!("namespaces: enrollment of the {scaled}th / of the 3rd (median of per-round ratios)"),
            Value::from(round3(median(&ratios.1))),
        );
        Ok(m)
    }

    /// `connections` short connections through the eBPF pod (`redirect attach`), at c=16: the
    /// connection maps' fill and the loader's RSS before and after.
    pub(super) fn churn_workload(
        &mut self,
        connections: u64,
    ) -> anyhow::Result<BTreeMap<String, Value>> {
        let pod = self
            .pods
            .iter()
            .find(|p| p.mode == Mode::Ebpf)
            .context("the eBPF pod")?;
        let loader = pod.attach.as_ref().context("its redirect attach")?.pid();
        let maps = self.attach_map_ids();
        let fill = |name: &str| maps.get(name).map_or(0, |id| map_fill(*id));
        let before: Vec<usize> = CONNECTION_MAPS.iter().map(|n| fill(n)).collect();
        let rss0 = scene::rss_kib(loader);
        let runs0 = self.hook_runs();
        let mut done = 0u64;
        let mut errors = 0u64;
        // Runs of 5 s (1 s for a small churn) until the count is reached.
        let chunk = if connections >= 100_000 {
            "5000"
        } else {
            "1000"
        };
        let t0 = Instant::now();
        while done < connections {
            progress(&format!("churn: {done} of {connections} connections"))?;
            let args = [
                "cps",
                "--connect",
                &pod.target.to_string(),
                "--concurrency",
                "16",
                "--duration-ms",
                chunk,
            ]
            .map(String::from);
            match self.client(pod, &args)? {
                Load::Cps {
                    connections: n,
                    errors: e,
                    ..
                } => {
                    done += n;
                    errors += e;
                }
                other => bail!("churn: probe-load cps printed {other:?}"),
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        let after: Vec<usize> = CONNECTION_MAPS.iter().map(|n| fill(n)).collect();
        let rss1 = scene::rss_kib(loader);
        let runs1 = self.hook_runs();
        let mut m = BTreeMap::new();
        m.insert(
            "churn: connections through the eBPF pod (c=16)".into(),
            Value::from(done),
        );
        m.insert("churn: failed connections".into(), Value::from(errors));
        m.insert(
            "churn: connections per second".into(),
            Value::from((done as f64 / secs).round()),
        );
        for (i, name) in CONNECTION_MAPS.iter().enumerate() {
            m.insert(
                format!("churn: {name} entries before / after"),
                Value::from(format!("{} / {}", before[i], after[i])),
            );
        }
        // Every hook's runs and time per connection over the churn (bpf_stats is on for it).
        let per = |v: u64| v as f64 / done.max(1) as f64;
        let mut all_ns = 0;
        for (program, (runs, ns)) in &runs1 {
            let (r0, n0) = runs0.get(program).copied().unwrap_or((0, 0));
            all_ns += ns.saturating_sub(n0);
            m.insert(
                format!("churn: {program} runs, ns per connection"),
                Value::from(format!(
                    "{:.2}, {:.0}",
                    per(runs.saturating_sub(r0)),
                    per(ns.saturating_sub(n0))
                )),
            );
        }
        m.insert(floor::HOOKS_NS.into(), Value::from(per(all_ns).round()));
        m.insert(
            "churn: redirect attach (loader) RSS before / after, KiB".into(),
            Value::from(format!("{rss0} / {rss1}")),
        );
        Ok(m)
    }

    /// Each attached program of the eBPF pod's datapath: (runs, run time ns) so far
    /// (`redirect status --json`; bpf_stats is on during the churn).
    pub(super) fn hook_runs(&self) -> BTreeMap<String, (u64, u64)> {
        super::footprint::runs_of(&self.attach_status().unwrap_or_default())
    }

    /// One short-connection run of `pod` at c=1: its rate.
    fn pod_cps(&self, pod: &Pod, p: &Params) -> anyhow::Result<f64> {
        let args = [
            "cps",
            "--connect",
            &pod.target.to_string(),
            "--duration-ms",
            &p.duration_ms.to_string(),
        ]
        .map(String::from);
        match self.client(pod, &args)? {
            Load::Cps {
                per_second,
                errors: 0,
                ..
            } => Ok(per_second),
            other => bail!("node pod: probe-load cps printed {other:?}"),
        }
    }

    /// Kernel ids of the eBPF pod's maps, by name (its `redirect attach` state file).
    pub(super) fn attach_map_ids(&self) -> BTreeMap<String, u64> {
        std::fs::read_dir(&self.state_dir)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .and_then(|e| std::fs::read_to_string(e.path()).ok())
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|s| {
                s["maps"].as_array().map(|a| {
                    a.iter()
                        .filter_map(|p| Some((p[0].as_str()?.to_owned(), p[1].as_u64()?)))
                        .collect()
                })
            })
            .unwrap_or_default()
    }
}

fn round3(v: Option<f64>) -> f64 {
    v.map_or(0.0, |v| (v * 1000.0).round() / 1000.0)
}

/// (program, verification ms) from the loader's `program verified and loaded` debug lines.
fn verify_times(log: &str) -> Vec<(String, f64)> {
    let field = |line: &str, key: &str| -> Option<String> {
        let rest = &line[line.find(key)? + key.len()..];
        let end = rest.find([' ', '\n']).unwrap_or(rest.len());
        Some(rest[..end].trim_matches('"').to_owned())
    };
    let mut v: Vec<(String, f64)> = log
        .lines()
        .filter(|l| l.contains("program verified and loaded"))
        .filter_map(|l| {
            let us: f64 = field(l, "elapsed_us=")?.parse().ok()?;
            Some((field(l, "program=")?, us / 1000.0))
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Sum of bpftool's `bytes_memlock` over the maps pinned under `dir/maps`.
fn memlock_of(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir.join("maps")) else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|e| {
            let out = Command::new("bpftool")
                .args(["-j", "map", "show", "pinned"])
                .arg(e.path())
                .output()
                .ok()?;
            serde_json::from_slice::<Value>(&out.stdout).ok()?["bytes_memlock"].as_u64()
        })
        .sum()
}

/// Entries in map `id` now (a dump: only for the small connection maps).
fn map_fill(id: u64) -> usize {
    Command::new("bpftool")
        .args(["-j", "map", "dump", "id", &id.to_string()])
        .output()
        .ok()
        .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
        .and_then(|v| v.as_array().map(Vec::len))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_lines_are_read_by_program() {
        let log = "2026-12-02T01:14:45Z DEBUG redirect_datapath::attach::plan: program verified and loaded program=\"redirect_connect6\" elapsed_us=140659\n\
                   noise\n\
                   2026-12-02T01:14:45Z DEBUG redirect_datapath::attach::plan: program verified and loaded program=\"redirect_bind4\" elapsed_us=429\n";
        assert_eq!(
            verify_times(log),
            vec![
                ("redirect_bind4".to_owned(), 0.429),
                ("redirect_connect6".to_owned(), 140.659)
            ]
        );
    }
}
