//! A node shared by many pods: one pod's `redirect istio-iptables`, run the way istio-init runs
//! it (its own PID and mount namespaces, its own /run/netns), never removes another pod's policy,
//! and without the host's bpffs it refuses instead of "applying" a datapath private to itself.
use std::process::{Command, Output};

use redirect_testkit::{privileged_or_skip, unique_name, Cgroup};
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
    if !privileged_or_skip("istio_init_in_its_own_namespaces_keeps_other_pods") {
        return;
    }
    let (a, b) = (World::new("rta", false), World::new("rtb", false));
    b.renumber("10.200.0.3", "10.201.0.3");
    let cgroup = Cgroup::new("rtc").expect("cgroup");
    let pins = Pins::new();
    ok(
        &redirect(&pins.0, cgroup.path(), &a.pod.path(), &["-i", "*"]),
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
    if !privileged_or_skip("without_the_hosts_bpffs_the_command_refuses") {
        return;
    }
    let w = World::new("rtd", false);
    let cgroup = Cgroup::new("rtc").expect("cgroup");
    let pins = std::path::PathBuf::from("/sys/fs/bpf").join(unique_name("rtp"));
    // A container without the host's /sys/fs/bpf: a private mount namespace with it unmounted.
    let script = format!(
        "umount /sys/fs/bpf && exec {} istio-iptables --bpffs {} --cgroup {} --netns {} -i '*'",
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
        &redirect(&pins, cgroup.path(), &w.pod.path(), &["-i", "*"]),
        "apply with the host's bpffs",
    );
    ok(
        &redirect(&pins, cgroup.path(), &w.pod.path(), &["--cleanup-only"]),
        "cleanup",
    );
    assert!(!pins.exists());
    wait_detached(cgroup.path());
}
