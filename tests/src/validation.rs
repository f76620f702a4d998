//! Istio's istio-validation container as the tests run it: `redirect istio-iptables FLAGS
//! --run-validation --skip-rule-apply` as uid and gid 1337, in a pod's network namespace and the
//! node's cgroup (where the programs are attached).
use std::{
    path::Path,
    process::{Command, Output},
};

use crate::bin_path;

/// istio-iptables' flags in Istio's injected pods (hello.yaml's istio-init) with `-m mode`.
pub const fn istio_flags(mode: &str) -> [&str; 16] {
    [
        "-p",
        "15001",
        "-z",
        "15006",
        "-u",
        "1337",
        "-m",
        mode,
        "-i",
        "*",
        "-x",
        "",
        "-b",
        "*",
        "-d",
        "15090,15021,15020",
    ]
}

/// Runs the validation in the namespace `netns` (its name) under `cgroup`, with `flags` (the
/// pod's istio-iptables flags) and `--probe-timeout timeout`.
pub fn run(cgroup: &Path, netns: &str, flags: &[&str], timeout: &str) -> Output {
    Command::new(bin_path("redirect"))
        .arg("exec")
        .arg("--cgroup")
        .arg(cgroup)
        .args(["--", "ip", "netns", "exec", netns])
        .args([
            "setpriv",
            "--reuid",
            "1337",
            "--regid",
            "1337",
            "--clear-groups",
            "--",
        ])
        .arg(bin_path("redirect"))
        .arg("istio-iptables")
        .args(flags)
        .args([
            "--run-validation",
            "--skip-rule-apply",
            "--probe-timeout",
            timeout,
        ])
        .output()
        .expect("run the validation")
}
