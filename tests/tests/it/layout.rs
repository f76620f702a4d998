//! The design card's layout holds: nothing at the root but the card's folders and documents,
//! and the exec'd CNI plugin links its protocol only (no datapath, cluster client, async
//! runtime, HTTP, TLS or netlink crate).
use std::{collections::BTreeSet, path::Path, process::Command};

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

#[test]
fn the_root_holds_only_the_cards_folders() {
    let allowed = [
        "redirect-ebpf",
        "redirect-user",
        "tests",
        "xtask",
        "deploy",
        "docs",
        "target",
    ];
    let dirs: BTreeSet<String> = std::fs::read_dir(root())
        .expect("list the root")
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    let extra: Vec<&String> = dirs
        .iter()
        .filter(|d| !allowed.contains(&d.as_str()))
        .collect();
    assert!(
        extra.is_empty(),
        "folders outside the card's layout at the root: {extra:?}"
    );
    for (folder, crates) in [
        ("redirect-ebpf", &["common", "programs"][..]),
        (
            "redirect-user",
            &[
                "cli",
                "cni",
                "daemon",
                "daemon-api",
                "datapath",
                "http",
                "install",
                "k8s",
                "policy",
                "proxy",
                "sys",
            ][..],
        ),
        ("tests", &["testkit"][..]),
    ] {
        for c in crates {
            let manifest = root().join(folder).join(c).join("Cargo.toml");
            assert!(manifest.is_file(), "{} is missing", manifest.display());
        }
    }
}

#[test]
fn the_cni_plugin_links_its_protocol_only() {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "-p",
            "redirect-cni",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .current_dir(root())
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    let crates: BTreeSet<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let forbidden: Vec<&&str> = crates
        .iter()
        .filter(|c| {
            [
                "aya",
                "kube",
                "tokio",
                "hyper",
                "rustls",
                "netlink",
                "redirect-datapath",
                "redirect-daemon",
            ]
            .iter()
            .any(|f| c.starts_with(f) && **c != "redirect-daemon-api")
        })
        .collect();
    assert!(
        forbidden.is_empty(),
        "redirect-cni links {forbidden:?}:\n{tree}"
    );
    assert!(crates.contains("redirect-daemon-api"), "{tree}");
}
