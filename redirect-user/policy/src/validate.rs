//! The invariants every [`Policy`] must hold, whatever it came from: a policy read as JSON
//! (`enroll --policy`, the daemon's socket, enrollment files) is held to what the
//! istio-iptables parser enforces, field by field, with the field named in the error.
use ipnet::Ipv4Net;

use super::{InboundPorts, OwnerGroups, Policy, PolicyError, MAX_OWNER_IDS};

/// An interface name the kernel accepts (`dev_valid_name`): 1-15 bytes, not `.` or `..`, no
/// `/`, `:`, NUL or whitespace.
pub(super) fn interface_problem(name: &str) -> Option<&'static str> {
    let bad_char = |c: char| c == '/' || c == ':' || c == '\0' || c.is_whitespace();
    if name.is_empty() || name.len() > 15 {
        Some("is not an interface name (1-15 bytes)")
    } else if name == "." || name == ".." {
        Some("is not an interface name ('.' and '..' are not allowed)")
    } else if name.contains(bad_char) {
        Some("is not an interface name (no '/', ':', NUL or spaces)")
    } else {
        None
    }
}

/// istio's rule for `ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR`: a loopback address, a mask of 8-32.
pub(super) fn loopback_problem(net: &Ipv4Net) -> Option<&'static str> {
    if !net.addr().is_loopback() {
        Some("is not an IPv4 loopback address (127.0.0.0/8)")
    } else if !(8..=32).contains(&net.prefix_len()) {
        Some("has a mask outside 8-32 bits")
    } else {
        None
    }
}

fn invalid(field: &str, value: impl ToString, reason: &str) -> PolicyError {
    PolicyError::invalid(&format!("policy.{field}"), &value.to_string(), reason)
}

fn ports(field: &str, list: &[u16]) -> Result<(), PolicyError> {
    match list.iter().find(|p| **p == 0) {
        Some(p) => Err(invalid(field, p, "is not a port (a number 1-65535)")),
        None => Ok(()),
    }
}

fn ids(field: &str, list: &[u32], what: &str) -> Result<(), PolicyError> {
    let shown = || format!("{list:?}");
    if list.is_empty() {
        return Err(invalid(field, shown(), &format!("names no {what}")));
    }
    count(field, list.len(), shown, what)
}

fn count(field: &str, n: usize, shown: impl Fn() -> String, what: &str) -> Result<(), PolicyError> {
    if n > MAX_OWNER_IDS {
        return Err(invalid(
            field,
            shown(),
            &format!(
                "lists {n} {what}s; at most {MAX_OWNER_IDS} are supported (the eBPF datapath's \
                fixed per-policy limit)"
            ),
        ));
    }
    Ok(())
}

fn interfaces(field: &str, list: &[String]) -> Result<(), PolicyError> {
    for name in list {
        if let Some(reason) = interface_problem(name) {
            return Err(invalid(field, name, reason));
        }
    }
    Ok(())
}

impl Policy {
    /// Checks what the istio-iptables parser checks (ports 1-65535, 1 to [`MAX_OWNER_IDS`]
    /// proxy uids and gids, at most that many owner groups, kernel interface names, the
    /// loopback CIDR). Every policy [`crate::parse_invocation`] returns passes.
    pub fn validate(&self) -> Result<(), PolicyError> {
        for (field, port) in [
            ("proxy_port", self.proxy_port),
            ("inbound_capture_port", self.inbound_capture_port),
            ("tunnel_port", self.tunnel_port),
        ] {
            ports(field, &[port])?;
        }
        ports("include_ports", &self.include_ports)?;
        ports("exclude_ports", &self.exclude_ports)?;
        if let InboundPorts::List(list) = &self.inbound_ports {
            ports("inbound_ports", list)?;
        }
        ports("inbound_exclude_ports", &self.inbound_exclude_ports)?;
        ids("proxy_uids", &self.proxy_uids, "uid")?;
        ids("proxy_gids", &self.proxy_gids, "gid")?;
        if let OwnerGroups::Include(g) | OwnerGroups::Exclude(g) = &self.owner_groups {
            let names = || {
                g.iter()
                    .map(|g| g.name.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            count("owner_groups", g.len(), names, "group")?;
        }
        interfaces("exclude_interfaces", &self.exclude_interfaces)?;
        interfaces("kube_virt_interfaces", &self.kube_virt_interfaces)?;
        if let Some(reason) = loopback_problem(&self.ipv4_loopback_cidr) {
            return Err(invalid(
                "ipv4_loopback_cidr",
                self.ipv4_loopback_cidr,
                reason,
            ));
        }
        Ok(())
    }
}
