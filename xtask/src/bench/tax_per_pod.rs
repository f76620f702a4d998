//! The tax's per-pod side (issue 48): a node daemon with `--attach-scope per-pod`, five meshed
//! pods enrolled through its socket (each cgroup linked by its ADD), and the non-meshed pair of
//! the tax workload in a sibling cgroup below the same node cgroup: what the node's other
//! sockets pay when the programs are linked per pod, measured against the same bare pair.
use std::{io::BufRead as _, io::Write as _, os::unix::fs::MetadataExt as _, path::PathBuf};

use anyhow::{bail, Context as _};
use redirect_testkit::{Cgroup, Child, Netns, Node};
use serde_json::{json, Value};

use super::{scene, Bench};

/// The pods the per-pod node enrolls, one at a time (the probe apiserver serves `pod-N`, uid
/// `uid-pod-N`): their ADDs' phases give a median.
const PODS: usize = 5;

/// A per-pod node with its pods linked. Fields drop in order: the daemon stops first, the
/// pods' namespaces and cgroups go, then the node's pins and cgroup.
pub(super) struct PerPodNode {
    _daemon: Child,
    _api: Child,
    _pods: Vec<(Netns, Cgroup)>,
    pub(super) node: Node,
    /// The daemon's log: its "pod enrolled" line gives the ADD's phases (`cgroup`: the links).
    pub(super) log: PathBuf,
}

impl Bench {
    /// Starts the per-pod node and enrolls its pod (CNI ADD through the daemon's socket),
    /// checking that the pod's cgroup, and nothing else, is linked.
    pub(super) fn per_pod_node(&self) -> anyhow::Result<PerPodNode> {
        let node = Node::on_tmpfs(
            &self.bin.join("redirect"),
            self.scratch.join("per-pod-daemon"),
        )?;
        let root = node.cgroup.path().display().to_string();
        let log = self.scratch.join("per-pod-daemon.log");
        let (api, daemon) = self.pod_node_daemon(
            &node,
            PODS,
            "per-pod-daemon.log",
            &["--attach-scope", "per-pod", "--pod-cgroup-root", &root],
        )?;
        let mut pods = Vec::new();
        for n in 0..PODS {
            pods.push(enroll(&node, n)?);
        }
        let linked = linked_cgroups(&node)?;
        let mut want = pods
            .iter()
            .map(|(_, cg)| std::fs::metadata(cg.path()).map(|m| m.ino()))
            .collect::<Result<Vec<u64>, _>>()?;
        want.sort_unstable();
        if linked != want {
            bail!("the per-pod node linked cgroups {linked:?}, not its pods' ({want:?})");
        }
        Ok(PerPodNode {
            _daemon: daemon,
            _api: api,
            _pods: pods,
            node,
            log,
        })
    }
}

/// Pod `pod-N` on the per-pod node: its cgroup made (as the kubelet makes `pod<uid>` before
/// the sandbox), its namespace with an address, its ADD sent to the daemon's socket (which
/// links the cgroup).
fn enroll(node: &Node, n: usize) -> anyhow::Result<(Netns, Cgroup)> {
    let pod = format!("pod-{n}");
    let cgroup = node.cgroup.child(&format!("poduid-{pod}"))?;
    let ns = scene::netns("rbq-")?;
    let ip = format!("198.18.200.{}", n + 1);
    for args in [
        vec![
            "link", "add", "eth0", "type", "veth", "peer", "name", "eth1",
        ],
        vec!["addr", "add", &format!("{ip}/24"), "dev", "eth0"],
        vec!["link", "set", "eth0", "up"],
    ] {
        let mut full = vec!["-n", ns.name()];
        full.extend(args);
        redirect_testkit::ip(&full)?;
    }
    let answer = request(
        &node.dir.join("daemon.sock"),
        &json!({
            "v": 2,
            "call": "pod_add",
            "pod": {"namespace": "bench", "name": pod, "uid": format!("uid-{pod}"),
                    "container_id": format!("sandbox-{pod}")},
            "netns": ns.path(),
            "ips": [ip],
        }),
    )?;
    if answer["ok"] != true || answer["answer"]["pod"]["meshed"] != true {
        bail!("pod_add of {pod} on the per-pod node: {answer}");
    }
    Ok((ns, cgroup))
}

/// The pod cgroups `node`'s datapath has linked (`redirect status --json`).
fn linked_cgroups(node: &Node) -> anyhow::Result<Vec<u64>> {
    let out = node.cmd(&["status", "--json"]).output()?;
    let status: Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "redirect status --json: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let mut ids: Vec<u64> = status["node"]["pod_cgroups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// One request line to a daemon's socket; its answer.
fn request(socket: &std::path::Path, request: &Value) -> anyhow::Result<Value> {
    let mut line = request.to_string();
    line.push('\n');
    let mut stream = std::os::unix::net::UnixStream::connect(socket)
        .with_context(|| format!("connecting to {}", socket.display()))?;
    stream.write_all(line.as_bytes())?;
    let mut answer = String::new();
    std::io::BufReader::new(&stream).read_line(&mut answer)?;
    serde_json::from_str(&answer).with_context(|| format!("the daemon's answer {answer:?}"))
}

/// The per-pod phases of the per-pod node's ADDs (median microseconds: the pod's cgroup
/// found, the pinned programs opened, the links made, pinned) and the whole ADD's, from the
/// daemon's "pod enrolled" lines.
pub(super) fn add_phases(log: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("pod enrolled"))
        .collect();
    let field = |key: &str| {
        let values: Vec<f64> = lines
            .iter()
            .filter_map(|line| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(key))
                    .and_then(|v| v.trim_matches(|c: char| !c.is_ascii_digit()).parse().ok())
            })
            .collect();
        super::stats::median(&values).map(|v| format!("{v:.0}"))
    };
    Some(format!(
        "lookup {}, programs {}, links {}, pins {} us of {} us (medians of {} ADDs)",
        field("pod_cgroup=")?,
        field("cgroup_progs=")?,
        field("cgroup_links=")?,
        field("cgroup_pins=")?,
        field("us=")?,
        lines.len()
    ))
}
