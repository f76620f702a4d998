//! The CNI workload's node: the testkit's [`Node`] (its daemon directory a tmpfs, as `/run` is
//! on a node), the daemon the ADDs go to and the recorded-object apiserver it watches; all
//! stopped and removed on drop.
use std::process::Command;

use anyhow::Context as _;
use redirect_testkit::{Child, Node, Spawn};

use super::{cni::NODE, scene, Bench};

/// The daemon the ADDs go to, its apiserver and its node.
#[derive(Debug)]
pub(super) struct CniNode {
    // Fields drop in this order: the daemon stops before its node's pins go.
    _daemon: Child,
    _api: Child,
    pub(super) node: Node,
    pub(super) next: usize,
    /// Each exec'd ADD one at a time: the pod's name and milliseconds from spawn to exit (the
    /// plugin's phase table joins them to its log lines).
    pub(super) exec_ms: Vec<(String, f64)>,
}

impl Bench {
    /// The daemon and apiserver of the CNI workload, serving `pods` pod names.
    pub(super) fn cni_node(&mut self, pods: usize) -> anyhow::Result<&mut CniNode> {
        if self.cni.is_none() {
            let node = Node::on_tmpfs(&self.bin.join("redirect"), self.scratch.join("cni-daemon"))?;
            let (api, daemon) = self.pod_node_daemon(&node, pods, "cni-daemon.log", &[])?;
            self.cni = Some(CniNode {
                _daemon: daemon,
                _api: api,
                node,
                next: 0,
                exec_ms: Vec::new(),
            });
        }
        self.cni.as_mut().context("CNI node")
    }

    /// A `probe-apiserver` serving `pods` pod names and `node`'s daemon reading it (with
    /// `extra` arguments), its log in the scratch file `log` (not a pipe a reader thread of
    /// this process wakes for during a timed ADD): its "pod enrolled" lines say where each
    /// ADD's time went (`phases`), written as a node's daemon writes them at its default level.
    pub(super) fn pod_node_daemon(
        &self,
        node: &Node,
        pods: usize,
        log: &str,
        extra: &[&str],
    ) -> anyhow::Result<(Child, Child)> {
        let kubeconfig = node.dir.join("kubeconfig");
        let mut api = Command::new(self.bin.join("probe-apiserver"));
        api.arg("--kubeconfig").arg(&kubeconfig).args([
            "--node",
            NODE,
            "--count",
            &pods.to_string(),
        ]);
        let api = scene::spawn("probe-apiserver", api, "listening")?;
        let mut daemon = node.daemon_cmd(&["--node-name", NODE]);
        daemon
            .args(extra)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .env("RUST_LOG", "warn,redirect_daemon::server::pods=info");
        let log = self.scratch.join(log);
        let spawn = Spawn::new("redirect daemon")
            .terminate_on_drop(std::time::Duration::from_secs(1))
            .stderr_to(&log);
        let (daemon, _) = node
            .start_daemon(spawn, daemon)
            .with_context(|| format!("a node's daemon (its log: {})", log.display()))?;
        Ok((api, daemon))
    }
}
