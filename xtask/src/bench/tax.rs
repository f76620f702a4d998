//! The tax on the node's other sockets: a client and a server in namespaces no policy covers,
//! in a cgroup below the node datapath's attach point (as every process of a node sits below
//! the root the daemon attaches at), against the same pair in a cgroup with nothing attached.
use std::{collections::BTreeMap, net::SocketAddr, path::Path, process::Command};

use anyhow::{bail, Context as _};
use redirect_testkit::{probe::Load, Cgroup, Child, Netns, Node};
use serde_json::Value;

use super::{
    profile::Subject,
    progress, scene,
    stats::{median, Sample},
    Bench, Params,
};

/// Report keys of this workload start with this.
pub(super) const PREFIX: &str = "tax";
/// The workload's name (`--only tax`).
pub(super) const WORKLOAD: &str = "tax";
/// The pair with nothing attached above it.
const BARE: &str = "no programs";
/// The pair below the node datapath's attach point.
const ATTACHED: &str = "node datapath attached";
/// The pair beside a linked pod on a node whose datapath links per pod.
const PER_POD: &str = "per-pod scope, beside a linked pod";

/// A server namespace and a client namespace joined by a veth, both run in `cgroup`. Fields
/// drop in order: the server, then its cgroup, then the namespaces.
struct Pair {
    name: &'static str,
    server: Child,
    cgroup: Cgroup,
    client: Netns,
    _server_ns: Netns,
    target: SocketAddr,
}

impl Pair {
    /// Its client, for a profiled run.
    fn subject(&self) -> Subject<'_> {
        Subject {
            label: self.name,
            ns: &self.client,
            cgroup: Some(self.cgroup.path()),
            target: self.target,
        }
    }
}

impl Bench {
    /// A pair named `name` in a new cgroup below `parent` (subnet `subnet`).
    fn tax_pair(&self, name: &'static str, parent: &Cgroup, subnet: u8) -> anyhow::Result<Pair> {
        let cgroup = parent.child(&format!("tax-{subnet}"))?;
        let client = scene::netns("rbt-")?;
        let server_ns = scene::netns("rbs-")?;
        let target = scene::link(&client, &server_ns, subnet)?;
        let mut cmd = Command::new(self.bin.join("redirect"));
        cmd.arg("exec")
            .arg("--cgroup")
            .arg(cgroup.path())
            .args(["--", "ip", "netns", "exec", server_ns.name()])
            .arg(self.bin.join("probe-load"))
            .args(["server", "--listen", &format!("0.0.0.0:{}", target.port())]);
        let server = scene::spawn(&format!("{name} server"), cmd, "listening")?;
        Ok(Pair {
            name,
            server,
            cgroup,
            client,
            _server_ns: server_ns,
            target,
        })
    }

    /// One short-connection run of `pair` at concurrency `c`: (conn/s, connections, errors,
    /// CPU ms of client and server).
    fn tax_run(&self, pair: &Pair, c: usize, ms: u64) -> anyhow::Result<(f64, u64, u64, f64)> {
        let before = scene::cpu_ms(pair.server.pid());
        let load = self.load_in(
            &pair.client,
            Some(pair.cgroup.path()),
            pair.name,
            &[
                "cps".into(),
                "--connect".into(),
                pair.target.to_string(),
                "--concurrency".into(),
                c.to_string(),
                "--duration-ms".into(),
                ms.to_string(),
            ],
        )?;
        let cpu = scene::cpu_ms(pair.server.pid()) - before + load.cpu_ms();
        let Load::Cps {
            per_second,
            connections,
            errors,
            ..
        } = load
        else {
            bail!("{}: probe-load cps printed {load:?}", pair.name);
        };
        Ok((per_second, connections, errors, cpu))
    }

    /// Rounds of both pairs at c=1 and at `p.concurrency`, the order swapped every round; then
    /// one run of the attached pair while `bpf_stats` counts which hooks ran for it.
    pub(super) fn tax_workload(
        &mut self,
        p: &Params,
        profile: bool,
    ) -> anyhow::Result<BTreeMap<String, Value>> {
        let attached_parent = self.node_datapath()?.node.cgroup.child("rbt-tax")?;
        let bare_parent = Cgroup::new("rbx-")?;
        let per_pod = self.per_pod_node()?;
        let per_pod_parent = per_pod.node.cgroup.child("rbt-tax")?;
        let pairs = [
            self.tax_pair(BARE, &bare_parent, 150)?,
            self.tax_pair(ATTACHED, &attached_parent, 151)?,
            self.tax_pair(PER_POD, &per_pod_parent, 152)?,
        ];
        let levels = [1, p.concurrency];
        for round in 0..p.cps_rounds {
            for c in levels {
                for i in 0..pairs.len() {
                    let pair = &pairs[(i + round) % pairs.len()];
                    progress(&format!(
                        "non-meshed tax round {}/{} c={c} {}",
                        round + 1,
                        p.cps_rounds,
                        pair.name
                    ))?;
                    let (rate, conns, errors, cpu) = self.tax_run(pair, c, p.duration_ms)?;
                    let mut s = Sample::new(
                        WORKLOAD,
                        &format!("c={c}"),
                        pair.name,
                        round,
                        rate,
                        "conn/s",
                        true,
                    );
                    s.cpu_per_1000 = (conns > 0).then(|| cpu / conns as f64 * 1000.0);
                    s.errors = errors;
                    self.samples.push(s);
                }
            }
        }
        let mut m = summary(&self.samples, &levels);
        let runs = {
            let _stats = scene::BpfStats::enable();
            let before = self.node_runs();
            let (_, conns, _, _) = self.tax_run(&pairs[1], 1, p.duration_ms)?;
            let after = self.node_runs();
            let per_pod_before = runs_of(&per_pod.node);
            let (_, per_pod_conns, _, _) = self.tax_run(&pairs[2], 1, p.duration_ms)?;
            let per_pod_after = runs_of(&per_pod.node);
            m.insert(
                "tax per-pod: hook runs per non-meshed connection beside a linked pod (client and server)"
                    .into(),
                Value::from(per_connection(&per_pod_before, &per_pod_after, per_pod_conns)),
            );
            (
                per_connection(&before, &after, conns),
                after.into_keys().collect::<Vec<_>>(),
            )
        };
        m.insert(
            "tax: hook runs per non-meshed connection on an attached node (client and server)"
                .into(),
            Value::from(runs.0),
        );
        if let Some(phases) = super::tax_per_pod::add_phases(&per_pod.log) {
            m.insert(
                "tax per-pod: the pod's ADD with its cgroup linked (12 links)".into(),
                Value::from(phases),
            );
        }
        if profile {
            let subjects = [pairs[0].subject(), pairs[1].subject(), pairs[2].subject()];
            let pr = self.profile(&subjects, &runs.1, p.concurrency)?;
            let busy = |i| pr.busy_us(i).map_or("-".into(), |v| format!("{v:.1}"));
            m.insert(
                format!("tax (profile, c={}): busy CPU per connection none / attached / per-pod (us); samples in the node datapath's hooks per connection none / attached / per-pod (us)", p.concurrency),
                Value::from(format!(
                    "{} / {} / {}; {:.2} / {:.2} / {:.2}",
                    busy(0),
                    busy(1),
                    busy(2),
                    pr.hooks_us(0),
                    pr.hooks_us(1),
                    pr.hooks_us(2)
                )),
            );
        }
        drop(pairs);
        drop(attached_parent);
        drop(bare_parent);
        drop(per_pod_parent);
        drop(per_pod);
        Ok(m)
    }

    /// Each program of the node datapath: runs so far (`redirect status --json`).
    fn node_runs(&self) -> BTreeMap<String, u64> {
        self.node
            .as_ref()
            .map_or_else(BTreeMap::new, |n| runs_of(&n.node))
    }

    /// `probe-load ARGS` in `ns` (and `cgroup`); its result line.
    pub(super) fn load_in(
        &self,
        ns: &Netns,
        cgroup: Option<&Path>,
        label: &str,
        args: &[String],
    ) -> anyhow::Result<Load> {
        let mut cmd = Command::new(self.bin.join("probe-load"));
        cmd.arg("--netns").arg(ns.path());
        if let Some(cg) = cgroup {
            cmd.arg("--cgroup").arg(cg);
        }
        let out = cmd.args(args).output().context("running probe-load")?;
        if !out.status.success() {
            bail!(
                "probe-load {args:?} ({label}): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(text.lines().last().unwrap_or_default())
            .with_context(|| format!("probe-load output {text:?}"))
    }
}

/// Each program of the datapath of `node`: runs so far (`redirect status --json`).
fn runs_of(node: &Node) -> BTreeMap<String, u64> {
    let status = node
        .cmd(&["status", "--json"])
        .output()
        .ok()
        .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
        .unwrap_or_default();
    // Each pinned link's and program's program; a program pinned twice counts once.
    let mut by_id = BTreeMap::new();
    for prog in status["node"]["programs"].as_array().into_iter().flatten() {
        let (Some(id), Some(name)) = (prog["id"].as_u64(), prog["name"].as_str()) else {
            continue;
        };
        by_id.insert(id, (name.to_owned(), prog["runs"].as_u64().unwrap_or(0)));
    }
    let mut runs = BTreeMap::new();
    for (name, n) in by_id.into_values() {
        *runs.entry(name).or_default() += n;
    }
    runs
}

/// "prog runs/conn, ..." over the programs that ran, from run counts before and after.
fn per_connection(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    conns: u64,
) -> String {
    let parts: Vec<String> = after
        .iter()
        .filter_map(|(prog, a)| {
            let runs = a.saturating_sub(before.get(prog).copied().unwrap_or(0));
            (runs > 0).then(|| format!("{prog} {:.2}", runs as f64 / conns.max(1) as f64))
        })
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// Per level, for the attached pair and the per-pod pair: its conn/s over the bare pair's and
/// its CPU per 1,000 connections minus the bare pair's, each the median of per-round values.
fn summary(samples: &[Sample], levels: &[usize]) -> BTreeMap<String, Value> {
    let mut m = BTreeMap::new();
    for c in levels {
        let variant = format!("c={c}");
        let of = |mode: &str| -> BTreeMap<usize, &Sample> {
            samples
                .iter()
                .filter(|s| s.workload == WORKLOAD && s.variant == variant && s.mode == mode)
                .map(|s| (s.round, s))
                .collect()
        };
        let bare = of(BARE);
        for (mode, key) in [
            (ATTACHED, format!("tax ({variant}): conn/s attached / none; CPU ms per 1,000, attached - none")),
            (PER_POD, format!("tax per-pod ({variant}): conn/s beside a linked pod / none; CPU ms per 1,000, beside - none")),
        ] {
            let mut ratios = Vec::new();
            let mut cpu = Vec::new();
            for (round, a) in &of(mode) {
                let Some(b) = bare.get(round) else { continue };
                if b.value > 0.0 {
                    ratios.push(a.value / b.value);
                }
                if let (Some(x), Some(y)) = (a.cpu_per_1000, b.cpu_per_1000) {
                    cpu.push(x - y);
                }
            }
            let fmt =
                |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
            m.insert(
                key,
                Value::from(format!(
                    "{}; {}",
                    fmt(median(&ratios), 3),
                    fmt(median(&cpu), 2)
                )),
            );
        }
    }
    m
}
