//! Errors that give the fix for the command typed (issue 32, items 2, 3, 5 and 7), and the VM
//! lab (issue 33, item 5): `vm` reads the VM's files from this host; a port out of range is
//! named with its range; an unknown flag or annotation key gets the name meant; a CIDR with
//! host bits is normalised with a warning; a re-enroll says what it replaced; `validate` names
//! the cgroup to use; `redirect-cni --help` helps; `uninstall-cni` says each thing once.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use redirect_testkit::{privileged, unique_name, Netns};
use redirect_tests::{
    bin_path,
    conformance::{reach, sidecar_listeners, World},
    node::Node,
};
use serde_json::Value;

fn text(out: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A directory of the test's own, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(unique_name("roe"));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `/etc/netns/NAME` of the test's own, removed on drop (with `/etc/netns` when it made it).
struct EtcNetns {
    dir: PathBuf,
    made_parent: bool,
}

impl EtcNetns {
    fn new(name: &str, resolv_conf: &str) -> Self {
        let parent = PathBuf::from("/etc/netns");
        let made_parent = !parent.exists();
        let dir = parent.join(name);
        std::fs::create_dir_all(&dir).expect("/etc/netns/NAME");
        std::fs::write(dir.join("resolv.conf"), resolv_conf).expect("resolv.conf");
        Self { dir, made_parent }
    }
}

impl Drop for EtcNetns {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if self.made_parent {
            let _ = std::fs::remove_dir(Path::new("/etc/netns"));
        }
    }
}

/// Issue 33, item 5: a namespace playing a VM on this host, with Istio's cluster.env and no
/// `-u`: its files are this host's (`/etc/netns/NAME` first), the proxy uid istio-iptables'
/// default 1337, said once; an application's connection is captured, the proxy's is not.
#[test]
fn the_vm_lab_enrolls_with_istios_cluster_env_and_no_uid() {
    privileged!();
    let node = Node::new();
    let w = World::new("roev", false);
    let _etc = EtcNetns::new(w.pod.name(), "nameserver 192.0.2.77\n");
    let env = concat!(env!("CARGO_MANIFEST_DIR"), "/data/istio/vm-cluster.env");
    let cgroup = node.cgroup.path().display().to_string();
    let vm = ["vm", "--cluster-env", env, "--netns", w.pod.name()];
    let dry = node.ok(&[&vm[..], &["--dry-run"]].concat());
    assert!(
        dry.contains("note: proxy uid 1337 (no -u): istio-iptables' default"),
        "{dry}"
    );
    assert!(
        dry.contains("192.0.2.77"),
        "the VM's DNS server from /etc/netns: {dry}"
    );
    assert!(!node.pins.exists(), "a dry run pins nothing");
    let said = node.ok(&[&vm[..], &["--cgroup", &cgroup]].concat());
    assert_eq!(
        said.matches("note: proxy uid 1337").count(),
        1,
        "said once: {said}"
    );
    let list: Value = serde_json::from_str(&node.ok(&["list", "--json"])).expect("list");
    let policy = &list[0]["policy"];
    assert_eq!(policy["proxy_uids"], serde_json::json!([1337]), "{list}");
    assert_eq!(policy["proxy_gids"], serde_json::json!([1337]), "{list}");
    assert_eq!(
        policy["dns_servers"],
        serde_json::json!(["192.0.2.77"]),
        "{list}"
    );
    assert!(
        list[0]["source"]
            .as_str()
            .is_some_and(|s| s.contains("istio-iptables' default")),
        "{list}"
    );
    let _l = sidecar_listeners(&w, node.cgroup.path());
    assert_eq!(
        reach(&w, node.cgroup.path(), (1000, 1000), "192.0.2.10:80"),
        "at=proxy/[::]:15001 orig=192.0.2.10:80"
    );
    assert_eq!(
        reach(&w, node.cgroup.path(), (1337, 1337), "192.0.2.10:80"),
        "at=world/192.0.2.10:80 orig=192.0.2.10:80"
    );
    node.ok(&["uninstall"]);
}

#[test]
fn flag_values_and_names_are_named_with_their_fix() {
    privileged!();
    let node = Node::new();
    let out = node.run(&[
        "explain",
        "--netns",
        "x",
        "--uid",
        "0",
        "--dst",
        "10.0.0.1:70000",
    ]);
    let (_, e) = text(&out);
    assert!(
        e.contains("port 70000, above 65535") && e.contains("1 to 65535"),
        "{e}"
    );

    let out = node.run(&[
        "enroll",
        "--netns",
        "x",
        "--istio-args",
        "-u 1337 --istio-service-cidrs '*'",
    ]);
    let (_, e) = text(&out);
    assert!(e.contains("did you mean --istio-service-cidr?"), "{e}");

    let out = node.run(&[
        "istio-iptables",
        "--dry-run",
        "--proxy-cgroup",
        "/sys/fs/cgroup",
    ]);
    let (_, e) = text(&out);
    assert!(e.contains("renamed --bind-proxy-cgroup"), "{e}");

    let out = node.run(&[
        "istio-iptables",
        "--dry-run",
        "-u",
        "1337",
        "-x",
        "10.0.0.1/8",
    ]);
    let (o, e) = text(&out);
    assert!(out.status.success(), "{e}");
    assert!(e.contains("host bits") && e.contains("10.0.0.0/8"), "{e}");
    assert!(o.contains("10.0.0.0/8") && !o.contains("10.0.0.1/8"), "{o}");
}

#[test]
fn a_reenroll_says_what_it_replaced_directly_and_through_the_daemon() {
    privileged!();
    let node = Node::new();
    let w = World::new("roer", false);
    let netns = w.pod.path().display().to_string();
    node.apply(
        w.pod.path().as_path(),
        &["-u", "1337", "-i", "*", "-b", "*"],
    );
    let said = node.apply(w.pod.path().as_path(), &["-u", "1337", "-i", "*", "-b", ""]);
    assert!(
        said.contains("replaced its policy from istio-iptables"),
        "{said}"
    );
    assert!(said.contains("\n  - ") && said.contains("\n  + "), "{said}");

    let (_daemon, _) = node.daemon_with(&[]);
    let args = "-u 1337 -i '*' -b '*'";
    let dry = node.ok(&[
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        args,
        "--dry-run",
    ]);
    assert!(dry.contains("would replace the policy"), "{dry}");
    let said = node.ok(&["enroll", "--netns", &netns, "--istio-args", args]);
    assert!(
        said.contains("replaced its policy from istio-iptables"),
        "{said}"
    );
    let again = node.ok(&["enroll", "--netns", &netns, "--istio-args", args]);
    assert!(again.contains("its policy is unchanged (enroll"), "{again}");
    node.ok(&["uninstall"]);
}

#[test]
fn cleanup_logs_no_sentinel_values() {
    privileged!();
    let node = Node::new();
    let ns = Netns::new("roec").expect("netns");
    node.apply(&ns.path(), &["-u", "1337", "-i", "*"]);
    let out = node.run(&[
        "istio-iptables",
        "--netns",
        &ns.path().display().to_string(),
        "--cleanup-only",
    ]);
    let (o, e) = text(&out);
    assert!(out.status.success(), "{e}");
    assert!(o.contains("policy removed"), "{o}");
    assert!(
        !e.contains("4294967295") && !e.contains("from=nothing"),
        "{e}"
    );
}

#[test]
fn validate_outside_the_capture_cgroup_names_the_cgroup_to_use() {
    privileged!();
    let node = Node::new();
    let w = World::new("roeq", false);
    node.apply(
        w.pod.path().as_path(),
        &["-u", "1337", "-i", "*", "-b", "*"],
    );
    let netns = w.pod.path().display().to_string();
    let out = node.run(&["validate", "--netns", &netns, "--timeout-ms", "500"]);
    let (_, e) = text(&out);
    assert!(!out.status.success());
    let cgroup = node.cgroup.path().display().to_string();
    assert!(e.contains(&format!("rerun with --cgroup {cgroup}")), "{e}");
    node.ok(&["uninstall"]);
}

#[test]
fn unknown_istio_annotation_keys_are_named_with_the_key_meant() {
    let dir = Scratch::new();
    let pod = dir.0.join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n    sidecar.istio.io/status: '{}'\n    traffic.sidecar.istio.io/excludeOutboundPort: \"3306\"\nspec:\n  containers:\n  - name: app\n    image: app\n  - name: istio-proxy\n    image: proxy\n",
    )
    .expect("write pod");
    let out = Command::new(bin_path("redirect"))
        .arg("pod-policy")
        .arg(&pod)
        .output()
        .expect("pod-policy");
    let (o, e) = text(&out);
    assert!(out.status.success(), "{e}");
    let meant = "did you mean traffic.sidecar.istio.io/excludeOutboundPorts?";
    assert!(e.contains(meant) && o.contains(meant), "{e}\n{o}");
    let out = Command::new(bin_path("redirect"))
        .args(["pod-policy", "--json"])
        .arg(&pod)
        .output()
        .expect("pod-policy --json");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        v[0]["warnings"][0]["did_you_mean"], "traffic.sidecar.istio.io/excludeOutboundPorts",
        "{v}"
    );
}

#[test]
fn the_plugins_help_helps_and_uninstall_cni_says_each_thing_once() {
    let out = Command::new(bin_path("redirect-cni"))
        .arg("--help")
        .output()
        .expect("redirect-cni --help");
    let (o, _) = text(&out);
    assert!(out.status.success(), "{out:?}");
    assert!(
        o.contains("redirect install-cni") && o.contains("CNI versions:"),
        "{o}"
    );
    let dir = Scratch::new();
    let out = Command::new(bin_path("redirect"))
        .arg("uninstall-cni")
        .arg("--cni-conf-dir")
        .arg(&dir.0)
        .output()
        .expect("uninstall-cni");
    let (o, e) = text(&out);
    let both = format!("{o}{e}");
    assert_eq!(both.matches("nothing to undo").count(), 1, "{both}");
}
