//! Human-readable lines for a resolved [`Policy`] (`--dry-run`, status).
use crate::{Cidrs, InboundPorts, Mode, NoProxy, OwnerGroups, Policy};

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
        format!(
            "dual stack             {}",
            if p.dual_stack { "on" } else { "off" }
        ),
        format!(
            "invalid drop           {}",
            if p.drop_invalid { "on" } else { "off" }
        ),
        format!("proxy binding          {}", binding(p)),
        format!(
            "no proxy listening     {}",
            match p.no_proxy {
                NoProxy::Refuse => "refuse (connects fail fast, as with iptables)",
                NoProxy::Passthrough => "passthrough (left alone until the proxy listens)",
            }
        ),
        format!(
            "own addresses          {}",
            match &p.own_addresses {
                None => "every address the namespace holds (a pod the daemon enrolls: its pod IPs)"
                    .to_owned(),
                Some(a) => list(a),
            }
        ),
    ]
}

/// Who the uid/gid bypass holds for: the proxy's cgroup, nobody yet, or anywhere.
fn binding(p: &Policy) -> String {
    match (&p.proxy_cgroup, p.proxy_bypass_closed) {
        (Some(cg), _) => format!("strict: only inside the cgroup {}", cg.display()),
        (None, true) => "strict: closed (the proxy's cgroup is not known yet)".to_owned(),
        (None, false) => "uid/gid anywhere in the namespace".to_owned(),
    }
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

    /// Every field of [`Policy`] (by its JSON key), changed on its own from a base where it
    /// shows, is reported as a change; a field added without a line here fails this test.
    #[test]
    fn every_field_takes_part_in_the_comparison() {
        type Change = fn(&mut Policy);
        let dns_on = |p: &mut Policy| {
            p.redirect_dns = true;
            p.dns_servers = vec!["10.96.0.10".parse().unwrap()];
        };
        let changes_by_key: [(&str, Change, Change); 25] = [
            ("proxy_port", |_| {}, |p| p.proxy_port = 15002),
            (
                "inbound_capture_port",
                |_| {},
                |p| p.inbound_capture_port = 15007,
            ),
            ("tunnel_port", |_| {}, |p| p.tunnel_port = 15009),
            ("proxy_uids", |_| {}, |p| p.proxy_uids = vec![1338]),
            ("proxy_gids", |_| {}, |p| p.proxy_gids = vec![1338]),
            ("mode", |_| {}, |p| p.mode = Mode::Tproxy),
            ("include_cidrs", |_| {}, |p| p.include_cidrs = Cidrs::All),
            (
                "exclude_cidrs",
                |_| {},
                |p| {
                    p.exclude_cidrs = vec!["10.0.0.0/8".parse().unwrap()];
                },
            ),
            ("include_ports", |_| {}, |p| p.include_ports = vec![80]),
            ("exclude_ports", |_| {}, |p| p.exclude_ports = vec![80]),
            (
                "inbound_ports",
                |_| {},
                |p| p.inbound_ports = InboundPorts::All,
            ),
            (
                "inbound_exclude_ports",
                |_| {},
                |p| p.inbound_exclude_ports = vec![80],
            ),
            (
                "exclude_interfaces",
                |_| {},
                |p| {
                    p.exclude_interfaces = vec!["eth1".into()];
                },
            ),
            (
                "kube_virt_interfaces",
                |_| {},
                |p| {
                    p.kube_virt_interfaces = vec!["eth1".into()];
                },
            ),
            (
                "redirect_dns",
                |p| {
                    p.dns_servers = vec!["10.96.0.10".parse().unwrap()];
                },
                |p| p.redirect_dns = true,
            ),
            ("capture_all_dns", dns_on, |p| p.capture_all_dns = true),
            ("dns_servers", dns_on, |p| {
                p.dns_servers = vec!["10.96.0.53".parse().unwrap()];
            }),
            (
                "owner_groups",
                |_| {},
                |p| p.owner_groups = OwnerGroups::Include(Vec::new()),
            ),
            (
                "ipv4_loopback_cidr",
                |_| {},
                |p| {
                    p.ipv4_loopback_cidr = "127.0.0.0/8".parse().unwrap();
                },
            ),
            ("dual_stack", |_| {}, |p| p.dual_stack = true),
            ("drop_invalid", |_| {}, |p| p.drop_invalid = true),
            (
                "proxy_cgroup",
                |_| {},
                |p| p.proxy_cgroup = Some("/sys/fs/cgroup/p".into()),
            ),
            (
                "proxy_bypass_closed",
                |_| {},
                |p| p.proxy_bypass_closed = true,
            ),
            (
                "own_addresses",
                |_| {},
                |p| {
                    p.own_addresses = Some(vec!["10.1.0.5".parse().unwrap()]);
                },
            ),
            ("no_proxy", |_| {}, |p| p.no_proxy = NoProxy::Passthrough),
        ];
        let mut full = Policy::default();
        for (_, setup, change) in &changes_by_key {
            setup(&mut full);
            change(&mut full);
        }
        let json = serde_json::to_value(&full).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut listed: Vec<&str> = changes_by_key.iter().map(|(k, _, _)| *k).collect();
        keys.sort_unstable();
        listed.sort_unstable();
        assert_eq!(keys, listed, "Policy's fields and this test's list differ");
        for (key, setup, change) in &changes_by_key {
            let mut base = Policy::default();
            setup(&mut base);
            let mut changed = base.clone();
            change(&mut changed);
            assert_ne!(base, changed, "{key}: the change changes nothing");
            let lines = changes(&base, &changed, false);
            assert!(!lines.is_empty(), "changing {key} is reported as unchanged");
        }
    }

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
