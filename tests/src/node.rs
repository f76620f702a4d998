//! A node of the test's own for `redirect daemon` / `vm` / `stats`: a daemon directory, a pin
//! directory and an attach cgroup, all removed on drop; pin directories and
//! `redirect istio-iptables` for the tests that apply policies without a daemon.
use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    time::Duration,
};

use redirect_testkit::{unique_name, Cgroup, Child};

use crate::{env::bin_path, procs::attached_program_ids};

/// A daemon directory and pin directory of the test's own, removed on drop.
#[derive(Debug)]
pub struct Node {
    /// `REDIRECT_DAEMON_DIR`.
    pub dir: PathBuf,
    /// `REDIRECT_BPFFS`.
    pub pins: PathBuf,
    /// Where the datapath attaches.
    pub cgroup: Cgroup,
}

impl Default for Node {
    fn default() -> Self {
        Self::new()
    }
}

impl Node {
    /// Unique directories and a fresh cgroup.
    pub fn new() -> Self {
        let name = unique_name("rdn");
        Self {
            dir: std::env::temp_dir().join(&name),
            pins: PathBuf::from("/sys/fs/bpf").join(&name),
            cgroup: Cgroup::new("rdc").expect("node cgroup"),
        }
    }

    /// `redirect ARGS` with this node's environment.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin_path("redirect"));
        cmd.args(args)
            .env("REDIRECT_DAEMON_DIR", &self.dir)
            .env("REDIRECT_BPFFS", &self.pins);
        cmd
    }

    /// Runs `redirect ARGS`.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run redirect")
    }

    /// Runs `redirect ARGS`, asserting success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "redirect {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts `redirect daemon` attached at the node's cgroup and waits until it is ready.
    pub fn daemon(&self) -> Child {
        self.daemon_with(&[]).0
    }

    /// Same, with extra daemon arguments; also returns its `ready ...` line. The node's cgroup
    /// holds applications and proxies alike: capture and the proxy hooks attach there.
    pub fn daemon_with(&self, extra: &[&str]) -> (Child, String) {
        let mut cmd = self.cmd(&["daemon"]);
        cmd.arg("--cgroup")
            .arg(self.cgroup.path())
            .arg("--proxy-cgroup")
            .arg(self.cgroup.path())
            .args(extra);
        let mut child = Child::spawn("redirect daemon", cmd).expect("start redirect daemon");
        // Creating the datapath runs the verifier over every program: seconds of CPU, more
        // when other tests load theirs at the same moment.
        let ready = child
            .wait_line("its ready line", Duration::from_secs(40), |l| {
                l.starts_with("ready ")
            })
            .expect("daemon ready");
        (child, ready)
    }

    /// `redirect istio-iptables --netns NETNS --cgroup <the node's> ARGS` with this node's
    /// environment, asserting success; returns stdout.
    pub fn apply(&self, netns: &std::path::Path, args: &[&str]) -> String {
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
    ready
        .split("metrics=http://")
        .nth(1)
        .and_then(|url| url.trim().trim_end_matches("/metrics").parse().ok())
        .unwrap_or_else(|| panic!("no metrics address in the ready line {ready:?}"))
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.pins);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
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
