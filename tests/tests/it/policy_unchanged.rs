//! "Unchanged" is only said when nothing changes: a re-enroll through the daemon that adds one
//! of our own flags (`--no-proxy passthrough`, `--bind-proxy-cgroup`) or one of Istio's (`-x`)
//! is reported line by line, by `--dry-run` too, and applied; repeating it is "unchanged" and
//! the kernel's answer stays as it was. Every field of the policy, one by one, is covered by
//! the policy crate's `every_field_takes_part_in_the_comparison`.
use redirect_testkit::privileged;
use redirect_tests::{conformance::World, node::Node};

#[test]
fn each_of_our_flags_is_a_change_and_repeating_it_is_unchanged() {
    privileged!();
    let node = Node::new();
    let proxy_cg = node.cgroup.child("proxy").expect("proxy cgroup");
    let w = World::new("rpu", false);
    let _daemon = node.daemon();
    let netns = w.pod.path().display().to_string();
    let base = "-u 1337 -i '*' -b '*'";
    let enroll = |args: &str| node.ok(&["enroll", "--netns", &netns, "--istio-args", args]);
    let dry = |args: &str| {
        node.ok(&[
            "enroll",
            "--netns",
            &netns,
            "--istio-args",
            args,
            "--dry-run",
        ])
    };
    let explain = || {
        node.ok(&[
            "explain",
            "--netns",
            &netns,
            "--uid",
            "1000",
            "--dst",
            "10.9.0.1:80",
        ])
    };
    enroll(base);
    let captured = explain();

    let bind = format!("{base} --bind-proxy-cgroup {}", proxy_cg.path().display());
    for (args, line) in [
        (
            format!("{base} --no-proxy passthrough"),
            "+ no proxy listening     passthrough",
        ),
        (
            bind,
            "+ proxy binding          strict: only inside the cgroup",
        ),
        (
            format!("{base} -x 10.9.0.0/16"),
            "+ exclude CIDRs (-x)     10.9.0.0/16",
        ),
    ] {
        let would = dry(&args);
        assert!(
            would.contains("would replace the policy") && would.contains(line),
            "dry run of {args:?}:\n{would}"
        );
        let said = enroll(&args);
        assert!(
            said.contains("replaced its policy") && said.contains(line),
            "{args:?}:\n{said}"
        );
        let applied = explain();
        let again = enroll(&args);
        assert!(
            again.contains("its policy is unchanged"),
            "{args:?}:\n{again}"
        );
        assert!(dry(&args).contains("nothing changes"), "{args:?}");
        assert_eq!(
            explain(),
            applied,
            "repeating {args:?} changed the kernel's answer"
        );
        // Back to the base policy: a change again, and capture as at first.
        let said = enroll(base);
        assert!(said.contains("replaced its policy"), "{said}");
        assert_eq!(explain(), captured, "back to {base:?}");
    }
    // Passthrough and the exclusion change what explain answers (the binding does not, for an
    // app's uid): the flags were applied, not only reported.
    enroll(&format!("{base} -x 10.9.0.0/16"));
    assert_ne!(explain(), captured, "-x 10.9.0.0/16 was applied");
    node.ok(&["uninstall"]);
}

#[test]
fn list_shows_the_arguments_as_a_shell_splits_them_back() {
    privileged!();
    let node = Node::new();
    let w = World::new("rpq", false);
    node.apply(w.pod.path().as_path(), &["-u", "1337", "-i", "*", "-x", ""]);
    let list = node.ok(&["list"]);
    // --netns and --cgroup come first (the node's own), then the pod's flags as written.
    assert!(list.contains("-u 1337 -i '*' -x ''"), "{list}");
    node.ok(&["uninstall"]);
}
