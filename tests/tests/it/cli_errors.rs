//! What an operator sees when a command cannot run: one sentence for every command run
//! without root (never a raw syscall error), and `istio-iptables --dry-run` still works.
use std::process::Command;

use redirect_testkit::privileged;
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
    privileged!();
    let root = redirect_testkit::cgroup2_root().expect("cgroup v2 mount");
    let root = root.to_str().expect("utf-8");
    for args in [
        &["status"][..],
        &["probe"],
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
        &["attach", "--cgroup", root],
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

#[test]
fn flag_errors_name_the_flag_before_anything_is_loaded() {
    privileged!();
    let root = redirect_testkit::cgroup2_root().expect("cgroup v2 mount");
    let root_s = root.to_str().expect("utf-8");
    let run = |args: &[&str]| {
        Command::new("timeout")
            .arg("10")
            .arg(bin_path("redirect"))
            .args(args)
            .output()
            .expect("run redirect")
    };
    let out = run(&["attach", "--cgroup", root_s, "--proxy-cgroup", "/nope-rdx"]);
    assert!(!out.status.success(), "{out:?}");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("'--proxy-cgroup <PATH>'"), "{e}");
    assert!(
        e.contains(&format!("mkdir {}", root.join("nope-rdx").display())),
        "the hint is a cgroup v2 path: {e}"
    );
    let out = run(&["attach", "--cgroup", root_s, "--inbound", "nope-rdx"]);
    assert!(!out.status.success(), "{out:?}");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("'--inbound <SPEC>'")
            && e.contains("network namespace /run/netns/nope-rdx does not exist"),
        "{e}"
    );
    // --daemon-dir is REDIRECT_DAEMON_DIR as a flag.
    let out = run(&[
        "unenroll",
        "--netns",
        "nope-rdx",
        "--daemon-dir",
        "/nonexistent-rdx",
    ]);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent-rdx/daemon.sock"),
        "{out:?}"
    );
    // A last flag without its value inside --istio-args is named as istio-iptables names it
    // (not as eating the namespace: `unexpected argument "/run/netns/..."`), istio-init's
    // arguments pasted whole (`istio-iptables` first) are taken, and a namespace inside them is
    // refused, naming it (the enrolled one is enroll's own --netns).
    for (istio_args, said) in [
        (
            "-u 1337 -i '*' -x",
            "flag -x/--istio-service-exclude-cidr needs a value",
        ),
        (
            "istio-iptables -u 1337 -i '*' -x",
            "flag -x/--istio-service-exclude-cidr needs a value",
        ),
        (
            "-u 1337 --netns=other",
            "--netns=other names a namespace inside",
        ),
    ] {
        let out = run(&["enroll", "--netns", "nope-rdx", "--istio-args", istio_args]);
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && e.contains(said) && !e.contains("unexpected argument"),
            "{istio_args}: {e}"
        );
    }
}

#[test]
fn probe_lists_every_feature_and_a_missing_one_is_a_sentence() {
    privileged!();
    let out = Command::new(bin_path("redirect"))
        .args(["probe", "--json"])
        .output()
        .expect("run redirect probe");
    assert!(
        out.status.success(),
        "this kernel has every feature: {out:?}"
    );
    let probed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(probed["ok"], true, "{probed}");
    assert!(
        probed["kernel"].as_str().is_some_and(|k| !k.is_empty()),
        "{probed}"
    );
    let names: Vec<&str> = probed["features"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|p| p["name"].as_str().unwrap_or(""))
        .collect();
    assert!(names.contains(&"sk_lookup ingress_ifindex"), "{names:?}");
    assert!(
        names.contains(&"bpf_get_netns_cookie in sock_ops"),
        "{names:?}"
    );
    let out = Command::new(bin_path("redirect"))
        .args(["probe", "--demo-missing"])
        .output()
        .expect("run redirect probe");
    assert!(!out.status.success(), "{out:?}");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("lacks BPF helper #2147483647, which the --demo-missing check of `redirect probe` needs"),
        "{e}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("MISSING"),
        "{out:?}"
    );
}

/// Bytes that are not UTF-8 are refused naming where they are: an environment variable was
/// taken as unset (a pod's `ISTIO_SERVICE_CIDR` silently captured nothing), and clap's message
/// named no argument.
#[test]
fn non_utf8_input_is_named() {
    use std::{ffi::OsStr, os::unix::ffi::OsStrExt as _};
    let out = Command::new(bin_path("redirect"))
        .args(["istio-iptables", "--dry-run"])
        .env("ISTIO_SERVICE_CIDR", OsStr::from_bytes(b"10.0.0.0/8\xff"))
        .output()
        .expect("run redirect istio-iptables");
    assert!(!out.status.success(), "{out:?}");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains(
            "-i/--istio-service-cidr ($ISTIO_SERVICE_CIDR): \"10.0.0.0/8\u{fffd}\" is not a CIDR"
        ),
        "{e}"
    );
    let out = Command::new(bin_path("redirect"))
        .args(["enroll", "--netns"])
        .arg(OsStr::from_bytes(b"pod\xff"))
        .output()
        .expect("run redirect enroll");
    assert!(!out.status.success(), "{out:?}");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("argument 3 \"pod\u{fffd}\" (the value of --netns) is not UTF-8"),
        "{e}"
    );
}
