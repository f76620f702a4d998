//! `redirect istio-iptables` as istio-init uses it: the exact args of a kube-inject output,
//! one shared pinned datapath for many namespaces, `--cleanup-only`, `--dry-run`, and bad
//! input that leaves nothing attached.
use std::{path::Path, process::Command};

use redirect_testkit::{privileged, reference, Cgroup};
use redirect_tests::{
    attached_program_ids, bin_path,
    conformance::{inbound_at, probe, reach, sidecar_listeners, World, POD4},
    node::{istio_iptables as redirect, ok, Pins},
    wait_detached,
};

/// The istio-init container's args in inject/hello.yaml.injected, after `istio-iptables`.
fn hello_init_args() -> Vec<String> {
    reference::istio_init_args(&reference::inject("hello.yaml"))
}

#[test]
fn istio_init_args_apply_unchanged_and_cleanup_removes_everything() {
    privileged!();
    let args = hello_init_args();
    assert_eq!(args[..2], ["-p", "15001"], "{args:?}");
    assert!(
        args.contains(&"--log_output_level=default:info".to_owned()),
        "{args:?}"
    );
    let w = World::new("rip", false);
    let cgroup = Cgroup::new("ric").expect("cgroup");
    let pins = Pins::new();
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(
        &redirect(&pins.0, cgroup.path(), &w.pod.path(), &argv),
        "apply hello.yaml's args",
    );
    assert!(
        pins.0.join("maps/NETNS_OUTBOUND").exists(),
        "datapath pinned"
    );
    let _l = sidecar_listeners(&w, cgroup.path());

    // Outbound from the app lands on 15001 with its original destination; from the proxy it
    // leaves directly.
    let app = probe(
        &w.pod,
        Some(cgroup.path()),
        Some((1000, 1000)),
        &["tcp:192.0.2.10:80".into()],
    );
    assert_eq!(
        app[0].at(),
        "at=proxy/[::]:15001 orig=192.0.2.10:80",
        "{app:?}"
    );
    assert_eq!(
        app[0].peer,
        Some("192.0.2.10:80".parse().expect("addr")),
        "getpeername shows the original: {app:?}"
    );
    let proxy = probe(
        &w.pod,
        Some(cgroup.path()),
        Some((1337, 1337)),
        &["tcp:192.0.2.10:80".into()],
    );
    assert_eq!(
        proxy[0].at(),
        "at=world/192.0.2.10:80 orig=192.0.2.10:80",
        "{proxy:?}"
    );
    // Inbound (-b '*') lands on 15006, except the -d ports.
    assert_eq!(
        inbound_at(&w, &[80, 15021]),
        [
            format!("at=proxy/[::]:15006 orig={POD4}:80"),
            format!("at=app/[::]:15021 orig={POD4}:15021")
        ]
    );

    let out = ok(
        &redirect(&pins.0, cgroup.path(), &w.pod.path(), &["--cleanup-only"]),
        "cleanup",
    );
    assert!(out.contains("datapath unpinned"), "{out}");
    assert!(!pins.0.exists(), "pins left after the last --cleanup-only");
    wait_detached(cgroup.path());
    assert_eq!(
        reach(&w, cgroup.path(), (1000, 1000), "192.0.2.10:80"),
        "at=world/192.0.2.10:80 orig=192.0.2.10:80",
        "no capture after cleanup"
    );
}

#[test]
fn namespaces_share_one_datapath_with_their_own_policies() {
    privileged!();
    let (a, b, c) = (
        World::new("ria", false),
        World::new("rib", false),
        World::new("rin", false),
    );
    let cgroup = Cgroup::new("ric").expect("cgroup");
    let pins = Pins::new();
    let first = ok(
        &redirect(
            &pins.0,
            cgroup.path(),
            &a.pod.path(),
            &["-u", "1337", "-i", "*"],
        ),
        "apply a",
    );
    assert!(first.contains("datapath created"), "{first}");
    // Pod addresses identify the namespace for inbound steering: a clash is refused by name.
    let clash = redirect(
        &pins.0,
        cgroup.path(),
        &b.pod.path(),
        &["-u", "1337", "-i", "10.0.0.0/8"],
    );
    assert!(!clash.status.success());
    assert!(
        String::from_utf8_lossy(&clash.stderr).contains(POD4),
        "{clash:?}"
    );
    b.renumber("10.200.0.3", "10.201.0.3");
    c.renumber("10.200.0.4", "10.201.0.4");
    let second = ok(
        &redirect(
            &pins.0,
            cgroup.path(),
            &b.pod.path(),
            &["-u", "1337", "-i", "10.0.0.0/8"],
        ),
        "apply b",
    );
    assert!(
        !second.contains("datapath created"),
        "the second namespace reuses it: {second}"
    );
    let _la = sidecar_listeners(&a, cgroup.path());
    let _lb = sidecar_listeners(&b, cgroup.path());
    let _lc = sidecar_listeners(&c, cgroup.path());
    let go = |w: &World| {
        probe(
            &w.pod,
            Some(cgroup.path()),
            Some((1000, 1000)),
            &["tcp:192.0.2.10:80".into()],
        )[0]
        .at()
    };
    assert_eq!(
        go(&a),
        "at=proxy/[::]:15001 orig=192.0.2.10:80",
        "a: -i '*'"
    );
    assert_eq!(
        go(&b),
        "at=world/192.0.2.10:80 orig=192.0.2.10:80",
        "b: 192.0.2.10 is outside -i"
    );
    assert_eq!(
        go(&c),
        "at=world/192.0.2.10:80 orig=192.0.2.10:80",
        "c has no policy: untouched"
    );

    // Re-applying replaces a namespace's policy in place.
    ok(
        &redirect(
            &pins.0,
            cgroup.path(),
            &b.pod.path(),
            &["-u", "1337", "-i", "192.0.2.0/24"],
        ),
        "re-apply b",
    );
    assert_eq!(
        go(&b),
        "at=proxy/[::]:15001 orig=192.0.2.10:80",
        "b after re-apply"
    );

    let out = ok(
        &redirect(&pins.0, cgroup.path(), &a.pod.path(), &["--cleanup-only"]),
        "cleanup a",
    );
    assert!(!out.contains("unpinned"), "b still has a policy: {out}");
    assert_eq!(
        go(&a),
        "at=world/192.0.2.10:80 orig=192.0.2.10:80",
        "a after cleanup"
    );
    assert_eq!(
        go(&b),
        "at=proxy/[::]:15001 orig=192.0.2.10:80",
        "b keeps its policy"
    );
    ok(
        &redirect(&pins.0, cgroup.path(), &b.pod.path(), &["--cleanup-only"]),
        "cleanup b",
    );
    assert!(
        !pins.0.exists(),
        "the last policy takes the datapath with it"
    );
    wait_detached(cgroup.path());
}

#[test]
fn bad_input_names_the_flag_and_leaves_nothing_attached() {
    privileged!();
    let w = World::new("rix", false);
    let cgroup = Cgroup::new("ric").expect("cgroup");
    let pins = Pins::new();
    let cases: [(&[&str], &str); 7] = [
        (&["-u", "1337", "-i", "10.0.0.0/33"], "10.0.0.0/33"),
        (&["-p", "70000"], "70000"),
        (&["-m", "TRANSPARENT"], "TRANSPARENT"),
        (&["--no-such-flag"], "--no-such-flag"),
        (&["-x", "*"], "-x"),
        (&["-u", "proxy"], "proxy"),
        (&["-b", "80,http"], "http"),
    ];
    for (args, named) in cases {
        let out = redirect(&pins.0, cgroup.path(), &w.pod.path(), args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(
            err.contains(named),
            "{args:?}: error does not name {named:?}: {err}"
        );
        assert!(!pins.0.exists(), "{args:?}: something was pinned");
        assert!(
            attached_program_ids(cgroup.path()).is_empty(),
            "{args:?}: something was attached"
        );
    }
    // Valid flags but a namespace that does not exist: the datapath created for it goes too.
    let out = redirect(
        &pins.0,
        cgroup.path(),
        Path::new("/run/netns/no-such-netns-rix"),
        &["-u", "1337", "-i", "*"],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-netns-rix"));
    assert!(
        !pins.0.exists(),
        "datapath left behind after a failed first apply"
    );
    wait_detached(cgroup.path());
    // A rejected update leaves the namespace's previous policy active.
    ok(
        &redirect(
            &pins.0,
            cgroup.path(),
            &w.pod.path(),
            &["-u", "1337", "-i", "*"],
        ),
        "apply",
    );
    let _l = sidecar_listeners(&w, cgroup.path());
    let out = redirect(
        &pins.0,
        cgroup.path(),
        &w.pod.path(),
        &["-u", "1337", "-i", "300.0.0.0/8"],
    );
    assert!(!out.status.success());
    assert_eq!(
        reach(&w, cgroup.path(), (1000, 1000), "192.0.2.10:80"),
        "at=proxy/[::]:15001 orig=192.0.2.10:80",
        "previous policy kept"
    );
    ok(
        &redirect(&pins.0, cgroup.path(), &w.pod.path(), &["--cleanup-only"]),
        "cleanup",
    );
    assert!(!pins.0.exists());
}

#[test]
fn dry_run_prints_policy_and_istio_rules_and_changes_nothing() {
    privileged!();
    let w = World::new("rid", false);
    let cgroup = Cgroup::new("ric").expect("cgroup");
    let pins = Pins::new();
    let out = ok(
        &redirect(
            &pins.0,
            cgroup.path(),
            &w.pod.path(),
            &[
                "--dry-run",
                "-u",
                "1337",
                "-i",
                "10.0.0.0/8",
                "-x",
                "10.96.0.0/12",
                "-q",
                "3306",
            ],
        ),
        "dry run",
    );
    for want in [
        "include CIDRs (-i)     10.0.0.0/8",
        "-A ISTIO_OUTPUT -d 10.96.0.0/12 -j RETURN",
        "-A ISTIO_OUTPUT -p tcp --dport 3306 -j ISTIO_REDIRECT",
        "-A ISTIO_OUTPUT -d 10.0.0.0/8 -j ISTIO_REDIRECT",
    ] {
        assert!(out.contains(want), "dry run lacks {want:?}:\n{out}");
    }
    assert!(!pins.0.exists(), "dry run pinned something");
    assert!(
        attached_program_ids(cgroup.path()).is_empty(),
        "dry run attached something"
    );
    let help = Command::new(bin_path("redirect"))
        .args(["istio-iptables", "--help"])
        .output()
        .expect("help");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("--istio-service-cidr") && help.contains("--cleanup-only"),
        "{help}"
    );
}
