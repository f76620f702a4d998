//! Conformance of [`iptables_restore_text`] with every case of Istio's capture goldens.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;

use super::test_support::Stub;
use super::{iptables_restore_text, parse_invocation};

const BASE: &str = "-p 15001 -z 15006 -e 15008 -u 1337 -g 1337 -m REDIRECT";

fn reference_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/istio-reference")
}

/// One row of capture-cases.tsv.
#[derive(Debug)]
struct Case {
    name: String,
    args: Vec<String>,
    env: HashMap<String, String>,
    dns: Vec<IpAddr>,
    ipv6: bool,
}

fn cases() -> Vec<Case> {
    let path = reference_dir().join("capture-cases.tsv");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            let col = |i: usize| cols.get(i).copied().unwrap_or("");
            let mut args: Vec<String> = BASE.split(' ').map(String::from).collect();
            if col(1) != "(none)" {
                args.extend(col(1).split(' ').map(String::from));
            }
            let env = match col(2) {
                "-" | "" => HashMap::new(),
                e => e
                    .split(' ')
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').expect("env column is KEY=value");
                        (k.to_string(), v.to_string())
                    })
                    .collect(),
            };
            let notes = col(3);
            let dns = notes
                .split([' ', ';', ','])
                .filter_map(|w| w.parse().ok())
                .collect();
            Case {
                name: col(0).to_string(),
                args,
                env,
                dns,
                ipv6: notes.contains("ipv6=1"),
            }
        })
        .collect()
}

/// The golden's iptables-restore blocks split into the v4 half and the v6 half (the v6 half
/// starts where the table names stop increasing); harness markers are dropped.
fn golden(name: &str) -> (String, Option<String>) {
    let path = reference_dir()
        .join("capture-golden")
        .join(format!("{name}.golden"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut halves: Vec<String> = vec![String::new()];
    let mut last_table = String::new();
    let mut in_block = false;
    for line in text.lines() {
        if let Some(table) = line.strip_prefix("* ") {
            if table <= last_table.as_str() {
                halves.push(String::new());
            }
            last_table = table.to_string();
            in_block = true;
        }
        if in_block {
            let half = halves.last_mut().expect("one half at least");
            half.push_str(line);
            half.push('\n');
        }
        if line == "COMMIT" {
            in_block = false;
        }
    }
    assert!(halves.len() <= 2, "{name}: more than two families");
    let v6 = halves.get(1).cloned();
    (halves.swap_remove(0), v6)
}

fn diff(want: &str, got: &str) -> String {
    let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let mut out = String::new();
    for i in 0..w.len().max(g.len()) {
        let (a, b) = (w.get(i).copied(), g.get(i).copied());
        if a == b {
            out.push_str(&format!("   {}\n", a.unwrap_or("")));
        } else {
            if let Some(a) = a {
                out.push_str(&format!(" - {a}\n"));
            }
            if let Some(b) = b {
                out.push_str(&format!(" + {b}\n"));
            }
        }
    }
    out
}

#[test]
fn every_capture_case_matches_its_golden() {
    let cases = cases();
    assert!(cases.len() >= 27, "only {} cases read", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let resolv: String = case
            .dns
            .iter()
            .map(|s| format!("nameserver {s}\n"))
            .collect();
        let sys = Stub::with_resolv(&resolv);
        let inv = parse_invocation(&case.args, &case.env, &sys)
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let (v4, v6) = iptables_restore_text(&inv.policy, case.ipv6);
        let (want4, want6) = golden(&case.name);
        assert_eq!(want6.is_some(), case.ipv6, "{}: golden families", case.name);
        if v4 != want4 {
            failures.push(format!("{} (IPv4):\n{}", case.name, diff(&want4, &v4)));
        }
        if v6 != want6 {
            let (w, g) = (want6.unwrap_or_default(), v6.unwrap_or_default());
            failures.push(format!("{} (IPv6):\n{}", case.name, diff(&w, &g)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn dns_servers_flag_gives_the_same_rules_as_resolv_conf() {
    for case in cases().iter().filter(|c| !c.dns.is_empty()) {
        let mut args = case.args.clone();
        let list: Vec<String> = case.dns.iter().map(ToString::to_string).collect();
        args.push(format!("--dns-servers={}", list.join(",")));
        let inv = parse_invocation(&args, &case.env, &Stub::default()).unwrap();
        assert_eq!(inv.policy.dns_servers, case.dns, "{}", case.name);
        let got = iptables_restore_text(&inv.policy, case.ipv6);
        assert_eq!(got, golden(&case.name), "{}", case.name);
    }
}
