//! A generator of valid policies (every field in range), for the round trips.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use proptest::prelude::*;
use redirect_policy::{Cidrs, Group, InboundPorts, Mode, NoProxy, OwnerGroups, Policy};

pub(crate) fn port() -> impl Strategy<Value = u16> {
    1..=u16::MAX
}

fn ports() -> impl Strategy<Value = Vec<u16>> {
    proptest::collection::vec(port(), 0..4)
}

fn ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|o| IpAddr::V4(Ipv4Addr::from(o))),
        any::<[u16; 8]>().prop_map(|s| IpAddr::V6(Ipv6Addr::from(s))),
    ]
}

fn net() -> impl Strategy<Value = IpNet> {
    prop_oneof![
        (any::<[u8; 4]>(), 0u8..=32)
            .prop_map(|(o, p)| IpNet::V4(Ipv4Net::new(o.into(), p).expect("prefix in range"))),
        (any::<[u16; 8]>(), 0u8..=128)
            .prop_map(|(s, p)| IpNet::V6(Ipv6Net::new(s.into(), p).expect("prefix in range"))),
    ]
}

fn nets() -> impl Strategy<Value = Vec<IpNet>> {
    proptest::collection::vec(net(), 0..4)
}

fn ids() -> impl Strategy<Value = Vec<u32>> {
    proptest::collection::vec(any::<u32>(), 1..=redirect_policy::MAX_OWNER_IDS)
}

fn ifaces() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec("[a-z][a-z0-9._-]{0,14}", 0..3)
}

fn groups(min: usize) -> impl Strategy<Value = Vec<Group>> {
    proptest::collection::vec(
        any::<u32>().prop_map(|gid| Group {
            name: gid.to_string(),
            gid,
        }),
        min..=redirect_policy::MAX_OWNER_IDS,
    )
}

fn owner_groups() -> impl Strategy<Value = OwnerGroups> {
    prop_oneof![
        Just(OwnerGroups::All),
        groups(0).prop_map(OwnerGroups::Include),
        groups(1).prop_map(OwnerGroups::Exclude),
    ]
}

fn loopback() -> impl Strategy<Value = Ipv4Net> {
    (any::<[u8; 3]>(), 8u8..=32).prop_map(|([a, b, c], p)| {
        Ipv4Net::new(Ipv4Addr::new(127, a, b, c), p).expect("prefix in range")
    })
}

/// Any policy [`Policy::validate`] accepts and istio-iptables' flags and env can express.
pub(crate) fn valid() -> impl Strategy<Value = Policy> {
    let ports_and_ids = (port(), port(), port(), ids(), ids(), any::<bool>());
    let outbound = (
        prop_oneof![Just(Cidrs::All), nets().prop_map(Cidrs::List)],
        nets(),
        ports(),
        ports(),
    );
    let inbound = (
        prop_oneof![
            Just(InboundPorts::All),
            ports().prop_map(InboundPorts::List)
        ],
        ports(),
        ifaces(),
        ifaces(),
    );
    let rest = (
        any::<[bool; 4]>(),
        proptest::collection::vec(ip(), 0..3),
        owner_groups(),
        loopback(),
        proptest::option::of("/[a-z0-9/]{0,20}".prop_map(PathBuf::from)),
        any::<bool>(),
    );
    (ports_and_ids, outbound, inbound, rest).prop_map(
        |(
            (proxy_port, inbound_capture_port, tunnel_port, proxy_uids, proxy_gids, tproxy),
            (include_cidrs, exclude_cidrs, include_ports, exclude_ports),
            (inbound_ports, inbound_exclude_ports, exclude_interfaces, kube_virt_interfaces),
            (
                [redirect_dns, capture_all_dns, dual_stack, drop_invalid],
                dns_servers,
                owner_groups,
                ipv4_loopback_cidr,
                proxy_cgroup,
                passthrough,
            ),
        )| Policy {
            proxy_port,
            inbound_capture_port,
            tunnel_port,
            proxy_uids,
            proxy_gids,
            mode: if tproxy { Mode::Tproxy } else { Mode::Redirect },
            include_cidrs,
            exclude_cidrs,
            include_ports,
            exclude_ports,
            inbound_ports,
            inbound_exclude_ports,
            exclude_interfaces,
            kube_virt_interfaces,
            redirect_dns,
            capture_all_dns,
            dns_servers,
            owner_groups,
            ipv4_loopback_cidr,
            dual_stack,
            drop_invalid,
            proxy_cgroup,
            proxy_bypass_closed: false,
            own_addresses: None,
            no_proxy: if passthrough {
                NoProxy::Passthrough
            } else {
                NoProxy::Refuse
            },
        },
    )
}
