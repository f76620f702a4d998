//! The CNI workload's node: the daemon the ADDs go to, the recorded-object apiserver it
//! watches, its cgroup, pins and directory (a tmpfs, as `/run` is on a node); all removed on
//! drop.
use std::{path::PathBuf, process::Command};

use anyhow::Context as _;
use redirect_testkit::{Cgroup, Child};

use super::{cni::NODE, scene, Bench};

/// The daemon the ADDs go to, its apiserver, cgroup, pins and directory; all removed on drop.
pub(super) struct CniNode {
    pub(super) daemon: Option<Child>,
    pub(super) _api: Child,
    pub(super) cg: Cgroup,
    pub(super) pins: PathBuf,
    pub(super) dir: Tmpfs,
    pub(super) next: usize,
}

impl Drop for CniNode {
    fn drop(&mut self) {
        // Stopped first: a daemon leaves its datapath pinned, so the pins go after it.
        drop(self.daemon.take());
        let _ = std::fs::remove_dir_all(&self.pins);
    }
}

/// A tmpfs mounted at a new directory (unmounted and removed on drop): the daemon's directory
/// on a node is `/run/redirect/daemon`, and `/run` is a tmpfs there, while this machine's
/// scratch (and even its `/run`) may be a disk whose journal makes each enrollment record's
/// write wait for I/O now and then.
pub(super) struct Tmpfs(pub(super) PathBuf);

impl Tmpfs {
    fn mount(path: PathBuf) -> anyhow::Result<Self> {
        use nix::mount::{mount, MsFlags};
        std::fs::create_dir_all(&path)?;
        let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        mount(
            Some("tmpfs"),
            &path,
            Some("tmpfs"),
            flags,
            Some("size=16m,mode=0700"),
        )
        .with_context(|| format!("mounting a tmpfs at {}", path.display()))?;
        Ok(Self(path))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Bench {
    /// The daemon and apiserver of the CNI workload, serving `pods` pod names.
    pub(super) fn cni_node(&mut self, pods: usize) -> anyhow::Result<&mut CniNode> {
        if self.cni.is_none() {
            let dir = Tmpfs::mount(self.scratch.join("cni-daemon"))?;
            let kubeconfig = dir.0.join("kubeconfig");
            let mut api = Command::new(self.bin.join("probe-apiserver"));
            api.arg("--kubeconfig").arg(&kubeconfig).args([
                "--node",
                NODE,
                "--count",
                &pods.to_string(),
            ]);
            let api = scene::spawn("probe-apiserver", api, "listening")?;
            let cg = Cgroup::new("rbc-")?;
            let pins = PathBuf::from(format!("/sys/fs/bpf/redirect-bench-cni-{}", self.id));
            // Its log goes to a file, not to a pipe a reader thread of this process wakes for
            // during the timed ADD: its "pod enrolled" lines say where each ADD's time went
            // (`phases`), written as a node's daemon writes them at its default level.
            let log = self.scratch.join("cni-daemon.log");
            let mut daemon = Command::new("sh");
            daemon
                .args(["-c", "exec \"$@\" 2>>\"$0\""])
                .arg(&log)
                .arg(self.bin.join("redirect"))
                .arg("daemon")
                .arg("--bpffs")
                .arg(&pins)
                .arg("--cgroup")
                .arg(cg.path())
                .arg("--proxy-cgroup")
                .arg(cg.path())
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["--node-name", NODE])
                .env("REDIRECT_DAEMON_DIR", &dir.0)
                .env("RUST_LOG", "warn,redirect_daemon::server::pods=info");
            let daemon = scene::spawn("redirect daemon", daemon, "ready ")?;
            self.cni = Some(CniNode {
                daemon: Some(daemon),
                _api: api,
                cg,
                pins,
                dir,
                next: 0,
            });
        }
        self.cni.as_mut().context("CNI node")
    }
}
