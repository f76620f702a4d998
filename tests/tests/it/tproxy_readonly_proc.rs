//! TPROXY mode where `/proc/sys` is read-only (issue 45): container runtimes bind-mount it
//! read-only into a non-privileged container, the node daemon's in Kubernetes. `redirect
//! istio-iptables -m TPROXY` runs here in a mount namespace of its own with `/proc/sys` made
//! read-only as a runtime makes it, and still sets the pod's `net.ipv4.tcp_fwmark_accept`
//! (through a writable clone of the mount that no one else sees); the host's value stays as
//! it was, and `--cleanup-only`, run the same way, puts the pod's back to 0.
use std::process::{Command, Output};

use redirect_testkit::{privileged, Cgroup, Netns};
use redirect_tests::{bin_path, node::Pins, wait_detached};

const FWMARK_ACCEPT: &str = "/proc/sys/net/ipv4/tcp_fwmark_accept";

/// Run by `sh -c` inside `unshare --mount --propagation private`: `/proc/sys` bind-mounted
/// onto itself and remounted read-only (what runc does for a non-privileged container),
/// checked read-only in mountinfo, then the command (`$0 "$@"`) run in its place.
const READ_ONLY_PROC_SYS: &str = r#"set -e
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
awk '$5 == "/proc/sys" && $6 ~ /^ro(,|$)/ { ro = 1 } END { exit !ro }' /proc/self/mountinfo \
    || { echo "/proc/sys is not read-only in the test's mount namespace" >&2; exit 97; }
exec "$0" "$@""#;

/// `redirect istio-iptables ARGS` with `/proc/sys` read-only (see [`READ_ONLY_PROC_SYS`]).
fn redirect_read_only_proc(args: &[String]) -> Output {
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(READ_ONLY_PROC_SYS)
        .arg(bin_path("redirect"))
        .arg("istio-iptables")
        .args(args)
        .env("ISTIO_DUAL_STACK", "true")
        .output()
        .expect("run unshare ... redirect istio-iptables")
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The namespace's `net.ipv4.tcp_fwmark_accept`.
fn fwmark_accept(pod: &Netns) -> String {
    let out = pod
        .exec("cat")
        .arg(FWMARK_ACCEPT)
        .output()
        .expect("read net.ipv4.tcp_fwmark_accept in the namespace");
    assert!(out.status.success(), "cat {FWMARK_ACCEPT}: {}", said(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// This process's (the host's) `net.ipv4.tcp_fwmark_accept`.
fn host_fwmark_accept() -> String {
    std::fs::read_to_string(FWMARK_ACCEPT)
        .expect("read the host's net.ipv4.tcp_fwmark_accept")
        .trim()
        .to_owned()
}

/// Our fwmark rules in the namespace (`ip rule` lines naming mark 1337 or table 133).
fn our_rules(pod: &Netns) -> Vec<String> {
    ["-4", "-6"]
        .into_iter()
        .flat_map(|family| {
            let out = Command::new("ip")
                .args(["-n", pod.name(), family, "rule"])
                .output()
                .expect("ip rule");
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.contains("0x539") || l.contains("lookup 133"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn tproxy_sets_and_clears_the_pods_fwmark_accept_with_proc_sys_read_only() {
    privileged!();
    let pod = Netns::new("rtro").expect("netns");
    let cgroup = Cgroup::new("rtroc").expect("cgroup");
    let pins = Pins::new();
    let base = pins.cli_args(&pod.path(), cgroup.path());
    let host_before = host_fwmark_accept();
    assert_eq!(fwmark_accept(&pod), "0", "a new namespace's default");

    let mut apply = base.clone();
    apply.extend(
        [
            "-p", "15001", "-z", "15006", "-u", "1337", "-m", "TPROXY", "-b", "*", "-i", "*",
        ]
        .map(str::to_owned),
    );
    let out = redirect_read_only_proc(&apply);
    assert!(
        out.status.success(),
        "istio-iptables -m TPROXY with /proc/sys read-only: {}",
        said(&out)
    );
    assert_eq!(fwmark_accept(&pod), "1", "the pod's tcp_fwmark_accept");
    assert_eq!(
        host_fwmark_accept(),
        host_before,
        "the host's tcp_fwmark_accept changed"
    );
    assert_eq!(our_rules(&pod).len(), 2, "{:?}", our_rules(&pod));

    let mut cleanup = base.clone();
    cleanup.push("--cleanup-only".into());
    let out = redirect_read_only_proc(&cleanup);
    assert!(
        out.status.success(),
        "--cleanup-only with /proc/sys read-only: {}",
        said(&out)
    );
    wait_detached(cgroup.path());
    assert_eq!(fwmark_accept(&pod), "0", "the sysctl was not put back");
    assert_eq!(our_rules(&pod), Vec::<String>::new(), "rules left behind");
    assert_eq!(
        host_fwmark_accept(),
        host_before,
        "the host's tcp_fwmark_accept changed"
    );
}
