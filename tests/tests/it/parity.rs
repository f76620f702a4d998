//! Parity details with istio-iptables that the golden cases do not reach: a connect to the
//! unspecified address (0.0.0.0, `::`) is routed to the host itself and the nat table sees it
//! as 127.0.0.1 / `::1`, so it is never captured.
use redirect_testkit::{privileged, Cgroup};
use redirect_tests::{
    conformance::{reach, sidecar_listeners, World},
    node::{istio_iptables as redirect, ok, Pins},
    wait_detached,
};

#[test]
fn a_connect_to_the_unspecified_address_reaches_the_pod_itself() {
    privileged!();
    let w = World::new("rpu", true);
    let cgroup = Cgroup::new("rpc").expect("cgroup");
    let pins = Pins::new();
    ok(
        &redirect(
            &pins.0,
            cgroup.path(),
            &w.pod.path(),
            &["-u", "1337", "-i", "*", "--dual-stack"],
        ),
        "apply",
    );
    // The proxy's listeners and the application's own on [::]:8000.
    let _listeners = sidecar_listeners(&w, cgroup.path());
    for dst in ["0.0.0.0:8000", "[::]:8000"] {
        for id in [(1000, 1000), (1337, 1337)] {
            let at = reach(&w, cgroup.path(), id, dst);
            assert!(at.starts_with("at=app/[::]:8000"), "{id:?} -> {dst}: {at}");
        }
    }
    let explained = std::process::Command::new(redirect_tests::bin_path("redirect"))
        .args(["explain", "--bpffs"])
        .arg(&pins.0)
        .arg("--netns")
        .arg(w.pod.path())
        .args(["--uid", "1000", "--dst", "0.0.0.0:8000"])
        .output()
        .expect("explain");
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(
        text.contains("untouched") && text.contains("loopback"),
        "{text}"
    );
    ok(
        &redirect(&pins.0, cgroup.path(), &w.pod.path(), &["--cleanup-only"]),
        "cleanup",
    );
    wait_detached(cgroup.path());
}
