//! A client inside a pod's network namespace (istio-init kept, run with this image: root,
//! NET_ADMIN, the daemon's socket mounted) may enroll its own namespace through the daemon and
//! nothing else (issue 46, finding 6): enrolling another namespace, unenrolling one, or
//! uninstalling the node's capture is refused, naming why; what the node enrolled stays.
use std::process::Output;

use redirect_testkit::{privileged, Netns};
use redirect_tests::node::Node;

/// `redirect ARGS` with the node's environment, run inside `ns` (`nsenter --net`: the mounts
/// stay, bpffs and the daemon's directory among them, as the pod mounts them).
fn inside(node: &Node, ns: &Netns, args: &[&str]) -> Output {
    let inner = node.cmd(args);
    let mut cmd = std::process::Command::new("nsenter");
    cmd.arg(format!("--net={}", ns.path().display()))
        .arg("--")
        .arg(inner.get_program())
        .args(inner.get_args());
    for (k, v) in inner.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    cmd.output().expect("ip netns exec redirect")
}

#[test]
fn a_client_inside_a_pod_enrolls_its_own_namespace_and_nothing_else() {
    privileged!();
    let node = Node::new();
    let _daemon = node.daemon();
    let (pod, other) = (
        Netns::new("rpcp").expect("netns"),
        Netns::new("rpco").expect("netns"),
    );
    let other_path = other.path().display().to_string();
    node.ok(&[
        "enroll",
        "--netns",
        &other_path,
        "--istio-args",
        "-u 1337 -i '*'",
    ]);

    let own = inside(
        &node,
        &pod,
        &[
            "istio-iptables",
            "--netns",
            "/proc/self/ns/net",
            "-u",
            "1337",
            "-i",
            "*",
        ],
    );
    assert!(own.status.success(), "its own namespace: {own:?}");
    for args in [
        &[
            "enroll",
            "--netns",
            &other_path,
            "--istio-args",
            "-u 1337 -i '*' -x 10.0.0.0/8",
        ][..],
        &["unenroll", "--netns", &other_path][..],
        &["uninstall"][..],
    ] {
        let out = inside(&node, &pod, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("inside a pod's network namespace"),
            "{args:?} from inside a pod: {out:?}"
        );
    }
    let list: Vec<serde_json::Value> =
        serde_json::from_str(&node.ok(&["list", "--json"])).expect("list --json");
    assert_eq!(list.len(), 2, "{list:?}");
    let other_entry = list
        .iter()
        .find(|e| e["netns"] == other_path.as_str())
        .expect("the other namespace still enrolled");
    assert_eq!(
        other_entry["policy"]["exclude_cidrs"],
        serde_json::json!([]),
        "the other namespace's policy was replaced"
    );
    assert!(node.pins.exists(), "the node's capture was uninstalled");
}
