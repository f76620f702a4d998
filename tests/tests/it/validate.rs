//! `redirect validate`: the istio-validation equivalent passes where capture works and fails,
//! saying why, where it does not.
use redirect_testkit::privileged;
use redirect_tests::{conformance::World, node::Node};

#[test]
fn validate_proves_capture_and_fails_without_it() {
    privileged!();
    let node = Node::new();
    let (good, off, none) = (
        World::new("rva", false),
        World::new("rvb", false),
        World::new("rvc", false),
    );
    off.renumber("10.200.0.3", "10.201.0.3");
    none.renumber("10.200.0.4", "10.201.0.4");
    let _daemon = node.daemon();
    let path = |w: &World| w.pod.path().display().to_string();
    node.ok(&[
        "enroll",
        "--netns",
        &path(&good),
        "--istio-args",
        "-u 1337 -i '*' -b '*'",
    ]);
    node.ok(&[
        "enroll",
        "--netns",
        &path(&off),
        "--istio-args",
        "-u 1337 -i ''",
    ]);
    let cg = node.cgroup.path().display().to_string();
    let validate_within = |w: &World, ms: &str| {
        node.run(&[
            "validate",
            "--netns",
            &path(w),
            "--cgroup",
            &cg,
            "--timeout-ms",
            ms,
        ])
    };
    let validate = |w: &World| validate_within(w, "1000");

    // A passing run returns as soon as both connections arrive, not after its timeout: with
    // 30 s per check, well below one of them (it took 2 x 30 s when the dial waited out its
    // read timeout before the listener accepted).
    let started = std::time::Instant::now();
    let out = validate_within(&good, "30000");
    let took = started.elapsed();
    assert!(
        out.status.success() && took < std::time::Duration::from_secs(15),
        "a passing validate took {took:?} of its 2 x 30 s: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let out = validate(&good);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("outbound  OK") && text.contains("original destination 192.0.2.1:9"),
        "{text}"
    );
    assert!(
        text.contains("inbound   OK") && text.contains("original destination 10.200.0.2:15099"),
        "{text}"
    );

    let out = validate(&off);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("outbound  FAIL"), "{text}");

    let out = validate(&none);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("has no capture policy"), "{text}");
    node.ok(&["uninstall"]);
}
