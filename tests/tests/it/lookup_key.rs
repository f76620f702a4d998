//! The daemon holds the kernel's sk_lookup static key on with one link of its own program in a
//! private, empty namespace: it is there before any enrollment, is not any enrolled
//! namespace's, stays while pods come and go, and goes with the daemon (nothing left
//! attached). Each enrollment's log line says where its time went.
use std::{process::Command, time::Duration};

use nix::sys::signal::Signal;
use redirect_testkit::{eventually, privileged, Child, Netns};
use redirect_tests::node::Node;
use serde_json::Value;

/// `(netns inode)` of every sk_lookup link running the program pinned at `prog`.
fn lookup_links(prog: &std::path::Path) -> Vec<u64> {
    let shown = Command::new("bpftool")
        .args(["-j", "prog", "show", "pinned"])
        .arg(prog)
        .output()
        .expect("bpftool prog show");
    let prog: Value = serde_json::from_slice(&shown.stdout).expect("bpftool json");
    let id = prog["id"].as_u64().expect("program id");
    let links = Command::new("bpftool")
        .args(["-j", "link", "show"])
        .output()
        .expect("bpftool link show");
    let links: Value = serde_json::from_slice(&links.stdout).expect("bpftool json");
    links
        .as_array()
        .expect("links")
        .iter()
        .filter(|l| l["attach_type"] == "sk_lookup" && l["prog_id"].as_u64() == Some(id))
        .filter_map(|l| l["netns_ino"].as_u64())
        .collect()
}

fn inode(ns: &Netns) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(ns.path()).expect("netns").ino()
}

#[test]
fn the_daemon_holds_sk_lookup_on_until_it_stops() {
    privileged!();
    let node = Node::new();
    // At info whatever the caller's RUST_LOG: the enrollment's line is read below.
    let mut cmd = node.cmd(&["daemon"]);
    cmd.arg("--cgroup")
        .arg(node.cgroup.path())
        .arg("--proxy-cgroup")
        .arg(node.cgroup.path())
        .env("RUST_LOG", "info");
    let mut daemon = Child::spawn("redirect daemon", cmd).expect("start redirect daemon");
    daemon
        .wait_line("its ready line", Duration::from_secs(40), |l| {
            l.starts_with("ready ")
        })
        .expect("daemon ready");
    // Whichever sk_lookup program this kernel got (without `ingress_ifindex`, the second).
    let prog = ["redirect_sk_lookup", "redirect_sk_lookup_no_ifindex"]
        .iter()
        .map(|name| node.pins.join("progs").join(name))
        .find(|p| p.exists())
        .expect("a pinned sk_lookup program");
    let held = lookup_links(&prog);
    assert_eq!(
        held.len(),
        1,
        "one held link before any enrollment: {held:?}"
    );

    let pod = Netns::new("rlk").expect("netns");
    let path = pod.path().display().to_string();
    node.ok(&["enroll", "--netns", &path, "--istio-args", "-u 1337 -i '*'"]);
    let mut both = lookup_links(&prog);
    both.sort_unstable();
    let mut expected = vec![held[0], inode(&pod)];
    expected.sort_unstable();
    assert_eq!(both, expected, "the pod's own link beside the held one");
    assert_ne!(
        held[0],
        inode(&pod),
        "the held link is in no enrolled namespace"
    );

    let line = eventually(
        "the enrollment's log line with its phases",
        Duration::from_secs(5),
        || {
            daemon
                .stderr_lines()
                .into_iter()
                .chain(daemon.lines())
                .find(|l| l.contains("namespace enrolled"))
                .ok_or("not yet")
        },
    )
    .expect("namespace enrolled line");
    for phase in ["open=", "addresses=", "sk_lookup=", "outbound=", "record="] {
        assert!(line.contains(phase), "{phase} in {line}");
    }

    node.ok(&["unenroll", "--netns", &path]);
    eventually("the pod's link released", Duration::from_secs(5), || {
        let now = lookup_links(&prog);
        if now == held {
            Ok(())
        } else {
            Err(now)
        }
    })
    .expect("only the held link stays");

    daemon.stop(Signal::SIGTERM);
    eventually("the held link released", Duration::from_secs(5), || {
        let now = lookup_links(&prog);
        if now.is_empty() {
            Ok(())
        } else {
            Err(now)
        }
    })
    .expect("no sk_lookup link once the daemon stopped");
    // Capture stays pinned without the daemon; the node's drop removes the pins.
    assert!(prog.exists(), "the datapath stays pinned");
}
