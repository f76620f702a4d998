//! The per-pod attach scope (issue 48): the cgroup programs are pinned unattached in `progs/`
//! and linked at each enrolled pod's own cgroup (`cgroups/ID/PROG-N`, ID its cgroup id), so
//! the node's other sockets never dispatch a program. The root scope links them once at the
//! datapath's cgroup (`links/PROG-N`). A pod cgroup's links go when its last enrollment goes,
//! or, when the kubelet removes the cgroup first, when the tick sees the kernel detached them.
use std::{
    fs::File,
    os::fd::AsFd as _,
    path::{Path, PathBuf},
};

use super::{pins::pin_err, NodeDatapath};
use crate::{
    attach::plan,
    cgroup,
    error::{Error, Result},
    phases::Phases,
    sys::bpfsys,
};

/// Where a node datapath links its cgroup programs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum AttachScope {
    /// Once, at the datapath's cgroup (the cgroup v2 root on a node): every socket below it
    /// runs the hooks, which exit early where no policy is.
    #[default]
    Root,
    /// At each enrolled pod's cgroup, at enrollment: only enrolled pods' sockets run a hook.
    PerPod,
}

impl std::fmt::Display for AttachScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Root => "root",
            Self::PerPod => "per-pod",
        })
    }
}

/// The pins directory of the per-pod scope (present only in that scope).
pub(crate) const CGROUPS: &str = "cgroups";

/// The cgroup programs, each once, in plan order (what the per-pod scope pins in `progs/`).
pub(super) fn cgroup_programs() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = plan::cgroup_plan(Path::new("/"), Path::new("/"))
        .into_iter()
        .map(|s| s.program)
        .collect();
    names.dedup();
    names
}

impl NodeDatapath {
    /// The scope this datapath was created with, or switched to (the pins say: `cgroups/`
    /// exists only in the per-pod scope).
    pub fn scope(&self) -> AttachScope {
        scope_of(&self.dir)
    }

    /// The scope of the datapath pinned at `dir`.
    pub fn pinned_scope(dir: &Path) -> AttachScope {
        scope_of(dir)
    }

    /// Links every cgroup program at pod cgroup `dir` (the plan with the pod as both the
    /// application's and the proxy's cgroup) and pins the links in `cgroups/ID`; returns ID and
    /// where the time went (`cgroup_progs`: the directory checked and, for the first pod only, the
    /// pinned programs opened,
    /// `cgroup_links`: the
    /// links made, `cgroup_pins`: pinned). Already linked (a retried ADD, a re-created sandbox
    /// of the same pod): nothing to do. Nothing is pinned before every link is made, and any
    /// error leaves nothing (the links made close with their descriptors).
    pub fn attach_pod_cgroup(&self, dir: &Path) -> Result<(u64, Phases)> {
        let mut phases = Phases::start();
        if self.scope() != AttachScope::PerPod {
            return Err(Error::Scope {
                dir: self.dir.clone(),
                scope: self.scope(),
                why: "it links its programs once, at its own cgroup, never at a pod's",
            });
        }
        let dir = cgroup::validate_quick(dir)?;
        let id = cgroup::id(&dir)?;
        let pins = self.pod_pins(id);
        if pins.exists() && !self.pod_cgroup_gone(id) {
            return Ok((id, phases));
        }
        let _ = std::fs::remove_dir_all(&pins);
        let made = self.link_at(&dir, &pins, &mut phases);
        if made.is_err() {
            let _ = std::fs::remove_dir_all(&pins);
        }
        made.map(|()| (id, phases))
    }

    pub(super) fn link_at(&self, dir: &Path, pins: &Path, phases: &mut Phases) -> Result<()> {
        let target = File::open(dir).map_err(|e| Error::io("opening", dir, e))?;
        let plan = plan::cgroup_plan(dir, dir);
        let progs = self.pod_progs()?;
        phases.mark("cgroup_progs");
        let mut links = Vec::with_capacity(plan.len());
        for step in &plan {
            let prog = progs
                .iter()
                .find(|(name, _)| *name == step.program)
                .map(|(_, fd)| fd)
                .ok_or(Error::Missing {
                    kind: "pinned program",
                    name: step.program,
                })?;
            let link = bpfsys::link_create(prog.as_fd(), target.as_fd(), step.attach_type)
                .map_err(|source| Error::Pin {
                    op: "attaching (bpf_link_create) at",
                    path: dir.to_path_buf(),
                    source,
                })?;
            links.push(link);
        }
        phases.mark("cgroup_links");
        std::fs::create_dir_all(pins).map_err(pin_err("creating", pins))?;
        for (n, (step, link)) in plan.iter().zip(&links).enumerate() {
            let path = pins.join(format!("{}-{}", step.program, n + 1));
            bpfsys::obj_pin(link.as_fd(), &path).map_err(pin_err("pinning link", &path))?;
        }
        phases.mark("cgroup_pins");
        tracing::debug!(cgroup = %dir.display(), pins = %pins.display(), "pod cgroup linked");
        Ok(())
    }

    /// The pinned cgroup programs, opened once.
    pub(super) fn pod_progs(&self) -> Result<&[(&'static str, std::os::fd::OwnedFd)]> {
        if let Some(progs) = self.pod_progs.get() {
            return Ok(progs);
        }
        let mut progs = Vec::new();
        for name in cgroup_programs() {
            let pin = self.dir.join("progs").join(name);
            progs.push((
                name,
                bpfsys::obj_get(&pin).map_err(pin_err("opening program", &pin))?,
            ));
        }
        Ok(self.pod_progs.get_or_init(|| progs))
    }

    /// Unpins (detaches) the links of pod cgroup `id`; none: nothing to do.
    pub fn detach_pod_cgroup(&self, id: u64) -> Result<()> {
        super::pins::remove_dir(&self.pod_pins(id))
    }

    /// Unpins the links at pod cgroup `dir`, if any.
    pub fn detach_pod_cgroup_at(&self, dir: &Path) -> Result<()> {
        self.detach_pod_cgroup(cgroup::id(dir)?)
    }

    /// The pod cgroups linked, by cgroup id.
    pub fn pod_cgroups(&self) -> Vec<u64> {
        std::fs::read_dir(self.dir.join(CGROUPS)).map_or_else(
            |_| Vec::new(),
            |d| {
                d.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse().ok())
                    .collect()
            },
        )
    }

    /// Whether the kernel detached pod cgroup `id`'s links (the cgroup is gone): its first
    /// link reports cgroup 0. No link, or one that cannot be read: gone too (nothing captures).
    pub fn pod_cgroup_gone(&self, id: u64) -> bool {
        let first = std::fs::read_dir(self.pod_pins(id))
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok());
        let Some(first) = first else {
            return true;
        };
        bpfsys::obj_get(&first.path())
            .and_then(|l| bpfsys::link_cgroup_id(l.as_fd()))
            .map_or(true, |at| at != id)
    }

    /// Unpins the links of every pod cgroup that is gone; returns their ids.
    pub fn sweep_pod_cgroups(&self) -> Vec<u64> {
        let gone: Vec<u64> = self
            .pod_cgroups()
            .into_iter()
            .filter(|id| self.pod_cgroup_gone(*id))
            .collect();
        for id in &gone {
            if let Err(e) = self.detach_pod_cgroup(*id) {
                tracing::warn!(cgroup_id = id, error = %e, "cannot unpin a gone pod cgroup's links");
            }
        }
        gone
    }

    fn pod_pins(&self, id: u64) -> PathBuf {
        self.dir.join(CGROUPS).join(id.to_string())
    }
}

/// The scope of the datapath pinned at `dir`.
pub(crate) fn scope_of(dir: &Path) -> AttachScope {
    if dir.join(CGROUPS).is_dir() {
        AttachScope::PerPod
    } else {
        AttachScope::Root
    }
}
