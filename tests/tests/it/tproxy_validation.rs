//! istio-validation in a TPROXY pod (issue 45): `redirect istio-iptables --run-validation
//! --skip-rule-apply`, run as istio-cni's injection runs it (the pod's flags, here `-m
//! TPROXY`, as uid and gid 1337, in the pod's namespace), passes as it does behind Istio's
//! rules: nat's `REDIRECT` sends the proxy uid's dial to 127.0.0.6:15002 to 127.0.0.1:15006 in
//! TPROXY mode too, where the validator's plain listener takes it. Before, the redirect kept
//! the address (127.0.0.6:15006, where nothing listens) and every TPROXY pod stayed in Init.
//! `explain` says where the kernel sends it.
use std::process::Output;

use redirect_testkit::privileged;
use redirect_tests::{
    conformance::{World, POD4},
    node::Node,
};

/// The injector's flags in TPROXY mode (`sidecar.istio.io/interceptionMode: TPROXY`).
const FLAGS: &[&str] = &redirect_tests::validation::istio_flags("TPROXY");

/// The validation of `w`'s pod as istio-validation runs it: uid and gid 1337, in the pod's
/// namespace and the node's cgroup (where the programs are attached).
fn validation(node: &Node, w: &World) -> Output {
    redirect_tests::validation::run(node.cgroup.path(), w.pod.name(), FLAGS, "5s")
}

/// `redirect explain --json` for uid and gid 1337 in `w`'s pod: `dst`, from a socket bound
/// to `src` when given.
fn explain(node: &Node, w: &World, src: Option<&str>, dst: &str) -> serde_json::Value {
    let path = w.pod.path().display().to_string();
    let mut args = vec![
        "explain", "--netns", &path, "--uid", "1337", "--gid", "1337",
    ];
    if let Some(src) = src {
        args.extend(["--src", src]);
    }
    args.extend(["--dst", dst, "--json"]);
    let out = node.ok(&args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("explain --json: {e}: {out}"))
}

#[test]
fn istio_validation_passes_in_a_tproxy_pod_and_explain_says_where_its_dial_goes() {
    privileged!();
    let node = Node::new();
    let w = World::new("rtvl", false);
    node.apply(&w.pod.path(), FLAGS);

    let out = validation(&node, &w);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let passed = out.status.success()
        && stdout.contains(
            "validation passed: the probe arrived at 127.0.0.1:15006 with original destination 127.0.0.6:15002",
        );

    // explain: the dial from 127.0.0.1 goes to loopback (nat's REDIRECT), as the kernel sent
    // it; the same dial to the pod's address goes there too, from that address (unbound).
    let probe = explain(&node, &w, Some("127.0.0.1"), "127.0.0.6:15002");
    let to_pod = explain(&node, &w, None, &format!("{POD4}:15002"));
    node.apply(&w.pod.path(), &["--cleanup-only"]);

    assert!(
        passed,
        "the validation failed in a TPROXY pod: {stdout}{stderr}"
    );
    assert_eq!(
        (
            &probe["outcome"],
            &probe["counter"],
            &probe["detail"],
            &probe["tproxy"]
        ),
        (
            &"proxy:15006".into(),
            &"inbound_redirect_local".into(),
            &"at 127.0.0.1:15006".into(),
            &true.into()
        ),
        "{probe}"
    );
    assert!(
        to_pod["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with(&format!("at 127.0.0.1:15006, from {POD4}"))),
        "{to_pod}"
    );
}
