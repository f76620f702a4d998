//! Conformance of [`iptables_restore_text`] with every case of Istio's capture goldens.

use redirect_testkit::reference;
use std::collections::HashMap;
use std::net::IpAddr;

use super::test_support::Stub;
use super::{iptables_restore_text, parse_invocation};

/// One row of capture-cases.tsv in the form `parse_invocation` takes.
#[derive(Debug)]
struct Case {
    name: String,
    args: Vec<String>,
    env: HashMap<String, String>,
    dns: Vec<IpAddr>,
    ipv6: bool,
}

fn cases() -> Vec<Case> {
    reference::cases()
        .into_iter()
        .map(|row| Case {
            args: row.args(),
            env: row.env.into_iter().collect(),
            dns: row.dns,
            ipv6: row.ipv6,
            name: row.name,
        })
        .collect()
}

/// The golden's (IPv4, IPv6) iptables-restore halves.
fn golden(name: &str) -> (String, Option<String>) {
    let g = reference::golden(name);
    (g.v4, g.v6)
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
