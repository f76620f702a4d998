//! The watcher's hand-over with istio-cni, both ways, one pass at a time: istio-cni chained,
//! our entry stays out (the binary copied, the check ready); istio-cni's entry gone, ours goes
//! in; istio-cni back, ours leaves, the rest of the file as istio-cni left it.
use std::path::PathBuf;

use serde_json::{json, Value};

use crate::{
    check::check,
    conflist,
    install::{install, install_gated, Change, IstioCni, Options},
};

struct Node {
    dir: PathBuf,
    opts: Options,
}

impl Node {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(redirect_testkit::unique_name("standby"));
        for sub in ["net.d", "bin"] {
            std::fs::create_dir_all(dir.join(sub)).expect("mkdir");
        }
        let plugin = dir.join("redirect-cni.build");
        std::fs::write(&plugin, b"#!/bin/true\n").expect("plugin");
        let opts = Options {
            bin_dir: dir.join("bin"),
            conf_dir: dir.join("net.d"),
            plugin,
            entry: conflist::entry("/run/redirect/daemon.sock", &[], "info"),
            state_file: dir.join("state.json"),
            plugin_versions: vec!["0.4.0".into(), "1.0.0".into()],
        };
        Self { dir, opts }
    }

    fn list(&self) -> PathBuf {
        self.opts.conf_dir.join("10-bridge.conflist")
    }

    fn write(&self, plugins: &[&str]) {
        let plugins: Vec<Value> = plugins.iter().map(|t| json!({"type": t})).collect();
        let list = json!({"cniVersion": "1.0.0", "name": "k8s", "plugins": plugins});
        std::fs::write(self.list(), conflist::render(&list)).expect("write");
    }

    fn types(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.list()).expect("read");
        let list: Value = serde_json::from_str(&text).expect("json");
        list["plugins"]
            .as_array()
            .expect("plugins")
            .iter()
            .map(|p| p["type"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    fn pass(&self) -> Change {
        install_gated(&self.opts, &mut || true, IstioCni::StandBy)
            .expect("a pass")
            .change
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn the_watcher_stands_by_while_istio_cni_is_chained_and_takes_over_when_it_leaves() {
    let n = Node::new();
    n.write(&["bridge", "istio-cni"]);
    // A one-shot install refuses, writing nothing.
    let refused = install(&n.opts).expect_err("refused").to_string();
    assert!(refused.contains("chains istio-cni already"), "{refused}");
    assert!(
        refused.contains("--watch"),
        "names the way that waits: {refused}"
    );
    assert!(!n.opts.bin_dir.join("redirect-cni").exists());
    // The watcher stands by: binary in, entry out, ready (istio-cni captures).
    assert_eq!(n.pass(), Change::StandingBy);
    assert_eq!(n.types(), ["bridge", "istio-cni"]);
    assert!(n.opts.bin_dir.join("redirect-cni").exists());
    let ready = check(&n.opts).expect("ready while standing by");
    assert!(ready.contains("stands by"), "{ready}");
    assert_eq!(n.pass(), Change::StandingBy, "a second pass writes nothing");
    // istio-cni's uninstall takes its entry out: ours goes in at the next pass.
    n.write(&["bridge"]);
    assert_eq!(n.pass(), Change::Inserted);
    assert_eq!(n.types(), ["bridge", "redirect-cni"]);
    check(&n.opts).expect("ready with our entry");
}

#[test]
fn istio_cni_coming_back_takes_our_entry_out_and_uninstall_leaves_its_file_alone() {
    let n = Node::new();
    n.write(&["bridge"]);
    assert_eq!(n.pass(), Change::Inserted);
    // istio-cni's installer appends its entry to the file as it finds it (ours in it).
    let text = std::fs::read_to_string(n.list()).expect("read");
    let mut list: Value = serde_json::from_str(&text).expect("json");
    list["plugins"]
        .as_array_mut()
        .expect("plugins")
        .push(json!({"type": "istio-cni"}));
    std::fs::write(n.list(), conflist::render(&list)).expect("write");
    assert_eq!(n.types(), ["bridge", "redirect-cni", "istio-cni"]);
    let both = check(&n.opts)
        .expect_err("both chained is not ready")
        .to_string();
    assert!(both.contains("takes ours out"), "{both}");
    assert_eq!(n.pass(), Change::StandingBy);
    assert_eq!(n.types(), ["bridge", "istio-cni"]);
    check(&n.opts).expect("ready: istio-cni captures");
    // Uninstalling now removes the binary and leaves istio-cni's file as it is.
    crate::install::uninstall(&n.opts.state_file, &n.opts.conf_dir).expect("uninstall");
    assert_eq!(n.types(), ["bridge", "istio-cni"]);
    assert!(!n.opts.bin_dir.join("redirect-cni").exists());
}
