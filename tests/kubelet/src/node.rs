//! A node of the test's own: a network namespace (the node's host network), containerd in a
//! mount namespace of its own (a fresh `/run`, `/opt`, bpffs and libcni cache, as after a boot; the node's
//! CNI directories bound from the test's directory at the DaemonSet's hostPaths; `/` shared, as
//! systemd makes it), a cgroup that is the kubelet's `--cgroup-root`, containerd's root and
//! state under the test's directory. Dropped, every sandbox is stopped and removed through the
//! CRI, containerd stops, whatever is left in the node's cgroups is killed and the cgroup
//! directories go in every hierarchy.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{ensure, Context as _};
use redirect_testkit::{
    cgroup::remove_trees, eventually, unique_name, Cgroup, Child, Netns, Spawn,
};

use crate::{config, cri::Cri, pod::NodeInfo};

/// The node's address as its pods' host network sees it (`status.hostIP`): loopback of the
/// node's own namespace, so nothing the node serves is reachable from outside.
pub const HOST_IP: &str = "127.0.0.1";

/// The node.
#[derive(Debug)]
pub struct CriNode {
    /// The test's directory: containerd's state, the node's CNI directories, logs.
    pub dir: PathBuf,
    /// The node's network namespace.
    pub netns: Netns,
    /// The kubelet's cgroup root (cgroup v2; its name is the same in every hierarchy).
    pub cgroup: Cgroup,
    /// What the kubelet knows of the node.
    pub info: NodeInfo,
    containerd: Option<Child>,
    cri: Option<Cri>,
}

/// The shell that makes containerd's mount namespace and starts it (run by `unshare
/// --mount --propagation slave`, so nothing of it reaches the machine's mounts); `extra`
/// runs before containerd starts (more mounts of a node's own).
pub fn boot_script(dir: &Path, extra: &str) -> String {
    let d = dir.display();
    let (bin, conf) = (config::CNI_BIN_DIR, config::CNI_CONF_DIR);
    format!(
        "test -d {conf} || {{ echo '{conf} is missing (Debian podman creates it)' >&2; exit 1; }}\n\
         mount -t tmpfs -o mode=0755 tmpfs /run\nmkdir -p /run/netns\n\
         mount -t tmpfs -o mode=0755 tmpfs /opt\nmkdir -p {bin}\n\
         mount --bind {d}/opt-cni-bin {bin}\nmount --bind {d}/etc-cni-net.d {conf}\n\
         mount -t bpf bpf /sys/fs/bpf\nmkdir -p /var/lib/cni\nmount -t tmpfs tmpfs /var/lib/cni\n\
         {extra}mount --make-rshared /\n\
         exec containerd --config {d}/config.toml\n"
    )
}

/// Starts `containerd` in the network namespace `netns` and a mount namespace of its own made
/// by `script` (run by `unshare --mount --propagation slave`, so nothing of it reaches the
/// machine's mounts), its stderr appended to `log`; it and the shims it starts live in
/// `cgroup`'s `runtime` child.
pub fn start_containerd(
    netns: &Netns,
    cgroup: &Cgroup,
    script: &str,
    log: &Path,
) -> anyhow::Result<Child> {
    let mut cmd = Command::new("nsenter");
    cmd.arg(format!("--net={}", netns.path().display()))
        .args([
            "unshare",
            "--mount",
            "--propagation",
            "slave",
            "--",
            "sh",
            "-ec",
        ])
        .arg(script);
    let child = Spawn::new("containerd")
        .terminate_on_drop(Duration::from_secs(10))
        .stderr_to(log)
        .start(cmd)?;
    into_runtime_cgroup(cgroup, child.pid())?;
    Ok(child)
}

/// Moves process `pid` into `cgroup`'s `runtime` child (made when missing).
pub fn into_runtime_cgroup(cgroup: &Cgroup, pid: u32) -> anyhow::Result<()> {
    let runtime = cgroup.path().join("runtime");
    let _ = std::fs::create_dir(&runtime);
    std::fs::write(runtime.join("cgroup.procs"), pid.to_string())
        .context("moving a node process into the node's runtime cgroup")
}

/// `ctr images import` of the OCI archive `archive` into the CRI's image namespace of the
/// containerd at `socket`.
pub fn ctr_import(socket: &Path, archive: &Path) -> anyhow::Result<()> {
    let out = Command::new("ctr")
        .arg("--address")
        .arg(socket)
        .args(["--namespace", "k8s.io", "images", "import"])
        .arg(archive)
        .output()
        .context("starting ctr (containerd's package)")?;
    ensure!(
        out.status.success(),
        "ctr images import {}: {}",
        archive.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Kills everything in `cgroup` at once (`cgroup.kill`), reaps `children` and waits until the
/// cgroup is empty: a node's power cut.
pub fn kill_all(cgroup: &Cgroup, children: Vec<Child>) {
    let _ = std::fs::write(cgroup.path().join("cgroup.kill"), "1");
    for mut child in children {
        let _ = child.wait_exit(Duration::from_secs(10));
    }
    let events = cgroup.path().join("cgroup.events");
    let _ = redirect_testkit::until(
        "the node's processes to exit",
        Duration::from_secs(20),
        || std::fs::read_to_string(&events).is_ok_and(|e| e.contains("populated 0")),
    );
}

/// Makes a node's directory `dir`: its CNI directories (Debian's bridge, host-local and
/// loopback linked into the bin one), `ipam`, the directories `more`, and containerd's
/// `config.toml` for state under `dir`.
pub fn prepare_dir(dir: &Path, more: &[&str]) -> anyhow::Result<()> {
    for sub in ["opt-cni-bin", "etc-cni-net.d", "ipam"].iter().chain(more) {
        std::fs::create_dir_all(dir.join(sub))
            .with_context(|| format!("mkdir {}", dir.join(sub).display()))?;
    }
    std::fs::write(dir.join("config.toml"), config::containerd_toml(dir))
        .context("writing containerd's config.toml")?;
    for plugin in ["bridge", "host-local", "loopback"] {
        let from = Path::new("/usr/lib/cni").join(plugin);
        ensure!(
            from.exists(),
            "{} is missing (containernetworking-plugins; cargo xtask setup installs it)",
            from.display()
        );
        std::os::unix::fs::symlink(&from, dir.join("opt-cni-bin").join(plugin))
            .with_context(|| format!("linking {}", from.display()))?;
    }
    Ok(())
}

impl CriNode {
    /// Makes the node `name` and boots it (containerd running, the CRI answering).
    pub fn new(name: &str) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(unique_name("rcri"));
        prepare_dir(&dir, &["logs", "pods"])?;
        let netns = Netns::new("rnode")?;
        let cgroup = Cgroup::new("rkube")?;
        let root = cgroup
            .path()
            .file_name()
            .context("the node cgroup's name")?
            .to_string_lossy()
            .into_owned();
        let info = NodeInfo {
            name: name.to_owned(),
            host_ip: HOST_IP.to_owned(),
            cgroup_root: format!("/{root}"),
            cluster_dns: "10.96.0.10".to_owned(),
            log_root: dir.join("logs").display().to_string(),
            pods_root: dir.join("pods").display().to_string(),
            api: None,
        };
        let mut node = Self {
            dir,
            netns,
            cgroup,
            info,
            containerd: None,
            cri: None,
        };
        node.boot()?;
        Ok(node)
    }

    /// Starts containerd (a fresh mount namespace: empty `/run` and bpffs) and waits for its CRI.
    pub fn boot(&mut self) -> anyhow::Result<()> {
        let log = self.dir.join("containerd.log");
        let child = start_containerd(&self.netns, &self.cgroup, &boot_script(&self.dir, ""), &log)?;
        self.containerd = Some(child);
        let socket = self.socket();
        let cri = eventually("containerd's CRI", Duration::from_secs(30), || {
            if let Some(status) = self.containerd.as_mut().and_then(Child::exited) {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("containerd exited ({status}): {text}");
            }
            Cri::connect(&socket).map_err(|e| format!("{e:#}"))
        })?;
        self.cri = Some(cri);
        Ok(())
    }

    /// containerd's gRPC socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// The CRI client.
    pub fn cri(&self) -> &Cri {
        self.cri.as_ref().expect("the node is booted")
    }

    /// containerd's pid.
    pub fn containerd_pid(&self) -> u32 {
        self.containerd.as_ref().map_or(0, Child::pid)
    }

    /// `path` of the node's filesystem (containerd's mount namespace) as this process reaches it.
    pub fn host_path(&self, path: &str) -> PathBuf {
        Path::new(&format!("/proc/{}/root", self.containerd_pid()))
            .join(path.trim_start_matches('/'))
    }

    /// The node's CNI configuration directory (`/etc/cni/net.d` on the node).
    pub fn cni_conf_dir(&self) -> PathBuf {
        self.dir.join("etc-cni-net.d")
    }

    /// The node's CNI plugin directory (`/opt/cni/bin` on the node).
    pub fn cni_bin_dir(&self) -> PathBuf {
        self.dir.join("opt-cni-bin")
    }

    /// Writes the primary conflist (Debian's bridge + host-local on `subnet`, in `version`)
    /// as `10-podnet.conflist`, as a network add-on does on a new node.
    pub fn write_primary_conflist(&self, version: &str, subnet: &str) -> anyhow::Result<PathBuf> {
        let path = self.cni_conf_dir().join("10-podnet.conflist");
        std::fs::write(&path, config::bridge_conflist(&self.dir, version, subnet))
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    /// `ctr images import` of the OCI archive `archive` into the CRI's image namespace.
    pub fn import(&self, archive: &Path) -> anyhow::Result<()> {
        ctr_import(&self.socket(), archive)
    }

    /// Stops and removes every sandbox, as a node drained of its pods; errors are reported,
    /// not raised (the cleanup goes on).
    pub fn remove_all_sandboxes(&self) {
        let Some(cri) = &self.cri else { return };
        for id in cri.list_pod_sandboxes().unwrap_or_default() {
            if let Err(e) = cri
                .stop_pod_sandbox(&id)
                .and_then(|()| cri.remove_pod_sandbox(&id))
            {
                eprintln!("warning: removing sandbox {id}: {e}");
            }
        }
    }

    /// Kills everything the node runs (containerd, its shims, every container) at once, as
    /// a power cut does: the mount namespace with `/run`, the bpffs and the sandboxes'
    /// network namespaces goes with them; containerd's root (images, sandbox records) stays.
    pub fn power_off(&mut self) {
        self.cri = None;
        kill_all(&self.cgroup, self.containerd.take().into_iter().collect());
    }
}

impl Drop for CriNode {
    fn drop(&mut self) {
        self.remove_all_sandboxes();
        if let Some(mut c) = self.containerd.take() {
            c.terminate(Duration::from_secs(10));
        }
        self.power_off();
        // What runc made in every hierarchy, the v2 directory of the Cgroup guard with it.
        remove_trees(
            Path::new(self.info.cgroup_root.trim_start_matches('/')),
            true,
        );
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
