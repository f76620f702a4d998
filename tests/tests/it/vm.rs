//! VM mode: a namespace plays the VM, enrolled from Istio's cluster.env by `redirect vm`;
//! capture works inside it, the host's own connections are untouched, and no iptables rule
//! exists anywhere.
use std::process::Command;

use redirect_testkit::{
    privileged,
    probe::{parse_lines, ProbeResult},
    HostLink,
};
use redirect_tests::{
    bin_path,
    conformance::{inbound_at, listen, probe, reach, sidecar_listeners, World, POD4},
    node::Node,
    wait_detached,
};

fn rules(netns: Option<&str>, tool: &str) -> String {
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, tool]);
            c
        }
        None => Command::new(tool),
    };
    let out = cmd.output().expect("iptables-save");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_namespace_plays_the_vm_and_no_iptables_rule_exists() {
    privileged!();
    let node = Node::new();
    let vm = World::new("rvm", false);
    let link = HostLink::new(&vm.pod, "10.250.0.1", "10.250.0.2").expect("host link");
    let env = redirect_testkit::reference::dir().join("vm-cluster.env");
    let cgroup = node.cgroup.path().display().to_string();
    let out = node.ok(&[
        "vm",
        "--cluster-env",
        env.to_str().expect("utf8"),
        "--netns",
        &vm.pod.path().display().to_string(),
        "--args",
        "-u 1337 --dns-servers 127.0.0.53",
        "--cgroup",
        &cgroup,
    ]);
    assert!(
        out.contains("VM policy") && out.contains("inbound to :15006"),
        "{out}"
    );
    let _l = sidecar_listeners(&vm, node.cgroup.path());
    let _dns = listen(
        &vm.pod,
        Some(node.cgroup.path()),
        Some((1337, 1337)),
        "dns",
        &[],
        &["127.0.0.1:15053".into()],
    );

    // Inside the VM: ISTIO_SERVICE_CIDR='*' captures, DNS capture is on, inbound '*' except 22.
    assert_eq!(
        reach(&vm, node.cgroup.path(), (1000, 1000), "192.0.2.10:80"),
        "at=proxy/[::]:15001 orig=192.0.2.10:80"
    );
    let dns = probe(
        &vm.pod,
        Some(node.cgroup.path()),
        Some((1000, 1000)),
        &["udp:127.0.0.53:53".into()],
    );
    assert_eq!(dns[0].at(), "at=dns/127.0.0.1:15053", "{dns:?}");
    assert_eq!(
        inbound_at(&vm, &[80, 22]),
        [
            format!("at=proxy/[::]:15006 orig={POD4}:80"),
            format!("at=app/[::]:22 orig={POD4}:22")
        ]
    );

    // The host, in the same cgroup but its own namespace (no policy), is untouched: it reaches
    // the VM's ssh directly rather than a proxy port on its own loopback.
    let host = Command::new(bin_path("probe-matrix"))
        .args([
            "--cgroup",
            &cgroup,
            "--uid",
            "1000",
            "--gid",
            "1000",
            "--",
            "tcp:10.250.0.2:22",
        ])
        .output()
        .expect("probe-matrix on the host");
    let host: Vec<ProbeResult> = parse_lines(&host.stdout).expect("probe-matrix output");
    assert_eq!(
        host.iter().map(ProbeResult::at).collect::<Vec<_>>(),
        ["at=app/[::]:22 orig=10.250.0.2:22"],
        "{host:?}"
    );

    // No iptables rule anywhere: the VM's tables are empty, the host has no ISTIO chain.
    let ns = vm.pod.name();
    for tool in ["iptables-save", "ip6tables-save"] {
        let inside = rules(Some(ns), tool);
        assert!(
            !inside.lines().any(|l| l.starts_with("-A ")),
            "{tool} in the VM: {inside}"
        );
        let host = rules(None, tool);
        assert!(!host.contains("ISTIO"), "{tool} on the host: {host}");
    }

    node.ok(&["uninstall"]);
    assert!(!node.pins.exists());
    wait_detached(node.cgroup.path());
    drop(link);
}

/// Every command line in deploy/ names a subcommand and flags this `redirect` accepts.
#[test]
fn deploy_artifacts_use_real_commands() {
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let mut lines: Vec<Vec<String>> = Vec::new();
    for unit in [
        "systemd/redirect-daemon.service",
        "systemd/redirect-vm.service",
    ] {
        let text = std::fs::read_to_string(deploy.join(unit)).expect("unit file");
        for l in text.lines() {
            if let Some(cmd) = l
                .strip_prefix("ExecStart=")
                .or_else(|| l.strip_prefix("ExecStop="))
            {
                let words: Vec<String> =
                    cmd.split_whitespace().skip(1).map(str::to_owned).collect();
                lines.push(words);
            }
        }
    }
    let ds = std::fs::read_to_string(deploy.join("kubernetes/daemonset.yaml")).expect("daemonset");
    let args = ds
        .lines()
        .find_map(|l| l.trim().strip_prefix("args: ["))
        .expect("daemonset args");
    // The kubelet expands $(NODE_IP) from the downward API (status.hostIP).
    assert!(ds.contains("fieldPath: status.hostIP"), "{ds}");
    lines.push(
        args.trim_end_matches(']')
            .split(',')
            .map(|w| w.trim().trim_matches('"').replace("$(NODE_IP)", "10.0.0.5"))
            .collect(),
    );
    assert_eq!(lines.len(), 4, "{lines:?}");
    for words in lines {
        let out = Command::new(bin_path("redirect"))
            .args(&words)
            .arg("--help")
            .output()
            .expect("redirect --help");
        assert!(
            out.status.success(),
            "redirect {words:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
