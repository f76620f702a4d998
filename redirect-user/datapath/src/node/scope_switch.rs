//! Switching a pinned datapath's attach scope in place (issue 48), with no capture gap: the
//! new scope's links are all made and pinned under a staging name first, the staging
//! directory then takes its real name (the record of the scope), and only then are the old
//! scope's links unpinned. While both exist a pod's socket runs each program twice, the pod
//! cgroup's first; the programs are written to be idempotent under that (a second run finds
//! the connect already redirected, the hand-off already published). Nothing is changed before
//! every new link is made, and a failure removes what was made.
use std::{os::fd::AsFd as _, path::Path};

use super::{
    layout,
    pins::{pin_err, remove_dir},
    pod_links::{cgroup_programs, scope_of, AttachScope, CGROUPS},
    NodeDatapath,
};
use crate::{
    attach::plan,
    cgroup,
    error::{Error, Result},
    phases::Phases,
    sys::{bpfsys, bpfsys_replace as replace},
};

const LINKS: &str = "links";
const NEXT_CGROUPS: &str = "cgroups-next";
const NEXT_LINKS: &str = "links-next";

impl NodeDatapath {
    /// From the root scope to the per-pod scope: the cgroup programs the root links run are
    /// pinned in `progs/`, every pod cgroup of `pods` (the enrolled pods' directories) is
    /// linked, then the node's links go. Returns the pod cgroups linked.
    pub fn switch_to_per_pod(&self, pods: &[&Path]) -> Result<usize> {
        self.expect_scope(AttachScope::Root)?;
        let staged = self.dir.join(NEXT_CGROUPS);
        let _ = std::fs::remove_dir_all(&staged);
        let made = self.pin_root_programs().and_then(|()| {
            let mut phases = Phases::start();
            let mut ids = Vec::new();
            for dir in pods {
                let dir = cgroup::validate_quick(dir)?;
                let id = cgroup::id(&dir)?;
                if !ids.contains(&id) {
                    self.link_at(&dir, &staged.join(id.to_string()), &mut phases)?;
                    ids.push(id);
                }
            }
            std::fs::create_dir_all(&staged).map_err(pin_err("creating", &staged))?;
            let to = self.dir.join(CGROUPS);
            std::fs::rename(&staged, &to).map_err(pin_err("renaming the pod links to", &to))?;
            Ok(ids.len())
        });
        let linked = match made {
            Ok(n) => n,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staged);
                self.unpin_cgroup_programs();
                return Err(e);
            }
        };
        // Every pod is linked at its own cgroup now: the node's links can go (left behind,
        // the next start finishes it: `finish_switch`).
        if let Err(e) = remove_dir(&self.dir.join(LINKS)) {
            tracing::warn!(error = %e, "the node's links stay until the next start");
        }
        tracing::info!(dir = %self.dir.display(), pods = linked, "attach scope switched to per-pod");
        Ok(linked)
    }

    /// From the per-pod scope to the root scope: the plan is linked at the datapath's recorded
    /// cgroups from the pinned programs, then every pod cgroup's links go. Returns the links
    /// made.
    pub fn switch_to_root(&self) -> Result<usize> {
        self.expect_scope(AttachScope::PerPod)?;
        let record = layout::read(&self.dir)?.ok_or(Error::Layout {
            dir: self.dir.clone(),
            found: 0,
            expected: layout::LAYOUT_VERSION,
        })?;
        let gone = |why| Error::Scope {
            dir: self.dir.clone(),
            scope: AttachScope::PerPod,
            why,
        };
        let app = cgroup::path_of_id(record.app_cgroup)
            .ok_or_else(|| gone("its attach cgroup is gone: nothing to link the root scope at"))?;
        let proxy = cgroup::path_of_id(record.proxy_cgroup)
            .ok_or_else(|| gone("its proxy cgroup is gone: nothing to link the root scope at"))?;
        let staged = self.dir.join(NEXT_LINKS);
        let _ = std::fs::remove_dir_all(&staged);
        let made = self.link_root(&app, &proxy, &staged);
        let links = match made {
            Ok(n) => n,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staged);
                return Err(e);
            }
        };
        let to = self.dir.join(LINKS);
        if let Err(e) = std::fs::rename(&staged, &to) {
            let _ = std::fs::remove_dir_all(&staged);
            return Err(pin_err("renaming the node links to", &to)(e));
        }
        // The node's links run now: the pods' go, and with them the record of the scope (left
        // behind, the next start finishes it: `finish_switch`).
        match remove_dir(&self.dir.join(CGROUPS)) {
            Ok(()) => self.unpin_cgroup_programs(),
            Err(e) => tracing::warn!(error = %e, "the pods' links stay until the next start"),
        }
        tracing::info!(dir = %self.dir.display(), links, "attach scope switched to root");
        Ok(links)
    }

    /// Finishes a switch a crash or an error cut short, towards `to`, before the datapath at
    /// `dir` is opened: a staging directory goes, and when both scopes' links are pinned (the
    /// new scope's renamed into place, the old one's not yet unpinned; either set is whole)
    /// the other scope's go. Returns whether anything was finished.
    pub fn finish_switch(dir: &Path, to: AttachScope) -> Result<bool> {
        let _ = std::fs::remove_dir_all(dir.join(NEXT_CGROUPS));
        let _ = std::fs::remove_dir_all(dir.join(NEXT_LINKS));
        if !(dir.join(LINKS).is_dir() && dir.join(CGROUPS).is_dir()) {
            return Ok(false);
        }
        match to {
            AttachScope::PerPod => remove_dir(&dir.join(LINKS))?,
            AttachScope::Root => {
                remove_dir(&dir.join(CGROUPS))?;
                for name in cgroup_programs() {
                    let _ = std::fs::remove_file(dir.join("progs").join(name));
                }
            }
        }
        tracing::info!(dir = %dir.display(), scope = %to, "finished an attach scope switch cut short");
        Ok(true)
    }

    fn expect_scope(&self, scope: AttachScope) -> Result<()> {
        let _ = std::fs::remove_dir_all(self.dir.join(NEXT_CGROUPS));
        let _ = std::fs::remove_dir_all(self.dir.join(NEXT_LINKS));
        if scope_of(&self.dir) == scope {
            return Ok(());
        }
        Err(Error::Scope {
            dir: self.dir.clone(),
            scope: scope_of(&self.dir),
            why: "the switch starts from the other scope",
        })
    }

    /// Pins the program each root link runs as `progs/NAME`, once per name.
    fn pin_root_programs(&self) -> Result<()> {
        let links = self.dir.join(LINKS);
        let names = cgroup_programs();
        let mut pinned = Vec::new();
        for entry in std::fs::read_dir(&links).map_err(|e| Error::io("listing", &links, e))? {
            let path = entry.map_err(|e| Error::io("listing", &links, e))?.path();
            let file = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let Some(name) = names
                .iter()
                .find(|n| file.rsplit_once('-').is_some_and(|(p, _)| p == **n))
            else {
                continue;
            };
            if pinned.contains(name) {
                continue;
            }
            let link = bpfsys::obj_get(&path).map_err(pin_err("opening link", &path))?;
            let id = replace::link_prog_id(link.as_fd()).map_err(pin_err("reading link", &path))?;
            let prog = replace::prog_by_id(id).map_err(pin_err("opening the program of", &path))?;
            let pin = self.dir.join("progs").join(name);
            let _ = std::fs::remove_file(&pin);
            bpfsys::obj_pin(prog.as_fd(), &pin).map_err(pin_err("pinning program", &pin))?;
            pinned.push(*name);
        }
        if let Some(missing) = names.iter().find(|n| !pinned.contains(n)) {
            return Err(Error::Missing {
                kind: "root link of program",
                name: missing,
            });
        }
        Ok(())
    }

    /// Links the attach plan for `app` and `proxy` from the pinned programs, pinned under
    /// `staged` as `links/` names them; returns the links made.
    fn link_root(&self, app: &Path, proxy: &Path, staged: &Path) -> Result<usize> {
        let progs = self.pod_progs()?;
        let plan = plan::cgroup_plan(app, proxy);
        std::fs::create_dir_all(staged).map_err(pin_err("creating", staged))?;
        for (n, step) in plan.iter().enumerate() {
            let prog = progs
                .iter()
                .find(|(name, _)| *name == step.program)
                .map(|(_, fd)| fd)
                .ok_or(Error::Missing {
                    kind: "pinned program",
                    name: step.program,
                })?;
            let target = std::fs::File::open(&step.target)
                .map_err(|e| Error::io("opening", &step.target, e))?;
            let link = bpfsys::link_create(prog.as_fd(), target.as_fd(), step.attach_type)
                .map_err(|source| Error::Pin {
                    op: "attaching (bpf_link_create) at",
                    path: step.target.clone(),
                    source,
                })?;
            let path = staged.join(format!("{}-{}", step.program, n + 1));
            bpfsys::obj_pin(link.as_fd(), &path).map_err(pin_err("pinning link", &path))?;
        }
        Ok(plan.len())
    }

    /// Unpins the cgroup programs from `progs/` (the root scope keeps only sk_lookup's there).
    fn unpin_cgroup_programs(&self) {
        for name in cgroup_programs() {
            let _ = std::fs::remove_file(self.dir.join("progs").join(name));
        }
    }
}
