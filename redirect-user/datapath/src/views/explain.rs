//! `redirect explain`: what the kernel would do with one connection in one namespace, and why,
//! from the same `outbound::decide` and `outbound::target` the BPF programs run, fed from the
//! pinned maps.
use redirect_common::NetnsCookie;
use std::net::{IpAddr, SocketAddr};

use aya::maps::lpm_trie::Key;
use redirect_common::{
    inbound::{tproxy_takes, InboundPolicy},
    map_names,
    outbound::{
        decide, target, when_proxy_down, CidrKey, Conn, Lookups, OutboundPolicy, Target, Verdict,
        TPROXY_MARK,
    },
    types::family_words,
    AddrKey, Counter, PortKey,
};
use serde::Serialize;

use crate::{
    error::Result,
    maps::store::{hash, lpm, MapStore},
};

/// The answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explained {
    /// Where the connection goes, as `trace` says it: `proxy:15001`, `proxy:15006`,
    /// `dns:15053`, `untouched`, or `refused` (the proxy does not listen yet, `--no-proxy
    /// refuse`).
    pub outcome: String,
    /// What qualifies the outcome, when something does (`nothing listens on proxy:15001`; in
    /// TPROXY mode, the address a redirect goes to and, when it binds one, its source;
    /// inbound: what happens while the proxy's listener is down).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The decision counter (as in `redirect status` / metrics).
    pub counter: &'static str,
    /// The istio-iptables rule that decided.
    pub rule: &'static str,
    /// Whether the namespace has a policy of its own (else the default of `attach`, or none).
    pub own_policy: bool,
    /// Whether the namespace's inbound capture is TPROXY mode's (`-m TPROXY`).
    pub tproxy: bool,
}

impl Explained {
    /// The outcome with its detail, as the text output says it.
    pub fn shown(&self) -> String {
        match &self.detail {
            None => self.outcome.clone(),
            Some(d) if self.outcome == "refused" => format!("refused ({d})"),
            Some(d) => format!("{} {d}", self.outcome),
        }
    }
}

/// Answers each lookup from values read once from the maps.
struct Snapshot {
    own: bool,
    nic: bool,
    exclude: bool,
    include: bool,
    ports: u8,
    tproxy_takes: bool,
}

impl Lookups for Snapshot {
    fn is_own_addr(&self, _: &Conn) -> bool {
        self.own
    }
    fn via_excluded_nic(&self, _: &Conn) -> bool {
        self.nic
    }
    fn excluded_cidr(&self, _: &Conn) -> bool {
        self.exclude
    }
    fn included_cidr(&self, _: &Conn) -> bool {
        self.include
    }
    fn port_rule(&self, _: &Conn) -> u8 {
        self.ports
    }
    fn tproxy_takes(&self, _: &Conn) -> bool {
        self.tproxy_takes
    }
}

/// The id of `path`'s ancestor at depth `level` below the cgroup v2 root (itself when as deep).
fn ancestor_id(path: &std::path::Path, level: u16) -> Result<u64> {
    let dir = crate::cgroup::validate(path)?;
    let root = crate::cgroup::cgroup2_root()?;
    let mut at = root.clone();
    if let Ok(rel) = dir.strip_prefix(&root) {
        for c in rel.components().take(usize::from(level)) {
            at.push(c);
        }
    }
    Ok(crate::maps::outbound::cgroup_id_level(&at)?.id)
}

/// The connection to explain.
#[derive(Debug, Clone)]
pub struct Query<'a> {
    /// Caller's uid.
    pub uid: u32,
    /// Caller's gid.
    pub gid: u32,
    /// Destination.
    pub dst: SocketAddr,
    /// TCP (else a UDP datagram).
    pub tcp: bool,
    /// Source the socket is bound to, if any.
    pub src: Option<IpAddr>,
    /// The caller's cgroup, if known.
    pub caller_cgroup: Option<&'a std::path::Path>,
    /// The socket's mark (`SO_MARK`, 0 for none): [`TPROXY_MARK`] is TPROXY mode's proxy's
    /// transparent hop, which the TPROXY mangle step leaves alone.
    pub mark: u32,
}

/// Explains `q` in namespace `cookie`.
pub fn explain(store: &mut dyn MapStore, cookie: NetnsCookie, q: &Query<'_>) -> Result<Explained> {
    let Query {
        uid,
        gid,
        dst,
        tcp,
        src,
        caller_cgroup,
        mark,
    } = q.clone();
    let (family, addr) = family_words(dst.ip());
    let (policy, key) = {
        let policies = hash::<NetnsCookie, OutboundPolicy>(store, map_names::NETNS_OUTBOUND)?;
        match policies.get(&cookie, 0) {
            Ok(p) => (p, cookie),
            Err(_) => (
                policies
                    .get(&NetnsCookie::DEFAULT, 0)
                    .unwrap_or(OutboundPolicy::ZERO),
                NetnsCookie::DEFAULT,
            ),
        }
    };
    let own = hash::<AddrKey, u64>(store, map_names::POD_ADDRS)?
        .get(
            &AddrKey {
                addr,
                family,
                _pad: [0; 6],
            },
            0,
        )
        .is_ok_and(|owner| owner == cookie);
    let lookup_key = Key::new(CidrKey::LOOKUP_LEN, CidrKey::new(key.get(), family, addr));
    let mut trie = |name| -> Result<Option<u8>> {
        Ok(lpm::<CidrKey, u8>(store, name)?.get(&lookup_key, 0).ok())
    };
    let nic = trie(map_names::OUT_ROUTES)?.is_some_and(|v| v != 0);
    let exclude = trie(map_names::OUT_EXCLUDE)?.is_some();
    let include = trie(map_names::OUT_INCLUDE)?.is_some();
    let ports = crate::maps::store::ports(store, map_names::OUT_PORTS)?
        .get(&PortKey::new(key.get(), dst.port()))
        .unwrap_or(0);
    let inbound = hash::<NetnsCookie, InboundPolicy>(store, map_names::NETNS_INBOUND)?
        .get(&cookie, 0)
        .ok();
    let tproxy = super::captured::tproxy_mode(store, cookie)?.unwrap_or(false);
    let tproxy_takes = match inbound {
        Some(inbound) => {
            let rule = crate::maps::store::ports(store, map_names::INBOUND_PORTS)?
                .get(&PortKey::new(cookie.get(), dst.port()))
                .unwrap_or(0);
            tproxy_takes(&inbound, dst.port(), rule)
        }
        None => false,
    };
    let passthrough_src = src.is_some_and(|s| {
        s == IpAddr::from([127, 0, 0, 6])
            || s == IpAddr::from(std::net::Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6))
    });
    let conn = Conn {
        family,
        tcp,
        dst: addr,
        dport: dst.port(),
        uid,
        gid,
        passthrough_src,
        bound: src.is_some(),
        in_proxy_cgroup: match caller_cgroup {
            Some(path) if policy.proxy_cgroup != 0 => {
                ancestor_id(path, policy.proxy_cgroup_level)? == policy.proxy_cgroup
            }
            _ => false,
        },
        tproxy_marked: mark == TPROXY_MARK,
    };
    let verdict = decide(
        &policy,
        &conn,
        &Snapshot {
            own,
            nic,
            exclude,
            include,
            ports,
            tproxy_takes,
        },
    );
    let proxy_up = hash::<NetnsCookie, u64>(store, map_names::PROXY_LISTENERS)?
        .get(&cookie, 0)
        .is_ok_and(|n| n > 0);
    let verdict = when_proxy_down(&policy, verdict, key == cookie && key != 0, proxy_up);
    let to = target(&policy, verdict, &conn);
    let (outcome, detail, counter) = match verdict {
        Verdict::Pass(c) => ("untouched".to_owned(), None, c),
        // Sent to the closed outbound port: the application's connect is refused.
        Verdict::Redirect(port, c @ Counter::NoProxyRefused) => (
            "refused".to_owned(),
            Some(format!("nothing listens on proxy:{port}")),
            c,
        ),
        Verdict::Redirect(port, c) => {
            let who = if c == Counter::DnsRedirected {
                "dns"
            } else {
                "proxy"
            };
            let at = to.filter(|_| tproxy).map(|t| landing(t, dst.ip()));
            (format!("{who}:{port}"), at, c)
        }
    };
    Ok(Explained {
        outcome,
        detail,
        counter: counter.name(),
        rule: counter.rule(),
        own_policy: key == cookie && key != 0,
        tproxy,
    })
}

/// Where a TPROXY namespace's redirect of a connect to `dst` lands, as connect4/6 rewrite it
/// ([`Target`]): the address it keeps, or loopback (IPv4 or IPv6 as `dst`), from `dst` when the
/// socket is bound to it first.
fn landing(t: Target, dst: IpAddr) -> String {
    let dst = dst.to_canonical();
    if t.keep_addr {
        return format!(
            "at {}, its address kept (TPROXY)",
            SocketAddr::new(dst, t.port)
        );
    }
    let lo: IpAddr = if dst.is_ipv4() {
        std::net::Ipv4Addr::LOCALHOST.into()
    } else {
        std::net::Ipv6Addr::LOCALHOST.into()
    };
    let at = SocketAddr::new(lo, t.port);
    if t.bind_dst {
        format!("at {at}, from {dst} (the source the route chose, kept)")
    } else {
        format!("at {at}")
    }
}
