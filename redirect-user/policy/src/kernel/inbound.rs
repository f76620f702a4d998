//! A [`Policy`]'s inbound half in the form the kernel gets it: the `NETNS_INBOUND` value, the
//! `INBOUND_PORTS` rules and the `IFACES` interfaces (by name), with no map or namespace access.
//!
//! The same conversion `node::NodeDatapath::apply` (with `enroll::write_inbound`) and
//! `node::entries::write_ifaces` perform when they write the maps; this one is pure, so the
//! inbound decision can be checked against istio's rules on the host.
use std::path::Path;

use redirect_common::{
    InboundPolicy, IFACE_EXCLUDED, IFACE_KUBEVIRT, INBOUND_ALL_PORTS,
    INBOUND_NO_LISTENER_PASSTHROUGH, INBOUND_TPROXY, PORT_EXCLUDED, PORT_INCLUDED,
};

use crate::inbound_spec::{InboundPorts as SpecPorts, InboundSpec, NoListener};
use crate::{InboundPorts, Policy};

/// What the maps hold for one namespace's inbound capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundKernel {
    /// `NETNS_INBOUND[netns]`; `None` when inbound capture is off (empty `-b`): sk_lookup then
    /// leaves every connection of the namespace alone.
    pub policy: Option<InboundPolicy>,
    /// `INBOUND_PORTS[(netns, port)]`, one entry per port ([`PORT_INCLUDED`] / [`PORT_EXCLUDED`]).
    pub ports: Vec<(u16, u8)>,
    /// `IFACES[(netns, ifindex of name)]`: [`IFACE_EXCLUDED`] (`-c`) | [`IFACE_KUBEVIRT`] (`-k`).
    /// Written whether or not inbound capture is on.
    pub interfaces: Vec<(String, u8)>,
}

/// The inbound spec `redirect istio-iptables` enrolls `netns_path` with, `None` for an empty
/// `-b`. istio-iptables only applies `-d` with `-b '*'`, and refuses without a listener.
pub fn spec_of(policy: &Policy, netns_path: &Path) -> Option<InboundSpec> {
    let ports = match &policy.inbound_ports {
        InboundPorts::List(l) if l.is_empty() => return None,
        InboundPorts::All => SpecPorts::All,
        InboundPorts::List(l) => SpecPorts::List(l.clone()),
    };
    Some(InboundSpec {
        netns: netns_path.to_path_buf(),
        exclude: if ports == SpecPorts::All {
            policy.inbound_exclude_ports.clone()
        } else {
            Vec::new()
        },
        ports,
        inbound_port: policy.inbound_capture_port,
        tunnel_port: policy.tunnel_port,
        no_listener: NoListener::Refuse,
        tproxy: policy.mode == crate::Mode::Tproxy,
    })
}

/// `INBOUND_PORTS` entries of a spec: the `-b` list included, then `-d` excluded (a port in
/// both ends up excluded, as the second write replaces the first).
pub fn port_entries(spec: &InboundSpec) -> Vec<(u16, u8)> {
    let mut out: Vec<(u16, u8)> = Vec::new();
    let listed = match &spec.ports {
        SpecPorts::List(l) => l.as_slice(),
        SpecPorts::All | SpecPorts::None => &[],
    };
    let writes = listed
        .iter()
        .map(|p| (*p, PORT_INCLUDED))
        .chain(spec.exclude.iter().map(|p| (*p, PORT_EXCLUDED)));
    for (port, rule) in writes {
        match out.iter_mut().find(|(p, _)| *p == port) {
            Some(entry) => entry.1 = rule,
            None => out.push((port, rule)),
        }
    }
    out
}

/// `IFACES` entries by interface name: `-c` and `-k` bits merged per name, in flag order.
pub(crate) fn interface_entries(policy: &Policy) -> Vec<(String, u8)> {
    let mut out: Vec<(String, u8)> = Vec::new();
    let named = [
        (&policy.exclude_interfaces, IFACE_EXCLUDED),
        (&policy.kube_virt_interfaces, IFACE_KUBEVIRT),
    ];
    for (names, bit) in named {
        for name in names {
            match out.iter_mut().find(|(n, _)| n == name) {
                Some(entry) => entry.1 |= bit,
                None => out.push((name.clone(), bit)),
            }
        }
    }
    out
}

/// The `NETNS_INBOUND` value of a spec.
pub fn policy_of(spec: &InboundSpec) -> InboundPolicy {
    let mut flags = 0;
    if spec.ports == SpecPorts::All {
        flags |= INBOUND_ALL_PORTS;
    }
    if spec.no_listener == NoListener::Passthrough {
        flags |= INBOUND_NO_LISTENER_PASSTHROUGH;
    }
    if spec.tproxy {
        flags |= INBOUND_TPROXY;
    }
    InboundPolicy {
        inbound_port: spec.inbound_port,
        tunnel_port: spec.tunnel_port,
        flags,
        _pad: 0,
    }
}

/// The whole inbound kernel form of `policy`.
pub fn inbound_kernel(policy: &Policy) -> InboundKernel {
    let spec = spec_of(policy, Path::new(""));
    InboundKernel {
        policy: spec.as_ref().map(policy_of),
        ports: spec.as_ref().map(port_entries).unwrap_or_default(),
        interfaces: interface_entries(policy),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_flags() {
        let spec: InboundSpec = "p:no-listener=passthrough".parse().expect("spec");
        let p = policy_of(&spec);
        assert_eq!(p.flags, INBOUND_ALL_PORTS | INBOUND_NO_LISTENER_PASSTHROUGH);
        assert_eq!((p.inbound_port, p.tunnel_port), (15006, 15008));
        let list: InboundSpec = "p:b=80".parse().expect("spec");
        assert_eq!(policy_of(&list).flags, 0);
    }
    use redirect_common::INBOUND_ALL_PORTS;

    #[test]
    fn sidecar_defaults() {
        let policy = Policy {
            inbound_ports: InboundPorts::All,
            inbound_exclude_ports: vec![15090, 15021, 15020],
            exclude_interfaces: vec!["eth1".into()],
            kube_virt_interfaces: vec!["eth1".into(), "net1".into()],
            ..Policy::default()
        };
        let k = inbound_kernel(&policy);
        let p = k.policy.expect("inbound on");
        assert_eq!((p.inbound_port, p.tunnel_port), (15006, 15008));
        assert_eq!(p.flags, INBOUND_ALL_PORTS);
        assert_eq!(
            k.ports,
            vec![
                (15090, PORT_EXCLUDED),
                (15021, PORT_EXCLUDED),
                (15020, PORT_EXCLUDED)
            ]
        );
        assert_eq!(
            k.interfaces,
            vec![
                ("eth1".to_string(), IFACE_EXCLUDED | IFACE_KUBEVIRT),
                ("net1".to_string(), IFACE_KUBEVIRT)
            ]
        );
    }

    #[test]
    fn port_list_ignores_the_exclude_list_and_empty_list_disables() {
        let mut policy = Policy {
            inbound_ports: InboundPorts::List(vec![4000, 5000]),
            inbound_exclude_ports: vec![5000, 6000],
            ..Policy::default()
        };
        let k = inbound_kernel(&policy);
        assert_eq!(k.policy.map(|p| p.flags), Some(0));
        assert_eq!(k.ports, vec![(4000, PORT_INCLUDED), (5000, PORT_INCLUDED)]);
        policy.inbound_ports = InboundPorts::List(Vec::new());
        let k = inbound_kernel(&policy);
        assert_eq!((k.policy, k.ports.len()), (None, 0));
    }

    #[test]
    fn an_excluded_port_also_listed_ends_up_excluded() {
        let spec = InboundSpec {
            netns: "/run/netns/x".into(),
            ports: SpecPorts::List(vec![80, 81]),
            exclude: vec![81],
            inbound_port: 15006,
            tunnel_port: 15008,
            no_listener: NoListener::Refuse,
            tproxy: false,
        };
        assert_eq!(
            port_entries(&spec),
            vec![(80, PORT_INCLUDED), (81, PORT_EXCLUDED)]
        );
    }
}
