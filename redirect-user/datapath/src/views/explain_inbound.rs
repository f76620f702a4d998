//! `redirect explain --inbound`: what sk_lookup would do with one connection arriving at a
//! namespace, and why, from the same `inbound::decide` the BPF program runs, fed from the
//! pinned maps.
use redirect_common::NetnsCookie;
use std::net::SocketAddr;

use redirect_common::{
    inbound::{
        decide, is_loopback, is_passthrough, without_listener, InboundConn, Lookups, NoListener,
        Verdict,
    },
    map_names,
    types::family_words,
    AddrKey, Counter, IfKey, InboundPolicy, PortKey,
};

use crate::{
    error::Result,
    maps::store::{hash, MapStore},
    views::explain::Explained,
};

/// The arriving connection to explain.
#[derive(Debug, Clone)]
pub struct InboundQuery {
    /// The peer's address (and port, which does not change the decision).
    pub src: SocketAddr,
    /// The destination: one of the namespace's addresses and a port.
    pub dst: SocketAddr,
    /// The interface index it arrives on inside the namespace (0 when not given).
    pub ifindex: u32,
}

/// Answers each lookup from values read once from the maps.
struct Snapshot {
    own: bool,
    /// The source is loopback or the passthrough source (127.0.0.6, ::6).
    pod_side: bool,
    exempt: bool,
    rule: u8,
}

impl Lookups for Snapshot {
    fn remote_is_own(&self, _: &InboundConn) -> bool {
        self.own
    }
    /// A passthrough, loopback or own-address source is explained as the pod's own connect
    /// (sock_ops records those; a SYN from the wire claiming one is steered like any other);
    /// any other source as a client from the wire (in TPROXY mode the proxy's transparent hop
    /// also comes from a client's address, but inside the pod).
    fn local_connect(&self, _: &InboundConn) -> bool {
        self.own || self.pod_side
    }
    fn exempt_interface(&self, _: &InboundConn) -> bool {
        self.exempt
    }
    fn port_rule(&self, _: &InboundConn) -> u8 {
        self.rule
    }
}

fn untouched(counter: Counter, why: &'static str, tproxy: bool) -> Explained {
    Explained {
        outcome: "untouched".to_owned(),
        detail: None,
        counter: counter.name(),
        rule: why,
        own_policy: false,
        tproxy,
    }
}

/// Explains `q` arriving at namespace `cookie`.
pub fn explain_inbound(
    store: &mut dyn MapStore,
    cookie: NetnsCookie,
    q: &InboundQuery,
) -> Result<Explained> {
    let (family, local) = family_words(q.dst.ip());
    let (_, remote) = family_words(q.src.ip());
    let owner_of = |store: &mut dyn MapStore, addr: [u32; 4]| -> Result<Option<u64>> {
        Ok(hash::<AddrKey, u64>(store, map_names::POD_ADDRS)?
            .get(
                &AddrKey {
                    addr,
                    family,
                    _pad: [0; 6],
                },
                0,
            )
            .ok())
    };
    let policy = hash::<NetnsCookie, InboundPolicy>(store, map_names::NETNS_INBOUND)?
        .get(&cookie, 0)
        .ok();
    let tproxy = policy.is_some_and(|p| p.flags & redirect_common::INBOUND_TPROXY != 0);
    if owner_of(store, local)? != Some(cookie.get()) {
        return Ok(untouched(
            Counter::NoPolicy,
            "the destination is not an address of this namespace (sk_lookup finds the pod by its addresses)",
            tproxy,
        ));
    }
    let Some(policy) = policy else {
        return Ok(untouched(
            Counter::NoPolicy,
            "no inbound capture for this namespace (empty -b)",
            false,
        ));
    };
    let own = owner_of(store, remote)? == Some(cookie.get());
    let exempt = q.ifindex != 0
        && hash::<IfKey, u8>(store, map_names::IFACES)?
            .get(
                &IfKey {
                    netns: cookie,
                    ifindex: q.ifindex,
                    _pad: 0,
                },
                0,
            )
            .is_ok();
    let rule = crate::maps::store::ports(store, map_names::INBOUND_PORTS)?
        .get(&PortKey::new(cookie.get(), q.dst.port()))
        .unwrap_or(0);
    let conn = InboundConn {
        netns: cookie.into(),
        family,
        tcp: true,
        local,
        local_port: q.dst.port(),
        remote,
        remote_port: q.src.port(),
        ifindex: q.ifindex,
    };
    let pod_side = is_loopback(family, &remote) || is_passthrough(family, &remote);
    let snapshot = Snapshot {
        own,
        pod_side,
        exempt,
        rule,
    };
    let verdict = decide(&policy, &conn, &snapshot);
    Ok(match verdict {
        Verdict::Ignore => Explained {
            outcome: "untouched".to_owned(),
            detail: None,
            counter: "-",
            rule: "the proxy's own inbound port: its listener takes it directly",
            own_policy: true,
            tproxy,
        },
        Verdict::Pass(c) => Explained {
            outcome: "untouched".to_owned(),
            detail: None,
            counter: c.name(),
            rule: c.rule(),
            own_policy: true,
            tproxy,
        },
        Verdict::Steer => Explained {
            outcome: format!("proxy:{}", policy.inbound_port),
            detail: Some(format!(
                "while its listener is up, else {}{}",
                match without_listener(&policy) {
                    NoListener::Refuse => "refused (inbound_no_listener)",
                    NoListener::Passthrough => "passed to the application (inbound_no_listener)",
                },
                if tproxy {
                    "; TPROXY mode: the proxy's transparent connection (from this client's address, \
                        mark 1337) reaches the application, which sees the client"
                } else {
                    ""
                }
            )),
            counter: Counter::InboundSteered.name(),
            rule: Counter::InboundSteered.rule(),
            own_policy: true,
            tproxy,
        },
    })
}
