//! The pin directory is the unit of ownership: its layout record (version, owner, attach
//! cgroups) is checked on every adopt, a second daemon is refused whatever its own directory,
//! an explicit `--cgroup` elsewhere is refused, and `status` says who owns the datapath.
use std::time::Duration;

use redirect_testkit::{privileged, until, Cgroup, Child};
use redirect_tests::{
    conformance::{reach, sidecar_listeners, World},
    node::Node,
};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_layout_v0_datapath_is_refused_naming_both_versions() {
    privileged!();
    let node = Node::new();
    let w = World::new("rlv", false);
    let netns = w.pod.path().display().to_string();
    let cgroup = node.cgroup.path().display().to_string();
    let args = ["istio-iptables", "--netns", &netns, "--cgroup", &cgroup];
    node.ok(&[&args[..], &["-u", "1337", "-i", "*"]].concat());
    let status = node.ok(&["status"]);
    let v = redirect_datapath::LAYOUT_VERSION;
    assert!(status.contains(&format!("(layout v{v})")), "{status}");
    assert!(status.contains("owner: the CLI"), "{status}");
    assert!(
        status.contains(&format!("attached at cgroup {cgroup}")),
        "{status}"
    );

    // What a datapath pinned before layout records looks like: no record.
    std::fs::remove_file(node.pins.join("layout")).expect("unpin the layout record");
    for out in [
        node.run(&[&args[..], &["-u", "1337", "-i", "*"]].concat()),
        node.run(&["status"]),
    ] {
        assert!(!out.status.success(), "{out:?}");
        let e = stderr(&out);
        assert!(
            e.contains(&format!(
                "has layout v0, this redirect reads and writes layout v{v}"
            )),
            "{e}"
        );
        assert!(e.contains("redirect uninstall"), "{e}");
    }
    node.ok(&["uninstall"]);
    assert!(!node.pins.exists());
    let again = node.ok(&["uninstall"]);
    assert!(
        again.starts_with("nothing to do: no datapath pinned at"),
        "{again}"
    );
}

#[test]
fn a_second_daemon_on_the_same_pins_is_refused_whatever_its_directory() {
    privileged!();
    let node = Node::new();
    let mut daemon = node.daemon();
    let other = Node::new();
    let out = other
        .cmd(&["daemon", "--cgroup"])
        .arg(node.cgroup.path())
        .env("REDIRECT_BPFFS", &node.pins)
        .output()
        .expect("run a second daemon");
    assert!(!out.status.success(), "{out:?}");
    let e = stderr(&out);
    assert!(
        e.contains(&format!(
            "owned by the redirect daemon pid {}",
            daemon.pid()
        )),
        "{e}"
    );
    let status = node.ok(&["status"]);
    assert!(
        status.contains(&format!(
            "owner: the redirect daemon, pid {} (up)",
            daemon.pid()
        )),
        "{status}"
    );

    // The CLI removing the last policy from elsewhere leaves the daemon's datapath pinned.
    let w = World::new("rlo", false);
    let netns = w.pod.path().display().to_string();
    node.ok(&[
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        "-u 1337 -i '*'",
    ]);
    let cleanup = other
        .cmd(&["istio-iptables", "--netns", &netns, "--cleanup-only"])
        .env("REDIRECT_BPFFS", &node.pins)
        .output()
        .expect("cleanup");
    assert!(cleanup.status.success(), "{cleanup:?}");
    assert!(
        node.pins.join("layout").exists(),
        "the daemon's datapath was unpinned"
    );

    daemon.stop(nix::sys::signal::Signal::SIGKILL);
    let status = node.ok(&["status"]);
    assert!(status.contains("(down"), "{status}");
    // The owner is gone: a daemon of another directory may take over.
    let mut cmd = other.cmd(&["daemon", "--cgroup"]);
    cmd.arg(node.cgroup.path())
        .env("REDIRECT_BPFFS", &node.pins);
    let mut again = Child::spawn("second daemon", cmd).expect("start the second daemon");
    again
        .wait_line("second daemon ready", Duration::from_secs(10), |l| {
            l.starts_with("ready ")
        })
        .expect("second daemon ready");
    let status = node.ok(&["status"]);
    assert!(
        status.contains(&format!(
            "owner: the redirect daemon, pid {} (up)",
            again.pid()
        )),
        "{status}"
    );
    again.stop(nix::sys::signal::Signal::SIGKILL);
    node.ok(&["uninstall"]);
}

#[test]
fn an_explicit_cgroup_elsewhere_is_refused_naming_the_attachment() {
    privileged!();
    let node = Node::new();
    let elsewhere = Cgroup::new("rle").expect("cgroup");
    // One pod: two would clash on their (identical) addresses, which is another refusal.
    let a = World::new("rla", false);
    let cgroup = node.cgroup.path().display().to_string();
    let apply = |w: &World, cg: &str| {
        let netns = w.pod.path().display().to_string();
        node.run(&[
            "istio-iptables",
            "--netns",
            &netns,
            "--cgroup",
            cg,
            "-u",
            "1337",
            "-i",
            "*",
        ])
    };
    assert!(apply(&a, &cgroup).status.success());
    let out = apply(&a, &elsewhere.path().display().to_string());
    assert!(!out.status.success(), "{out:?}");
    let e = stderr(&out);
    assert!(e.contains(&format!("is attached at {cgroup}")), "{e}");
    assert!(e.contains("never moved silently"), "{e}");
    // The same cgroup still applies.
    assert!(apply(&a, &cgroup).status.success());
    node.ok(&["uninstall"]);
}

#[test]
fn istio_iptables_goes_through_the_owning_daemon_so_list_stays_true() {
    privileged!();
    let node = Node::new();
    let _daemon = node.daemon();
    let w = World::new("rlt", false);
    let netns = w.pod.path().display().to_string();
    node.ok(&[
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        "-u 1337 -i '*' -b '*'",
    ]);
    let row = |list: &str| {
        list.lines()
            .find(|l| l.starts_with(&netns))
            .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
    };
    assert_eq!(row(&node.ok(&["list"])).expect("listed")[3], "yes");

    // Another daemon directory, as a container running istio-init would have: the change still
    // reaches the daemon that owns the pins, and its list shows it.
    let other = Node::new();
    let run = |args: &[&str]| {
        other
            .cmd(args)
            .env("REDIRECT_BPFFS", &node.pins)
            .output()
            .expect("run redirect")
    };
    let out = run(&[
        "istio-iptables",
        "--netns",
        &netns,
        "-u",
        "1337",
        "-i",
        "*",
        "-b",
        "",
    ]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("(through the daemon, pid"), "{said}");
    let listed = row(&node.ok(&["list"])).expect("still listed");
    assert_eq!(listed[3], "no", "inbound is off after -b '': {listed:?}");
    assert!(listed.join(" ").contains("istio-iptables"), "{listed:?}");

    let out = run(&["istio-iptables", "--netns", &netns, "--cleanup-only"]);
    assert!(out.status.success(), "{out:?}");
    let list = node.ok(&["list"]);
    assert!(row(&list).is_none(), "{list}");
    assert!(list.contains("nothing is captured"), "{list}");
    assert!(
        node.pins.join("layout").exists(),
        "the daemon keeps its datapath"
    );
    node.ok(&["uninstall"]);
}

#[test]
fn attach_at_above_or_below_a_node_datapath_is_refused_naming_it() {
    privileged!();
    let node = Node::new();
    let w = World::new("rln", false);
    node.apply(&w.pod.path(), &["-u", "1337", "-i", "*"]);
    let child = node.cgroup.path().join("child");
    std::fs::create_dir(&child).expect("child cgroup");
    for at in [node.cgroup.path(), child.as_path()] {
        // `timeout`: an attach that wrongly succeeded would stay in the foreground.
        let out = std::process::Command::new("timeout")
            .arg("10")
            .arg(redirect_tests::bin_path("redirect"))
            .args(["attach", "--cgroup"])
            .arg(at)
            .output()
            .expect("run redirect attach");
        assert!(!out.status.success(), "{out:?}");
        let e = stderr(&out);
        assert!(
            e.contains(&format!(
                "the node datapath pinned at {}",
                node.pins.display()
            )) && e.contains("owner: the CLI")
                && e.contains("capture the same processes twice"),
            "{e}"
        );
    }
    let _ = std::fs::remove_dir(&child);
    node.ok(&["uninstall"]);
}

#[test]
fn the_daemon_repairs_a_policy_removed_behind_its_back() {
    privileged!();
    let node = Node::new();
    let _daemon = node.daemon();
    let w = World::new("rlk", false);
    let netns = w.pod.path().display().to_string();
    node.ok(&[
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        "-u 1337 -i '*'",
    ]);
    let kernel = || {
        let list = node.ok(&["list", "--json"]);
        let list: serde_json::Value = serde_json::from_str(&list).expect("json");
        (
            list[0]["kernel"].as_str().unwrap_or("").to_owned(),
            list[0]["cookie"].as_u64(),
        )
    };
    let (state, cookie) = kernel();
    assert_eq!(state, "ok");
    let cookie = cookie.expect("cookie is a number");
    // Someone removes the namespace's policy behind the daemon's back.
    let key: Vec<String> = cookie.to_ne_bytes().iter().map(|b| b.to_string()).collect();
    let out = std::process::Command::new("bpftool")
        .args(["map", "delete", "pinned"])
        .arg(node.pins.join("maps/NETNS_OUTBOUND"))
        .arg("key")
        .args(&key)
        .output()
        .expect("bpftool");
    assert!(out.status.success(), "{out:?}");
    // The daemon's check puts it back, and says so.
    until(
        "the daemon re-applied the policy",
        Duration::from_secs(10),
        || {
            node.ok(&["status"])
                .contains("repaired its datapath 1 time(s)")
        },
    )
    .expect("repaired");
    assert_eq!(kernel().0, "ok", "the kernel holds the policy again");
    let status = node.ok(&["status"]);
    assert!(
        status.contains("was removed behind the daemon's back; re-applied"),
        "{status}"
    );
    // Idempotent: unenrolling twice succeeds and says there was nothing to do.
    node.ok(&["unenroll", "--netns", &netns]);
    let again = node.ok(&["unenroll", "--netns", &netns]);
    assert!(again.contains("nothing to do"), "{again}");
    node.ok(&["uninstall"]);
}

#[test]
fn a_datapath_unpinned_behind_the_daemons_back_is_recreated_and_no_container_unpins_it() {
    privileged!();
    let node = Node::new();
    let _daemon = node.daemon();
    let w = World::new("rlu", false);
    let netns = w.pod.path().display().to_string();
    node.ok(&[
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        "-u 1337 -i '*'",
    ]);
    let _l = sidecar_listeners(&w, node.cgroup.path());
    let go = || reach(&w, node.cgroup.path(), (1000, 1000), "192.0.2.10:80");
    let captured = "at=proxy/[::]:15001 orig=192.0.2.10:80";
    assert_eq!(go(), captured);

    // istio-init in a container (own PID and mount namespaces, no view of the daemon's
    // directory) removing the last policy: the daemon's datapath is not unpinned (before, the
    // daemon's pid looked dead from there and the CLI unpinned everything).
    let script = format!(
        "mount -t tmpfs t {} && exec {} istio-iptables --bpffs {} --netns {} --cleanup-only",
        node.dir.display(),
        redirect_tests::bin_path("redirect").display(),
        node.pins.display(),
        netns
    );
    let out = std::process::Command::new("unshare")
        .args(["-pmf", "--mount-proc", "sh", "-c", &script])
        .output()
        .expect("unshare");
    // It cannot reach the daemon that owns the datapath, so it changes nothing and says so.
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr(&out).contains("daemon"), "names the daemon: {out:?}");
    assert!(
        node.pins.join("layout").exists(),
        "the daemon's datapath stays pinned"
    );
    assert_eq!(go(), captured, "and the pod stays captured");

    // The pins removed outright: the daemon recreates the datapath and re-applies.
    std::fs::remove_dir_all(&node.pins).expect("unpin");
    let said = |status: &str| status.contains("unpinned behind the daemon's back; recreated");
    until(
        "the daemon recreated its datapath",
        Duration::from_secs(15),
        || node.pins.join("layout").exists() && said(&node.ok(&["status"])),
    )
    .expect("recreated");
    assert_eq!(go(), captured, "captured again");
    node.ok(&["uninstall"]);
}
