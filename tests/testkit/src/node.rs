//! A node of the caller's own for `redirect daemon` and the commands that talk to it: a daemon
//! directory, a pin directory under bpffs and an attach cgroup, all removed on drop. The
//! integration tests and the bench (`cargo xtask bench`'s CNI node) start their daemons here.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::Context as _;

use crate::{tmpfs::Tmpfs, unique_name, Cgroup, Child, Spawn};

/// How long a daemon may take to print its `ready ...` line: creating the datapath runs the
/// verifier over every program, seconds of CPU, more while other tests load theirs.
pub const DAEMON_READY: Duration = Duration::from_secs(40);

/// A daemon directory, a pin directory and an attach cgroup of the caller's own.
#[derive(Debug)]
pub struct Node {
    /// The `redirect` binary its commands run.
    pub redirect: PathBuf,
    /// `REDIRECT_DAEMON_DIR` (not created here: the daemon creates it, unless it is a tmpfs).
    pub dir: PathBuf,
    /// `REDIRECT_BPFFS` (not created here: the first datapath creates it).
    pub pins: PathBuf,
    /// Where the datapath attaches: applications and proxies alike.
    pub cgroup: Cgroup,
    /// The tmpfs mounted at `dir`, if any.
    tmpfs: Option<Tmpfs>,
}

impl Node {
    /// Unique directories (under the temporary directory and `/sys/fs/bpf`) and a fresh cgroup,
    /// for the `redirect` binary at `redirect`.
    pub fn new(redirect: &Path) -> anyhow::Result<Self> {
        let name = unique_name("rdn");
        Ok(Self {
            redirect: redirect.to_owned(),
            dir: std::env::temp_dir().join(&name),
            pins: PathBuf::from("/sys/fs/bpf").join(&name),
            cgroup: Cgroup::new("rdc").context("the node's cgroup")?,
            tmpfs: None,
        })
    }

    /// The same with the daemon directory a tmpfs of 16 MiB mounted at `dir`, as a node's
    /// `/run` is.
    pub fn on_tmpfs(redirect: &Path, dir: PathBuf) -> anyhow::Result<Self> {
        let mut node = Self::new(redirect)?;
        let tmpfs = Tmpfs::mount(dir, "16m")?;
        node.dir = tmpfs.path().to_owned();
        node.tmpfs = Some(tmpfs);
        Ok(node)
    }

    /// `redirect ARGS` with this node's environment.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.redirect);
        cmd.args(args)
            .env("REDIRECT_DAEMON_DIR", &self.dir)
            .env("REDIRECT_BPFFS", &self.pins);
        cmd
    }

    /// `redirect daemon --cgroup <the node's> --proxy-cgroup <the node's> EXTRA`: capture and
    /// the proxy hooks attach at the one cgroup that holds applications and proxies alike.
    pub fn daemon_cmd(&self, extra: &[&str]) -> Command {
        let mut cmd = self.cmd(&["daemon"]);
        cmd.arg("--cgroup")
            .arg(self.cgroup.path())
            .arg("--proxy-cgroup")
            .arg(self.cgroup.path())
            .args(extra);
        cmd
    }

    /// Starts `cmd` (a [`Node::daemon_cmd`], with more set on it as needed) the way `spawn`
    /// says and waits for its `ready ...` line, which it returns beside the daemon.
    pub fn start_daemon(&self, spawn: Spawn, cmd: Command) -> anyhow::Result<(Child, String)> {
        let mut child = spawn.start(cmd).context("starting redirect daemon")?;
        let ready = child.wait_line("its ready line", DAEMON_READY, |l| l.starts_with("ready "))?;
        Ok((child, ready))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // A daemon leaves its datapath pinned when it stops: its caller stops it first. One
        // killed while it held the datapath's lock (a tick under way) leaves the lock's
        // directory too, which the next writer of these pins would take: there is none.
        let _ = std::fs::remove_dir_all(&self.pins);
        if let (Some(parent), Some(name)) = (self.pins.parent(), self.pins.file_name()) {
            let _ = std::fs::remove_dir(parent.join(format!("{}_lock", name.to_string_lossy())));
        }
        if self.tmpfs.take().is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The metrics address in a daemon's `ready ... metrics=http://ADDR/metrics` line.
pub fn metrics_addr(ready: &str) -> anyhow::Result<std::net::SocketAddr> {
    ready
        .split("metrics=http://")
        .nth(1)
        .and_then(|url| url.trim().trim_end_matches("/metrics").parse().ok())
        .with_context(|| format!("no metrics address in the ready line {ready:?}"))
}
