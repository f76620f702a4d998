//! A real Kubernetes cluster of one node for the tests: etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and the kubelet, v1.20.2 as `cargo xtask setup`
//! builds them from Debian's source package (`REDIRECT_KUBE_BIN`), driving Debian's containerd
//! with Debian's bridge + host-local as the primary network, in a node of the test's own
//! ([`node`]). The images (pause, the app, the image under test and the next layout's) are built
//! here and imported; nothing is pulled. The tests drive it only as an operator would: with
//! kubectl ([`Kubectl`]) and the manifests of `deploy/kubernetes/`. Cluster tests run one at a
//! time (two clusters would halve the CPU each has on a 2-core machine).
pub mod checks;
pub mod control_plane;
pub mod kubectl;
mod kubelet_conf;
pub mod node;
pub mod ops;
pub mod pki;
pub mod workloads;

use std::{
    path::{Path, PathBuf},
    sync::{Mutex, MutexGuard},
    time::Duration,
};

use anyhow::Context as _;
use redirect_kubelet::images;
use redirect_testkit::{eventually, privileged_or_skip, runs_or_skip};
use serde_json::Value;

pub use control_plane::ControlPlane;
pub use kubectl::Kubectl;
pub use node::Node;
pub use pki::Pki;

use crate::podman::image_under_test;

/// One cluster at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// What a cluster needs, or why it cannot run (a failure in CI).
#[derive(Debug, Clone)]
pub struct Parts {
    /// The Kubernetes binaries' directory.
    pub kube_bin: PathBuf,
    /// The image under test's tag.
    pub image: String,
    /// Its OCI archive.
    pub archive: PathBuf,
}

/// The parts, or `None` (after saying why) when the test cannot run outside CI; in CI a
/// missing part is a failure.
pub fn parts_or_skip(test: &str) -> Option<Parts> {
    if !privileged_or_skip(test) {
        return None;
    }
    let tool = [
        "/usr/bin/containerd",
        "/usr/bin/ctr",
        "/usr/sbin/runc",
        "/usr/bin/buildah",
        "/bin/busybox",
        "/usr/sbin/iptables",
    ]
    .into_iter()
    .find(|p| !Path::new(p).exists())
    .map(|p| format!("{p} is not installed (cargo xtask setup installs it)"));
    let parts = match (tool, control_plane::kube_bin_dir(), image_under_test()) {
        (Some(why), _, _) | (None, Err(why), _) | (None, Ok(_), Err(why)) => Err(why),
        (None, Ok(kube_bin), Ok((image, archive))) => Ok(Parts {
            kube_bin,
            image,
            archive,
        }),
    };
    match parts {
        Ok(parts) => Some(parts),
        Err(why) => {
            runs_or_skip(test, Some(why));
            None
        }
    }
}

/// For a test named `test`: the parts, a cluster started, the world listening and the
/// DaemonSet installed (`kubectl apply` of deploy/kubernetes); `None` after saying why when it
/// cannot run outside CI (a failure in CI).
pub fn installed(test: &str) -> Option<(Parts, Cluster, ops::Reached)> {
    let parts = parts_or_skip(test)?;
    let cluster = Cluster::start(&parts).expect("the cluster");
    let reached = ops::world(&cluster).expect("the world listener");
    cluster
        .install()
        .expect("kubectl apply of deploy/kubernetes");
    Some((parts, cluster, reached))
}

/// The cluster. Dropped: the node powered off, the control plane stopped, everything removed.
#[derive(Debug)]
pub struct Cluster {
    /// kubectl as the cluster administrator.
    pub kubectl: Kubectl,
    /// The node (dropped first).
    pub node: Node,
    /// The control plane.
    pub control: ControlPlane,
    /// The certificates.
    pub pki: Pki,
    /// The parts it runs.
    pub parts: Parts,
    _one: MutexGuard<'static, ()>,
}

impl Cluster {
    /// Boots the node and the control plane, imports the images, starts the kubelet and
    /// waits until the node has registered (tainted `redirect.dev/not-ready`) and is Ready;
    /// makes the `istio-system` namespace (deploy/README.md's first step) and the `kube-dns`
    /// Service (its cluster IP only: no DNS server runs here).
    pub fn start(parts: &Parts) -> anyhow::Result<Self> {
        let one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let started = std::time::Instant::now();
        let mut node = Node::new(&parts.kube_bin)?;
        for built in images::build(&node.dir).context("the pause and app images")? {
            node.import(&built)?;
        }
        node.import(&parts.archive)?;
        let pki = Pki::new(&node.dir)?;
        let control = ControlPlane::start(
            &parts.kube_bin,
            &node.dir,
            &node.netns.path(),
            &pki,
            node::NODE_IP,
        )?;
        let kubectl = Kubectl::new(
            &parts.kube_bin.join("kubectl"),
            &control.admin_kubeconfig()?,
            &node.netns.path(),
        );
        node.start_kubelet(&pki, &control.server)?;
        let cluster = Self {
            kubectl,
            node,
            control,
            pki,
            parts: parts.clone(),
            _one: one,
        };
        cluster.wait_node_ready()?;
        cluster.kubectl.apply(workloads::BASE)?;
        eprintln!(
            "cluster: node {} Ready {:.1} s after the start",
            cluster.node.name,
            started.elapsed().as_secs_f64()
        );
        Ok(cluster)
    }

    /// A node reboot: everything the node runs killed at once (`/run`, the bpffs and the pods'
    /// network namespaces gone), then containerd and the kubelet booted again.
    pub fn reboot(&mut self) -> anyhow::Result<()> {
        self.node.power_off();
        self.node.boot_containerd()?;
        self.node.start_kubelet(&self.pki, &self.control.server)
    }

    /// The Node object.
    pub fn node_object(&self) -> anyhow::Result<Value> {
        self.kubectl.get(&["node", &self.node.name])
    }

    fn wait_node_ready(&self) -> anyhow::Result<()> {
        eventually(
            "the node to register and be Ready",
            Duration::from_secs(120),
            || {
                let node = self.node_object().map_err(|e| format!("{e:#}"))?;
                let ready = node["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True");
                ready
                    .then_some(())
                    .ok_or_else(|| format!("{}", node["status"]["conditions"]))
            },
        )
        .map_err(|e| {
            let log =
                std::fs::read_to_string(self.node.dir.join("kubelet.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            anyhow::anyhow!("{e}\nkubelet log (last lines first):\n{}", tail.join("\n"))
        })
    }

    /// The node's taints' keys.
    pub fn taints(&self) -> Vec<String> {
        self.node_object()
            .map(|n| {
                n["spec"]["taints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|t| t["key"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every request of `user` the apiserver refused with 403, as `verb resource: reason`.
    pub fn forbidden(&self, user: &str) -> Vec<String> {
        let text = std::fs::read_to_string(&self.control.audit_log).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["user"]["username"] == user && e["responseStatus"]["code"] == 403)
            .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
            .collect()
    }
}
