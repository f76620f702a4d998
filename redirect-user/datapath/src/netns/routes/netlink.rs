//! Reads the routes of every table and the ip rules of a network namespace over its
//! rtnetlink socket (`RTM_GETROUTE` and `RTM_GETRULE` dumps), into the model of `table`.
//!
//! Netlink rather than `/proc/net/{route,ipv6_route}`: those show IPv4's main table only, one
//! nexthop of a multipath route, no table for IPv6 and no rules, which the choice needs.
use std::{
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use ipnet::IpNet;
use netlink_packet_route::{
    route::{RouteAddress, RouteAttribute, RouteFlags, RouteMessage, RouteNextHopFlags, RouteType},
    rule::{RuleAction, RuleAttribute, RuleFlags, RuleMessage},
    AddressFamily, RouteNetlinkMessage,
};

use super::table::{Route, Tables, TABLE_LOCAL, TABLE_MAIN};
use crate::netns::rtnl::{retry_torn, RouteSocket};

/// Table id of `default`, looked up last by IPv4's default rules.
const TABLE_DEFAULT: u32 = 253;

/// The current namespace's routes (at most `cap` of them decoded: the rest makes
/// [`Tables::left_out`] true) and rules; `lo` is the loopback's ifindex (local delivery leaves
/// by it, whatever device holds the address).
pub(super) fn read(socket: &RouteSocket, lo: u32, cap: usize) -> io::Result<Tables> {
    // The tables changed while they were dumped: read them again.
    retry_torn(|| read_once(socket, lo, cap))
}

fn read_once(socket: &RouteSocket, lo: u32, cap: usize) -> io::Result<Tables> {
    let mut tables = Tables::default();
    let (routes, left_out) = socket.dump_at_most(
        RouteNetlinkMessage::GetRoute(RouteMessage::default()),
        "RTM_GETROUTE dump",
        cap,
    )?;
    tables.left_out = left_out;
    for msg in routes {
        if let RouteNetlinkMessage::NewRoute(m) = msg {
            tables.routes.extend(route_of(&m, lo));
        }
    }
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    let (mut odd_v4, mut odd_v6) = (false, false);
    for msg in socket.dump(
        RouteNetlinkMessage::GetRule(RuleMessage::default()),
        "RTM_GETRULE dump",
    )? {
        let RouteNetlinkMessage::NewRule(m) = msg else {
            continue;
        };
        let (set, odd) = match m.header.family {
            AddressFamily::Inet => (&mut v4, &mut odd_v4),
            AddressFamily::Inet6 => (&mut v6, &mut odd_v6),
            _ => continue,
        };
        match default_shaped(&m) {
            Some(lookup) => set.push(lookup),
            None => *odd = true,
        }
    }
    v4.sort_unstable();
    v6.sort_unstable();
    tables.policy_rules_v4 = odd_v4
        || v4
            != [
                (0, TABLE_LOCAL),
                (32766, TABLE_MAIN),
                (32767, TABLE_DEFAULT),
            ];
    tables.policy_rules_v6 = odd_v6 || v6 != [(0, TABLE_LOCAL), (32766, TABLE_MAIN)];
    Ok(tables)
}

/// One dumped route in the model; `None` for other families and cached clones.
fn route_of(m: &RouteMessage, lo: u32) -> Option<Route> {
    let h = &m.header;
    let unspecified = match h.address_family {
        AddressFamily::Inet => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        AddressFamily::Inet6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        _ => return None,
    };
    if h.flags.contains(RouteFlags::Cloned) {
        return None;
    }
    let (mut dst, mut table, mut metric, mut oif) = (unspecified, u32::from(h.table), 0, None);
    let mut hops: Option<Vec<u32>> = None;
    for a in &m.attributes {
        match a {
            RouteAttribute::Destination(RouteAddress::Inet(ip)) => dst = IpAddr::V4(*ip),
            RouteAttribute::Destination(RouteAddress::Inet6(ip)) => dst = IpAddr::V6(*ip),
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::Priority(p) => metric = *p,
            RouteAttribute::Oif(i) => oif = Some(*i),
            RouteAttribute::MultiPath(nh) => {
                // Dead nexthops (their device is down) are skipped by the kernel's lookup.
                let live = nh
                    .iter()
                    .filter(|n| !n.flags.contains(RouteNextHopFlags::Dead));
                hops = Some(live.map(|n| n.interface_index).collect());
            }
            _ => {}
        }
    }
    let devices = match h.kind {
        // Delivered here: the packet leaves by the loopback (what iptables' `-o` sees).
        RouteType::Local | RouteType::Anycast => vec![lo],
        RouteType::Unicast | RouteType::Broadcast | RouteType::Multicast => match (hops, oif) {
            (Some(hops), _) if hops.is_empty() => return None,
            (Some(hops), _) => hops,
            (None, _) if h.flags.contains(RouteFlags::Dead) => return None,
            (None, Some(i)) => vec![i],
            (None, None) => Vec::new(),
        },
        // Unreachable, blackhole, prohibit, throw: no interface.
        _ => Vec::new(),
    };
    let prefix = IpNet::new(dst, h.destination_prefix_length).ok()?.trunc();
    Some(Route {
        table,
        prefix,
        metric,
        devices,
        selective: h.source_prefix_length != 0 || h.tos != 0,
    })
}

/// `(priority, table)` of a rule that only looks a table up for all traffic, as the default
/// rules do; `None` for any rule with a selector or another action.
fn default_shaped(m: &RuleMessage) -> Option<(u32, u32)> {
    let h = &m.header;
    if h.action != RuleAction::ToTable
        || h.dst_len != 0
        || h.src_len != 0
        || h.tos != 0
        || !(h.flags - RuleFlags::Permanent).is_empty()
    {
        return None;
    }
    let (mut priority, mut table) = (0, u32::from(h.table));
    for a in &m.attributes {
        match a {
            RuleAttribute::Priority(p) => priority = *p,
            RuleAttribute::Table(t) => table = *t,
            RuleAttribute::Protocol(_) => {}
            // Unset selectors as some kernels spell them: no mark, no suppression (-1).
            RuleAttribute::FwMark(0) | RuleAttribute::FwMask(0) => {}
            RuleAttribute::SuppressPrefixLen(u32::MAX)
            | RuleAttribute::SuppressIfGroup(u32::MAX) => {}
            _ => return None,
        }
    }
    Some((priority, table))
}
