//! `redirect istio-iptables --run-validation` (issue 45): istio-validation's own check, run as
//! istio-cni's injection runs it (the pod's flags with `--run-validation --skip-rule-apply`, as
//! uid 1337, inside the pod's network namespace), under the real programs. It passes in a
//! namespace captured with the injector's default flags (the dial to 127.0.0.6:15002 arrives at
//! 127.0.0.1:15006 with that original destination), and fails within its `--probe-timeout`,
//! with istio-iptables' exit code 126 and the reason, in one that is not captured.
use std::{
    process::Output,
    time::{Duration, Instant},
};

use redirect_testkit::{privileged, wait::scaled};
use redirect_tests::{conformance::World, node::Node};

/// istio-iptables' flags in Istio's injected pods (hello.yaml's istio-init).
const FLAGS: &[&str] = &redirect_tests::validation::istio_flags("REDIRECT");

/// The validation of `w`'s pod as istio-validation runs it: uid and gid 1337, in the pod's
/// namespace (and the node's cgroup, where the programs are attached).
fn validation(node: &Node, w: &World, timeout: &str) -> Output {
    redirect_tests::validation::run(node.cgroup.path(), w.pod.name(), FLAGS, timeout)
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn run_validation_passes_where_capture_is_in_place_and_fails_in_time_where_not() {
    privileged!();
    let node = Node::new();
    let (captured, bare) = (World::new("rvla", false), World::new("rvlb", false));
    bare.renumber("10.200.0.3", "10.201.0.3");
    node.apply(&captured.pod.path(), FLAGS);

    let out = validation(&node, &captured, "5s");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains(
            "validation passed: the probe arrived at 127.0.0.1:15006 with original destination 127.0.0.6:15002"
        ),
        "{stdout}{stderr}"
    );

    // Not captured: each dial goes to 127.0.0.6:15002 itself and is refused; it gives up at
    // its timeout with istio-iptables' code, saying why.
    let started = Instant::now();
    let out = validation(&node, &bare, "2s");
    let took = started.elapsed();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(126), "{stdout}{stderr}");
    assert!(
        stderr.contains("validation failed: in 2s no connection dialled to 127.0.0.6:15002 arrived at 127.0.0.1:15001 or 127.0.0.1:15006")
            && stderr.contains("the dial was refused"),
        "{stderr}"
    );
    assert!(
        took >= Duration::from_secs(2)
            && took < Duration::from_secs(2) + scaled(Duration::from_secs(2)),
        "gave up after {took:?}, its timeout 2s: {stderr}"
    );

    node.apply(&captured.pod.path(), &["--cleanup-only"]);
}
