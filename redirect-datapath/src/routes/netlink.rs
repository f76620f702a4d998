//! Reads the routes of every table and the ip rules of the current network namespace over
//! rtnetlink (`RTM_GETROUTE` and `RTM_GETRULE` dumps), into the model of `table`.
//!
//! Netlink rather than `/proc/net/{route,ipv6_route}`: those show IPv4's main table only, one
//! nexthop of a multipath route, no table for IPv6 and no rules, which the choice needs.
use std::{
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use ipnet::IpNet;
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use netlink_packet_route::{
    route::{RouteAddress, RouteAttribute, RouteFlags, RouteMessage, RouteNextHopFlags, RouteType},
    rule::{RuleAction, RuleAttribute, RuleFlags, RuleMessage},
    AddressFamily, RouteNetlinkMessage,
};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use super::table::{Route, Tables, TABLE_LOCAL, TABLE_MAIN};

/// Table id of `default`, looked up last by IPv4's default rules.
const TABLE_DEFAULT: u32 = 253;

/// The current namespace's routes and rules; `lo` is the loopback's ifindex (local delivery
/// leaves by it, whatever device holds the address).
pub(super) fn read(lo: u32) -> io::Result<Tables> {
    let mut tries = 0;
    loop {
        match read_once(lo) {
            // The tables changed while they were dumped: read them again.
            Err(e) if e.kind() == io::ErrorKind::Interrupted && tries < 4 => tries += 1,
            other => return other,
        }
    }
}

fn read_once(lo: u32) -> io::Result<Tables> {
    let socket = open()?;
    let mut tables = Tables::default();
    for msg in dump(
        &socket,
        RouteNetlinkMessage::GetRoute(RouteMessage::default()),
    )? {
        if let RouteNetlinkMessage::NewRoute(m) = msg {
            tables.routes.extend(route_of(&m, lo));
        }
    }
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    let (mut odd_v4, mut odd_v6) = (false, false);
    for msg in dump(
        &socket,
        RouteNetlinkMessage::GetRule(RuleMessage::default()),
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

fn open() -> io::Result<Socket> {
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    Ok(socket)
}

/// Sends one dump request and collects its answers up to `NLMSG_DONE`; a dump the kernel
/// marks inconsistent (`NLM_F_DUMP_INTR`: changed meanwhile) is an `Interrupted` error.
fn dump(socket: &Socket, request: RouteNetlinkMessage) -> io::Result<Vec<RouteNetlinkMessage>> {
    let what = match &request {
        RouteNetlinkMessage::GetRoute(_) => "RTM_GETROUTE dump",
        _ => "RTM_GETRULE dump",
    };
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    header.sequence_number = 1;
    let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(request));
    packet.finalize();
    let mut buf = vec![0; packet.buffer_len()];
    packet.serialize(&mut buf);
    socket.send(&buf, 0)?;
    let mut out = Vec::new();
    let mut torn = false;
    loop {
        let (datagram, _) = socket.recv_from_full()?;
        let mut offset = 0;
        while offset < datagram.len() {
            let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&datagram[offset..])
                .map_err(|e| io::Error::other(format!("{what}: decoding an answer: {e}")))?;
            let len = msg.header.length as usize;
            torn |= msg.header.flags & NLM_F_DUMP_INTR != 0;
            match msg.payload {
                NetlinkPayload::Done(_) if torn => {
                    return Err(io::Error::new(
                        io::ErrorKind::Interrupted,
                        format!("{what}: the tables changed during the dump"),
                    ))
                }
                NetlinkPayload::Done(_) => return Ok(out),
                NetlinkPayload::Error(e) if e.code.is_some() => {
                    let err = e.to_io();
                    return Err(io::Error::new(err.kind(), format!("{what}: {err}")));
                }
                NetlinkPayload::InnerMessage(m) => out.push(m),
                _ => {}
            }
            if len == 0 {
                break;
            }
            offset += (len + 3) & !3;
        }
    }
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
