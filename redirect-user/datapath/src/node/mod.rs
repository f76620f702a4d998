//! The persistent node datapath of `redirect istio-iptables`: programs, links and maps pinned
//! in bpffs so capture outlives the command, shared by every namespace that has a policy.
//!
//! Layout under the pin directory (default `/sys/fs/bpf/redirect`): `maps/NAME`,
//! `progs/redirect_sk_lookup` (or `progs/redirect_sk_lookup_no_ifindex` on a kernel without
//! sk_lookup's `ingress_ifindex`: the pin says which one runs), `links/HOOK-N` (cgroup links),
//! `netns/COOKIE` (a namespace's
//! sk_lookup link). Removing the directory detaches everything.
mod apply;
mod claims;
mod entries;
mod flock;
mod index;
pub(crate) mod layout;
mod lock;
mod lookup_key;
mod needs;
mod pins;
pub(crate) mod pod_links;
mod removal;
mod scope_switch;
pub(crate) mod upgrade;
mod upgrade_links;
mod upgrade_pods;
mod upgrade_policies;

pub use flock::PinsHeld;
use redirect_common::NetnsCookie;
use std::{
    collections::HashMap as StdHashMap,
    path::{Path, PathBuf},
};

use aya::maps::{Map, MapData};
use redirect_common::{map_names, prog_names};

pub use self::lock::{lock, open_to_all};
pub use self::lookup_key::SkLookupKey;
pub use self::pins::remove_dir;
pub use self::pod_links::AttachScope;
use redirect_policy::Policy;

use crate::{
    error::{Error, Result},
    maps::inbound,
    maps::outbound,
    maps::store::{hash, MapStore, PinnedMaps},
    netns::routes,
    netns::NetnsHandle,
    sizing,
};

/// Where the node datapath is pinned unless `--bpffs` or `REDIRECT_BPFFS` says otherwise.
pub const DEFAULT_DIR: &str = "/sys/fs/bpf/redirect";

/// Where the programs attach when the datapath is created.
#[derive(Debug, Clone)]
pub struct NodeAttach {
    /// Cgroup whose processes are captured (default: the cgroup v2 root).
    pub cgroup: Option<PathBuf>,
    /// Cgroup of the proxies' listeners (default: the same as `cgroup`).
    pub proxy_cgroup: Option<PathBuf>,
    /// Node sizing: map sizes and per-namespace quotas (used when the datapath is created).
    pub quotas: sizing::Quotas,
    /// Where the cgroup programs are linked: once at `cgroup`, or at each enrolled pod's
    /// cgroup (used when the datapath is created; a datapath pinned keeps its own).
    pub scope: AttachScope,
}

/// The pinned datapath, opened.
#[derive(Debug)]
pub struct NodeDatapath {
    dir: PathBuf,
    maps: PinnedMaps,
    quotas: sizing::Quotas,
    sk_lookup: &'static str,
    /// Whether every apply first removes the policies of namespaces that are gone (the CLI,
    /// which has no other moment to); the daemon does it on its tick instead.
    sweep_on_apply: bool,
    /// What each namespace owns in the maps (read on first use, kept by every write here).
    index: Option<index::Index>,
    /// Per-pod scope: the pinned cgroup programs, opened on the first pod's link and held
    /// (opening twelve pins costs an ADD about 0.1 ms).
    pod_progs: std::sync::OnceLock<Vec<(&'static str, std::os::fd::OwnedFd)>>,
}

/// What `apply` did for a namespace.
#[derive(Debug, Clone)]
pub struct Applied {
    /// Netns cookie.
    pub cookie: NetnsCookie,
    /// The namespace's own addresses (routed via `lo`).
    pub addrs: Vec<std::net::IpAddr>,
    /// Whether IPv6 follows the policy.
    pub ipv6: bool,
    /// Whether inbound capture (sk_lookup) is on.
    pub inbound: bool,
    /// Where the apply's time went.
    pub phases: crate::phases::Phases,
}

/// A node datapath opened at its directory, and whether this call created it.
#[derive(Debug)]
pub struct Opened {
    /// The datapath.
    pub datapath: NodeDatapath,
    /// Whether it was loaded, attached and pinned by this call.
    pub created: bool,
}

/// One namespace's policy applied at a directory, and whether that created the datapath.
#[derive(Debug)]
pub struct AppliedAt {
    /// What was applied.
    pub applied: Applied,
    /// Whether the datapath was created for it.
    pub created: bool,
}

/// What the kernel's maps hold for one namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelPolicy {
    /// An outbound policy (`NETNS_OUTBOUND`).
    pub outbound: bool,
    /// An inbound policy (`NETNS_INBOUND`).
    pub inbound: bool,
}

impl NodeDatapath {
    /// True when a datapath is pinned at `dir`.
    pub fn exists(dir: &Path) -> bool {
        dir.join("maps").join(map_names::NETNS_OUTBOUND).exists()
    }

    /// Opens the datapath pinned at `dir`; one of another layout is an error naming both.
    pub fn open(dir: &Path) -> Result<Self> {
        layout::check(dir)?;
        let mut maps = StdHashMap::new();
        for name in map_names::ALL {
            let path = dir.join("maps").join(name);
            if !path.exists() {
                continue;
            }
            let data = MapData::from_pin(&path).map_err(|source| Error::Map {
                op: "opening the pinned",
                name: path.display().to_string(),
                source: Box::new(source),
            })?;
            let map = Map::from_map_data(data).map_err(|source| Error::Map {
                op: "opening the pinned",
                name: path.display().to_string(),
                source: Box::new(source),
            })?;
            maps.insert(name, map);
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            maps: PinnedMaps(maps),
            quotas: sizing::read(dir)?,
            sk_lookup: pinned_sk_lookup(dir),
            sweep_on_apply: true,
            index: None,
            pod_progs: std::sync::OnceLock::new(),
        })
    }

    /// Whether each apply first removes the policies of namespaces that are gone (default
    /// on). Off for the daemon, which does it on its own timer: off the pod-start path.
    pub fn sweep_on_apply(&mut self, on: bool) {
        self.sweep_on_apply = on;
    }

    /// The sk_lookup program this datapath runs, as pinned when it was created:
    /// [`prog_names::SK_LOOKUP`], or [`prog_names::SK_LOOKUP_NO_IFINDEX`] on a kernel without
    /// `ingress_ifindex` (then policies with inbound `-c`/`-k` are refused).
    pub(crate) fn sk_lookup(&self) -> &'static str {
        self.sk_lookup
    }

    /// Opens the datapath at `dir`, creating (loading, attaching, pinning) it when absent.
    pub fn open_or_create(dir: &Path, attach: &NodeAttach) -> Result<Opened> {
        if Self::exists(dir) {
            let dp = Self::open(dir)?;
            dp.check_attach(attach)?;
            return Ok(Opened {
                datapath: dp,
                created: false,
            });
        }
        Self::create(dir, attach)?;
        Ok(Opened {
            datapath: Self::open(dir)?,
            created: true,
        })
    }

    /// Applies `policy` to one namespace, creating the datapath first when none is pinned; a
    /// datapath created for a call that then fails is removed again (nothing half-applied).
    pub fn apply_at(
        dir: &Path,
        attach: &NodeAttach,
        ns: &NetnsHandle,
        policy: &Policy,
    ) -> Result<AppliedAt> {
        let Opened {
            datapath: mut dp,
            created,
        } = Self::open_or_create(dir, attach)?;
        match dp.apply(ns, policy) {
            Ok(applied) => Ok(AppliedAt { applied, created }),
            Err(e) => {
                if created {
                    drop(dp);
                    remove_dir(dir)?;
                }
                Err(e)
            }
        }
    }

    /// An explicit `--cgroup` must name the cgroup the datapath is attached at: it is never
    /// moved, nor silently left elsewhere.
    pub fn check_attach(&self, attach: &NodeAttach) -> Result<()> {
        if self.scope() != attach.scope {
            return Err(Error::Scope {
                dir: self.dir.clone(),
                scope: self.scope(),
                why: match attach.scope {
                    AttachScope::Root => "a namespace enrolled outside a pod (no pod cgroup to link at) would have a policy and no program: enroll pods through its daemon's CNI plugin",
                    AttachScope::PerPod => "its programs run for every socket below its cgroup; remove it (`redirect uninstall`) to change the scope",
                },
            });
        }
        let Some(asked) = &attach.cgroup else {
            return Ok(());
        };
        let recorded = layout::check(&self.dir)?.app_cgroup;
        if crate::cgroup::id(asked)? == recorded {
            return Ok(());
        }
        Err(Error::AttachedElsewhere {
            dir: self.dir.clone(),
            recorded: crate::cgroup::path_of_id(recorded)
                .map_or_else(|| "a cgroup".to_owned(), |p| p.display().to_string()),
            recorded_id: recorded,
            asked: asked.clone(),
        })
    }

    /// The datapath's layout record.
    pub fn layout(&self) -> Result<layout::Layout> {
        layout::check(&self.dir)
    }

    /// The pin directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes one pinned map out (for users that need it owned, such as the trace reader).
    pub fn take_map(&mut self, name: &'static str) -> Result<Map> {
        self.maps
            .0
            .remove(name)
            .ok_or(Error::Missing { kind: "map", name })
    }

    /// What the kernel holds for namespace `cookie`.
    pub fn kernel_policy(&mut self, cookie: NetnsCookie) -> Result<KernelPolicy> {
        let outbound = hash::<NetnsCookie, redirect_common::outbound::OutboundPolicy>(
            &mut self.maps,
            map_names::NETNS_OUTBOUND,
        )?
        .get(&cookie, 0)
        .is_ok();
        let inbound = hash::<NetnsCookie, redirect_common::InboundPolicy>(
            &mut self.maps,
            map_names::NETNS_INBOUND,
        )?
        .get(&cookie, 0)
        .is_ok();
        Ok(KernelPolicy { outbound, inbound })
    }

    /// The pinned maps.
    pub fn maps(&mut self) -> &mut dyn MapStore {
        &mut self.maps
    }

    /// Reads what each namespace owns from the maps again: for a process that keeps the
    /// datapath open while another may write it between two of its locks.
    pub fn reindex(&mut self) -> Result<()> {
        self.index = Some(index::Index::build(&mut self.maps)?);
        Ok(())
    }

    /// Re-reads the namespace's addresses (and, with `-c`, its routes and rules) through the
    /// descriptor `ns` it was applied with and updates the maps when they changed: `OUT_ROUTES`
    /// is recompiled when the routes resolve to other entries than those stored, or the
    /// addresses changed. Returns the addresses now stored.
    pub fn refresh(&mut self, ns: &NetnsHandle, policy: &Policy) -> Result<Vec<std::net::IpAddr>> {
        let (netns_path, cookie) = (ns.path(), ns.cookie());
        let cap = self.quotas.addresses as usize * 4;
        let (held, left_out) = ns.addresses_at_most(cap)?;
        if left_out {
            tracing::error!(netns = %netns_path.display(), read = cap,
                "the namespace holds more addresses than 4 x --quota-addresses: only the first ones \
                are read");
        }
        let (addrs, not_own) = claims::own_only(policy, held);
        if !not_own.is_empty() {
            tracing::debug!(netns = %netns_path.display(),
                not_own = %redirect_policy::Comma(&not_own),
                "addresses not the pod's own: left out");
        }
        let addrs = self.without_taken(netns_path, cookie, addrs)?;
        let addrs = self.within_quota(netns_path, addrs);
        let old = self.index()?.owned(cookie);
        let (mut a, mut b) = (addrs.clone(), old.addrs.clone());
        a.sort();
        b.sort();
        let addrs_changed = a != b;
        if addrs_changed {
            inbound::sync_addresses(&mut self.maps, netns_path, cookie, &old.addrs, &addrs)?;
            self.index()?.set_addrs(cookie, &addrs);
            tracing::info!(netns = %netns_path.display(), addrs = %redirect_policy::Comma(&addrs),
                "pod addresses changed");
        }
        if !policy.exclude_interfaces.is_empty() {
            let mut routes =
                routes::resolve_in(ns, &policy.exclude_interfaces, self.quotas.read_cap())?;
            // The pod's own routes are its own to add: stored within --quota-routes, as at
            // apply, the first ones kept (a route left out only captures more: fail closed).
            let quota = self.quotas.routes as usize;
            if routes.entries.len() > quota {
                let left_out = routes.entries.split_off(quota).len();
                tracing::error!(netns = %netns_path.display(), quota, left_out,
                    "the namespace routes more via its excluded interfaces than --quota-routes: the \
                    first ones kept, the others captured");
            }
            if addrs_changed || outbound::stored_routes(&mut self.maps, cookie)? != routes.entries {
                routes::warn_doubts(netns_path, &routes);
                tracing::info!(netns = %netns_path.display(), entries = routes.entries.len(),
                    "routes changed: OUT_ROUTES recompiled");
                let ipv6 = ipv6_follows(policy, &addrs);
                let mut compiled = outbound::compile(policy, ipv6, routes.entries)?;
                compiled.policy.netns_ino = ns.inode();
                let out = outbound::write_over(&mut self.maps, cookie, &compiled, &old.out)?;
                self.index()?.set_out(cookie, out);
            }
        }
        Ok(addrs)
    }

    /// Whether something listens on the namespace's outbound port (the proxy is up).
    pub fn proxy_listening(&mut self, cookie: NetnsCookie) -> bool {
        hash::<NetnsCookie, u64>(&mut self.maps, map_names::PROXY_LISTENERS)
            .is_ok_and(|m| m.get(&cookie, 0).is_ok_and(|n| n > 0))
    }
}

/// The sk_lookup program pinned under `dir/progs`: the one without `ingress_ifindex` when
/// that is what is pinned, else the full one (whose absence attaching then reports).
fn pinned_sk_lookup(dir: &Path) -> &'static str {
    if dir
        .join("progs")
        .join(prog_names::SK_LOOKUP_NO_IFINDEX)
        .exists()
    {
        prog_names::SK_LOOKUP_NO_IFINDEX
    } else {
        prog_names::SK_LOOKUP
    }
}

/// Whether a namespace's IPv6 traffic follows the policy: istio-iptables writes ip6tables rules
/// when the pod has a usable (not link-local) IPv6 address, or dual stack is asked for.
pub fn ipv6_follows(policy: &Policy, addrs: &[std::net::IpAddr]) -> bool {
    policy.dual_stack
        || addrs.iter().any(|ip| match ip {
            std::net::IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) != 0xfe80,
            std::net::IpAddr::V4(_) => false,
        })
}

/// Removes TPROXY mode's routing from `ns` when it has any, logging (not returning) a failure:
/// for removal paths that must go on whatever happens in the namespace.
pub fn remove_tproxy_logged(ns: &NetnsHandle) {
    if ns.has_tproxy() {
        if let Err(e) = ns.remove_tproxy() {
            tracing::warn!(netns = %ns.path().display(), error = %e, "removing TPROXY routing \
                failed: left in the namespace");
        }
    }
}
