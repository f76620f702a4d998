//! A node shared by many pods: one pod's `redirect istio-iptables`, run the way istio-init runs
//! it (its own PID and mount namespaces, its own /run/netns), never removes another pod's policy,
//! and without the host's bpffs it refuses instead of "applying" a datapath private to itself.
use std::{
    process::{Command, Output},
    time::Duration,
};

use redirect_testkit::{privileged, unique_name, Cgroup, Child};
use redirect_tests::{
    bin_path,
    conformance::{reach, sidecar_listeners, World},
    node::{istio_iptables as redirect, ok, Pins},
    wait_detached,
};

/// `redirect istio-iptables ARGS` inside namespace `netns` as a pod's init container sees the
/// node: a new PID namespace with its own /proc and a mount namespace whose /run/netns is an
/// empty tmpfs, so no other pod's namespace is visible to it.
fn istio_init_in_pod(
    pins: &std::path::Path,
    cgroup: &std::path::Path,
    netns: &std::path::Path,
) -> Output {
    let script = format!(
        "mount -t tmpfs t /run/netns && exec {} istio-iptables --bpffs {} --cgroup {} \
         -p 15001 -z 15006 -u 1337 -m REDIRECT -i '*' -b '*'",
        bin_path("redirect").display(),
        pins.display(),
        cgroup.display()
    );
    Command::new("nsenter")
        .arg(format!("--net={}", netns.display()))
        .args(["unshare", "-pmf", "--mount-proc", "sh", "-c", &script])
        .output()
        .expect("run nsenter + unshare")
}

#[test]
fn istio_init_in_its_own_pid_and_mount_namespaces_keeps_other_pods_policies() {
    privileged!();
    let (a, b) = (World::new("rta", false), World::new("rtb", false));
    b.renumber("10.200.0.3", "10.201.0.3");
    let cgroup = Cgroup::new("rtc").expect("cgroup");
    let pins = Pins::new();
    ok(
        &redirect(
            &pins.0,
            cgroup.path(),
            &a.pod.path(),
            &["-u", "1337", "-i", "*"],
        ),
        "apply a from the host",
    );
    let _la = sidecar_listeners(&a, cgroup.path());
    let _lb = sidecar_listeners(&b, cgroup.path());
    let go = |w: &World| reach(w, cgroup.path(), (1000, 1000), "192.0.2.10:80");
    assert_eq!(go(&a), "at=proxy/[::]:15001 orig=192.0.2.10:80", "a before");

    ok(
        &istio_init_in_pod(&pins.0, cgroup.path(), &b.pod.path()),
        "istio-init in b",
    );
    assert_eq!(
        go(&b),
        "at=proxy/[::]:15001 orig=192.0.2.10:80",
        "b is captured"
    );
    assert_eq!(
        go(&a),
        "at=proxy/[::]:15001 orig=192.0.2.10:80",
        "a keeps its policy although b's run could not see a's namespace"
    );

    for w in [&a, &b] {
        ok(
            &redirect(&pins.0, cgroup.path(), &w.pod.path(), &["--cleanup-only"]),
            "cleanup",
        );
    }
    assert!(!pins.0.exists());
    wait_detached(cgroup.path());
}

#[test]
fn without_the_hosts_bpffs_the_command_refuses_and_mounts_nothing() {
    privileged!();
    let w = World::new("rtd", false);
    let cgroup = Cgroup::new("rtc").expect("cgroup");
    let pins = std::path::PathBuf::from("/sys/fs/bpf").join(unique_name("rtp"));
    // A container without the host's /sys/fs/bpf: a private mount namespace with it unmounted.
    let script = format!(
        "umount /sys/fs/bpf && exec {} istio-iptables --bpffs {} --cgroup {} --netns {} -u 1337 -i '*'",
        bin_path("redirect").display(),
        pins.display(),
        cgroup.path().display(),
        w.pod.path().display()
    );
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .output()
        .expect("run unshare");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "refused: {stderr}");
    assert!(
        stderr.contains("/sys/fs/bpf is not a bpf filesystem") && stderr.contains("-v /sys/fs/bpf"),
        "names the missing mount and the fix: {stderr}"
    );
    assert!(!pins.exists(), "nothing pinned on the host");
    assert!(
        redirect_tests::attached_program_ids(cgroup.path()).is_empty(),
        "nothing attached"
    );
    // The same command with the host's bpffs works (the refusal was about the mount only).
    ok(
        &redirect(
            &pins,
            cgroup.path(),
            &w.pod.path(),
            &["-u", "1337", "-i", "*"],
        ),
        "apply with the host's bpffs",
    );
    ok(
        &redirect(&pins, cgroup.path(), &w.pod.path(), &["--cleanup-only"]),
        "cleanup",
    );
    assert!(!pins.exists());
    wait_detached(cgroup.path());
}

/// `probe-churn` in the pod as an application (uid 1000) in `cgroup`.
fn churn(w: &World, cgroup: &std::path::Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(bin_path("probe-churn"));
    cmd.arg("--netns")
        .arg(w.pod.path())
        .arg("--cgroup")
        .arg(cgroup)
        .args(["--uid", "1000", "--gid", "1000", "--port", "15001"])
        .args(extra);
    cmd
}

#[test]
fn only_the_proxys_own_listener_makes_the_proxy_up() {
    privileged!();
    let w = World::new("rtl", false);
    let cgroup = Cgroup::new("rtc").expect("cgroup");
    let pins = Pins::new();
    ok(
        &redirect(
            &pins.0,
            cgroup.path(),
            &w.pod.path(),
            &["-u", "1337", "-i", "*", "--no-proxy", "passthrough"],
        ),
        "apply with --no-proxy passthrough",
    );
    let go = || reach(&w, cgroup.path(), (1000, 1000), "192.0.2.10:80");
    let world = "at=world/192.0.2.10:80 orig=192.0.2.10:80";
    let _remote = redirect_tests::conformance::listen(
        &w.world,
        None,
        None,
        "world",
        &["192.0.2.10:80".into()],
        &[],
    );
    // An application listening on the outbound port is not the proxy: nothing is captured
    // into it, the proxy is still down (passthrough).
    let mut held = Child::spawn("probe-churn --hold", churn(&w, cgroup.path(), &["--hold"]))
        .expect("start probe-churn");
    held.wait_line("listening", Duration::from_secs(10), |l| l == "listening")
        .expect("the application listens");
    let ss = w
        .pod
        .exec("ss")
        .args(["-Hltn", "sport = :15001"])
        .output()
        .expect("ss");
    assert!(
        String::from_utf8_lossy(&ss.stdout).contains("[::]:15001"),
        "the application holds [::]:15001: {ss:?}"
    );
    assert_eq!(
        go(),
        world,
        "an application's listener does not make the proxy up"
    );

    // The proxy (uid 1337) listens: captured.
    let proxy = redirect_tests::conformance::listen(
        &w.pod,
        Some(cgroup.path()),
        Some((1337, 1337)),
        "proxy",
        &["0.0.0.0:15001".into()],
        &[],
    );
    let captured = "at=proxy/0.0.0.0:15001 orig=192.0.2.10:80";
    assert_eq!(go(), captured, "the proxy's listener");
    drop(held);
    // Applications churning listen/close on the port, on every CPU, change nothing.
    let out = churn(&w, cgroup.path(), &["--threads", "4", "--loops", "3000"])
        .output()
        .expect("run probe-churn");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.starts_with("done "), "{said}");
    assert_ne!(said.trim(), "done 0", "the churn really listened");
    for _ in 0..5 {
        assert_eq!(go(), captured, "still captured after the churn");
    }
    // The proxy goes away: down again, passthrough (its close counted back).
    drop(proxy);
    redirect_testkit::until("the proxy counted down", Duration::from_secs(10), || {
        go() == world
    })
    .expect("passthrough once the proxy is gone");
    ok(
        &redirect(&pins.0, cgroup.path(), &w.pod.path(), &["--cleanup-only"]),
        "cleanup",
    );
    wait_detached(cgroup.path());
}
