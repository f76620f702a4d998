//! Node sizing and per-namespace quotas: the shared maps are sized from `max_pods` times each
//! quota when the datapath is created, the quotas are pinned beside it (`DIR/sizing`), and
//! every enrollment is checked against them before anything is written, so no namespace can
//! fill a shared map and lock the others out.
use std::{net::IpAddr, os::fd::AsFd as _, path::Path};

use aya::maps::{Array, Map, MapData};
use redirect_common::{map_names, Counter};
use redirect_policy::{InboundPorts, Policy};

use crate::{
    bpfsys,
    error::{Error, Result},
    outbound::Compiled,
};

/// Name of the sizing record's pin.
pub const PIN: &str = "sizing";
const MAGIC: u32 = 0x7a69_7365; // "size"
/// `TRACKED` entries beyond `slots * handshakes`: concurrent adds on every CPU at once.
const HANDOFF_SLACK: u32 = 1024;
type Raw = [u32; 8];

/// How many namespaces a node datapath holds and what each may use of the shared maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Quotas {
    /// Enrolled namespaces (`--max-pods`).
    pub max_pods: u32,
    /// Ports in each port list (`-b`, `-d`, `-o`, `-q`) (`--quota-ports`).
    pub ports: u32,
    /// CIDRs in each trie (`-i`, `-x`), per address family (`--quota-cidrs`).
    pub cidrs: u32,
    /// Addresses of one namespace (`--quota-addresses`).
    pub addresses: u32,
    /// Interfaces named by one namespace's policy (`-c`, `-k`) (`--quota-interfaces`).
    pub interfaces: u32,
    /// Routes of one namespace followed for `-c` (`--quota-routes`).
    pub routes: u32,
    /// Redirected connections of one namespace whose proxy side has not completed its
    /// handshake yet (`TRACKED` hand-offs in flight) (`--quota-handshakes`).
    pub handshakes: u32,
}

impl Default for Quotas {
    fn default() -> Self {
        Self {
            max_pods: 110,
            ports: 1024,
            cidrs: 1024,
            addresses: 64,
            interfaces: 16,
            routes: 4096,
            handshakes: 2048,
        }
    }
}

impl Quotas {
    /// `max_entries` of each shared map: one slot more than `max_pods` for the default entry
    /// (netns cookie 0) and two port lists per direction.
    pub fn map_sizes(&self) -> Vec<(&'static str, u32)> {
        let slots = self.max_pods.saturating_add(1);
        let per = |n: u32| slots.saturating_mul(n).max(1);
        vec![
            (map_names::NETNS_OUTBOUND, slots),
            (map_names::NETNS_INBOUND, slots),
            (map_names::PROXY_LISTENERS, slots),
            (map_names::OUT_EXCLUDE, per(self.cidrs.saturating_mul(2))),
            (map_names::OUT_INCLUDE, per(self.cidrs.saturating_mul(2))),
            (map_names::OUT_ROUTES, per(self.routes)),
            (map_names::OUT_PORTS, per(self.ports.saturating_mul(2))),
            (map_names::INBOUND_PORTS, per(self.ports.saturating_mul(2))),
            (map_names::POD_ADDRS, per(self.addresses)),
            (map_names::IFACES, per(self.interfaces)),
            (map_names::LISTENERS, per(2)),
            (map_names::NETNS_COUNTERS, per(Counter::COUNT)),
            (map_names::HANDOFFS, slots),
            (map_names::LOCAL_COUNTS, slots),
            // Each policy may go over its quota by one add per CPU at the same instant.
            (
                map_names::TRACKED,
                per(self.handshakes).saturating_add(HANDOFF_SLACK),
            ),
            (
                map_names::LOCAL_CONNECTS,
                per(self.handshakes).saturating_add(HANDOFF_SLACK),
            ),
        ]
    }

    fn encode(&self) -> Raw {
        [
            MAGIC,
            self.max_pods,
            self.ports,
            self.cidrs,
            self.addresses,
            self.interfaces,
            self.routes,
            self.handshakes,
        ]
    }

    fn decode(raw: &Raw) -> Option<Self> {
        (raw[0] == MAGIC).then_some(Self {
            max_pods: raw[1],
            ports: raw[2],
            cidrs: raw[3],
            addresses: raw[4],
            interfaces: raw[5],
            routes: raw[6],
            handshakes: raw[7],
        })
    }

    /// Checks one namespace's enrollment against the quotas, before anything is written.
    /// `new` is whether the namespace has no policy yet and `enrolled` how many have one.
    pub fn check(&self, e: &Enrollment<'_>) -> Result<()> {
        let over = |what: &'static str, count: usize, limit: u32, flag: &'static str| {
            if count > limit as usize {
                Err(Error::Quota {
                    netns: e.netns.to_path_buf(),
                    what,
                    count,
                    limit,
                    flag,
                })
            } else {
                Ok(())
            }
        };
        if e.new {
            over(
                "enrolled namespaces",
                e.enrolled + 1,
                self.max_pods,
                "--max-pods",
            )?;
        }
        let p = e.policy;
        over(
            "-o (excluded outbound ports)",
            p.exclude_ports.len(),
            self.ports,
            "--quota-ports",
        )?;
        over(
            "-q (included outbound ports)",
            p.include_ports.len(),
            self.ports,
            "--quota-ports",
        )?;
        if let InboundPorts::List(l) = &p.inbound_ports {
            over(
                "-b (captured inbound ports)",
                l.len(),
                self.ports,
                "--quota-ports",
            )?;
        }
        let exclude = p.inbound_exclude_ports.len();
        over(
            "-d (excluded inbound ports)",
            exclude,
            self.ports,
            "--quota-ports",
        )?;
        for (what, nets) in [
            ("-i (included CIDRs)", &e.compiled.include),
            ("-x (excluded CIDRs)", &e.compiled.exclude),
        ] {
            let v4 = nets.iter().filter(|n| n.addr().is_ipv4()).count();
            over(what, v4, self.cidrs, "--quota-cidrs")?;
            over(what, nets.len() - v4, self.cidrs, "--quota-cidrs")?;
        }
        over(
            "routes followed for -c",
            e.compiled.routes.len(),
            self.routes,
            "--quota-routes",
        )?;
        over(
            "addresses",
            e.addrs.len(),
            self.addresses,
            "--quota-addresses",
        )?;
        let mut ifaces: Vec<&String> = p
            .exclude_interfaces
            .iter()
            .chain(&p.kube_virt_interfaces)
            .collect();
        ifaces.sort();
        ifaces.dedup();
        over(
            "interfaces (-c, -k)",
            ifaces.len(),
            self.interfaces,
            "--quota-interfaces",
        )
    }
}

/// What one enrollment would write, for [`Quotas::check`].
#[derive(Debug)]
pub struct Enrollment<'a> {
    /// The namespace, for the error.
    pub netns: &'a Path,
    /// The policy asked for.
    pub policy: &'a Policy,
    /// Its compiled outbound form.
    pub compiled: &'a Compiled,
    /// The namespace's addresses.
    pub addrs: &'a [IpAddr],
    /// Whether the namespace has no policy yet.
    pub new: bool,
    /// Namespaces with a policy now.
    pub enrolled: usize,
}

fn map_err(op: &'static str, dir: &Path) -> impl FnOnce(aya::maps::MapError) -> Error {
    super::layout::record_err(op, dir, PIN)
}

/// Creates and pins the sizing record of a new datapath.
pub fn create(dir: &Path, quotas: &Quotas) -> Result<()> {
    let path = dir.join(PIN);
    let pin_err = |op: &'static str| {
        let path = path.clone();
        move |source| Error::Pin { op, path, source }
    };
    let size = u32::try_from(std::mem::size_of::<Raw>()).unwrap_or(u32::MAX);
    let fd = bpfsys::array_map_create("redirect_sizing", size)
        .map_err(pin_err("creating the sizing record for"))?;
    bpfsys::obj_pin(fd.as_fd(), &path).map_err(pin_err("pinning the sizing record at"))?;
    let data = MapData::from_pin(&path).map_err(map_err("opening the sizing record", dir))?;
    let mut array: Array<MapData, Raw> =
        Array::try_from(Map::Array(data)).map_err(map_err("reading the sizing record", dir))?;
    array
        .set(0, quotas.encode(), 0)
        .map_err(map_err("writing the sizing record", dir))
}

/// The quotas of the datapath at `dir`; the defaults for one pinned before sizing existed.
pub fn read(dir: &Path) -> Result<Quotas> {
    let path = dir.join(PIN);
    if !path.exists() {
        return Ok(Quotas::default());
    }
    let data = MapData::from_pin(&path).map_err(map_err("opening the sizing record", dir))?;
    let array: Array<MapData, Raw> =
        Array::try_from(Map::Array(data)).map_err(map_err("reading the sizing record", dir))?;
    let raw = array
        .get(&0, 0)
        .map_err(map_err("reading the sizing record", dir))?;
    Ok(Quotas::decode(&raw).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_sizing_follows_the_quotas() {
        let q = Quotas::default();
        assert_eq!(Quotas::decode(&q.encode()), Some(q));
        let sizes = q.map_sizes();
        let size = |name| sizes.iter().find(|(n, _)| *n == name).map(|(_, s)| *s);
        assert_eq!(size(map_names::NETNS_OUTBOUND), Some(111));
        assert_eq!(size(map_names::INBOUND_PORTS), Some(111 * 2048));
        assert_eq!(size(map_names::POD_ADDRS), Some(111 * 64));
        assert_eq!(size(map_names::TRACKED), Some(111 * 2048 + 1024));
        assert!(sizes.iter().all(|(_, s)| *s > 0));
    }
}
