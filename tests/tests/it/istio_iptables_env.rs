//! `redirect istio-iptables` beyond istio-init's own arguments: a VM's cluster.env as the
//! policy, and a pod that went away without `--cleanup-only` (istio-init never runs it) whose
//! entries the next apply reclaims.
use redirect_testkit::{privileged, reference, Cgroup};
use redirect_tests::{
    conformance::{inbound_at, listen, probe, reach, sidecar_listeners, World, POD4},
    node::{istio_iptables as redirect, ok, Pins},
    wait_detached,
};

#[test]
fn a_vm_cluster_env_is_a_policy() {
    privileged!();
    let w = World::new("riv", false);
    let cgroup = Cgroup::new("ric").expect("cgroup");
    let pins = Pins::new();
    let env = reference::dir().join("vm-cluster.env");
    let env = env.to_str().expect("utf8");
    // cluster.env names no proxy uid: istio-iptables' default (istio-proxy, else 1337).
    let out = ok(
        &redirect(
            &pins.0,
            cgroup.path(),
            &w.pod.path(),
            &[
                "--cluster-env",
                env,
                "--dns-servers",
                "127.0.0.53",
                "-u",
                "1337",
            ],
        ),
        "apply cluster.env",
    );
    assert!(out.contains("inbound capture to :15006"), "{out}");
    let mut l = sidecar_listeners(&w, cgroup.path());
    l.push(listen(
        &w.pod,
        Some(cgroup.path()),
        Some((1337, 1337)),
        "dns",
        &[],
        &["127.0.0.1:15053".into()],
    ));
    // ISTIO_SERVICE_CIDR='*': captured; ISTIO_META_DNS_CAPTURE='true': DNS to 15053.
    let app = probe(
        &w.pod,
        Some(cgroup.path()),
        Some((1000, 1000)),
        &["tcp:192.0.2.10:80".into(), "udp:127.0.0.53:53".into()],
    );
    assert_eq!(
        app[0].at(),
        "at=proxy/[::]:15001 orig=192.0.2.10:80",
        "{app:?}"
    );
    assert_eq!(app[1].at(), "at=dns/127.0.0.1:15053", "{app:?}");
    assert_eq!(
        app[1].peer,
        Some("127.0.0.53:53".parse().expect("addr")),
        "the reply comes from the server: {app:?}"
    );
    // ISTIO_INBOUND_PORTS='*' with ISTIO_LOCAL_EXCLUDE_PORTS='22,...': ssh stays reachable.
    assert_eq!(
        inbound_at(&w, &[80, 22]),
        [
            format!("at=proxy/[::]:15006 orig={POD4}:80"),
            format!("at=app/[::]:22 orig={POD4}:22")
        ]
    );
    ok(
        &redirect(&pins.0, cgroup.path(), &w.pod.path(), &["--cleanup-only"]),
        "cleanup",
    );
    assert!(!pins.0.exists());
}

#[test]
fn a_gone_pods_policy_and_address_are_reclaimed() {
    privileged!();
    let cgroup = Cgroup::new("ric").expect("cgroup");
    let pins = Pins::new();
    let first = World::new("rig", false);
    ok(
        &redirect(
            &pins.0,
            cgroup.path(),
            &first.pod.path(),
            &["-u", "1337", "-i", "*", "-b", "*"],
        ),
        "apply first",
    );
    // The pod goes away without --cleanup-only (istio-init never runs it).
    drop(first);
    // A new pod reuses its address: its apply reclaims the dead pod's entries.
    let second = World::new("rih", false);
    let out = ok(
        &redirect(
            &pins.0,
            cgroup.path(),
            &second.pod.path(),
            &["-u", "1337", "-i", "*"],
        ),
        "apply second",
    );
    assert!(!out.contains("datapath created"), "{out}");
    let _l = sidecar_listeners(&second, cgroup.path());
    assert_eq!(
        reach(&second, cgroup.path(), (1000, 1000), "192.0.2.10:80"),
        "at=proxy/[::]:15001 orig=192.0.2.10:80"
    );
    // Every enrolled namespace holds a link (how the kernel tells a gone one): only the new
    // pod's is left.
    let cookie = out
        .split("netns cookie ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .expect("the apply names the cookie")
        .to_owned();
    let linked: Vec<String> = std::fs::read_dir(pins.0.join("netns"))
        .expect("netns pins")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        linked,
        [cookie],
        "the dead pod's sk_lookup link is unpinned"
    );
    let out = ok(
        &redirect(
            &pins.0,
            cgroup.path(),
            &second.pod.path(),
            &["--cleanup-only"],
        ),
        "cleanup",
    );
    assert!(
        out.contains("datapath unpinned"),
        "only one policy was left: {out}"
    );
    wait_detached(cgroup.path());
}
