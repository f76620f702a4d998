//! `cargo xtask setup`: installs the BPF toolchain and test tools when missing; fast when not.
use std::{path::PathBuf, process::Command};

use anyhow::{bail, Context as _};

use crate::util::{self, output, run};

/// bpf-linker version the project is pinned to (works with nightly's LLVM 22 here).
const BPF_LINKER_VERSION: &str = "0.13.0";
/// cargo-deny version the lint step runs (`deny.toml`'s syntax is this version's).
const CARGO_DENY_VERSION: &str = "0.20.2";
/// Tools the tests and `cargo xtask run` use, besides LLVM.
/// `containernetworking-plugins`: the real CNI chain of tests/tests/cni.rs (bridge, host-local,
/// loopback in /usr/lib/cni); `strace`: a debugger attaching to the daemon (tests/tests/daemon.rs);
/// `buildah`: `cargo xtask image`; `musl-tools`: C parts of dependencies (ring) for the image's
/// static binaries; `podman`, `runc` (crun refuses a hybrid cgroup host with a controller left on
/// cgroup v2) and `busybox-static` (a container's rootfs): tests/tests/image.rs;
/// `ca-certificates`: the CA bundle the image carries for the daemon's Kubernetes client;
/// `containerd` (1.6, its CRI built in; `ctr` imports the images): the node the kubelet-lite
/// drives (tests/kubelet, tests/tests/it/cri.rs); `protobuf-compiler`: `protoc`, which the
/// `k8s-cri` crate's build runs over the CRI's protos (xtask itself never needs it, so a fresh
/// machine's `cargo xtask setup` builds before it is installed); `prometheus`: `promtool`, which
/// checks deploy/monitoring's alert rules and the metrics (tests/tests/it/monitoring.rs);
/// `gcc-aarch64-linux-gnu`: the arm64 image's linker and ring's C compiler (.cargo/config.toml),
/// with `libc6-dev-arm64-cross`, the C headers it compiles ring against (only a Recommends of
/// the compiler: without it ring's build stops at `bits/libc-header-start.h`);
/// `qemu-user-static`: `qemu-aarch64-static`, the runner of the arm64 unit tests.
const TOOL_PACKAGES: [&str; 19] = [
    "iproute2",
    "bpftool",
    "curl",
    "util-linux",
    "iptables",
    "strace",
    "containernetworking-plugins",
    "buildah",
    "podman",
    "runc",
    "musl-tools",
    "busybox-static",
    "ca-certificates",
    "containerd",
    "protobuf-compiler",
    "prometheus",
    "gcc-aarch64-linux-gnu",
    "libc6-dev-arm64-cross",
    "qemu-user-static",
];

/// LLVM major version of the nightly toolchain (`rustc +nightly -vV`).
pub(crate) fn nightly_llvm_major() -> anyhow::Result<u32> {
    let text = output("rustc", &["+nightly", "-vV"]).context(
        "the nightly toolchain is missing: install it with `rustup toolchain install nightly` \
         (the BPF crate is built with -Z build-std)",
    )?;
    parse_llvm_major(&text).context("`rustc +nightly -vV` printed no `LLVM version:` line")
}

fn parse_llvm_major(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.strip_prefix("LLVM version:"))
        .and_then(|v| v.trim().split('.').next())
        .and_then(|m| m.parse().ok())
}

fn package_installed(pkg: &str) -> bool {
    output("dpkg-query", &["-W", "-f=${Status}", pkg])
        .is_some_and(|s| s.contains("install ok installed"))
}

fn rust_src_installed() -> bool {
    output("rustc", &["+nightly", "--print", "sysroot"]).is_some_and(|sysroot| {
        PathBuf::from(sysroot.trim())
            .join("lib/rustlib/src/rust/library/core")
            .is_dir()
    })
}

/// Whether the default toolchain has the standard library of `target`.
fn rust_target_installed(target: &str) -> bool {
    output("rustc", &["--print", "sysroot"]).is_some_and(|sysroot| {
        PathBuf::from(sysroot.trim())
            .join("lib/rustlib")
            .join(target)
            .join("lib")
            .is_dir()
    })
}

fn bpf_linker_ok() -> bool {
    output("bpf-linker", &["--version"]).is_some_and(|v| v.contains(BPF_LINKER_VERSION))
}

fn cargo_deny_ok() -> bool {
    output("cargo", &["deny", "--version"]).is_some_and(|v| is_pinned_cargo_deny(&v))
}

/// Whether `cargo deny --version` printed the pinned version (`cargo-deny 0.20.2`).
fn is_pinned_cargo_deny(version: &str) -> bool {
    version.split_whitespace().nth(1) == Some(CARGO_DENY_VERSION)
}

/// Installs the pinned cargo-deny into cargo's bin directory when `cargo deny --version` is not
/// it. Built without its release profile's fat LTO and single codegen unit (whose last step runs
/// on one core): 4.4 to 4.6 minutes on 2 cores here against 10.3 with them (both beside other
/// builds), for a check that takes 2 s either way. cargo-deny 0.20 has no optional features.
fn install_cargo_deny() -> anyhow::Result<()> {
    if cargo_deny_ok() {
        return Ok(());
    }
    eprintln!(
        "xtask setup: installing cargo-deny {CARGO_DENY_VERSION} (about 4.5 minutes on 2 cores)"
    );
    run(util::cargo(None)
        .args(["install", "cargo-deny", "--locked", "--force"])
        .args(["--version", CARGO_DENY_VERSION])
        .env("CARGO_PROFILE_RELEASE_LTO", "false")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16"))
    .with_context(|| {
        format!("run by hand: cargo install cargo-deny --version {CARGO_DENY_VERSION} --locked")
    })
}

/// Installs with apt the Debian packages of `packages` that are not installed yet (nothing to do
/// and no apt call when all are present).
/// With `no_remove`, apt fails rather than remove an installed package to satisfy a conflict.
pub(crate) fn install_missing(packages: &[String], no_remove: bool) -> anyhow::Result<()> {
    let missing: Vec<&String> = packages.iter().filter(|p| !package_installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = missing.iter().map(|p| p.as_str()).collect();
    let line = format!("apt-get update && apt-get install -y {}", names.join(" "));
    if !util::is_root() {
        bail!(
            "missing Debian packages {}: run as root: {line}",
            names.join(", ")
        );
    }
    if output("apt-get", &["--version"]).is_none() {
        bail!(
            "missing packages {} and apt-get is not available: install them with your package \
            manager",
            names.join(", ")
        );
    }
    eprintln!("xtask setup: installing {}", names.join(" "));
    run(Command::new("apt-get").arg("update").arg("-q"))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(no_remove.then_some("--no-remove"))
        .args(&names)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

/// Whether `/proc/mounts` text has a bpf filesystem mounted at `at`.
fn bpffs_mounted_in(mounts: &str, at: &str) -> bool {
    mounts.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.get(1) == Some(&at) && f.get(2) == Some(&"bpf")
    })
}

/// Mounts the host's bpffs at `/sys/fs/bpf` where the boot did not (systemd does; a bare
/// machine or container may not): the node datapath and the tests pin there. `redirect`
/// itself never mounts one (it would be private to its mount namespace), it says so instead.
fn mount_bpffs() -> anyhow::Result<()> {
    const AT: &str = "/sys/fs/bpf";
    let mounts = std::fs::read_to_string("/proc/mounts").context("reading /proc/mounts")?;
    if bpffs_mounted_in(&mounts, AT) || !util::is_root() || !std::path::Path::new(AT).is_dir() {
        return Ok(());
    }
    eprintln!("xtask setup: mounting the bpf filesystem at {AT} (not mounted at boot here)");
    run(Command::new("mount").args(["-t", "bpf", "bpf", AT]))
        .with_context(|| format!("run by hand: mount -t bpf bpf {AT}"))
}

/// Installs whatever is missing. With everything present it only runs a few queries.
pub(crate) fn setup() -> anyhow::Result<()> {
    mount_bpffs()?;
    let llvm = nightly_llvm_major()?;
    let mut packages: Vec<String> =
        vec![format!("llvm-{llvm}-dev"), format!("libpolly-{llvm}-dev")];
    packages.extend(TOOL_PACKAGES.iter().map(|p| (*p).to_owned()));
    install_missing(&packages, false)?;
    if !rust_src_installed() {
        eprintln!("xtask setup: adding rust-src to the nightly toolchain");
        run(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))
        .context("run by hand: rustup component add rust-src --toolchain nightly")?;
    }
    for arch in crate::image::arch::Arch::ALL {
        let musl = arch.target();
        if !rust_target_installed(musl) {
            eprintln!("xtask setup: adding the {musl} target (the image's static binaries)");
            run(Command::new("rustup").args(["target", "add", musl]))
                .with_context(|| format!("run by hand: rustup target add {musl}"))?;
        }
    }
    if !bpf_linker_ok() {
        eprintln!("xtask setup: installing bpf-linker {BPF_LINKER_VERSION} for LLVM {llvm} (about a minute)");
        let prefix = format!("/usr/lib/llvm-{llvm}");
        run(util::cargo(None)
            .args(["install", &format!("bpf-linker@{BPF_LINKER_VERSION}"), "--locked", "--force"])
            .args(["--no-default-features", "--features", &format!("llvm-{llvm}")])
            .env("LLVM_PREFIX", &prefix))
        .with_context(|| {
            format!(
                "run by hand: LLVM_PREFIX={prefix} cargo install bpf-linker@{BPF_LINKER_VERSION} --locked \
                 --no-default-features --features llvm-{llvm}"
            )
        })?;
    }
    install_cargo_deny()?;
    crate::kube::ensure()
}

#[cfg(test)]
mod tests {
    use super::parse_llvm_major;

    #[test]
    fn finds_a_bpffs_mount() {
        let mounts = "sysfs /sys sysfs rw 0 0\nbpf /sys/fs/bpf bpf rw,relatime 0 0\n";
        assert!(super::bpffs_mounted_in(mounts, "/sys/fs/bpf"));
        assert!(!super::bpffs_mounted_in(
            "tmpfs /sys/fs/bpf tmpfs rw 0 0\n",
            "/sys/fs/bpf"
        ));
        assert!(!super::bpffs_mounted_in("", "/sys/fs/bpf"));
    }

    #[test]
    fn knows_the_pinned_cargo_deny() {
        let pinned = format!("cargo-deny {}\n", super::CARGO_DENY_VERSION);
        assert!(super::is_pinned_cargo_deny(&pinned));
        assert!(!super::is_pinned_cargo_deny("cargo-deny 0.19.0\n"));
        assert!(!super::is_pinned_cargo_deny(""));
    }

    #[test]
    fn reads_llvm_major() {
        let text =
            "rustc 1.97.0-nightly (e50aa6fba 2026-05-19)\nbinary: rustc\nLLVM version: 22.1.4\n";
        assert_eq!(parse_llvm_major(text), Some(22));
        assert_eq!(parse_llvm_major("rustc 1.0\n"), None);
    }
}
