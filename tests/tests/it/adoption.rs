//! A proxy already listening at enrollment is adopted only from the enrolled namespace: a
//! listener on the same inbound port in another namespace, open first, is never the pod's.
//! Real TCP from the pod's "world" lands on the pod's own proxy, or is refused (policy
//! `refuse`) or reaches the app (`no-listener=passthrough`) when the pod has none.
use redirect_testkit::{privileged, probe::ClientResult, Cgroup, Netns, Topology};
use redirect_tests::{
    client,
    conformance::{listen, probe, World, POD4},
    node::Node,
    Attach, ClientOpts, EchoServer,
};

/// A listener on [::]:15006 in a namespace of its own, started before any enrollment.
fn elsewhere() -> (Netns, redirect_testkit::Child) {
    let ns = Netns::new("rao").expect("another namespace");
    let l = listen(
        &ns,
        None,
        Some((1337, 1337)),
        "other",
        &["[::]:15006".into()],
        &[],
    );
    (ns, l)
}

#[test]
fn the_daemon_adopts_the_pods_own_listener_only() {
    privileged!();
    let node = Node::new();
    let _daemon = node.daemon();
    let (_other, _other_listener) = elsewhere();
    let with = World::new("rla", false);
    let without = World::new("rlb", false);
    without.renumber("10.200.0.3", "10.201.0.3");
    // Both pods' apps, and the first pod's proxy, listen before enrollment.
    let _proxy = listen(
        &with.pod,
        None,
        Some((1337, 1337)),
        "proxy",
        &["[::]:15006".into()],
        &[],
    );
    let _apps: Vec<_> = [&with, &without]
        .iter()
        .map(|w| listen(&w.pod, None, None, "app", &["[::]:8000".into()], &[]))
        .collect();
    for w in [&with, &without] {
        node.ok(&[
            "enroll",
            "--netns",
            &w.pod.path().display().to_string(),
            "--istio-args",
            "-u 1337 -i '*' -b '*'",
        ]);
    }
    let to = |w: &World, addr: &str| probe(&w.world, None, None, &[format!("tcp:{addr}:8000")]);
    let got = to(&with, POD4);
    assert_eq!(
        got[0].at(),
        format!("at=proxy/[::]:15006 orig={POD4}:8000"),
        "the pod's own proxy: {got:?}"
    );
    let got = to(&without, "10.200.0.3");
    assert_eq!(
        got[0].error.as_deref(),
        Some("refused"),
        "no listener in the pod: refused, not another namespace's: {got:?}"
    );
    node.ok(&["uninstall"]);
}

#[test]
fn attach_passes_through_when_only_another_namespace_listens() {
    privileged!();
    let (_other, _other_listener) = elsewhere();
    let topo = Topology::with_addresses("198.18.0.1", "198.18.0.2").expect("topology");
    let cgroup = Cgroup::new("rla").expect("cgroup");
    let _app = EchoServer::start(&topo.pod, "0.0.0.0:9080", "app9080");
    let spec = format!("{}:no-listener=passthrough", topo.pod.path().display());
    let attach = Attach::start(cgroup.path(), &["--inbound", &spec]);
    let r: ClientResult = client(
        &format!("{}:9080", topo.pod_ip),
        "hi",
        &ClientOpts {
            netns: Some(&topo.server),
            ..ClientOpts::default()
        },
    );
    let reply = r.reply.as_ref().expect("an answer");
    assert_eq!(reply.tag, "app9080", "{r:?}");
    assert_eq!(
        reply.peer.ip().to_string(),
        topo.server_ip,
        "straight to the app: {r:?}"
    );
    assert_eq!(attach.counter("inbound_steered"), 0);
    assert_eq!(attach.counter("inbound_no_listener"), 1);
}
