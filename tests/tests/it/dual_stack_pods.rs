//! Two dual-stack pods on one node, each with `::6` on its lo as istio-proxy configures it:
//! both enroll (`::6` is nobody's address in `POD_ADDRS`), both capture inbound and outbound,
//! and a connect to `[::6]:PORT` inside a pod is decided as istio-iptables decides traffic
//! leaving through lo.
use redirect_testkit::{ip, privileged};
use redirect_tests::{
    conformance::{probe, reach, sidecar_listeners, World, POD6},
    node::Node,
};

/// Pod b's IPv6 address (pod a keeps [`POD6`]); the same world-side prefix.
const POD6_B: &str = "fd00:200::3";

/// Where a TCP connect from the world to `dst` (in the pod) lands.
fn from_world(w: &World, dst: &str) -> String {
    probe(&w.world, None, None, &[format!("tcp:{dst}")])[0].at()
}

#[test]
fn two_dual_stack_pods_with_passthrough_on_lo_both_enroll_and_capture() {
    privileged!();
    let node = Node::new();
    let a = World::new("rda", true);
    let b = World::new("rdb", true);
    b.renumber("10.200.0.3", "10.201.0.3");
    let pb = b.pod.name();
    ip(&[
        "-n",
        pb,
        "addr",
        "del",
        &format!("{POD6}/64"),
        "dev",
        "eth0",
    ])
    .expect("ip");
    ip(&[
        "-n",
        pb,
        "addr",
        "add",
        &format!("{POD6_B}/64"),
        "dev",
        "eth0",
        "nodad",
    ])
    .expect("ip");
    ip(&[
        "-n",
        pb,
        "route",
        "replace",
        "default",
        "via",
        "fd00:200::1",
    ])
    .expect("ip");

    // The world's DNS-case server on lo is a test fixture, not istio's: only pod a keeps it.
    ip(&["-n", pb, "addr", "del", "::127.0.0.53/128", "dev", "lo"]).expect("ip");
    let args = ["-u", "1337", "-i", "*", "-b", "*"];
    node.apply(&a.pod.path(), &args);
    // Before the fix: refused, "::6 is already enrolled for another namespace".
    node.apply(&b.pod.path(), &args);

    let cg = node.cgroup.path();
    let _la = sidecar_listeners(&a, cg);
    let _lb = sidecar_listeners(&b, cg);
    for (w, addr) in [(&a, POD6), (&b, POD6_B)] {
        let dst = format!("[{addr}]:80");
        assert_eq!(
            from_world(w, &dst),
            format!("at=proxy/[::]:15006 orig={dst}"),
            "inbound IPv6 of {addr} is captured"
        );
        assert_eq!(
            reach(w, cg, (1000, 1000), "[2001:db8::10]:80"),
            "at=proxy/[::]:15001 orig=[2001:db8::10]:80",
            "outbound IPv6 of {addr} is captured"
        );
        // `::6` is on lo: the application's connect is left alone (`-o lo ! --uid-owner
        // 1337 -j RETURN`) and the proxy's goes to its inbound port (`-o lo ! -d ::1
        // --uid-owner 1337 -j ISTIO_IN_REDIRECT`), as for the pod's own address.
        assert_eq!(
            reach(w, cg, (1000, 1000), "[::6]:8000"),
            "at=app/[::]:8000 orig=[::6]:8000",
            "the app's connect to [::6] of {addr} stays on lo"
        );
        assert_eq!(
            reach(w, cg, (1337, 1337), "[::6]:8000"),
            "at=proxy/[::]:15006 orig=[::6]:8000",
            "the proxy's connect to [::6] of {addr} goes to its inbound port"
        );
    }
    for w in [&a, &b] {
        let netns = w.pod.path().display().to_string();
        node.ok(&["istio-iptables", "--netns", &netns, "--cleanup-only"]);
    }
}
