//! The links of an upgrade in place: each pinned cgroup or netns link with the program it
//! runs and the new build's program for it, checked against this build's attach plan before
//! anything changes, and put back on its old program when a later step fails.
use std::{
    os::fd::{AsFd as _, OwnedFd},
    path::{Path, PathBuf},
};

use aya::Ebpf;

use super::layout::Layout;
use crate::{
    attach::plan,
    cgroup,
    error::{Error, Result},
    sys::{bpfsys, bpfsys_replace as replace},
};

/// One cgroup or netns link and the programs it runs before and after.
pub(super) struct Swap {
    pub(super) pin: PathBuf,
    pub(super) link: OwnedFd,
    pub(super) old: OwnedFd,
    pub(super) new: OwnedFd,
}

/// The pinned cgroup links, each with its old program and its new one (loaded, verified). The
/// pins must be exactly those of this build's attach plan for the recorded cgroups.
pub(super) fn cgroup_swaps(dir: &Path, record: &Layout, ebpf: &mut Ebpf) -> Result<Vec<Swap>> {
    let not = |why: String| Error::NotUpgradable {
        dir: dir.to_path_buf(),
        why,
    };
    let app = cgroup::path_of_id(record.app_cgroup).ok_or_else(|| {
        not(format!(
            "its attach cgroup (id {}) is gone",
            record.app_cgroup
        ))
    })?;
    let proxy = cgroup::path_of_id(record.proxy_cgroup).ok_or_else(|| {
        not(format!(
            "its proxy cgroup (id {}) is gone",
            record.proxy_cgroup
        ))
    })?;
    let steps = plan::cgroup_plan(&app, &proxy);
    let mut pinned: Vec<String> = std::fs::read_dir(dir.join("links"))
        .map_err(|e| Error::io("listing", dir.join("links"), e))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let mut wanted: Vec<String> = (1..)
        .zip(&steps)
        .map(|(n, s)| format!("{}-{n}", s.program))
        .collect();
    pinned.sort();
    wanted.sort();
    if pinned != wanted {
        return Err(not(format!(
            "its links {pinned:?} are not this build's attach plan {wanted:?}"
        )));
    }
    (1..)
        .zip(&steps)
        .map(|(n, s)| {
            swap(
                dir,
                &dir.join("links").join(format!("{}-{n}", s.program)),
                ebpf,
                s.program,
            )
        })
        .collect()
}

/// Every namespace's sk_lookup link with the new sk_lookup program.
pub(super) fn netns_swaps(
    dir: &Path,
    ebpf: &mut Ebpf,
    sk_lookup: &'static str,
) -> Result<Vec<Swap>> {
    let Ok(entries) = std::fs::read_dir(dir.join("netns")) else {
        return Ok(Vec::new());
    };
    entries
        .flatten()
        .map(|e| swap(dir, &e.path(), ebpf, sk_lookup))
        .collect()
}

pub(super) fn swap(dir: &Path, pin: &Path, ebpf: &mut Ebpf, program: &'static str) -> Result<Swap> {
    let fail = |op, source| Error::UpgradeFailed {
        dir: dir.to_path_buf(),
        op,
        what: pin.display().to_string(),
        source,
    };
    let link = bpfsys::obj_get(pin).map_err(|e| fail("opening link", e))?;
    let id = replace::link_prog_id(link.as_fd()).map_err(|e| fail("reading link", e))?;
    let old = replace::prog_by_id(id).map_err(|e| fail("opening the program of link", e))?;
    let prog = plan::loaded(ebpf, program)?;
    let new = prog
        .fd()
        .map_err(|source| Error::Verify {
            name: program,
            source: Box::new(source),
        })?
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| fail("duplicating the new program for", e))?;
    Ok(Swap {
        pin: pin.to_path_buf(),
        link,
        old,
        new,
    })
}

pub(super) fn roll_back(done: &[&Swap]) {
    for swap in done.iter().rev() {
        if let Err(e) = replace::link_update(swap.link.as_fd(), swap.old.as_fd(), swap.new.as_fd())
        {
            tracing::error!(link = %swap.pin.display(), error = %e, "could not put the old program back");
        }
    }
}
