//! Human-readable lines for a resolved [`Policy`] (`--dry-run`, status).
use crate::{Cidrs, InboundPorts, Mode, OwnerGroups, Policy};

fn list<T: std::fmt::Display>(v: &[T]) -> String {
    if v.is_empty() {
        "(none)".into()
    } else {
        v.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// One line per decision input, in the order the rules use them.
pub fn policy_lines(p: &Policy, ipv6: bool) -> Vec<String> {
    let include = match &p.include_cidrs {
        Cidrs::All => "* (everything)".to_owned(),
        Cidrs::List(l) => list(l),
    };
    let inbound = match &p.inbound_ports {
        InboundPorts::All => "* (every port)".to_owned(),
        InboundPorts::List(l) if l.is_empty() => "(none: inbound capture off)".to_owned(),
        InboundPorts::List(l) => list(l),
    };
    let groups = match &p.owner_groups {
        OwnerGroups::All => "all".to_owned(),
        OwnerGroups::Include(g) => format!(
            "only {}",
            list(
                &g.iter()
                    .map(|g| format!("{}({})", g.name, g.gid))
                    .collect::<Vec<_>>()
            )
        ),
        OwnerGroups::Exclude(g) => format!(
            "all but {}",
            list(
                &g.iter()
                    .map(|g| format!("{}({})", g.name, g.gid))
                    .collect::<Vec<_>>()
            )
        ),
    };
    let dns = if !p.dns_enabled() {
        "off".to_owned()
    } else if p.capture_all_dns {
        "all servers -> 15053".to_owned()
    } else {
        format!("{} -> 15053", list(&p.dns_servers))
    };
    vec![
        format!("outbound port (-p)     {}", p.proxy_port),
        format!("inbound port (-z)      {}", p.inbound_capture_port),
        format!("tunnel port (-e)       {}", p.tunnel_port),
        format!("proxy uids (-u)        {}", list(&p.proxy_uids)),
        format!("proxy gids (-g)        {}", list(&p.proxy_gids)),
        format!(
            "mode (-m)              {}",
            match p.mode {
                Mode::Redirect => "REDIRECT (inbound: the application sees the proxy as its peer)",
                Mode::Tproxy =>
                    "TPROXY (inbound: the application sees the client's own address; \
                    the pod gets the fwmark 1337 rule and local table 133)",
            }
        ),
        format!("include CIDRs (-i)     {include}"),
        format!("exclude CIDRs (-x)     {}", list(&p.exclude_cidrs)),
        format!("include ports (-q)     {}", list(&p.include_ports)),
        format!("exclude ports (-o)     {}", list(&p.exclude_ports)),
        format!("inbound ports (-b)     {inbound}"),
        format!("inbound exclude (-d)   {}", list(&p.inbound_exclude_ports)),
        format!("exclude nics (-c)      {}", list(&p.exclude_interfaces)),
        format!("kube-virt nics (-k)    {}", list(&p.kube_virt_interfaces)),
        format!("DNS capture            {dns}"),
        format!("owner groups           {groups}"),
        format!("IPv4 loopback CIDR     {}", p.ipv4_loopback_cidr),
        format!(
            "IPv6                   {}",
            if ipv6 {
                "captured (dual stack)"
            } else {
                "untouched"
            }
        ),
        format!(
            "loopback include       {}",
            if p.include_has_loopback() {
                "yes: app traffic on lo follows -i"
            } else {
                "no"
            }
        ),
    ]
}

/// What replacing policy `old` with `new` changes, one `- old line` / `+ new line` pair per
/// decision input that differs (empty: the same policy).
pub fn changes(old: &Policy, new: &Policy, ipv6: bool) -> Vec<String> {
    let (a, b) = (policy_lines(old, ipv6), policy_lines(new, ipv6));
    let mut out = Vec::new();
    for i in 0..a.len().max(b.len()) {
        match (a.get(i), b.get(i)) {
            (Some(x), Some(y)) if x == y => {}
            (x, y) => {
                out.extend(x.map(|x| format!("- {}", x.trim_end())));
                out.extend(y.map(|y| format!("+ {}", y.trim_end())));
            }
        }
    }
    out
}

#[cfg(test)]
mod change_tests {
    use super::*;

    #[test]
    fn a_replaced_policy_names_what_changed_only() {
        let old = Policy::default();
        let mut new = old.clone();
        assert!(changes(&old, &new, false).is_empty());
        new.inbound_ports = InboundPorts::All;
        let c = changes(&old, &new, false);
        assert_eq!(c.len(), 2, "{c:?}");
        assert!(c[0].starts_with("- ") && c[1].starts_with("+ "), "{c:?}");
    }
}
