//! The port rules of a layout v4 datapath (hashes keyed by netns cookie and port) carried into
//! layout v5's port tries by an upgrade: every rule found again at the full key length, with
//! its value, in maps the kernel made (bpftool creates them as the old and new objects did).
use std::{os::fd::AsFd as _, path::Path, process::Command};

use redirect_datapath::test_support as bpf;
use redirect_testkit::privileged;
use redirect_tests::node::Pins;

fn bpftool(args: &[&str], path: &Path, rest: &[String]) {
    let out = Command::new("bpftool")
        .args(args)
        .arg(path)
        .args(rest)
        .output()
        .expect("run bpftool");
    assert!(
        out.status.success(),
        "bpftool {args:?} {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn hex(bytes: &[u8]) -> Vec<String> {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A `PortKey` as the maps store it: netns cookie, port (host order), six zero bytes.
fn port_key(netns: u64, port: u16) -> Vec<u8> {
    let mut k = netns.to_ne_bytes().to_vec();
    k.extend_from_slice(&port.to_ne_bytes());
    k.extend_from_slice(&[0; 6]);
    k
}

#[test]
fn an_upgrade_carries_the_port_hashes_into_the_port_tries() {
    privileged!();
    let pins = Pins::new();
    std::fs::create_dir_all(&pins.0).expect("pin dir");
    let old = pins.0.join("OUT_PORTS");
    let new = pins.0.join("OUT_PORTS_next");
    let create = |path: &Path, kind: &str, key: &str| {
        let rest: Vec<String> = [
            "type",
            kind,
            "key",
            key,
            "value",
            "1",
            "entries",
            "64",
            "name",
            "rib_ports",
            "flags",
            "1",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        bpftool(&["map", "create"], path, &rest);
    };
    create(&old, "hash", "16");
    create(&new, "lpm_trie", "20");
    let rules = [(11u64, 8080u16, 1u8), (11, 9090, 2), (12, 8080, 1)];
    for (ns, port, rule) in rules {
        let mut rest = vec!["key".to_owned(), "hex".to_owned()];
        rest.extend(hex(&port_key(ns, port)));
        rest.extend(["value".to_owned(), "hex".to_owned(), format!("{rule:02x}")]);
        bpftool(&["map", "update", "pinned"], &old, &rest);
    }

    let from = bpf::obj_get(&old).expect("open the hash");
    let to = bpf::obj_get(&new).expect("open the trie");
    let old_def = bpf::map_def(from.as_fd()).expect("hash definition");
    let new_def = bpf::map_def(to.as_fd()).expect("trie definition");
    assert!(
        bpf::hash_becomes_trie(&old_def, &new_def),
        "{old_def} -> {new_def}"
    );
    let copied = bpf::copy_hash_into_trie(from.as_fd(), to.as_fd(), old_def).expect("copy");
    assert_eq!(copied, rules.len());

    for (ns, port, rule) in rules {
        let mut key = 128u32.to_ne_bytes().to_vec();
        key.extend(port_key(ns, port));
        let out = Command::new("bpftool")
            .args(["-j", "map", "lookup", "pinned"])
            .arg(&new)
            .args(["key", "hex"])
            .args(hex(&key))
            .output()
            .expect("bpftool lookup");
        let json: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("bpftool lookup json");
        assert_eq!(
            json["value"][0].as_str(),
            Some(format!("0x{rule:02x}").as_str()),
            "netns {ns} port {port}: {json}"
        );
    }
    // A port of no rule, and a shorter prefix, find nothing: the trie matches whole keys only.
    let mut missing = 128u32.to_ne_bytes().to_vec();
    missing.extend(port_key(11, 8081));
    let out = Command::new("bpftool")
        .args(["map", "lookup", "pinned"])
        .arg(&new)
        .args(["key", "hex"])
        .args(hex(&missing))
        .output()
        .expect("bpftool lookup");
    assert!(!out.status.success(), "no rule for port 8081");
    // A hash of another key size is not one.
    let other = bpf::MapDef {
        key_size: 8,
        ..old_def
    };
    assert!(!bpf::hash_becomes_trie(&other, &new_def));
}
