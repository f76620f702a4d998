//! What an operator sees when a command cannot run: one sentence for every command run
//! without root (never a raw syscall error), and `istio-iptables --dry-run` still works.
use std::process::Command;

use redirect_testkit::privileged_or_skip;
use redirect_tests::bin_path;

fn as_nobody(args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(bin_path("redirect"))
        .args(args)
        .output()
        .expect("run setpriv redirect")
}

#[test]
fn every_command_without_root_says_so_in_one_sentence() {
    if !privileged_or_skip("every_command_without_root_says_so") {
        return;
    }
    for args in [
        &["status"][..],
        &["list"],
        &["stats"],
        &["trace", "--seconds", "1"],
        &[
            "explain",
            "--netns",
            "x",
            "--uid",
            "1",
            "--dst",
            "10.0.0.1:80",
        ],
        &["uninstall"],
        &[
            "enroll",
            "--netns",
            "/run/netns/x",
            "--istio-args",
            "-i '*'",
        ],
        &["unenroll", "--netns", "/run/netns/x"],
        &["istio-iptables", "--netns", "x"],
        &["attach", "--cgroup", "/"],
        &["daemon"],
        &["validate", "--netns", "x"],
        &["vm", "--cluster-env", "/dev/null"],
    ] {
        let out = as_nobody(args);
        assert!(!out.status.success(), "{args:?}: {out:?}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            e.contains(&format!(
                "redirect {} must run as root (effective uid is 65534)",
                args[0]
            )),
            "{args:?}: {e}"
        );
        assert!(
            !e.contains("os error"),
            "{args:?}: a raw syscall error: {e}"
        );
    }
    let dry = as_nobody(&["istio-iptables", "--dry-run", "-i", "10.0.0.0/8"]);
    assert!(dry.status.success(), "{dry:?}");
    assert!(String::from_utf8_lossy(&dry.stdout).contains("-d 10.0.0.0/8"));
}
