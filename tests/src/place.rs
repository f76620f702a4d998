//! Where a probe binary runs: `--cgroup`, `--netns`, `--uid`, `--gid`, entered in that order.
use std::path::PathBuf;

use anyhow::Context as _;
use nix::{
    sched::{setns, CloneFlags},
    unistd::{setgid, setgroups, setuid, Gid, Uid},
};

/// The shared command-line arguments of the probe binaries.
#[derive(Debug, Clone, clap::Args)]
pub struct Place {
    /// Network namespace file to enter first.
    #[arg(long)]
    pub netns: Option<PathBuf>,
    /// Cgroup v2 directory to move into first.
    #[arg(long)]
    pub cgroup: Option<PathBuf>,
    /// Uid to switch to (after cgroup and netns).
    #[arg(long)]
    pub uid: Option<u32>,
    /// Gid to switch to (after cgroup and netns; supplementary groups are cleared).
    #[arg(long)]
    pub gid: Option<u32>,
}

impl Place {
    /// Moves this process into the cgroup and network namespace, then drops to uid/gid.
    pub fn enter(&self) -> anyhow::Result<()> {
        if let Some(cg) = &self.cgroup {
            std::fs::write(cg.join("cgroup.procs"), b"0")
                .with_context(|| format!("enter cgroup {}", cg.display()))?;
        }
        if let Some(ns) = &self.netns {
            let file = std::fs::File::open(ns).with_context(|| format!("open {}", ns.display()))?;
            setns(file, CloneFlags::CLONE_NEWNET).context("setns")?;
        }
        if self.uid.is_some() || self.gid.is_some() {
            setgroups(&[]).context("setgroups")?;
        }
        if let Some(gid) = self.gid {
            setgid(Gid::from_raw(gid)).context("setgid")?;
        }
        if let Some(uid) = self.uid {
            setuid(Uid::from_raw(uid)).context("setuid")?;
        }
        Ok(())
    }
}
