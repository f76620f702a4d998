//! `deploy/monitoring`: the alert rules pass `promtool check rules` and their unit tests
//! (`promtool test rules alerts_test.yaml`: each alert fires on the series that mean it, a
//! healthy node stays silent), and what the daemon's `--metrics` endpoint and the proxy's two
//! Prometheus ports serve passes `promtool check metrics` (Debian's `prometheus` package,
//! installed by `cargo xtask setup`), with a refused ADD counted.
use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use redirect_testkit::{privileged, runs_or_skip, Netns};
use redirect_tests::{
    cni::{entry, plugins_missing, CniHost},
    http::{request, scrape},
    node::{metrics_addr, Node},
    procs::Proxy,
};

pub(crate) const PROMTOOL: &str = "/usr/bin/promtool";

pub(crate) fn promtool_missing() -> Option<String> {
    (!Path::new(PROMTOOL).exists()).then(|| {
        format!("{PROMTOOL} is missing (Debian's prometheus; cargo xtask setup installs it)")
    })
}

pub(crate) fn monitoring_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/monitoring")
}

/// `promtool ARGS` in deploy/monitoring, with `stdin`: (success, its output).
fn promtool(args: &[&str], stdin: &str) -> (bool, String) {
    let mut child = Command::new(PROMTOOL)
        .args(args)
        .current_dir(monitoring_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    if !runs_or_skip(redirect_testkit::test_path!(), promtool_missing()) {
        return;
    }
    let (ok, text) = promtool(&["check", "rules", "alerts.yaml"], "");
    assert!(ok, "promtool check rules: {text}");
    assert!(text.contains("SUCCESS: 5 rules found"), "{text}");
    let (ok, text) = promtool(&["test", "rules", "alerts_test.yaml"], "");
    assert!(ok, "promtool test rules: {text}");
}

#[test]
fn the_daemons_and_the_proxys_metrics_pass_promtool() {
    privileged!(promtool_missing().or_else(plugins_missing));
    let node = Node::new();
    let (_daemon, ready) = node.daemon_with(&["--metrics", "127.0.0.1:0"]);
    // One refused ADD (the daemon has no Kubernetes access): the daemon counts it.
    let host = CniHost::new();
    let pod = host.sandbox("shop", "refused-1", "uid-refused");
    let ran = pod.redirect_cni("ADD", &entry(&node.dir.join("daemon.sock")));
    assert!(!ran.ok(), "ADD without Kubernetes access: {}", ran.text());
    let text = scrape(&metrics_addr(&ready));
    assert!(
        text.contains("\nredirect_cni_add_refused_total 1\n"),
        "{text}"
    );
    for family in [
        "redirect_build_info",
        "redirect_decisions_total",
        "redirect_map_entries",
        "redirect_map_capacity",
        "redirect_cni_add_unreachable_total",
        "redirect_cni_add_refused_total",
    ] {
        assert!(
            text.contains(&format!("# TYPE {family} ")),
            "{family} missing: {text}"
        );
    }
    // The build and datapath serving, and each map's capacity beside its fill (the kernel's
    // max_entries, never 0 for a map that exists).
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        text.contains(&format!(
            "redirect_build_info{{version=\"{version}\",layout=\""
        )) && text.contains("scope=\"root\"} 1\n"),
        "{text}"
    );
    for map in ["TRACKED", "NETNS_OUTBOUND", "POD_ADDRS"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("redirect_map_capacity{{map=\"{map}\"}} ")))
            .unwrap_or_else(|| panic!("no capacity of {map}: {text}"));
        let cap: u64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("number");
        assert!(cap > 0, "{line}");
    }
    let (ok, lint) = promtool(&["check", "metrics"], &text);
    assert!(ok, "promtool check metrics (daemon): {lint}\n{text}");

    let ns = Netns::new("rmon").expect("netns");
    let _proxy = Proxy::start(&ns);
    for port in ["127.0.0.1:15090", "127.0.0.1:15020"] {
        let (status, body) = request(&ns, "GET", port, "/stats/prometheus");
        assert_eq!(status, 200, "{port}: {body}");
        let (ok, lint) = promtool(&["check", "metrics"], &body);
        assert!(ok, "promtool check metrics (proxy {port}): {lint}\n{body}");
    }
}
