//! Creating the pinned datapath (load, attach by bpf_link, pin) and the bpffs it lives on:
//! mounting and removing (the lock is `lock.rs`).
use std::{os::fd::AsFd as _, path::Path};

use aya::{Ebpf, EbpfLoader};
use redirect_common::map_names;

use super::{
    layout::{self, Layout, Owner, LAYOUT_VERSION},
    pod_links::{self, AttachScope},
    NodeAttach, NodeDatapath,
};
use crate::{
    attach::plan,
    cgroup,
    error::{Error, Result},
    load::object,
    load::preflight,
    sizing,
    sys::bpfsys,
};

pub(super) fn pin_err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Pin { op, path, source }
}

fn is_bpffs(path: &Path) -> bool {
    // `BPF_FS_MAGIC` (linux/magic.h; rustix has no constant for it), typed as `f_type` is on
    // this architecture (with rustix's own syscalls, whatever the libc: glibc or the musl image).
    const BPF_FS_MAGIC: rustix::fs::FsWord = 0xcafe_4a11;
    rustix::fs::statfs(path).is_ok_and(|s| s.f_type == BPF_FS_MAGIC)
}

/// Makes sure `dir`'s parent is a bpf filesystem. None is ever mounted here: one mounted by
/// this process in a container's own mount namespace would be private to it, and a datapath
/// pinned there would die with the container while looking applied.
pub(super) fn ensure_bpffs(dir: &Path) -> Result<()> {
    let parent = dir.parent().unwrap_or(Path::new("/"));
    if is_bpffs(parent) {
        return Ok(());
    }
    Err(Error::NoBpffs {
        dir: dir.to_path_buf(),
        mount: parent.to_path_buf(),
    })
}

/// The loader of the node datapath's object for a node sized by `quotas` (`quota`: the
/// handshake quota the programs read, kept alive by the caller for the loader's life).
pub(super) fn loader<'a>(quotas: &sizing::Quotas, quota: &'a u64) -> EbpfLoader<'a> {
    let mut loader = EbpfLoader::new();
    loader.override_global("AYA_LOG_LEVEL", &0u8, false);
    loader.override_global(redirect_common::HANDOFF_QUOTA_GLOBAL, quota, true);
    for (name, size) in quotas.map_sizes() {
        loader.map_max_entries(name, size);
    }
    loader
}

impl NodeDatapath {
    pub(super) fn create(dir: &Path, attach: &NodeAttach) -> Result<()> {
        preflight::require_root()?;
        let app = match &attach.cgroup {
            Some(p) => cgroup::validate(p)?,
            None => cgroup::validate(&cgroup::cgroup2_root()?)?,
        };
        let proxy = match &attach.proxy_cgroup {
            Some(p) => cgroup::validate(p)?,
            None => app.clone(),
        };
        // Checked only here: a datapath already pinned keeps its own sizing, whatever the flags.
        attach
            .quotas
            .validate()
            .map_err(|why| Error::Sizing { why })?;
        let probed = preflight::require_kernel_support()?;
        let sk_lookup = crate::load::probe::sk_lookup_program(&probed);
        ensure_bpffs(dir)?;
        let object = object::bpf_object().ok_or(Error::NoObject)?;
        let quota = u64::from(attach.quotas.handshakes);
        let mut ebpf = loader(&attach.quotas, &quota)
            .load(object)
            .map_err(|e| Error::Load(Box::new(e)))?;
        let result = Self::pin_all(&mut ebpf, dir, (&app, &proxy, attach.scope), sk_lookup)
            .and_then(|()| sizing::create(dir, &attach.quotas));
        if result.is_err() {
            // Nothing half-applied: the pins are the only thing that outlives this process.
            let _ = std::fs::remove_dir_all(dir);
        }
        result?;
        tracing::info!(dir = %dir.display(), cgroup = %app.display(),
            proxy_cgroup = %proxy.display(), scope = %attach.scope, sk_lookup, quotas = %attach.quotas,
            "node datapath created and pinned");
        Ok(())
    }

    /// Pins maps, cgroup links (the root scope; the per-pod scope pins the cgroup programs
    /// instead, linked at enrollment) and the sk_lookup program `sk_lookup` (under its own
    /// name: the pin is the record of which one the datapath runs, see
    /// [`NodeDatapath::sk_lookup`]).
    fn pin_all(
        ebpf: &mut Ebpf,
        dir: &Path,
        (app, proxy, scope): (&Path, &Path, AttachScope),
        sk_lookup: &'static str,
    ) -> Result<()> {
        let links = match scope {
            AttachScope::Root => "links",
            AttachScope::PerPod => pod_links::CGROUPS,
        };
        for sub in ["maps", "progs", links, "netns"] {
            let p = dir.join(sub);
            std::fs::create_dir_all(&p).map_err(pin_err("creating", &p))?;
        }
        layout::create(
            dir,
            &Layout {
                version: LAYOUT_VERSION,
                owner: Owner::Cli,
                app_cgroup: cgroup::id(app)?,
                proxy_cgroup: cgroup::id(proxy)?,
                daemon_dir: None,
                build: object::build_id(),
            },
        )?;
        for (name, map) in ebpf.maps().filter(|(n, _)| map_names::ALL.contains(n)) {
            let path = dir.join("maps").join(name);
            map.pin(&path).map_err(|e| Error::Pin {
                op: "pinning map",
                path: path.clone(),
                source: std::io::Error::other(e.to_string()),
            })?;
        }
        plan::load_all(ebpf, &plan::programs(sk_lookup))?;
        if scope == AttachScope::PerPod {
            for name in pod_links::cgroup_programs() {
                pin_program(ebpf, dir, name)?;
            }
            return pin_program(ebpf, dir, sk_lookup);
        }
        for (n, link) in plan::link_cgroups(ebpf, app, proxy)?.iter().enumerate() {
            let path = dir
                .join("links")
                .join(format!("{}-{}", link.attachment.program, n + 1));
            bpfsys::obj_pin(link.fd.as_fd(), &path).map_err(pin_err("pinning link", &path))?;
        }
        pin_program(ebpf, dir, sk_lookup)
    }
}

/// Pins loaded program `name` as `progs/NAME`.
fn pin_program(ebpf: &mut Ebpf, dir: &Path, name: &'static str) -> Result<()> {
    let prog = plan::loaded(ebpf, name)?;
    let path = dir.join("progs").join(name);
    prog.pin(&path).map_err(|e| Error::Pin {
        op: "pinning program",
        path: path.clone(),
        source: std::io::Error::other(e.to_string()),
    })
}

/// Unpins everything under `dir` (detaching the programs), if it exists.
pub fn remove_dir(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(pin_err("removing", dir)(e)),
    }
}
