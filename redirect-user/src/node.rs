//! The persistent node datapath of `redirect istio-iptables`: programs, links and maps pinned
//! in bpffs so capture outlives the command, shared by every namespace that has a policy.
//!
//! Layout under the pin directory (default `/sys/fs/bpf/redirect`): `maps/NAME`,
//! `progs/redirect_sk_lookup`, `links/HOOK-N` (cgroup links), `netns/COOKIE` (a namespace's
//! sk_lookup link). Removing the directory detaches everything.
use std::{
    collections::HashMap as StdHashMap,
    fs::File,
    os::fd::AsFd as _,
    path::{Path, PathBuf},
};

use aya::{
    maps::{Map, MapData},
    programs::{CgroupSockAddr, CgroupSockopt, SkLookup, SockOps},
    Ebpf, EbpfLoader,
};
use redirect_common::{map_names, prog_names};

use crate::{
    bpfsys::{self, attach_type},
    cgroup,
    datapath::PEER_HOOKS,
    enroll,
    error::{Error, Result},
    inbound::{InboundPorts as SpecPorts, InboundSpec, NoListener},
    netns, object, outbound,
    policy::{InboundPorts, Policy},
    preflight, routes,
    store::{hash, MapStore, PinnedMaps},
};

/// Where the node datapath is pinned unless `--bpffs` or `REDIRECT_BPFFS` says otherwise.
pub const DEFAULT_DIR: &str = "/sys/fs/bpf/redirect";
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Where the programs attach when the datapath is created.
#[derive(Debug, Clone)]
pub struct NodeAttach {
    /// Cgroup whose processes are captured (default: the cgroup v2 root).
    pub cgroup: Option<PathBuf>,
    /// Cgroup of the proxies' listeners (default: the same as `cgroup`).
    pub proxy_cgroup: Option<PathBuf>,
}

/// The pinned datapath, opened.
#[derive(Debug)]
pub struct NodeDatapath {
    dir: PathBuf,
    maps: PinnedMaps,
}

/// What `apply` did for a namespace.
#[derive(Debug, Clone)]
pub struct Applied {
    /// Netns cookie.
    pub cookie: u64,
    /// The namespace's own addresses (routed via `lo`).
    pub addrs: Vec<std::net::IpAddr>,
    /// Whether IPv6 follows the policy.
    pub ipv6: bool,
    /// Whether inbound capture (sk_lookup) is on.
    pub inbound: bool,
    /// The kernel form written.
    pub compiled: outbound::Compiled,
}

fn pin_err(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Pin { op, path, source }
}

fn is_bpffs(path: &Path) -> bool {
    nix::sys::statfs::statfs(path).is_ok_and(|s| s.filesystem_type().0 == BPF_FS_MAGIC)
}

/// Makes sure `dir`'s parent is a bpffs; mounts one at `/sys/fs/bpf` when that is the parent
/// and nothing is mounted there yet (what systemd does on most distributions).
fn ensure_bpffs(dir: &Path) -> Result<()> {
    let parent = dir.parent().unwrap_or(Path::new("/"));
    if is_bpffs(parent) {
        return Ok(());
    }
    if parent == Path::new("/sys/fs/bpf") {
        nix::mount::mount(
            Some("bpf"),
            parent,
            Some("bpf"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .map_err(|e| pin_err("mounting a bpf filesystem at", parent)(e.into()))?;
        tracing::info!(path = %parent.display(), "mounted a bpf filesystem");
        return Ok(());
    }
    Err(Error::Pin {
        op: "the pin directory must be inside a bpf filesystem (mount -t bpf bpf DIR):",
        path: dir.to_path_buf(),
        source: std::io::Error::other("not on bpffs"),
    })
}

impl NodeDatapath {
    /// True when a datapath is pinned at `dir`.
    pub fn exists(dir: &Path) -> bool {
        dir.join("maps").join(map_names::NETNS_OUTBOUND).exists()
    }

    /// Opens the datapath pinned at `dir`.
    pub fn open(dir: &Path) -> Result<Self> {
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
        })
    }

    /// Opens the datapath at `dir`, creating (loading, attaching, pinning) it when absent.
    /// Returns whether it was created.
    pub fn open_or_create(dir: &Path, attach: &NodeAttach) -> Result<(Self, bool)> {
        if Self::exists(dir) {
            return Ok((Self::open(dir)?, false));
        }
        Self::create(dir, attach)?;
        Ok((Self::open(dir)?, true))
    }

    /// Applies `policy` to one namespace, creating the datapath first when none is pinned; a
    /// datapath created for a call that then fails is removed again (nothing half-applied).
    /// Returns what was applied and whether the datapath was created.
    pub fn apply_at(
        dir: &Path,
        attach: &NodeAttach,
        netns_path: &Path,
        policy: &Policy,
    ) -> Result<(Applied, bool)> {
        let (mut dp, created) = Self::open_or_create(dir, attach)?;
        match dp.apply(netns_path, policy) {
            Ok(applied) => Ok((applied, created)),
            Err(e) => {
                if created {
                    drop(dp);
                    remove_dir(dir)?;
                }
                Err(e)
            }
        }
    }

    fn create(dir: &Path, attach: &NodeAttach) -> Result<()> {
        preflight::require_root()?;
        let app = match &attach.cgroup {
            Some(p) => cgroup::validate(p)?,
            None => cgroup::validate(&cgroup::cgroup2_root()?)?,
        };
        let proxy = match &attach.proxy_cgroup {
            Some(p) => cgroup::validate(p)?,
            None => app.clone(),
        };
        preflight::require_kernel_support()?;
        ensure_bpffs(dir)?;
        let object = object::bpf_object().ok_or(Error::NoObject)?;
        let mut ebpf = EbpfLoader::new()
            .override_global("AYA_LOG_LEVEL", &0u8, false)
            .load(object)
            .map_err(|e| Error::Load(Box::new(e)))?;
        let result = Self::pin_all(&mut ebpf, dir, &app, &proxy);
        if result.is_err() {
            // Nothing half-applied: the pins are the only thing that outlives this process.
            let _ = std::fs::remove_dir_all(dir);
        }
        result?;
        tracing::info!(dir = %dir.display(), cgroup = %app.display(), proxy_cgroup = %proxy.display(), "node datapath created and pinned");
        Ok(())
    }

    fn pin_all(ebpf: &mut Ebpf, dir: &Path, app: &Path, proxy: &Path) -> Result<()> {
        for sub in ["maps", "progs", "links", "netns"] {
            let p = dir.join(sub);
            std::fs::create_dir_all(&p).map_err(pin_err("creating", &p))?;
        }
        for (name, map) in ebpf.maps().filter(|(n, _)| map_names::ALL.contains(n)) {
            let path = dir.join("maps").join(name);
            map.pin(&path).map_err(|e| Error::Pin {
                op: "pinning map",
                path: path.clone(),
                source: std::io::Error::other(e.to_string()),
            })?;
        }
        let mut n = 0;
        let mut link =
            |ebpf: &mut Ebpf, name: &'static str, hook: u32, target: &Path| -> Result<()> {
                let prog = ebpf.program_mut(name).ok_or(Error::Missing {
                    kind: "program",
                    name,
                })?;
                if prog.fd().is_err() {
                    load(prog, name)?;
                }
                let fd = prog.fd().map_err(|source| Error::Verify {
                    name,
                    source: Box::new(source),
                })?;
                let file =
                    File::open(target).map_err(|e| Error::io("opening cgroup", target, e))?;
                let link = bpfsys::link_create(fd.as_fd(), file.as_fd(), hook).map_err(|e| {
                    Error::Pin {
                        op: "attaching (bpf_link_create) at",
                        path: target.to_path_buf(),
                        source: e,
                    }
                })?;
                n += 1;
                let path = dir.join("links").join(format!("{name}-{n}"));
                bpfsys::obj_pin(link.as_fd(), &path).map_err(pin_err("pinning link", &path))
            };
        // Tracking first, capture last: a connect is only rewritten once its answer can be found.
        link(ebpf, prog_names::GETSOCKOPT, attach_type::GETSOCKOPT, proxy)?;
        link(ebpf, prog_names::SOCK_OPS, attach_type::SOCK_OPS, proxy)?;
        if !cgroup::contains(proxy, app) {
            link(ebpf, prog_names::SOCK_OPS, attach_type::SOCK_OPS, app)?;
        }
        for (name, _, hook) in PEER_HOOKS {
            link(ebpf, name, hook, app)?;
        }
        link(ebpf, prog_names::CONNECT4, attach_type::CONNECT4, app)?;
        link(ebpf, prog_names::CONNECT6, attach_type::CONNECT6, app)?;
        let prog = ebpf
            .program_mut(prog_names::SK_LOOKUP)
            .ok_or(Error::Missing {
                kind: "program",
                name: prog_names::SK_LOOKUP,
            })?;
        load(prog, prog_names::SK_LOOKUP)?;
        let path = dir.join("progs").join(prog_names::SK_LOOKUP);
        prog.pin(&path).map_err(|e| Error::Pin {
            op: "pinning program",
            path: path.clone(),
            source: std::io::Error::other(e.to_string()),
        })
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

    /// The pinned maps.
    pub fn maps(&mut self) -> &mut dyn MapStore {
        &mut self.maps
    }

    /// Applies `policy` to the namespace at `netns_path`, replacing a previous one. Nothing is
    /// active for the namespace until its outbound policy value is written (last).
    pub fn apply(&mut self, netns_path: &Path, policy: &Policy) -> Result<Applied> {
        let cookie = netns::cookie(netns_path)?;
        let addrs = netns::addresses(netns_path)?;
        let ipv6 = ipv6_follows(policy, &addrs);
        let routes = if policy.exclude_interfaces.is_empty() {
            Vec::new()
        } else {
            routes::via_interfaces(netns_path, &policy.exclude_interfaces)?
        };
        let compiled = outbound::compile(policy, ipv6, routes)?;
        let old = owned_addresses(&mut self.maps, cookie)?;
        enroll::sync_addresses(&mut self.maps, netns_path, cookie, &old, &addrs)?;
        let inbound = !matches!(&policy.inbound_ports, InboundPorts::List(l) if l.is_empty());
        if inbound {
            let spec = InboundSpec {
                netns: netns_path.to_path_buf(),
                ports: match &policy.inbound_ports {
                    InboundPorts::All => SpecPorts::All,
                    InboundPorts::List(l) => SpecPorts::List(l.clone()),
                },
                // istio-iptables only uses -d with -b '*'.
                exclude: if policy.inbound_ports == InboundPorts::All {
                    policy.inbound_exclude_ports.clone()
                } else {
                    Vec::new()
                },
                inbound_port: policy.inbound_capture_port,
                tunnel_port: policy.tunnel_port,
                no_listener: NoListener::Refuse,
            };
            enroll::remove_inbound(&mut self.maps, cookie)?;
            enroll::write_inbound(&mut self.maps, &spec, cookie)?;
            self.attach_sk_lookup(netns_path, cookie)?;
            enroll::adopt_listeners(&mut self.maps, &spec, cookie)?;
        } else {
            self.detach_sk_lookup(cookie)?;
            enroll::remove_inbound(&mut self.maps, cookie)?;
        }
        write_ifaces(&mut self.maps, netns_path, cookie, policy)?;
        seed_proxy_listeners(&mut self.maps, netns_path, cookie, policy.proxy_port)?;
        outbound::write(&mut self.maps, cookie, &compiled)?;
        tracing::info!(netns = %netns_path.display(), cookie, ipv6, inbound, addrs = ?addrs, "policy applied");
        Ok(Applied {
            cookie,
            addrs,
            ipv6,
            inbound,
            compiled,
        })
    }

    fn attach_sk_lookup(&mut self, netns_path: &Path, cookie: u64) -> Result<()> {
        let pin = self.dir.join("netns").join(cookie.to_string());
        if pin.exists() {
            return Ok(());
        }
        let prog_path = self.dir.join("progs").join(prog_names::SK_LOOKUP);
        let prog =
            bpfsys::obj_get(&prog_path).map_err(pin_err("opening pinned program", &prog_path))?;
        let ns = File::open(netns_path)
            .map_err(|e| Error::io("opening network namespace", netns_path, e))?;
        let link = bpfsys::link_create(prog.as_fd(), ns.as_fd(), attach_type::SK_LOOKUP)
            .map_err(pin_err("attaching sk_lookup to", netns_path))?;
        bpfsys::obj_pin(link.as_fd(), &pin).map_err(pin_err("pinning link", &pin))
    }

    fn detach_sk_lookup(&mut self, cookie: u64) -> Result<()> {
        let pin = self.dir.join("netns").join(cookie.to_string());
        match std::fs::remove_file(&pin) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(pin_err("unpinning", &pin)(e)),
        }
    }

    /// Removes the namespace's policy (`--cleanup-only`). When no namespace has a policy any
    /// more, the whole datapath is unpinned (and so detached). Returns whether it was.
    pub fn cleanup(&mut self, netns_path: &Path) -> Result<bool> {
        let cookie = netns::cookie(netns_path)?;
        self.remove_policy(cookie, netns_path)?;
        if outbound::count(&mut self.maps)? == 0 {
            self.maps.0.clear();
            remove_dir(&self.dir)?;
            tracing::info!(dir = %self.dir.display(), "last policy removed: node datapath unpinned");
            return Ok(true);
        }
        Ok(false)
    }

    /// Removes everything stored for namespace `cookie` (which may no longer exist; `shown`
    /// only names it in logs and errors). The datapath itself stays.
    pub fn remove_policy(&mut self, cookie: u64, shown: &Path) -> Result<()> {
        outbound::remove(&mut self.maps, cookie)?;
        self.detach_sk_lookup(cookie)?;
        enroll::remove_inbound(&mut self.maps, cookie)?;
        remove_ifaces(&mut self.maps, cookie)?;
        let _ = hash::<u64, u32>(&mut self.maps, map_names::PROXY_LISTENERS)?.remove(&cookie);
        let old = owned_addresses(&mut self.maps, cookie)?;
        enroll::sync_addresses(&mut self.maps, shown, cookie, &old, &[])?;
        tracing::info!(netns = %shown.display(), cookie, "policy removed");
        Ok(())
    }

    /// Re-reads the namespace's addresses (and, with `-c`, its routes) and updates the maps
    /// when they changed. Returns the addresses now stored.
    pub fn refresh(
        &mut self,
        netns_path: &Path,
        cookie: u64,
        policy: &Policy,
    ) -> Result<Vec<std::net::IpAddr>> {
        let addrs = netns::addresses(netns_path)?;
        let old = owned_addresses(&mut self.maps, cookie)?;
        let (mut a, mut b) = (addrs.clone(), old.clone());
        a.sort();
        b.sort();
        if a != b {
            enroll::sync_addresses(&mut self.maps, netns_path, cookie, &old, &addrs)?;
            tracing::info!(netns = %netns_path.display(), addrs = ?addrs, "pod addresses changed");
            if !policy.exclude_interfaces.is_empty() {
                let routes = routes::via_interfaces(netns_path, &policy.exclude_interfaces)?;
                let compiled = outbound::compile(policy, ipv6_follows(policy, &addrs), routes)?;
                outbound::write(&mut self.maps, cookie, &compiled)?;
            }
        }
        Ok(addrs)
    }

    /// Whether something listens on the namespace's outbound port (the proxy is up).
    pub fn proxy_listening(&mut self, cookie: u64) -> bool {
        hash::<u64, u32>(&mut self.maps, map_names::PROXY_LISTENERS)
            .is_ok_and(|m| m.get(&cookie, 0).is_ok_and(|n| n > 0))
    }

    /// Number of namespaces with a policy.
    pub fn policies(&mut self) -> Result<usize> {
        outbound::count(&mut self.maps)
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

/// Unpins everything under `dir` (detaching the programs), if it exists.
pub fn remove_dir(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(pin_err("removing", dir)(e)),
    }
}

fn load(prog: &mut aya::programs::Program, name: &'static str) -> Result<()> {
    let r = match prog {
        aya::programs::Program::CgroupSockAddr(p) => CgroupSockAddr::load(p),
        aya::programs::Program::CgroupSockopt(p) => CgroupSockopt::load(p),
        aya::programs::Program::SockOps(p) => SockOps::load(p),
        aya::programs::Program::SkLookup(p) => SkLookup::load(p),
        _ => {
            return Err(Error::Missing {
                kind: "program",
                name,
            })
        }
    };
    r.map_err(|source| Error::Verify {
        name,
        source: Box::new(source),
    })
}

fn owned_addresses(store: &mut dyn MapStore, cookie: u64) -> Result<Vec<std::net::IpAddr>> {
    let map = hash::<redirect_common::AddrKey, u64>(store, map_names::POD_ADDRS)?;
    Ok(map
        .iter()
        .filter_map(|e| e.ok())
        .filter(|(_, owner)| *owner == cookie)
        .map(|(k, _)| enroll::addr_of_key(&k))
        .collect())
}

fn flock_dir(dir: &Path) -> Result<nix::fcntl::Flock<File>> {
    let file = File::open(dir).map_err(|e| Error::io("opening", dir, e))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| Error::io("locking", dir, e.into()))
}

/// Serialises changes to pinned datapaths (`redirect istio-iptables` runs, the daemon): an
/// exclusive flock on the bpffs directory that holds the pin directory, released on drop.
/// Mounts the bpffs first when needed (under a lock on the mount point, so two first runs
/// cannot stack two mounts). Leaves no file behind.
pub fn lock(dir: &Path) -> Result<nix::fcntl::Flock<File>> {
    preflight::require_root()?;
    let parent = dir.parent().unwrap_or(Path::new("/"));
    if !is_bpffs(parent) {
        let _mounting = flock_dir(parent)?;
        ensure_bpffs(dir)?;
    }
    flock_dir(parent)
}

/// Interfaces whose arriving traffic istio-iptables RETURNs in PREROUTING (`-c`, `-k`), by
/// index in the namespace; names that do not exist (yet) are skipped with a warning.
fn write_ifaces(
    store: &mut dyn MapStore,
    netns_path: &Path,
    cookie: u64,
    policy: &Policy,
) -> Result<()> {
    let mut wanted: Vec<(String, u8)> = Vec::new();
    for (names, bit) in [
        (&policy.exclude_interfaces, redirect_common::IFACE_EXCLUDED),
        (
            &policy.kube_virt_interfaces,
            redirect_common::IFACE_KUBEVIRT,
        ),
    ] {
        for n in names {
            match wanted.iter_mut().find(|(w, _)| w == n) {
                Some((_, b)) => *b |= bit,
                None => wanted.push((n.clone(), bit)),
            }
        }
    }
    let names: Vec<String> = wanted.iter().map(|(n, _)| n.clone()).collect();
    let indexes = netns::in_netns(netns_path, move || {
        Ok(names
            .iter()
            .map(|n| nix::net::if_::if_nametoindex(n.as_str()).ok())
            .collect::<Vec<_>>())
    })?;
    remove_ifaces(store, cookie)?;
    let mut map = hash::<redirect_common::IfKey, u8>(store, map_names::IFACES)?;
    for ((name, bits), index) in wanted.iter().zip(indexes) {
        let Some(ifindex) = index else {
            tracing::warn!(interface = %name, netns = %netns_path.display(), "interface not found; its inbound traffic is not exempted");
            continue;
        };
        map.insert(
            redirect_common::IfKey {
                netns: cookie,
                ifindex,
                _pad: 0,
            },
            *bits,
            0,
        )
        .map_err(crate::store::map_error("writing", map_names::IFACES))?;
    }
    Ok(())
}

fn remove_ifaces(store: &mut dyn MapStore, cookie: u64) -> Result<()> {
    let mut map = hash::<redirect_common::IfKey, u8>(store, map_names::IFACES)?;
    let keys: Vec<redirect_common::IfKey> = map
        .keys()
        .filter_map(|k| k.ok())
        .filter(|k| k.netns == cookie)
        .collect();
    for k in keys {
        let _ = map.remove(&k);
    }
    Ok(())
}

/// Counts the sockets already listening on the outbound port (sock_ops only sees listen()
/// calls made after the policy exists), so a proxy that started first is known to be up.
fn seed_proxy_listeners(
    store: &mut dyn MapStore,
    netns_path: &Path,
    cookie: u64,
    port: u16,
) -> Result<()> {
    let found = crate::adopt::listeners(netns_path, port)?.len();
    let mut map = hash::<u64, u32>(store, map_names::PROXY_LISTENERS)?;
    map.insert(cookie, u32::try_from(found).unwrap_or(u32::MAX), 0)
        .map_err(crate::store::map_error(
            "writing",
            map_names::PROXY_LISTENERS,
        ))
}
