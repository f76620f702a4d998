//! The differential conformance suite's cases and goldens (topology and probes: `world`): one row of Istio's
//! `capture-cases.tsv` becomes two identical pods, one behind the golden iptables rules and one
//! behind `redirect istio-iptables` with the same arguments, probed with the same connections.
use redirect_testkit::reference;

/// Public ranges the cases name, mapped (in goldens and arguments alike) into 198.18.0.0/15 so
/// that every destination lives in a test namespace.
pub const RANGE_MAP: [(&str, &str); 2] = [
    ("1.1.0.0/16", "198.18.0.0/16"),
    ("9.9.0.0/16", "198.19.0.0/16"),
];
/// Group names the owner-group cases use, mapped to numeric gids that exist nowhere else.
pub const GROUP_MAP: [(&str, &str); 2] = [("java", "2000"), ("ftp", "2001")];

/// One row of capture-cases.tsv, with ranges and group names mapped.
#[derive(Debug, Clone)]
pub struct Case {
    /// Row name = golden file name.
    pub name: String,
    /// istio-iptables arguments: the base plus the row's.
    pub args: Vec<String>,
    /// Environment of the row.
    pub env: Vec<(String, String)>,
    /// DNS servers named in the notes.
    pub dns: Vec<String>,
    /// The pod is dual-stack.
    pub ipv6: bool,
    /// A TPROXY row (`-m TPROXY`): Istio's policy routing and a transparent proxy join it.
    pub tproxy: bool,
}

fn map_text(s: &str) -> String {
    let mut out = s.to_owned();
    for (from, to) in RANGE_MAP {
        out = out.replace(from, to);
    }
    for (from, to) in GROUP_MAP {
        out = out.replace(
            &format!("--gid-owner {from} "),
            &format!("--gid-owner {to} "),
        );
        out = out.replace(&format!("={from},"), &format!("={to},"));
        out = out.replace(&format!(",{from}"), &format!(",{to}"));
    }
    out
}

/// Every case of capture-cases.tsv, mapped.
pub fn cases() -> Vec<Case> {
    reference::cases()
        .into_iter()
        .map(|row| {
            let args = reference::CASE_BASE_ARGS
                .split_whitespace()
                .map(str::to_owned)
                .chain(
                    map_text(&row.row_args)
                        .split_whitespace()
                        .map(str::to_owned),
                )
                .collect();
            let env = row
                .env
                .iter()
                .map(|(k, v)| {
                    // Mapped as `KEY=VALUE,` (as before the cases moved to the testkit), so that
                    // a group name first in the list (`=java,`) is mapped too.
                    let mapped = map_text(&format!("={v},"));
                    let mapped = mapped.trim_start_matches('=').trim_end_matches(',');
                    (k.clone(), mapped.to_owned())
                })
                .collect();
            Case {
                args,
                env,
                dns: row.dns.iter().map(ToString::to_string).collect(),
                ipv6: row.ipv6,
                tproxy: row.tproxy,
                name: row.name,
            }
        })
        .collect()
}

/// The golden of `case`, mapped: (IPv4 restore text, IPv6 restore text when dual-stack).
pub fn golden(case: &Case) -> (String, Option<String>) {
    let g = reference::split_golden(&map_text(&reference::read(&format!(
        "capture-golden/{}.golden",
        case.name
    ))));
    (g.v4, if case.ipv6 { g.v6 } else { None })
}

pub use crate::world::*;

#[cfg(test)]
mod tests {
    use super::{cases, GROUP_MAP};

    #[test]
    fn group_names_are_mapped_wherever_they_stand_in_a_list() {
        for case in cases() {
            for (name, _) in GROUP_MAP {
                let named = |v: &str| v.split([',', '=', ' ']).any(|w| w == name);
                assert!(
                    !case.env.iter().any(|(_, v)| named(v)) && !case.args.iter().any(|a| named(a)),
                    "{}: {name} left unmapped: {:?} {:?}",
                    case.name,
                    case.env,
                    case.args
                );
            }
        }
    }
}
