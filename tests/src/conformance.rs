//! The differential conformance suite's cases and goldens (topology and probes: `world`): one row of Istio's
//! `capture-cases.tsv` becomes two identical pods, one behind the golden iptables rules and one
//! behind `redirect istio-iptables` with the same arguments, probed with the same connections.
use crate::iptables::reference_dir;

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
    /// TPROXY rows are not part of the suite (see the test's docs).
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

/// Every case of capture-cases.tsv.
pub fn cases() -> Vec<Case> {
    let path = reference_dir().join("capture-cases.tsv");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let base = "-p 15001 -z 15006 -e 15008 -u 1337 -g 1337 -m REDIRECT";
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            let (name, args, env, notes) = (
                cols[0],
                cols.get(1).copied().unwrap_or(""),
                cols.get(2).copied().unwrap_or("-"),
                cols.get(3).copied().unwrap_or(""),
            );
            let row_args = if args == "(none)" {
                String::new()
            } else {
                map_text(args)
            };
            let mut all: Vec<String> = base.split(' ').map(str::to_owned).collect();
            all.extend(row_args.split_whitespace().map(str::to_owned));
            let env = if env == "-" {
                Vec::new()
            } else {
                let mapped = map_text(&format!("{env},"));
                let mapped = mapped.trim_end_matches(',');
                let (k, v) = mapped.split_once('=').expect("KEY=VALUE");
                vec![(k.to_owned(), v.to_owned())]
            };
            let dns = notes
                .split(';')
                .filter_map(|n| n.trim().strip_prefix("dns server"))
                .flat_map(|rest| {
                    rest.trim_start_matches('s')
                        .split(" and ")
                        .map(|s| s.trim().to_owned())
                        .collect::<Vec<_>>()
                })
                .filter(|s| !s.is_empty())
                .collect();
            Case {
                name: name.to_owned(),
                args: all,
                env,
                dns,
                ipv6: notes.contains("ipv6=1"),
                tproxy: args.contains("TPROXY"),
            }
        })
        .collect()
}

/// The golden of `case`, mapped: (IPv4 restore text, IPv6 restore text when dual-stack).
pub fn golden(case: &Case) -> (String, Option<String>) {
    let path = reference_dir()
        .join("capture-golden")
        .join(format!("{}.golden", case.name));
    let text = map_text(
        &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display())),
    );
    let mut blocks: Vec<String> = vec![String::new()];
    let mut seen: Vec<String> = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if let Some(table) = line.strip_prefix("* ") {
            if seen.contains(&table.to_owned()) {
                blocks.push(String::new());
                seen.clear();
            }
            seen.push(table.to_owned());
            inside = true;
        }
        if inside {
            let b = blocks.last_mut().expect("block");
            b.push_str(line);
            b.push('\n');
        }
        if line == "COMMIT" {
            inside = false;
        }
    }
    let v6 = if case.ipv6 {
        blocks.get(1).cloned().filter(|b| !b.is_empty())
    } else {
        None
    };
    (blocks.swap_remove(0), v6)
}

pub use crate::world::*;
