//! The cluster's one node, as a boot makes it: a network namespace for its host network (the
//! node's address on a dummy interface, no route off the box; kube-proxy's one rule for the
//! `kubernetes` Service, whose cluster IP every in-cluster client dials), a mount namespace with
//! a fresh `/run`, `/opt` and bpffs (the node's CNI directories and `/var/log` bound from the
//! test's directory at their usual paths, kept across a reboot), containerd in it, and the real kubelet beside containerd
//! (cgroupfs driver, containerd's CRI, `--register-with-taints`), its cgroup root in every
//! hierarchy. [`Node::power_off`] kills everything the node runs at once; dropped, the node
//! is powered off and its cgroups and directory removed.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{ensure, Context as _};
use redirect_kubelet::{
    config,
    node::{ctr_import, into_runtime_cgroup, kill_all, prepare_dir, start_containerd},
};
use redirect_testkit::{
    cgroup::remove_trees, eventually, ip, unique_name, Cgroup, Child, Netns, Spawn,
};

use super::{control_plane::KUBERNETES_SERVICE_IP, pki::Pki};

/// The node's address (on its interface `node0`, one end of a veth pair inside the node).
pub const NODE_IP: &str = "10.250.0.2";
/// The pods' subnet on the node's bridge.
pub const POD_SUBNET: &str = "10.244.9.0/24";
/// The bridge's address (the pods' gateway).
pub const GATEWAY: &str = "10.244.9.1";
/// The kube-dns Service's cluster IP (the kubelet's `clusterDNS`).
pub const CLUSTER_DNS: &str = "10.96.0.10";
/// The readiness taint the kubelet registers the node with (deploy/README.md).
pub const NOT_READY_TAINT: &str = "redirect.dev/not-ready=true:NoSchedule";

/// The node.
#[derive(Debug)]
pub struct Node {
    /// Its name (`spec.nodeName`).
    pub name: String,
    /// The test's directory.
    pub dir: PathBuf,
    /// Its network namespace.
    pub netns: Netns,
    /// Its cgroup v2 directory, the kubelet's `--cgroup-root` (the same name in every hierarchy).
    pub cgroup: Cgroup,
    kube_bin: PathBuf,
    kubelet: Option<Child>,
    containerd: Option<Child>,
}

/// The node's boot: containerd's (`redirect_kubelet::node::boot_script`) with `/var/log`
/// (the pods' logs) on the test's directory, kept across a reboot as on a disk.
fn boot_script(dir: &Path) -> String {
    let extra = format!("mount --bind {}/var-log /var/log\n", dir.display());
    redirect_kubelet::node::boot_script(dir, &extra)
}

/// Makes `rel` in every cgroup v1 hierarchy (cpuset's with its parent's cpus and mems), as
/// the kubelet wants its `--cgroup-root` to exist.
fn make_v1_dirs(rel: &str) -> anyhow::Result<()> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").context("mountinfo")?;
    for m in redirect_testkit::cgroup::parse_mountinfo(&mounts)
        .iter()
        .filter(|m| m.fstype == "cgroup")
    {
        let dir = m.mount_point.join(rel);
        std::fs::create_dir_all(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
        for knob in ["cpuset.cpus", "cpuset.mems"] {
            if let Ok(value) = std::fs::read_to_string(m.mount_point.join(knob)) {
                std::fs::write(dir.join(knob), value.trim())
                    .with_context(|| format!("writing {}", dir.join(knob).display()))?;
            }
        }
    }
    Ok(())
}

impl Node {
    /// Makes the node's network, directories and cgroups and boots containerd (no kubelet yet).
    pub fn new(kube_bin: &Path) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(unique_name("rk8s"));
        let made = Self::make(kube_bin, &dir);
        if made.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        made
    }

    fn make(kube_bin: &Path, dir: &Path) -> anyhow::Result<Self> {
        let (name, dir) = (unique_name("rk8s-node"), dir.to_owned());
        prepare_dir(&dir, &["kubelet", "var-log"])?;
        // Pods get a route to the `kubernetes` Service's cluster IP through their gateway (a
        // real node's pods have a default route; these reach only their subnet otherwise), for
        // in-cluster clients on the pod network such as the untaint controller.
        let mut conflist: serde_json::Value =
            serde_json::from_str(&config::bridge_conflist(&dir, "0.4.0", POD_SUBNET))
                .context("the primary conflist")?;
        conflist["plugins"][0]["ipam"]["routes"] =
            serde_json::json!([{"dst": format!("{KUBERNETES_SERVICE_IP}/32")}]);
        std::fs::write(
            dir.join("etc-cni-net.d/10-podnet.conflist"),
            conflist.to_string(),
        )
        .context("the primary conflist")?;
        let netns = Netns::new("rk8s")?;
        let ns = netns.name().to_owned();
        // No dummy driver on every kernel: a veth pair whose both ends stay in the node.
        ip(&[
            "-n", &ns, "link", "add", "node0", "type", "veth", "peer", "name", "node0p",
        ])?;
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{NODE_IP}/24"),
            "dev",
            "node0",
        ])?;
        ip(&["-n", &ns, "link", "set", "node0p", "up"])?;
        ip(&["-n", &ns, "link", "set", "node0", "up"])?;
        // The Services' range routes to the node itself; kube-proxy's rule for the
        // `kubernetes` Service (no kube-proxy exists here) sends its cluster IP to the apiserver,
        // from the node's own processes (OUTPUT: the daemon, host network) and from pods
        // (PREROUTING: the untaint controller, on the pod network), as kube-proxy's
        // KUBE-SERVICES chain is jumped to from both.
        ip(&["-n", &ns, "route", "add", "10.96.0.0/16", "dev", "node0"])?;
        for chain in ["OUTPUT", "PREROUTING"] {
            let out = netns
                .exec("iptables")
                .args([
                    "-t",
                    "nat",
                    "-A",
                    chain,
                    "-d",
                    KUBERNETES_SERVICE_IP,
                    "-p",
                    "tcp",
                ])
                .args(["--dport", "443", "-j", "DNAT", "--to-destination"])
                .arg(format!("{NODE_IP}:{}", super::control_plane::API_PORT))
                .output()
                .context("iptables")?;
            ensure!(
                out.status.success(),
                "iptables -A {chain}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let cgroup = Cgroup::new("rk8s")?;
        make_v1_dirs(&Self::cgroup_rel(&cgroup))?;
        let mut node = Self {
            name,
            dir,
            netns,
            cgroup,
            kube_bin: kube_bin.to_owned(),
            kubelet: None,
            containerd: None,
        };
        node.boot_containerd()?;
        Ok(node)
    }

    fn cgroup_rel(cgroup: &Cgroup) -> String {
        cgroup
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The kubelet's `--cgroup-root` (`/NAME`).
    pub fn cgroup_root(&self) -> String {
        format!("/{}", Self::cgroup_rel(&self.cgroup))
    }

    /// containerd's gRPC socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// The node's CNI configuration directory (`/etc/cni/net.d` on the node).
    pub fn cni_conf_dir(&self) -> PathBuf {
        self.dir.join("etc-cni-net.d")
    }

    /// The node's CNI plugin directory (`/opt/cni/bin` on the node).
    pub fn cni_bin_dir(&self) -> PathBuf {
        self.dir.join("opt-cni-bin")
    }

    /// `path` of the node's filesystem as this process reaches it.
    pub fn host_path(&self, path: &str) -> PathBuf {
        let pid = self.containerd.as_ref().map_or(0, Child::pid);
        Path::new(&format!("/proc/{pid}/root")).join(path.trim_start_matches('/'))
    }

    /// Boots containerd in a fresh mount namespace and waits for its socket.
    pub fn boot_containerd(&mut self) -> anyhow::Result<()> {
        let log = self.dir.join("containerd.log");
        let child = start_containerd(&self.netns, &self.cgroup, &boot_script(&self.dir), &log)?;
        self.containerd = Some(child);
        let socket = self.socket();
        let containerd = &mut self.containerd;
        eventually("containerd's socket", Duration::from_secs(30), || {
            if let Some(status) = containerd.as_mut().and_then(Child::exited) {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("containerd exited ({status}): {text}");
            }
            let out = Command::new("ctr")
                .arg("--address")
                .arg(&socket)
                .arg("version")
                .output()
                .map_err(|e| e.to_string())?;
            out.status
                .success()
                .then_some(())
                .ok_or_else(|| "not yet".to_owned())
        })
        .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// `ctr images import` of the OCI archive `archive` into the CRI's namespace.
    pub fn import(&self, archive: &Path) -> anyhow::Result<()> {
        ctr_import(&self.socket(), archive)
    }

    /// Starts the kubelet in the node's mount and network namespaces.
    pub fn start_kubelet(&mut self, pki: &Pki, server: &str) -> anyhow::Result<()> {
        let client = pki.client(
            "kubelet",
            &format!("system:node:{}", self.name),
            &["system:nodes"],
        )?;
        let kubeconfig = pki.kubeconfig("kubelet", server, &client)?;
        let conf = self.dir.join("kubelet.yaml");
        std::fs::write(&conf, super::kubelet_conf::config(pki, &self.cgroup_root()))
            .context("the kubelet's configuration")?;
        let root = self.dir.join("kubelet");
        let containerd = self.containerd.as_ref().map_or(0, Child::pid);
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--target={containerd}"))
            .args(["--mount", "--net", "--"])
            .arg(self.kube_bin.join("kubelet"))
            .arg(format!("--config={}", conf.display()))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--root-dir={}", root.display()))
            .arg(format!("--cert-dir={}", root.join("pki").display()))
            .args(["--container-runtime=remote"])
            .arg(format!(
                "--container-runtime-endpoint=unix://{}",
                self.socket().display()
            ))
            .arg(format!("--node-ip={NODE_IP}"))
            .arg(format!("--hostname-override={}", self.name))
            .arg(format!("--register-with-taints={NOT_READY_TAINT}"))
            .arg(format!(
                "--pod-infra-container-image={}",
                config::PAUSE_IMAGE
            ))
            // Dead containers and their logs kept for the test's life (the proxy's records).
            .args([
                "--maximum-dead-containers-per-container=100",
                "--minimum-container-ttl-duration=1h",
            ])
            .arg("--v=2");
        let child = Spawn::new("kubelet")
            .terminate_on_drop(Duration::from_secs(10))
            .stderr_to(&self.dir.join("kubelet.log"))
            .start(cmd)?;
        into_runtime_cgroup(&self.cgroup, child.pid())?;
        self.kubelet = Some(child);
        Ok(())
    }

    /// Whether the kubelet still runs (its log's tail otherwise).
    pub fn kubelet_alive(&mut self) -> Result<(), String> {
        match self.kubelet.as_mut().and_then(Child::exited) {
            None => Ok(()),
            Some(status) => {
                let text =
                    std::fs::read_to_string(self.dir.join("kubelet.log")).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                Err(format!(
                    "the kubelet exited ({status}): {}",
                    tail.join("\n")
                ))
            }
        }
    }

    /// Kills everything the node runs at once, as a power cut does: the kubelet, containerd,
    /// every container; its mount namespace (`/run`, the bpffs, the pods' network namespaces)
    /// goes with them. containerd's root, the kubelet's directory and the CNI directories stay.
    pub fn power_off(&mut self) {
        let children = [self.kubelet.take(), self.containerd.take()];
        kill_all(&self.cgroup, children.into_iter().flatten().collect());
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut k) = self.kubelet.take() {
            k.terminate(Duration::from_secs(10));
        }
        self.power_off();
        remove_trees(Path::new(&Self::cgroup_rel(&self.cgroup)), true);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
