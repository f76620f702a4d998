//! install-cni and its readiness check on the conflists real nodes have (`tests/data/cni`:
//! flannel, Calico and Cilium's chaining mode at 0.3.1, containerd's bridge at 1.0.0): our
//! entry last, `--check` in place, and the installed plugin answering an ADD of the list's own
//! version with a result in that version. A list our plugin would fail on (a version it does
//! not speak, istio-cni chained already) is refused by a one-shot install, naming the file and
//! the fix, with nothing written, and the check fails.
use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use redirect_tests::install_dirs::{default_entry, json_of, read, text, Dirs};
use serde_json::{json, Value};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data/cni")
        .join(name)
}

/// The installed plugin's answer to a non-pod ADD of `list`'s version with a prevResult of
/// that version's shape: what it prints.
fn add_without_a_pod(plugin: &Path, list: &Value) -> Value {
    let version = list["cniVersion"].as_str().expect("cniVersion");
    let mut conf = list["plugins"]
        .as_array()
        .and_then(|p| p.last())
        .cloned()
        .expect("our entry last");
    conf["name"] = list["name"].clone();
    conf["cniVersion"] = version.into();
    // Its log (cni.log) goes beside the daemon socket: in the test's own directory, never the
    // node's /run/redirect/daemon.
    conf["daemon_socket"] = json!(plugin.with_file_name("daemon.sock"));
    conf["prevResult"] = json!({
        "cniVersion": version,
        "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/cni-test"}],
        "ips": [{"version": "4", "address": "10.244.1.5/24", "gateway": "10.244.1.1", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dns": {}
    });
    let mut child = Command::new(plugin)
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", "stock-test")
        .env("CNI_NETNS", "/var/run/netns/cni-test")
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", plugin.parent().expect("bin dir"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the installed redirect-cni");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(conf.to_string().as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("redirect-cni");
    assert!(out.status.success(), "{version}: {}", text(&out));
    serde_json::from_slice(&out.stdout).expect("a JSON result")
}

#[test]
fn the_stock_conflists_take_our_entry_and_the_plugin_speaks_their_version() {
    for name in [
        "flannel.conflist",
        "calico.conflist",
        "cilium-chaining.conflist",
        "containerd-bridge.conflist",
    ] {
        let d = Dirs::new();
        let original = read(&data(name));
        let list = d.file(name);
        std::fs::write(&list, &original).expect("write");
        let said = d.ok("install-cni", &[]);
        assert!(said.contains("(inserted)"), "{name}: {said}");
        let checked = d.ok("install-cni", &["--check"]);
        assert!(checked.contains(name), "{name}: {checked}");
        let now = json_of(&list);
        let before: Value = serde_json::from_str(&original).expect("json");
        let plugins = now["plugins"].as_array().expect("plugins");
        assert_eq!(plugins.last(), Some(&default_entry()), "{name}: {now}");
        assert_eq!(
            plugins[..plugins.len() - 1],
            before["plugins"].as_array().expect("plugins")[..],
            "{name}: the primary's plugins changed"
        );
        let result = add_without_a_pod(&d.plugin(), &now);
        assert_eq!(result["cniVersion"], now["cniVersion"], "{name}: {result}");
        assert_eq!(
            result["ips"][0]["address"], "10.244.1.5/24",
            "{name}: {result}"
        );
        d.ok("uninstall-cni", &[]);
        assert_eq!(
            read(&list),
            original,
            "{name}: uninstall gives the bytes back"
        );
    }
}

#[test]
fn a_conflist_the_plugin_would_fail_on_is_refused_with_the_fix_and_nothing_written() {
    for (name, says) in [
        ("istio-cni-chained.conflist", "chains istio-cni already"),
        (
            "too-old.conflist",
            "cniVersion \"0.2.0\" is not one redirect-cni speaks",
        ),
    ] {
        let d = Dirs::new();
        let original = read(&data(name));
        let list = d.file(name);
        std::fs::write(&list, &original).expect("write");
        let listing = d.listing();
        let out = d.redirect("install-cni", &[]);
        let said = text(&out);
        assert!(!out.status.success(), "{name}: {said}");
        assert!(
            said.contains(&list.display().to_string()) && said.contains(says),
            "{name}: names the file and why: {said}"
        );
        assert!(
            said.contains("remove istio-cni first")
                || said.contains("set the conflist's cniVersion"),
            "{name}: gives the fix: {said}"
        );
        assert_eq!(read(&list), original, "{name}: the conflist was written");
        assert_eq!(d.listing(), listing, "{name}: a file was added");
        assert!(!d.plugin().exists(), "{name}: the plugin was copied");
        // The readiness probe keeps such a node unready, saying why (with istio-cni chained:
        // that no plugin is there; `install-cni --watch` copies it and stands by, tested in
        // redirect-install's `stand_by_tests` and on the cluster, `cluster_migration`).
        let check = d.redirect("install-cni", &["--check"]);
        assert!(!check.status.success(), "{name}: {}", text(&check));
        let why = if name.starts_with("istio") {
            "does not exist"
        } else {
            says
        };
        assert!(text(&check).contains(why), "{name}: {}", text(&check));
    }
}

#[test]
fn a_list_newer_than_the_plugin_says_upgrade() {
    let d = Dirs::new();
    let list = d.file("10-future.conflist");
    std::fs::write(
        &list,
        r#"{"cniVersion": "1.1.0", "cniVersions": ["1.1.0", "2.0.0"], "name": "future", "plugins": [{"type": "bridge"}]}"#,
    )
    .expect("write");
    let out = d.redirect("install-cni", &[]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("\"2.0.0\"") && text(&out).contains("older than the conflist"),
        "{}",
        text(&out)
    );
}
