//! The arm64 guest (`--kernel arm64-6.1|arm64-6.12|arm64`): Debian's arm64 cloud kernels under
//! qemu-system-aarch64, a userland of Debian's arm64 packages (busybox-static, iproute2,
//! bpftool, util-linux, iptables, the CNI plugins: downloaded with their dependencies through a
//! private apt configuration and unpacked, never installed), and the workspace's binaries and
//! the integration test binary built for `aarch64-unknown-linux-musl` (static).
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context as _;

use super::fetch::Archive;
use crate::{
    image::arch::Arch,
    util::{self, run},
};

/// The smoke set each arm64 kernel runs: the feature probe, the programs loaded, attached and
/// gone again, an app's connect landing at the proxy with its original destination, and the CNI
/// plugin's ADD enrolling a pod through the daemon (Debian's bridge and host-local first).
pub(crate) const DEFAULT_TESTS: &str = "cli_errors=probe_lists_every_feature,\
    lifecycle=after_attach_stops_nothing_is_redirected,\
    outbound=captured_client_reaches_server_through_proxy_with_original_destination,\
    cni=cni_chain_enrolls_meshed_pods_and_fails_closed";

/// The guest's userland (with their dependencies).
const GUEST_PACKAGES: [&str; 6] = [
    "busybox-static",
    "iproute2",
    "bpftool",
    "util-linux",
    "iptables",
    "containernetworking-plugins",
];

/// Downloads [`GUEST_PACKAGES`] and their dependencies for arm64 and unpacks them into one tree
/// (once per package set); returns its root.
pub(super) fn sysroot(archive: &Archive, kernels_dir: &Path) -> anyhow::Result<PathBuf> {
    let debs = kernels_dir.join("arm64-debs");
    let root = kernels_dir.join("arm64-root");
    let done = root.join(".unpacked");
    let marker = GUEST_PACKAGES.join(" ");
    if std::fs::read_to_string(&done).ok().as_deref() == Some(marker.as_str()) {
        return Ok(root);
    }
    std::fs::create_dir_all(debs.join("partial"))?;
    let into = format!("-o=Dir::Cache::archives={}", debs.display());
    let mut args = vec![
        "install",
        "-y",
        "--download-only",
        "--no-install-recommends",
        &into,
    ];
    args.extend(GUEST_PACKAGES);
    run(&mut archive.get(kernels_dir, &args)).context("downloading the arm64 guest's packages")?;
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root)?;
    for entry in std::fs::read_dir(&debs)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "deb") {
            run(Command::new("dpkg-deb").arg("-x").arg(&path).arg(&root))?;
        }
    }
    std::fs::write(&done, &marker)?;
    Ok(root)
}

/// The applets of the guest's busybox (`--list-full`, run under qemu-aarch64-static).
pub(super) fn busybox_applets(root: &Path) -> anyhow::Result<Vec<String>> {
    let busybox = root.join("bin/busybox");
    let out = Command::new("qemu-aarch64-static")
        .arg(&busybox)
        .arg("--list-full")
        .output()
        .context("running the arm64 busybox under qemu-aarch64-static (qemu-user-static)")?;
    anyhow::ensure!(
        out.status.success(),
        "{} --list-full failed",
        busybox.display()
    );
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

/// The workspace's binaries for arm64 (debug, static, the BPF object embedded), under
/// target/aarch64-unknown-linux-musl/debug where the test binary's `bin_path` looks.
pub(super) fn build_bins() -> anyhow::Result<PathBuf> {
    let target = Arch::Arm64.target();
    run(util::cargo(None)
        .args(["build", "--workspace", "--exclude", "redirect-ebpf"])
        .args(["--exclude", "xtask", "--bins", "--target", target])
        .env("REDIRECT_EBPF_OBJECT", util::ebpf_object()))
    .context("building the workspace's binaries for arm64")?;
    Ok(util::target_dir().join(target).join("debug"))
}

/// A command running the arm64 `exe` on this host (listing its tests).
pub(super) fn on_host(exe: &Path) -> Command {
    let mut cmd = Command::new("qemu-aarch64-static");
    cmd.arg(exe);
    cmd
}

/// Adds the unpacked packages under `root` to the guest at the same paths.
pub(super) fn add_sysroot(tree: &mut super::initramfs::Tree, root: &Path) -> anyhow::Result<()> {
    tree.foreign_dir(root, root)
}
