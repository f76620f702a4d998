//! `redirect install-cni` / `uninstall-cni` on real-looking CNI directories of the test's
//! own (a bridge + portmap conflist as a kubeadm node has, a flannel-style `.conf`): our
//! entry after the primary plugin, nothing else touched, a second run writing nothing,
//! uninstall giving back the original bytes; and the conflist it wrote run by the real Debian
//! plugins, libcni's way (the watcher: `install_cni_watch.rs`).
use std::{os::unix::fs::PermissionsExt as _, path::Path, process::Command};

use redirect_testkit::{privileged, unique_name};
use redirect_tests::{
    bin_path,
    install_dirs::{default_entry, json_of, read, stamp, text, Dirs, BRIDGE, FLANNEL},
};
use serde_json::{json, Value};

#[test]
fn install_appends_after_the_primary_twice_is_a_no_op_uninstall_restores_the_bytes() {
    let d = Dirs::new();
    let list = d.file("10-bridge.conflist");
    std::fs::write(&list, BRIDGE).expect("write");
    // A lower-priority file and an invalid higher-priority one: neither touched.
    std::fs::write(
        d.file("99-loopback.conf"),
        r#"{"cniVersion":"1.0.0","name":"lo","type":"loopback"}"#,
    )
    .expect("write");
    std::fs::write(d.file("05-broken.conflist"), "{\"name\": ").expect("write");
    let before = d.listing();
    let said = d.ok("install-cni", &[]);
    assert!(said.contains("10-bridge.conflist (inserted)"), "{said}");

    let original: Value = serde_json::from_str(BRIDGE).expect("json");
    let now = json_of(&list);
    let plugins = now["plugins"].as_array().expect("plugins");
    assert_eq!(plugins.len(), 3, "{now}");
    assert_eq!(
        plugins[..2],
        original["plugins"].as_array().expect("plugins")[..],
        "the primary's plugins changed"
    );
    assert_eq!(plugins[2], default_entry(), "our entry, last");
    let mut rest = now.clone();
    rest["plugins"] = original["plugins"].clone();
    assert_eq!(rest, original, "another field changed");
    // Field order kept, the primary's and the vendor's too.
    let written = read(&list);
    let at = |s: &str| {
        written
            .find(s)
            .unwrap_or_else(|| panic!("{s} missing: {written}"))
    };
    assert!(
        at("cniVersion") < at("\"name\"")
            && at("\"name\"") < at("disableCheck")
            && at("disableCheck") < at("plugins")
            && at("plugins") < at("x-vendor"),
        "{written}"
    );
    assert!(
        at("\"zeta\"") < at("\"alpha\"") && at("\"bridge\": \"cni0\"") < at("\"ipam\""),
        "{written}"
    );
    assert_eq!(
        read(&d.file("99-loopback.conf")),
        r#"{"cniVersion":"1.0.0","name":"lo","type":"loopback"}"#
    );
    assert_eq!(read(&d.file("05-broken.conflist")), "{\"name\": ");

    // The plugin: executable, the build's binary, and it answers VERSION.
    let plugin = d.plugin();
    assert_eq!(
        std::fs::metadata(&plugin)
            .expect("plugin")
            .permissions()
            .mode()
            & 0o777,
        0o755
    );
    assert_eq!(
        std::fs::read(&plugin).expect("plugin"),
        std::fs::read(bin_path("redirect-cni")).expect("built plugin")
    );
    let version = Command::new(&plugin)
        .env("CNI_COMMAND", "VERSION")
        .stdin(std::fs::File::open(d.file("99-loopback.conf")).expect("stdin"))
        .output()
        .expect("run the installed plugin");
    assert!(version.status.success(), "{}", text(&version));
    let answer: Value = serde_json::from_slice(&version.stdout).expect("VERSION json");
    assert_eq!(
        answer["supportedVersions"],
        json!(["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
    );

    // Twice: the same bytes, neither file rewritten.
    let (file_stamp, plugin_stamp, bytes) = (stamp(&list), stamp(&plugin), read(&list));
    let said = d.ok("install-cni", &[]);
    assert!(
        said.contains("(unchanged); entry in") && said.ends_with("(unchanged)\n"),
        "{said}"
    );
    assert_eq!(read(&list), bytes);
    assert_eq!(stamp(&list), file_stamp, "the conflist was rewritten");
    assert_eq!(stamp(&plugin), plugin_stamp, "the plugin was rewritten");
    assert!(d.ok("install-cni", &["--check"]).starts_with("in place: "));

    // Other options: our entry replaced in place.
    d.ok(
        "install-cni",
        &[
            "--exclude-namespaces",
            "kube-system,istio-system",
            "--plugin-log-level",
            "debug",
        ],
    );
    let now = json_of(&list);
    assert_eq!(
        now["plugins"][2]["exclude_namespaces"],
        json!(["kube-system", "istio-system"])
    );
    assert_eq!(now["plugins"].as_array().map(Vec::len), Some(3));
    // --check holds the running options to the file.
    let out = d.redirect("install-cni", &["--check"]);
    assert!(
        !out.status.success()
            && text(&out).contains("10-bridge.conflist holds another redirect-cni entry"),
        "{}",
        text(&out)
    );

    // Uninstall: the original bytes, the binary and the state gone; twice is fine.
    d.ok("uninstall-cni", &[]);
    assert_eq!(read(&list), BRIDGE, "not restored byte for byte");
    assert!(!plugin.exists(), "the plugin binary is left");
    assert_eq!(d.listing(), before);
    let said = d.ok("uninstall-cni", &[]);
    assert!(said.contains("nothing to undo"), "{said}");
    let out = d.redirect("install-cni", &["--check"]);
    assert!(
        !out.status.success() && text(&out).contains("redirect-cni does not exist"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_conf_becomes_a_conflist_and_uninstall_brings_it_back() {
    let d = Dirs::new();
    let conf = d.file("10-flannel.conf");
    std::fs::write(&conf, FLANNEL).expect("write");
    let said = d.ok("install-cni", &[]);
    assert!(said.contains("converted from"), "{said}");
    let list = d.file("10-flannel.conflist");
    assert!(
        !conf.exists(),
        "the .conf is left beside the conflist (it would win)"
    );
    let original: Value = serde_json::from_str(FLANNEL).expect("json");
    assert_eq!(
        json_of(&list),
        json!({"cniVersion": "0.4.0", "name": "cbr0", "plugins": [original, default_entry()]})
    );
    let stamped = stamp(&list);
    d.ok("install-cni", &[]);
    assert_eq!(stamp(&list), stamped, "rewritten on the second run");
    d.ok("uninstall-cni", &[]);
    assert_eq!(read(&conf), FLANNEL, "the .conf not restored byte for byte");
    assert!(!list.exists());
    assert_eq!(d.listing(), vec!["10-flannel.conf".to_owned()]);
}

#[test]
fn others_changes_survive_uninstall_and_no_config_is_named() {
    let d = Dirs::new();
    // No configuration: refused naming the directory, nothing copied.
    let out = d.redirect("install-cni", &[]);
    assert!(!out.status.success());
    let said = text(&out);
    assert!(
        said.contains(&format!(
            "no CNI network configuration in {}",
            d.conf.display()
        )),
        "{said}"
    );
    assert!(!d.plugin().exists(), "copied without a configuration");
    // A plugin appended by someone else after ours stays; only our entry goes.
    let list = d.file("10-bridge.conflist");
    std::fs::write(&list, BRIDGE).expect("write");
    d.ok("install-cni", &[]);
    let mut theirs = json_of(&list);
    theirs["plugins"]
        .as_array_mut()
        .expect("plugins")
        .push(json!({"type": "bandwidth"}));
    std::fs::write(&list, theirs.to_string()).expect("write");
    d.ok("uninstall-cni", &[]);
    let left = json_of(&list);
    let types: Vec<_> = left["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .map(|p| p["type"].clone())
        .collect();
    assert_eq!(
        types,
        vec![json!("bridge"), json!("portmap"), json!("bandwidth")]
    );
}

#[test]
fn the_installed_conflist_runs_with_the_real_plugins() {
    use redirect_tests::{
        apiserver::{recorded_pod, PodServer},
        cni::{CniHost, PodCall, PLUGIN_DIR},
        node::Node,
    };
    privileged!(redirect_tests::cni::plugins_missing());
    let node = Node::new();
    let api = PodServer::start(&node.dir.join("api"));
    let kubeconfig = api.kubeconfig().display().to_string();
    let (_daemon, _) = node.daemon_with(&[
        "--kubeconfig",
        &kubeconfig,
        "--node-name",
        "node-inst",
        "--pod-get-attempts",
        "3",
        "--pod-get-interval-ms",
        "100",
    ]);
    let host = CniHost::new();
    let socket = node.dir.join("daemon.sock").display().to_string();
    // Debian's bridge and host-local speak 0.3.0 to 1.0.0; flannel and Calico ship 0.3.1.
    for (i, version) in ["0.3.1", "0.4.0", "1.0.0"].into_iter().enumerate() {
        let d = Dirs::new();
        let mut primary = json!({"cniVersion": version, "name": "redirect-test", "plugins": [host.bridge_conf()]});
        for key in ["cniVersion", "name"] {
            primary["plugins"][0]
                .as_object_mut()
                .expect("bridge")
                .remove(key);
        }
        let list = d.file("10-bridge.conflist");
        std::fs::write(&list, serde_json::to_string_pretty(&primary).expect("json"))
            .expect("write");
        d.ok("install-cni", &["--daemon-socket", &socket]);
        d.ok("install-cni", &["--daemon-socket", &socket, "--check"]);
        let installed = json_of(&list);

        let uid = unique_name("uid");
        let name = format!("inst-{i}");
        api.put(&recorded_pod(
            "hello.yaml",
            "shop",
            &name,
            &uid,
            "node-inst",
        ));
        let netns = redirect_testkit::Netns::new("rcp").expect("pod netns");
        let call = PodCall {
            container_id: unique_name("sandbox"),
            netns: netns.path(),
            pod: ("shop".into(), name.clone(), uid),
        };
        let cni_path = [Path::new(PLUGIN_DIR), d.bin.as_path()];
        let added = host.run_conflist("ADD", &call, &installed, &cni_path, None);
        assert!(
            added.ok(),
            "{version}: the installed chain's ADD: {}",
            added.text()
        );
        assert_eq!(
            added.json["cniVersion"],
            version,
            "{version}: {}",
            added.text()
        );
        assert!(
            added.json["ips"][0]["address"].is_string(),
            "{version}: {}",
            added.text()
        );
        let listed: Vec<Value> = serde_json::from_str(&node.ok(&["list", "--json"])).expect("list");
        assert_eq!(listed.len(), 1, "{version}: {listed:?}");
        assert_eq!(
            listed[0]["pod"]["name"],
            name.as_str(),
            "{version}: {listed:?}"
        );
        let del = host.run_conflist("DEL", &call, &installed, &cni_path, Some(&added.json));
        assert!(
            del.ok(),
            "{version}: the installed chain's DEL: {}",
            del.text()
        );
        let listed: Vec<Value> = serde_json::from_str(&node.ok(&["list", "--json"])).expect("list");
        assert!(listed.is_empty(), "{version}: {listed:?}");
    }
}
