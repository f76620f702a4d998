//! Upgrading a pinned datapath in place, with no capture gap: every map whose definition is
//! unchanged is kept (with all state: policies, hand-offs, per-socket storage), a changed map
//! is created beside it and its entries copied, then each pinned link gets the new program
//! with `BPF_LINK_UPDATE` in the attach plan's order (readers of the state first, capture
//! last), and only then do the new maps take the old pins' names. A failure before the first
//! link update changes nothing; one during the updates puts every link back on its old program.
//! The per-pod scope's links are each pod cgroup's ([`super::upgrade_pods`]).
use std::{
    os::fd::AsFd as _,
    path::{Path, PathBuf},
};

use aya::Ebpf;
use redirect_common::map_names;

use super::{
    layout::{self, Layout, LAYOUT_VERSION, UPGRADES_FROM},
    pinned_sk_lookup,
    pins::{loader, pin_err},
    pod_links::{scope_of, AttachScope},
    upgrade_links::{cgroup_swaps, netns_swaps, roll_back, Swap},
    upgrade_pods::{commit_programs, pod_swaps},
    NodeDatapath,
};
use crate::{
    attach::plan,
    error::{Error, Result},
    load::{object, preflight},
    sizing,
    sys::bpfsys,
    sys::bpfsys_replace::{self as replace, MapDef},
};

/// What an upgrade did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upgraded {
    /// Layout version and build id before.
    pub from: (u32, u64),
    /// Layout version and build id after (this build's).
    pub to: (u32, u64),
    /// Maps kept as they were, state and all.
    pub kept: Vec<&'static str>,
    /// Maps whose definition changed: created anew, with the number of entries carried over.
    pub carried: Vec<(&'static str, usize)>,
    /// Maps the old layout did not have: created empty.
    pub created: Vec<&'static str>,
    /// cgroup links given the new programs.
    pub links: usize,
    /// Namespaces whose sk_lookup link got the new program (those already gone are skipped).
    pub namespaces: usize,
    /// Policies of older builds completed with what this build derives from them
    /// (`upgrade_policies`: a TPROXY namespace's `OUT_TPROXY`).
    pub completed: usize,
}

/// Whether the datapath at `dir` runs another build's programs that this build can take over
/// in place: its record (`Some`), or `None` when it is this build's. Another layout this build
/// does not upgrade is an error naming both versions.
pub fn needed(dir: &Path) -> Result<Option<Layout>> {
    let record = layout::read(dir)?;
    let Some(record) = record else {
        return Err(Error::Layout {
            dir: dir.to_path_buf(),
            found: 0,
            expected: LAYOUT_VERSION,
        });
    };
    if record.version == LAYOUT_VERSION && record.build == object::build_id() {
        return Ok(None);
    }
    if record.version == LAYOUT_VERSION || UPGRADES_FROM.contains(&record.version) {
        return Ok(Some(record));
    }
    Err(Error::Layout {
        dir: dir.to_path_buf(),
        found: record.version,
        expected: LAYOUT_VERSION,
    })
}

/// A map of the new object and what becomes of it.
struct Staged {
    name: &'static str,
    /// Pin of the old map, if there is one.
    old: PathBuf,
    /// `Some(staged pin)` when it is created anew (its definition changed, or it is new).
    new: Option<PathBuf>,
}

impl NodeDatapath {
    /// Upgrades the datapath pinned at `dir` to this build in place (see the module docs), when
    /// [`needed`]. The caller holds the node lock; a live daemon other than this process must
    /// not own it. Returns what was done, or `None` when it already runs this build.
    pub fn upgrade(dir: &Path) -> Result<Option<Upgraded>> {
        preflight::require_root()?;
        let Some(record) = needed(dir)? else {
            return Ok(None);
        };
        if layout::daemon_up(dir, &record) {
            if let layout::Owner::Daemon { pid, .. } = record.owner {
                if pid != std::process::id() {
                    return Err(Error::OwnedByDaemon {
                        dir: dir.to_path_buf(),
                        pid,
                    });
                }
            }
        }
        let object = object::bpf_object().ok_or(Error::NoObject)?;
        let quotas = sizing::read(dir)?;
        let staging = dir.join("staged");
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging).map_err(pin_err("creating", &staging))?;
        let result = Self::upgrade_staged(dir, &staging, &record, object, &quotas);
        let _ = std::fs::remove_dir_all(&staging);
        let mut done = result?;
        // The programs run this build now; a policy they would read differently is completed
        // (a failure leaves it to its next apply, as before this step existed).
        match super::upgrade_policies::complete(dir) {
            Ok(n) => done.completed = n,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "completing the policies of older \
                    builds failed: each is completed at its next apply")
            }
        }
        let carried: Vec<String> = done
            .carried
            .iter()
            .map(|(m, n)| format!("{m}:{n}"))
            .collect();
        tracing::info!(completed = done.completed, dir = %dir.display(), from = done.from.0,
            to = done.to.0, kept = %redirect_policy::Comma(&done.kept),
            carried = %redirect_policy::Comma(&carried), links = done.links,
            namespaces = done.namespaces, "node datapath upgraded in place");
        Ok(Some(done))
    }

    fn upgrade_staged(
        dir: &Path,
        staging: &Path,
        record: &Layout,
        object: &[u8],
        quotas: &sizing::Quotas,
    ) -> Result<Upgraded> {
        let quota = u64::from(quotas.handshakes);
        let staged = stage_maps(dir, staging, object, quotas, &quota)?;
        let mut ld = loader(quotas, &quota);
        for s in &staged {
            ld.map_pin_path(s.name, s.new.clone().unwrap_or_else(|| s.old.clone()));
        }
        let mut ebpf = ld.load(object).map_err(|e| Error::Load(Box::new(e)))?;
        let mut carried = Vec::new();
        let mut created = Vec::new();
        for s in staged.iter().filter(|s| s.new.is_some()) {
            if s.old.exists() {
                carried.push((s.name, carry(dir, s)?));
            } else {
                created.push(s.name);
            }
        }
        let sk_lookup = pinned_sk_lookup(dir);
        plan::load_all(&mut ebpf, &plan::programs(sk_lookup))?;
        let scope = scope_of(dir);
        let links = match scope {
            AttachScope::Root => cgroup_swaps(dir, record, &mut ebpf)?,
            AttachScope::PerPod => pod_swaps(dir, &mut ebpf)?,
        };
        let netns = netns_swaps(dir, &mut ebpf, sk_lookup)?;
        // Nothing has changed yet. From here on, a failure puts every link back.
        let mut done: Vec<&Swap> = Vec::new();
        let (mut links_skipped, mut netns_skipped) = (0, 0);
        for (n, swap) in links.iter().chain(netns.iter()).enumerate() {
            match replace::link_update(swap.link.as_fd(), swap.new.as_fd(), swap.old.as_fd()) {
                Ok(()) => done.push(swap),
                // A netns link whose namespace died, a cgroup link whose pod cgroup was
                // removed: nothing runs it any more.
                Err(e) if e.raw_os_error() == Some(libc::ENOLINK) => {
                    if n < links.len() {
                        links_skipped += 1;
                    } else {
                        netns_skipped += 1;
                    }
                }
                Err(e) => {
                    roll_back(&done);
                    return Err(Error::UpgradeFailed {
                        dir: dir.to_path_buf(),
                        op: "replacing the program of link",
                        what: swap.pin.display().to_string(),
                        source: e,
                    });
                }
            }
        }
        // The per-pod scope's programs for the next pods are pinned last, after the maps they
        // read took their names: a failed commit leaves `progs/` as the old links run it.
        let committed = commit(dir, &staged, &mut ebpf, sk_lookup, record).and_then(|()| {
            if scope == AttachScope::PerPod {
                commit_programs(dir, &mut ebpf)
            } else {
                Ok(())
            }
        });
        if let Err(e) = committed {
            roll_back(&done);
            return Err(e);
        }
        Ok(Upgraded {
            from: (record.version, record.build),
            to: (LAYOUT_VERSION, object::build_id()),
            kept: staged
                .iter()
                .filter(|s| s.new.is_none())
                .map(|s| s.name)
                .collect(),
            carried,
            created,
            links: links.len() - links_skipped,
            namespaces: netns.len() - netns_skipped,
            completed: 0,
        })
    }
}

/// Creates every map of the new object under `staging` (sized as the pinned datapath was) and
/// compares each with the pin of the same name: the same definition keeps the old map (its
/// staged twin is unpinned again), another definition keeps the staged one, to be filled.
fn stage_maps(
    dir: &Path,
    staging: &Path,
    object: &[u8],
    quotas: &sizing::Quotas,
    quota: &u64,
) -> Result<Vec<Staged>> {
    let mut ld = loader(quotas, quota);
    let names: Vec<&'static str> = map_names::ALL.to_vec();
    for name in &names {
        ld.map_pin_path(name, staging.join(name));
    }
    drop(ld.load(object).map_err(|e| Error::Load(Box::new(e)))?);
    let mut staged = Vec::new();
    for name in names {
        let new_pin = staging.join(name);
        let old = dir.join("maps").join(name);
        let Some(new_def) = def_at(&new_pin) else {
            continue; // not a map of this object
        };
        let same = def_at(&old).is_some_and(|d| d == new_def);
        if same {
            let _ = std::fs::remove_file(&new_pin);
        } else if let Some(old_def) = def_at(&old) {
            let why = if replace::hash_becomes_trie(&old_def, &new_def) {
                None // the port rules (layout v5): carried key by key
            } else if old_def.map_type != new_def.map_type
                || old_def.key_size != new_def.key_size
                || old_def.value_size != new_def.value_size
            {
                Some("its key or value format changed and this build has no converter for it")
            } else if !replace::copyable(old_def.map_type) {
                Some("its entries cannot be copied from user space")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(Error::NotUpgradable {
                    dir: dir.to_path_buf(),
                    why: format!("map {name} ({old_def}) becomes ({new_def}): {why}"),
                });
            }
        }
        staged.push(Staged {
            name,
            old,
            new: (!same).then_some(new_pin),
        });
    }
    Ok(staged)
}

fn def_at(pin: &Path) -> Option<MapDef> {
    let fd = bpfsys::obj_get(pin).ok()?;
    replace::map_def(fd.as_fd()).ok()
}

/// Copies the entries of the old map into its staged successor.
fn carry(dir: &Path, s: &Staged) -> Result<usize> {
    let new_pin = s.new.as_deref().unwrap_or(&s.old);
    let fail = |op, source| Error::UpgradeFailed {
        dir: dir.to_path_buf(),
        op,
        what: s.old.display().to_string(),
        source,
    };
    let from = bpfsys::obj_get(&s.old).map_err(|e| fail("opening", e))?;
    let to = bpfsys::obj_get(new_pin).map_err(|e| fail("opening the successor of", e))?;
    let def = replace::map_def(from.as_fd()).map_err(|e| fail("reading", e))?;
    let to_def = replace::map_def(to.as_fd()).map_err(|e| fail("reading the successor of", e))?;
    if replace::hash_becomes_trie(&def, &to_def) {
        return replace::copy_hash_into_trie(from.as_fd(), to.as_fd(), def)
            .map_err(|e| fail("copying the entries of", e));
    }
    replace::copy_entries(from.as_fd(), to.as_fd(), def, to_def.max_entries)
        .map_err(|e| fail("copying the entries of", e))
}

/// The new maps take the old pins' names, the new sk_lookup program its pin, and the record
/// this build's layout and build id.
fn commit(
    dir: &Path,
    staged: &[Staged],
    ebpf: &mut Ebpf,
    sk_lookup: &'static str,
    record: &Layout,
) -> Result<()> {
    for s in staged {
        if let Some(new) = &s.new {
            std::fs::rename(new, &s.old).map_err(pin_err("renaming the new map over", &s.old))?;
        }
    }
    let prog = plan::loaded(ebpf, sk_lookup)?;
    let pin = dir.join("progs").join(sk_lookup);
    let next = dir.join("staged").join(sk_lookup);
    prog.pin(&next).map_err(|e| Error::Pin {
        op: "pinning program",
        path: next.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    std::fs::rename(&next, &pin).map_err(pin_err("renaming the new program over", &pin))?;
    layout::write(
        dir,
        &Layout {
            version: LAYOUT_VERSION,
            build: object::build_id(),
            ..record.clone()
        },
    )
}
