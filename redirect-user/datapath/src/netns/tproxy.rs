//! TPROXY mode's policy routing inside a pod's namespace. The proxy connects to the
//! application from the client's own address (`IP_TRANSPARENT`, marked as Envoy's original_src
//! marks it); the application's replies go to that address, which is not the pod's. Three
//! things, made with the enrollment and removed with it, keep them in the pod:
//! - `net.ipv4.tcp_fwmark_accept = 1` (it covers IPv6 too): a connection accepted from a marked
//!   SYN carries the SYN's mark, from its SYN-ACK on, where Istio restores it with CONNMARK;
//! - `ip rule fwmark MARK lookup TABLE` and `ip route local default dev lo table TABLE`, IPv4 and
//!   IPv6, as istio-iptables adds them: a marked reply is delivered locally, to the proxy's
//!   transparent socket, instead of leaving for the client.
//!
//! The sysctl is written through `netns::sysctl`, which still writes it where `/proc/sys` is
//! mounted read-only, as container runtimes mount it in the node daemon's non-privileged
//! container (issue 45).
//!
//! Rules and routes carry protocol [`PROTOCOL`] (`ip rule` shows `proto 114`), which is how
//! removal finds them whatever mark and table they name. Nothing else in the pod changes: an
//! application's own sockets have no mark, and a SYN from outside the pod arrives unmarked.
use std::io;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::{
    route::{RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType},
    rule::{RuleAction, RuleAttribute, RuleHeader, RuleMessage},
    AddressFamily, RouteNetlinkMessage,
};

use super::{rtnl::RouteSocket, NetnsHandle};
use crate::error::Result;

/// The routing protocol number of our rules and routes.
pub(crate) const PROTOCOL: u8 = 114;
/// The namespace's sysctl that hands a SYN's mark to the accepted connection (its path below
/// `/proc/sys`).
const FWMARK_ACCEPT: &str = "net/ipv4/tcp_fwmark_accept";
/// The loopback interface's index, the same in every namespace.
const LOOPBACK_IFINDEX: u32 = 1;
/// The rule's priority, the one `ip rule add` gives istio-iptables' rule in a fresh namespace.
/// Given explicitly: the kernel's duplicate check compares priorities, so a re-apply finds the
/// rule there (EEXIST) instead of adding another below it.
const RULE_PRIORITY: u32 = 32765;

/// The mark the proxy's transparent connections carry and the table their replies are looked
/// up in (istio-iptables `-t` and `-r`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TproxyRouting {
    /// The mark (`-t`, 1337).
    pub(crate) mark: u32,
    /// The table (`-r`, 133).
    pub(crate) table: u32,
}

impl TproxyRouting {
    /// istio-iptables' defaults: mark 1337, table 133.
    pub(crate) const ISTIO: Self = Self {
        mark: 1337,
        table: 133,
    };
}

fn rule(family: AddressFamily, r: TproxyRouting) -> RuleMessage {
    let mut m = RuleMessage::default();
    m.header = RuleHeader {
        family,
        table: u8::try_from(r.table).unwrap_or(0),
        action: RuleAction::ToTable,
        ..RuleHeader::default()
    };
    m.attributes = vec![
        RuleAttribute::FwMark(r.mark),
        RuleAttribute::FwMask(u32::MAX),
        RuleAttribute::Table(r.table),
        RuleAttribute::Protocol(RouteProtocol::Other(PROTOCOL)),
        RuleAttribute::Priority(RULE_PRIORITY),
    ];
    m
}

fn route(family: AddressFamily, r: TproxyRouting) -> RouteMessage {
    let mut m = RouteMessage::default();
    m.header = RouteHeader {
        address_family: family,
        table: u8::try_from(r.table).unwrap_or(0),
        protocol: RouteProtocol::Other(PROTOCOL),
        scope: RouteScope::Host,
        kind: RouteType::Local,
        ..RouteHeader::default()
    };
    m.attributes = vec![
        RouteAttribute::Table(r.table),
        RouteAttribute::Oif(LOOPBACK_IFINDEX),
    ];
    m
}

/// Adds, tolerating what is already there (a re-apply).
fn add(s: &RouteSocket, msg: RouteNetlinkMessage, what: &str) -> io::Result<bool> {
    match s.change(msg, NLM_F_CREATE | NLM_F_EXCL, what) {
        Ok(()) => Ok(true),
        Err(e)
            if e.raw_os_error() == Some(libc::EEXIST)
                || e.kind() == io::ErrorKind::AlreadyExists =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// IPv6 is off here: no IPv6 in the kernel (EAFNOSUPPORT), or disabled on lo (EACCES).
fn ipv6_off(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EAFNOSUPPORT | libc::EACCES))
}

fn install(s: &RouteSocket, r: TproxyRouting) -> io::Result<()> {
    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        let v6 = family == AddressFamily::Inet6;
        let rule_msg = || RouteNetlinkMessage::NewRule(rule(family, r));
        match add(s, rule_msg(), "RTM_NEWRULE fwmark") {
            // Without IPv6 its IPv4 half is all there is.
            Err(e) if v6 && ipv6_off(&e) => continue,
            other => other?,
        };
        let route_msg = RouteNetlinkMessage::NewRoute(route(family, r));
        match add(s, route_msg, "RTM_NEWROUTE local default") {
            Err(e) if v6 && ipv6_off(&e) => {
                // IPv6 disabled on lo: no half of it stays.
                gone(s.change(
                    RouteNetlinkMessage::DelRule(rule(family, r)),
                    0,
                    "RTM_DELRULE",
                ))?;
            }
            other => {
                other?;
            }
        }
    }
    Ok(())
}

/// A delete that found nothing (another remover was first) is not an error.
fn gone(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e)
            if e.raw_os_error() == Some(libc::ENOENT) || e.raw_os_error() == Some(libc::ESRCH) =>
        {
            Ok(())
        }
        other => other,
    }
}

/// Our rules (protocol [`PROTOCOL`]) in the namespace.
fn our_rules(s: &RouteSocket) -> io::Result<Vec<RuleMessage>> {
    let ours = RuleAttribute::Protocol(RouteProtocol::Other(PROTOCOL));
    Ok(super::rtnl::retry_torn(|| {
        s.dump(
            RouteNetlinkMessage::GetRule(RuleMessage::default()),
            "RTM_GETRULE dump",
        )
    })?
    .into_iter()
    .filter_map(|msg| match msg {
        RouteNetlinkMessage::NewRule(m) if m.attributes.contains(&ours) => Some(m),
        _ => None,
    })
    .collect())
}

/// Deletes every rule and route of ours; returns whether there was any.
fn remove(s: &RouteSocket) -> io::Result<bool> {
    let ours = RouteProtocol::Other(PROTOCOL);
    let mut found = false;
    for m in our_rules(s)? {
        found = true;
        gone(s.change(RouteNetlinkMessage::DelRule(m), 0, "RTM_DELRULE"))?;
    }
    for msg in super::rtnl::retry_torn(|| {
        s.dump(
            RouteNetlinkMessage::GetRoute(RouteMessage::default()),
            "RTM_GETROUTE dump",
        )
    })? {
        if let RouteNetlinkMessage::NewRoute(m) = msg {
            if m.header.protocol == ours {
                found = true;
                gone(s.change(RouteNetlinkMessage::DelRoute(m), 0, "RTM_DELROUTE"))?;
            }
        }
    }
    Ok(found)
}

impl NetnsHandle {
    /// Installs TPROXY mode's routing in this namespace (see the module's documentation).
    /// A failure leaves nothing of it behind.
    pub(crate) fn install_tproxy(&self, r: TproxyRouting) -> Result<()> {
        let installed = self
            .with_route_socket(|s| install(s, r))
            .and_then(|()| self.run(|| write_sysctl("1")));
        if installed.is_err() {
            let _ = self.with_route_socket(remove);
        }
        installed
    }

    /// Whether this namespace holds a rule of ours (one rule dump): the check before
    /// [`Self::remove_tproxy`] on the removal paths, which trust the namespace over the maps.
    pub(crate) fn has_tproxy(&self) -> bool {
        self.with_route_socket(our_rules)
            .is_ok_and(|rules| !rules.is_empty())
    }

    /// Removes TPROXY mode's routing from this namespace: our rules and routes, and the sysctl
    /// back to the kernel's default (0) when there were any (a value the pod had set itself
    /// before is not remembered). Returns whether there were.
    pub(crate) fn remove_tproxy(&self) -> Result<bool> {
        let found = self.with_route_socket(remove)?;
        if found {
            self.run(|| write_sysctl("0"))?;
        }
        Ok(found)
    }
}

/// Sets the namespace's `tcp_fwmark_accept`; run by a thread inside it (`NetnsHandle::run`),
/// read-only `/proc/sys` included.
fn write_sysctl(value: &str) -> io::Result<()> {
    super::sysctl::write(FWMARK_ACCEPT, value)
}
