//! One view of everything captured (issue 32, item 1): `list` shows every namespace the kernel
//! holds a policy for, whoever wrote it (`istio-iptables`, `vm`, the daemon), labelled by its
//! writer and whether the daemon follows it, with or without a daemon; a daemon that starts on
//! a datapath others wrote adopts what is recorded (and follows its addresses) and says which
//! policy it cannot adopt; `stats` names every namespace by path.
use std::{path::Path, time::Duration};

use redirect_testkit::{privileged, until, Netns};
use redirect_tests::{conformance::World, node::Node};
use serde_json::Value;

fn listed(node: &Node) -> Vec<Value> {
    serde_json::from_str(&node.ok(&["list", "--json"])).expect("list --json")
}

fn row<'a>(list: &'a [Value], netns: &str) -> &'a Value {
    list.iter()
        .find(|r| r["netns"] == netns)
        .unwrap_or_else(|| panic!("{netns} not listed: {list:?}"))
}

#[test]
fn list_shows_every_writers_namespaces_and_a_daemon_adopts_and_follows_them() {
    privileged!();
    let node = Node::new();
    let w = World::new("r1v", false);
    let a = w.pod.path().display().to_string();
    let vm_ns = Netns::new("r1m").expect("netns");
    let b = vm_ns.path().display().to_string();
    let stray_ns = Netns::new("r1s").expect("netns");
    let d = stray_ns.path().display().to_string();
    let enrolled_ns = Netns::new("r1e").expect("netns");
    let c = enrolled_ns.path().display().to_string();

    // No daemon: istio-iptables and vm write straight into the pinned maps.
    node.apply(w.pod.path().as_path(), &["-u", "1337", "-i", "*"]);
    let env = concat!(env!("CARGO_MANIFEST_DIR"), "/data/istio/vm-cluster.env");
    node.ok(&[
        "vm",
        "--cluster-env",
        env,
        "--netns",
        &b,
        "--args",
        "-u 1337 --dns-servers 192.0.2.53",
    ]);
    // A policy with no record (written by an older version, its record lost).
    let said = node.apply(&stray_ns.path(), &["-u", "1337", "-i", "*"]);
    let cookie: u64 = said
        .split("netns cookie ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a cookie in {said:?}"));
    std::fs::remove_file(node.dir.join("enrollments").join(format!("{cookie}.json")))
        .expect("the direct write recorded the stray's policy");

    let list = listed(&node);
    assert_eq!(list.len(), 3, "{list:?}");
    for (netns, writer) in [(&a, "istio_iptables"), (&b, "vm")] {
        let r = row(&list, netns);
        assert_eq!(r["writer"], writer, "{r}");
        assert_eq!(r["followed"], "no_daemon", "{r}");
        assert_eq!(r["kernel"], "ok", "{r}");
        assert!(r["cookie"].is_u64(), "{r}");
    }
    let stray = row(&list, &d);
    assert_eq!(stray["writer"], "unknown", "named by its inode: {stray}");
    assert_eq!(stray["cookie"], cookie, "{stray}");
    let table = node.ok(&["list"]);
    assert!(
        table.contains("istio-iptables") && table.contains(" vm "),
        "{table}"
    );
    let stats = node.ok(&["stats"]);
    for netns in [&a, &b, &d] {
        assert!(
            stats.contains(&format!("netns {netns} (cookie ")),
            "{stats}"
        );
    }

    // A daemon starts: it adopts what is recorded and says what it cannot.
    let (_daemon, _) = node.daemon_with(&[]);
    node.ok(&["enroll", "--netns", &c, "--istio-args", "-u 1337 -i '*'"]);
    let list = listed(&node);
    assert_eq!(list.len(), 4, "{list:?}");
    for (netns, writer) in [(&a, "istio_iptables"), (&b, "vm"), (&c, "enroll")] {
        let r = row(&list, netns);
        assert_eq!(r["writer"], writer, "{r}");
        assert_eq!(r["followed"], "yes", "{r}");
    }
    let stray = row(&list, &d);
    assert_eq!(stray["followed"], "not_by_the_daemon", "{stray}");
    let out = node.run(&["list"]);
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    let warned = String::from_utf8_lossy(&out.stderr);
    assert!(
        warned.contains("captured but not followed by the daemon"),
        "{warned}"
    );

    // Adopted means followed: an address added to the istio-iptables namespace is listed.
    let added = "10.200.0.78";
    let add = format!("-n {} addr add {added}/32 dev eth0", w.pod.name());
    redirect_testkit::ip(&add.split_whitespace().collect::<Vec<_>>()).expect("ip addr add");
    until(
        "the adopted namespace's new address followed",
        Duration::from_secs(10),
        || row(&listed(&node), &a)["addrs"].to_string().contains(added),
    )
    .expect("followed");
    node.ok(&["uninstall"]);
}

/// A direct write recorded under `/proc/PID/ns/net` (no other name): that process exits while
/// another keeps the namespace alive. The daemon that starts next keeps the policy (the kernel
/// says the namespace lives) and follows it under the name the machine gives it now; it never
/// removes a live namespace's capture because a path died (fail closed).
#[test]
fn a_daemon_keeps_and_follows_a_live_namespace_whose_recorded_path_died() {
    privileged!();
    let node = Node::new();
    let first = redirect_testkit::Child::spawn("first holder", {
        let mut c = std::process::Command::new("unshare");
        c.args(["--net", "sleep", "600"]);
        c
    })
    .expect("a namespace held by a process");
    let first_path = format!("/proc/{}/ns/net", first.pid());
    until(
        "the first holder in its namespace",
        Duration::from_secs(10),
        || std::fs::read_link(&first_path).ok() != std::fs::read_link("/proc/self/ns/net").ok(),
    )
    .expect("unshared");
    let second = redirect_testkit::Child::spawn("second holder", {
        let mut c = std::process::Command::new("nsenter");
        c.arg(format!("--net={first_path}")).args(["sleep", "600"]);
        c
    })
    .expect("a second process in it");
    let second_path = format!("/proc/{}/ns/net", second.pid());
    until("the second holder joined", Duration::from_secs(10), || {
        std::fs::read_link(&second_path).ok() == std::fs::read_link(&first_path).ok()
    })
    .expect("joined");
    node.apply(
        Path::new(&first_path),
        &["-u", "1337", "-i", "*", "-b", "*"],
    );
    drop(first);

    let (_daemon, _) = node.daemon_with(&[]);
    let list = listed(&node);
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(
        list[0]["netns"],
        second_path.as_str(),
        "followed under its live name: {list:?}"
    );
    assert_eq!(list[0]["followed"], "yes", "{list:?}");
    assert_eq!(list[0]["kernel"], "ok", "the policy stayed: {list:?}");
    let why: Value = serde_json::from_str(&node.ok(&[
        "explain",
        "--netns",
        &second_path,
        "--uid",
        "1000",
        "--dst",
        "10.1.1.1:80",
        "--json",
    ]))
    .expect("explain");
    assert_eq!(why["own_policy"], true, "{why}");
    node.ok(&["uninstall"]);
    drop(second);
}
