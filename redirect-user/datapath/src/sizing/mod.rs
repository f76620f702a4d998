//! Node sizing and per-namespace quotas: the shared maps are sized from `max_pods` times each
//! quota, and the connection maps from `max_connections`, when the datapath is created; the
//! sizing is pinned beside it (`DIR/sizing`), and every enrollment is checked against it before
//! anything is written, so no namespace can fill a shared map and lock the others out.
mod pin;

use std::{net::IpAddr, path::Path};

use redirect_common::{map_names, Counter};
use redirect_policy::{InboundPorts, Policy};

pub(crate) use self::pin::{create, read};
use crate::{
    error::{Error, Result},
    maps::outbound::Compiled,
};

/// Name of the sizing record's pin.
pub(crate) const PIN: &str = "sizing";
const MAGIC: u32 = 0x7a69_7365; // "size"
/// `TRACKED` entries beyond `slots * handshakes`: concurrent adds on every CPU at once.
pub(crate) const HANDOFF_SLACK: u32 = 1024;
/// Default `--max-connections`: connections in hand-off at once on a 110-pod node.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 16_384;
/// The record of a datapath pinned before `max_connections` existed (layout v4 and older).
type RawV1 = [u32; 8];
/// The record: [`MAGIC_V2`], the seven quotas, `max_connections`, one reserved word.
type Raw = [u32; 10];
const MAGIC_V2: u32 = 0x7a69_7332; // "zis2"

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
    /// Connections in hand-off at once on the node, in each of `TRACKED` and `LOCAL_CONNECTS`
    /// (`--max-connections`): those maps' size, and twice the inbound LRU's (`INBOUND`, whose
    /// entries are allocated up front and live one network round trip). `(max_pods + 1) x
    /// handshakes` plus the per-CPU slack must fit in it, so every namespace can always use
    /// its quota.
    pub max_connections: u32,
    /// Entries of the inbound LRU (`INBOUND`), from `max_connections` when the datapath is
    /// created ([`Quotas::inbound_for`]) and pinned with the rest.
    pub inbound: u32,
}

impl std::fmt::Display for Quotas {
    /// The flags' own names and values (in the record's order), as a log field.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const NAMES: [&str; 9] = [
            "max-pods",
            "ports",
            "cidrs",
            "addresses",
            "interfaces",
            "routes",
            "handshakes",
            "max-connections",
            "inbound",
        ];
        for (i, (name, value)) in NAMES.iter().zip(&self.encode()[1..]).enumerate() {
            write!(f, "{}{name}={value}", if i > 0 { "," } else { "" })?;
        }
        Ok(())
    }
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
            handshakes: Self::handshakes_for(110, DEFAULT_MAX_CONNECTIONS),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            inbound: Self::inbound_for(DEFAULT_MAX_CONNECTIONS),
        }
    }
}

impl Quotas {
    /// How many routes are read of one namespace (at apply, and each tick with `-c`): four
    /// times what it may store, routes and addresses (each address adds local routes) alike.
    /// A namespace that holds more has its excluded-interface routes left captured, and the
    /// reading costs no more however many it adds.
    #[must_use]
    pub(crate) fn read_cap(&self) -> usize {
        (self.routes as usize + self.addresses as usize * 2) * 4
    }

    /// The default `--max-connections` of a node of `max_pods`: 16,384, or room for 16
    /// hand-offs per namespace when that is more.
    pub fn default_max_connections(max_pods: u32) -> u32 {
        let per_pod = max_pods
            .saturating_add(1)
            .saturating_mul(16)
            .saturating_add(HANDOFF_SLACK);
        DEFAULT_MAX_CONNECTIONS.max(per_pod)
    }

    /// Entries of the inbound LRU for `max_connections`: half of it, and at least 256 per
    /// possible CPU (the kernel's common LRU keeps up to 128 free entries on each CPU's list,
    /// so a smaller map would evict before it is full); 1,024 to 65,536.
    pub(crate) fn inbound_for(max_connections: u32) -> u32 {
        let cpus = aya::util::nr_cpus().map_or(1, |n| u32::try_from(n).unwrap_or(u32::MAX));
        (max_connections / 2)
            .max(cpus.saturating_mul(256))
            .clamp(1024, redirect_common::INBOUND_MAX_ENTRIES)
    }

    /// These quotas with connection maps of `max_connections` (and the inbound LRU it gives).
    pub fn with_connections(self, max_connections: u32) -> Self {
        Self {
            max_connections,
            inbound: Self::inbound_for(max_connections),
            ..self
        }
    }

    /// The default `--quota-handshakes` of a node sized `max_pods` x `max_connections`: an
    /// equal share of the connection maps for every namespace and the default policy, after
    /// the per-CPU slack (at least 1).
    pub fn handshakes_for(max_pods: u32, max_connections: u32) -> u32 {
        let slots = max_pods.saturating_add(1);
        (max_connections.saturating_sub(HANDOFF_SLACK) / slots).max(1)
    }

    /// Checks that the connection maps hold every namespace's hand-off quota at once (so no
    /// namespace can take another's share): an error naming the three flags otherwise.
    pub(crate) fn validate(&self) -> std::result::Result<(), String> {
        let slots = u64::from(self.max_pods) + 1;
        let needed = slots * u64::from(self.handshakes) + u64::from(HANDOFF_SLACK);
        if slots + u64::from(HANDOFF_SLACK) > u64::from(self.max_connections) {
            return Err(format!(
                "--max-connections {} cannot hold one hand-off for each of {slots} namespaces \
                 (--max-pods {} and the default policy) plus {HANDOFF_SLACK} for adds racing on \
                 every CPU: give at least {}",
                self.max_connections,
                self.max_pods,
                slots + u64::from(HANDOFF_SLACK),
            ));
        }
        if needed > u64::from(self.max_connections) {
            return Err(format!(
                "--quota-handshakes {} for {} namespaces (--max-pods {} and the default policy) plus \
                 {HANDOFF_SLACK} for adds racing on every CPU needs --max-connections of at least \
                 {needed}, not {}: raise --max-connections or lower --quota-handshakes (its \
                 default, {}, is the equal share)",
                self.handshakes,
                slots,
                self.max_pods,
                self.max_connections,
                Self::handshakes_for(self.max_pods, self.max_connections),
            ));
        }
        Ok(())
    }

    /// `max_entries` of each shared map: one slot more than `max_pods` for the default entry
    /// (netns cookie 0) and two port lists per direction; the connection maps hold
    /// `max_connections`, the inbound LRU `inbound`.
    pub(crate) fn map_sizes(&self) -> Vec<(&'static str, u32)> {
        let slots = self.max_pods.saturating_add(1);
        let per = |n: u32| slots.saturating_mul(n).max(1);
        let conns = self.max_connections.max(1);
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
            (map_names::TRACKED, conns),
            (map_names::LOCAL_CONNECTS, conns),
            (map_names::INBOUND, self.inbound.max(1)),
        ]
    }

    fn encode(&self) -> Raw {
        [
            MAGIC_V2,
            self.max_pods,
            self.ports,
            self.cidrs,
            self.addresses,
            self.interfaces,
            self.routes,
            self.handshakes,
            self.max_connections,
            self.inbound,
        ]
    }

    fn decode(raw: &Raw) -> Option<Self> {
        (raw[0] == MAGIC_V2).then_some(Self {
            max_pods: raw[1],
            ports: raw[2],
            cidrs: raw[3],
            addresses: raw[4],
            interfaces: raw[5],
            routes: raw[6],
            handshakes: raw[7],
            max_connections: raw[8],
            inbound: if raw[9] == 0 {
                Self::inbound_for(raw[8])
            } else {
                raw[9]
            },
        })
    }

    /// A record of a datapath pinned before `max_connections`: its connection maps were
    /// sized from the quota (`TRACKED`) and its inbound LRU fixed; the same sizes again.
    fn decode_v1(raw: &RawV1) -> Option<Self> {
        if raw[0] != MAGIC {
            return None;
        }
        let slots = raw[1].saturating_add(1);
        let mut v2 = [0; 10];
        v2[..8].copy_from_slice(raw);
        v2[0] = MAGIC_V2;
        v2[8] = slots.saturating_mul(raw[7]).saturating_add(HANDOFF_SLACK);
        // Its inbound LRU had the fixed size of those layouts.
        v2[9] = redirect_common::INBOUND_MAX_ENTRIES;
        Self::decode(&v2)
    }

    /// Checks one namespace's enrollment against the quotas, before anything is written.
    /// `new` is whether the namespace has no policy yet and `enrolled` how many have one.
    pub(crate) fn check(&self, e: &Enrollment<'_>) -> Result<()> {
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
pub(crate) struct Enrollment<'a> {
    /// The namespace, for the error.
    pub(crate) netns: &'a Path,
    /// The policy asked for.
    pub(crate) policy: &'a Policy,
    /// Its compiled outbound form.
    pub(crate) compiled: &'a Compiled,
    /// The namespace's addresses.
    pub(crate) addrs: &'a [IpAddr],
    /// Whether the namespace has no policy yet.
    pub(crate) new: bool,
    /// Namespaces with a policy now.
    pub(crate) enrolled: usize,
}

#[cfg(test)]
mod tests;
