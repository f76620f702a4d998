//! A kernel without sk_lookup's `ingress_ifindex` (< 5.17), shown on this one with
//! `REDIRECT_PROBE_ASSUME_MISSING`: the datapath loads the sk_lookup program that does not read
//! it, plain inbound capture keeps working (real TCP from the world lands on the proxy's 15006
//! with its original destination), and a policy whose inbound capture needs the arrival
//! interface (`-c`, `-k`) is refused with a sentence, leaving nothing behind; a later apply
//! goes by the pinned program, not by a new probe.
use std::{path::Path, process::Command};

use redirect_testkit::{privileged, reference, Cgroup};
use redirect_tests::{
    attached_program_ids, bin_path,
    conformance::{inbound_at, sidecar_listeners, World, POD4},
    node::{ok, Pins},
};

const ASSUME: &str = "REDIRECT_PROBE_ASSUME_MISSING";
const FEATURE: &str = "sk_lookup_ingress_ifindex";

/// `redirect istio-iptables` with istio-init's args for hello.yaml plus `extra`, with the
/// feature assumed missing or not.
fn apply(
    pins: &Path,
    cgroup: &Path,
    w: &World,
    extra: &[&str],
    assume: bool,
) -> std::process::Output {
    let mut args = reference::istio_init_args(&reference::inject("hello.yaml"));
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = redirect_tests::node::istio_iptables_cmd(pins, cgroup, &w.pod.path(), &args);
    cmd.env_remove(ASSUME);
    if assume {
        cmd.env(ASSUME, FEATURE);
    }
    cmd.output().expect("run redirect istio-iptables")
}

/// Asserts `out` failed with the sentence naming the feature, `flag` and the kernel that added it.
fn refused(out: &std::process::Output, flag: &str, why: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{flag} must be refused: {err}");
    for part in [
        "lacks sk_lookup ingress_ifindex",
        &format!("which {flag} needs with inbound capture"),
        "(first in Linux: 5.17)",
        "nothing was written",
        why,
    ] {
        assert!(err.contains(part), "{part:?} missing from: {err}");
    }
}

#[test]
fn without_ingress_ifindex_inbound_works_and_interface_policies_are_refused() {
    privileged!();
    let w = World::with_nic("rpf", "net1");
    let cgroup = Cgroup::new("rpc").expect("cgroup");
    let pins = Pins::new();
    let assumed = "(assumed missing by REDIRECT_PROBE_ASSUME_MISSING)";

    // No datapath yet: the one created for a -k policy is removed again with the refusal.
    refused(
        &apply(&pins.0, cgroup.path(), &w, &["-k", "net1"], true),
        "-k net1",
        assumed,
    );
    assert!(!pins.0.exists(), "a refused first apply leaves no pins");
    assert!(
        attached_program_ids(cgroup.path()).is_empty(),
        "a refused first apply leaves nothing attached"
    );

    // A plain sidecar policy: loads the program without ingress_ifindex, and only that one.
    ok(
        &apply(&pins.0, cgroup.path(), &w, &[], true),
        "apply hello.yaml's args with ingress_ifindex assumed missing",
    );
    let progs = pins.0.join("progs");
    assert!(progs.join("redirect_sk_lookup_no_ifindex").exists());
    assert!(!progs.join("redirect_sk_lookup").exists());
    let status = Command::new(bin_path("redirect"))
        .args(["status", "--bpffs"])
        .arg(&pins.0)
        .output()
        .expect("run redirect status");
    let status = ok(&status, "redirect status");
    assert!(
        status
            .contains("sk_lookup program: redirect_sk_lookup_no_ifindex (without ingress_ifindex"),
        "{status}"
    );
    let _l = sidecar_listeners(&w, cgroup.path());
    let expect = [
        format!("at=proxy/[::]:15006 orig={POD4}:80"),
        format!("at=app/[::]:15021 orig={POD4}:15021"),
    ];
    assert_eq!(inbound_at(&w, &[80, 15021]), expect);

    // A later apply without the override goes by the pinned program: -c is still refused,
    // and the namespace keeps the policy it had.
    let links = std::fs::read_dir(pins.0.join("netns"))
        .expect("netns pins")
        .count();
    refused(
        &apply(&pins.0, cgroup.path(), &w, &["-c", "net1"], false),
        "-c net1",
        "the datapath was created while it was assumed missing",
    );
    assert_eq!(
        std::fs::read_dir(pins.0.join("netns"))
            .expect("netns pins")
            .count(),
        links
    );
    assert_eq!(
        inbound_at(&w, &[80, 15021]),
        expect,
        "the refused apply changed nothing"
    );
    // -c with inbound capture off is outbound only: accepted.
    ok(
        &apply(&pins.0, cgroup.path(), &w, &["-c", "net1", "-b", ""], false),
        "-c net1 with -b ''",
    );
}

#[test]
fn probe_reports_what_the_override_names_and_refuses_unknown_ids() {
    privileged!();
    let probe = |value: &str| {
        Command::new(bin_path("redirect"))
            .arg("probe")
            .env(ASSUME, value)
            .output()
            .expect("run redirect probe")
    };
    let out = probe(FEATURE);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "an optional feature missing is no error: {out:?}"
    );
    let line = text
        .lines()
        .find(|l| l.contains("sk_lookup ingress_ifindex"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("MISSING")
            && line.contains("(assumed missing by REDIRECT_PROBE_ASSUME_MISSING)"),
        "{line}"
    );
    let out = probe("sk_lookup_ingress_ifindex,no_such_feature");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("\"no_such_feature\"") && err.contains(FEATURE),
        "{err}"
    );
}
