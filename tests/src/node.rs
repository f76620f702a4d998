//! A node of the test's own for `redirect daemon` / `vm` / `stats` (the testkit's, for this
//! build's binary, with asserting helpers); pin directories and `redirect istio-iptables` for
//! the tests that apply policies without a daemon.
use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use redirect_testkit::{apiserver::PodServer, unique_name, Child, Spawn};

use crate::{env::bin_path, procs::attached_program_ids};

/// The testkit's [`redirect_testkit::Node`] for this build's `redirect`, with the tests'
/// asserting helpers (a failure panics with the command's output).
#[derive(Debug)]
pub struct Node(redirect_testkit::Node);

impl Default for Node {
    fn default() -> Self {
        Self::new()
    }
}

impl std::ops::Deref for Node {
    type Target = redirect_testkit::Node;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Node {
    /// Unique directories and a fresh cgroup.
    pub fn new() -> Self {
        Self(redirect_testkit::Node::new(&bin_path("redirect")).expect("a node of the test's own"))
    }

    /// The same with the daemon directory a tmpfs under `/run`, which every user can reach
    /// (a temporary directory may sit below a private `$TMPDIR`): for the tests that connect to
    /// the daemon as another user.
    pub fn under_run() -> Self {
        let dir = Path::new("/run").join(unique_name("rnode"));
        Self(
            redirect_testkit::Node::on_tmpfs(&bin_path("redirect"), dir)
                .expect("a node of the test's own under /run"),
        )
    }

    /// Runs `redirect ARGS`.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run redirect")
    }

    /// Runs `redirect ARGS`, asserting success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        ok(&self.run(args), &format!("redirect {args:?}"))
    }

    /// Starts `redirect daemon` attached at the node's cgroup and waits until it is ready.
    pub fn daemon(&self) -> Child {
        self.daemon_with(&[]).0
    }

    /// Same, with extra daemon arguments; also returns its `ready ...` line.
    pub fn daemon_with(&self, extra: &[&str]) -> (Child, String) {
        self.start_daemon(Spawn::new("redirect daemon"), self.daemon_cmd(extra))
            .expect("redirect daemon ready")
    }

    /// Same, reading pods from the recorded apiserver `api` (`--kubeconfig`), as node
    /// `node_name` when given, with the cluster DNS 10.96.0.10, then `extra`.
    pub fn pod_daemon(
        &self,
        api: &PodServer,
        node_name: Option<&str>,
        extra: &[&str],
    ) -> (Child, String) {
        let kubeconfig = api.kubeconfig().display().to_string();
        let mut args = vec!["--kubeconfig", kubeconfig.as_str()];
        if let Some(name) = node_name {
            args.extend(["--node-name", name]);
        }
        args.extend(["--cluster-dns", "10.96.0.10"]);
        args.extend_from_slice(extra);
        self.daemon_with(&args)
    }

    /// `redirect istio-iptables --netns NETNS --cgroup <the node's> ARGS` with this node's
    /// environment, asserting success; returns stdout.
    pub fn apply(&self, netns: &Path, args: &[&str]) -> String {
        let mut cmd = self.cmd(&["istio-iptables", "--netns"]);
        cmd.arg(netns)
            .arg("--cgroup")
            .arg(self.cgroup.path())
            .args(args);
        ok(
            &cmd.output().expect("run redirect istio-iptables"),
            "redirect istio-iptables",
        )
    }

    /// Program ids attached at the node's cgroup, sorted.
    pub fn link_ids(&self) -> Vec<u64> {
        let mut ids = attached_program_ids(self.cgroup.path());
        ids.sort_unstable();
        ids
    }
}

/// The metrics address in a daemon's `ready ... metrics=http://ADDR/metrics` line.
pub fn metrics_addr(ready: &str) -> std::net::SocketAddr {
    redirect_testkit::node::metrics_addr(ready).unwrap_or_else(|e| panic!("{e:#}"))
}

#[derive(Debug)]
/// A pinned datapath directory of the test's own, removed on drop if a test failed half-way.
pub struct Pins(pub PathBuf);

impl Default for Pins {
    fn default() -> Self {
        Self::new()
    }
}

impl Pins {
    /// The CLI's arguments that apply to the namespace `netns` with the programs attached at
    /// `cgroup` and pinned here, and no DNS servers read from the pod's files.
    pub fn cli_args(&self, netns: &Path, cgroup: &Path) -> Vec<String> {
        [
            "--netns".into(),
            netns.display().to_string(),
            "--cgroup".into(),
            cgroup.display().to_string(),
            "--bpffs".into(),
            self.0.display().to_string(),
            "--dns-servers".into(),
            String::new(),
        ]
        .into()
    }

    /// A unique directory under /sys/fs/bpf (not created: the first apply creates it).
    pub fn new() -> Self {
        Self(PathBuf::from("/sys/fs/bpf").join(unique_name("rib")))
    }
}

impl Drop for Pins {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `max_entries` of map `name` of the datapath pinned at `pins`, as bpftool reports it.
pub fn map_max_entries(pins: &Path, name: &str) -> u64 {
    let shown = Command::new("bpftool")
        .args(["-j", "map", "show", "pinned"])
        .arg(pins.join("maps").join(name))
        .output()
        .expect("bpftool");
    let json: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("bpftool json");
    json["max_entries"]
        .as_u64()
        .unwrap_or_else(|| panic!("no max_entries for {name}: {json}"))
}

/// `redirect istio-iptables --bpffs PINS --cgroup CGROUP --netns NETNS ARGS...`.
pub fn istio_iptables(pins: &Path, cgroup: &Path, netns: &Path, args: &[&str]) -> Output {
    istio_iptables_cmd(pins, cgroup, netns, args)
        .output()
        .expect("run redirect istio-iptables")
}

/// The command [`istio_iptables`] runs, to add environment before running it.
pub fn istio_iptables_cmd(pins: &Path, cgroup: &Path, netns: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin_path("redirect"));
    cmd.arg("istio-iptables")
        .arg("--bpffs")
        .arg(pins)
        .arg("--cgroup")
        .arg(cgroup)
        .arg("--netns")
        .arg(netns)
        .args(args);
    cmd
}

/// Asserts that `out` (of `what`) succeeded; returns its stdout.
pub fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
