//! iptables-restore text generation: the rule list of each family and its rendering in istio's format.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv6Addr};

use ipnet::IpNet;

use super::{rules_chains, Policy};

/// The iptables-restore input istio-iptables would apply for `policy`: the IPv4 text, and the
/// IPv6 text when `ipv6` is true (istio writes IPv6 rules only when the pod has IPv6).
///
/// The format is that of istio's goldens: tables sorted by name, each `* table`, its `-N`
/// lines (chains in order of first use, then jump targets), the `-A`/`-I` rules in build
/// order, `COMMIT`. `-I CHAIN 1` lines are in text order, so in the kernel the last one is
/// first. The TPROXY mark is istio's default 1337 (`-t` is not modelled).
pub fn iptables_restore_text(policy: &Policy, ipv6: bool) -> (String, Option<String>) {
    let render = |v6| {
        let mut rules = Rules::default();
        rules_chains::build(policy, &Family { policy, v6 }, &mut rules);
        rules.render()
    };
    (render(false), ipv6.then(|| render(true)))
}

/// An iptables table; the derive order is the sort order of the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Table {
    Mangle,
    Nat,
    Raw,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::Mangle => "mangle",
            Table::Nat => "nat",
            Table::Raw => "raw",
        }
    }
}

#[derive(Debug)]
struct Rule {
    table: Table,
    chain: &'static str,
    /// `Some(n)`: `-I chain n`; `None`: `-A chain`.
    position: Option<u32>,
    spec: String,
}

/// The rules of one family, in build order.
#[derive(Debug, Default)]
pub(super) struct Rules(Vec<Rule>);

const BUILTIN: [&str; 5] = ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"];

impl Rules {
    /// `-A chain spec` in `table`.
    pub(super) fn append(&mut self, table: Table, chain: &'static str, spec: impl Into<String>) {
        self.push(table, chain, None, spec.into());
    }

    /// `-I chain position spec` in `table`.
    pub(super) fn insert(
        &mut self,
        table: Table,
        chain: &'static str,
        position: u32,
        spec: impl Into<String>,
    ) {
        self.push(table, chain, Some(position), spec.into());
    }

    fn push(&mut self, table: Table, chain: &'static str, position: Option<u32>, spec: String) {
        self.0.push(Rule {
            table,
            chain,
            position,
            spec,
        });
    }

    fn render(&self) -> String {
        let mut tables: BTreeMap<Table, Vec<&Rule>> = BTreeMap::new();
        for rule in &self.0 {
            tables.entry(rule.table).or_default().push(rule);
        }
        let mut out = String::new();
        for (table, rules) in tables {
            let mut chains: Vec<&str> = Vec::new();
            for rule in &rules {
                declare(&mut chains, rule.chain);
            }
            for rule in &rules {
                if let Some(target) = jump_target(&rule.spec) {
                    declare(&mut chains, target);
                }
            }
            let _ = writeln!(out, "* {}", table.name());
            for chain in chains {
                let _ = writeln!(out, "-N {chain}");
            }
            for rule in rules {
                let _ = match rule.position {
                    Some(n) => writeln!(out, "-I {} {n} {}", rule.chain, rule.spec),
                    None => writeln!(out, "-A {} {}", rule.chain, rule.spec),
                };
            }
            out.push_str("COMMIT\n");
        }
        out
    }
}

/// Add `name` to the `-N` list unless it is built in or already there.
fn declare<'a>(chains: &mut Vec<&'a str>, name: &'a str) {
    if !BUILTIN.contains(&name) && !chains.contains(&name) {
        chains.push(name);
    }
}

/// The user chain a rule jumps to (`-j ISTIO_...`), if any.
fn jump_target(spec: &str) -> Option<&str> {
    let mut words = spec.split(' ');
    words.find(|w| *w == "-j")?;
    words.next().filter(|t| t.starts_with("ISTIO_"))
}

/// One address family's view of the policy.
#[derive(Debug)]
pub(super) struct Family<'a> {
    pub(super) policy: &'a Policy,
    pub(super) v6: bool,
}

impl Family<'_> {
    /// The loopback destination the rules exempt: the env CIDR (v4) or `::1/128`.
    pub(super) fn loopback(&self) -> String {
        if self.v6 {
            "::1/128".into()
        } else {
            self.policy.ipv4_loopback_cidr.to_string()
        }
    }

    /// The inbound passthrough source: `127.0.0.6/32` or `::6/128`.
    pub(super) fn passthrough_source(&self) -> &'static str {
        if self.v6 {
            "::6/128"
        } else {
            "127.0.0.6/32"
        }
    }

    /// Whether `net` belongs to this family (v4-mapped IPv6 counts as IPv6, as in istio).
    pub(super) fn owns(&self, net: &IpNet) -> bool {
        matches!(net, IpNet::V6(_)) == self.v6
    }

    /// This family's DNS servers as host CIDRs (`a.b.c.d/32`, `x::y/128`).
    pub(super) fn dns_servers(&self) -> Vec<String> {
        self.policy
            .dns_servers
            .iter()
            .filter(|a| a.is_ipv6() == self.v6)
            .map(|a| format!("{}/{}", addr(a), if self.v6 { 128 } else { 32 }))
            .collect()
    }
}

/// A CIDR as written (host bits kept).
pub(super) fn net(n: &IpNet) -> String {
    format!("{}/{}", addr(&n.addr()), n.prefix_len())
}

/// An address in iptables syntax. IPv4-compatible IPv6 addresses (`::a.b.c.d`, first 96 bits
/// zero, a.b nonzero) keep their dotted form, as in istio's goldens (`::127.0.0.53/128`).
fn addr(a: &IpAddr) -> String {
    match a {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            if s[..6] == [0; 6] && s[6] != 0 {
                let [_, _, _, _, _, _, _, _, _, _, _, _, a, b, c, d] = v6.octets();
                return format!("::{a}.{b}.{c}.{d}");
            }
            Ipv6Addr::to_string(v6)
        }
        IpAddr::V4(v4) => v4.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_keep_their_golden_form() {
        let a = |s: &str| addr(&s.parse().unwrap());
        assert_eq!(a("::127.0.0.53"), "::127.0.0.53");
        assert_eq!(a("::1"), "::1");
        assert_eq!(a("::2"), "::2");
        assert_eq!(a("::ffff:1.2.3.4"), "::ffff:1.2.3.4");
        assert_eq!(a("2001:db8::1"), "2001:db8::1");
        assert_eq!(net(&"10.1.2.3/8".parse().unwrap()), "10.1.2.3/8");
        assert_eq!(net(&"2001:db8::/32".parse().unwrap()), "2001:db8::/32");
    }

    #[test]
    fn jump_targets() {
        assert_eq!(
            jump_target("-p tcp -j ISTIO_INBOUND"),
            Some("ISTIO_INBOUND")
        );
        assert_eq!(jump_target("-p tcp -j RETURN"), None);
        assert_eq!(jump_target("-p tcp"), None);
    }
}
