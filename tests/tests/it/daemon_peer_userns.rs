//! A capability counts only in the daemon's own user namespace (issue 46, finding 1): root
//! without CAP_NET_ADMIN that makes a user namespace of its own (`unshare --user
//! --map-root-user`, no capability needed) holds every capability inside it while
//! `SO_PEERCRED` still says uid 0. Such a client may read but neither unenroll a pod nor
//! uninstall the node's capture; and a process posing as the daemon that way is not believed
//! by the CNI plugin.
use std::process::Command;

use redirect_testkit::{privileged, Netns};
use redirect_tests::{env::bin_path, node::Node};

/// `probe-hold ARGS` run as root without CAP_NET_ADMIN in a user namespace of its own.
fn in_a_user_namespace_of_its_own(args: &[&str]) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--bounding-set", "-net_admin", "--"])
        .args(["unshare", "--user", "--map-root-user", "--"])
        .arg(bin_path("probe-hold"))
        .args(args);
    cmd
}

/// The daemon's answer to `line` from such a client.
fn ask(node: &Node, line: &serde_json::Value) -> serde_json::Value {
    let socket = node.dir.join("daemon.sock");
    let out = in_a_user_namespace_of_its_own(&[
        "ask-unix",
        "--path",
        &socket.display().to_string(),
        "--line",
        &line.to_string(),
    ])
    .output()
    .expect("probe-hold ask-unix");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

#[test]
fn a_root_client_in_a_user_namespace_of_its_own_may_read_but_not_change_capture() {
    privileged!();
    let node = Node::new();
    let _daemon = node.daemon();
    let ns = Netns::new("rpun").expect("a namespace");
    let netns = ns.path().display().to_string();
    node.ok(&[
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        "-u 1337 -i '*'",
    ]);

    let listed = ask(&node, &serde_json::json!({"v": 2, "call": "list"}));
    assert_eq!(listed["ok"], true, "list refused: {listed}");
    for call in [
        serde_json::json!({"v": 2, "call": "unenroll", "netns": netns}),
        serde_json::json!({"v": 2, "call": "uninstall"}),
    ] {
        let answer = ask(&node, &call);
        let error = answer["error"].as_str().unwrap_or_default();
        assert!(
            answer["ok"] == false
                && error.contains("needs CAP_NET_ADMIN")
                && error.contains("user namespace other than the daemon's"),
            "{call} from a user namespace of its own: {answer}"
        );
    }
    let list: Vec<serde_json::Value> =
        serde_json::from_str(&node.ok(&["list", "--json"])).expect("list --json");
    assert_eq!(list.len(), 1, "the enrollment was changed: {list:?}");
    assert!(node.pins.exists(), "the node's capture was uninstalled");
    node.ok(&["unenroll", "--netns", &netns]);
}

#[test]
fn the_plugin_does_not_believe_a_daemon_in_a_user_namespace_of_its_own() {
    privileged!();
    let node = Node::new();
    std::fs::create_dir_all(&node.dir).expect("the daemon directory");
    let socket = node.dir.join("daemon.sock");
    let answer = serde_json::json!({
        "v": 2, "ok": true,
        "answer": {"message": "enrolled", "pod": {"meshed": true, "decision": "meshed"}}
    });
    let cmd = in_a_user_namespace_of_its_own(&[
        "answer-unix",
        "--path",
        &socket.display().to_string(),
        "--line",
        &answer.to_string(),
    ]);
    let mut fake = redirect_testkit::Child::spawn("fake daemon", cmd).expect("the fake daemon");
    fake.wait_line("ready", std::time::Duration::from_secs(10), |l| {
        l == "ready"
    })
    .expect("ready");
    let conf = serde_json::json!({
        "cniVersion": "1.1.0", "name": "peer-test", "type": "redirect-cni",
        "daemon_socket": socket,
    });
    let out = crate::daemon_peer::plugin("STATUS", &conf, None);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "the fake daemon was believed: {said}"
    );
    assert!(
        said.contains("is not the redirect daemon") && said.contains("user namespace of its own"),
        "{said}"
    );
}
