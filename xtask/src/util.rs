//! Small helpers for running commands and locating the workspace.
use std::{
    path::PathBuf,
    process::{Command, Stdio},
};

use anyhow::{bail, Context as _};

/// The workspace root (parent of xtask/).
pub(crate) fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map_or(manifest.clone(), PathBuf::from)
}

/// Every crate directory of the workspace (the root's children and grandchildren that hold a
/// Cargo.toml: the card's layout nests crates one level under redirect-ebpf/, redirect-user/
/// and tests/).
pub(crate) fn crate_dirs() -> anyhow::Result<Vec<PathBuf>> {
    let root = workspace_root();
    let mut out = Vec::new();
    for top in std::fs::read_dir(&root).with_context(|| format!("listing {}", root.display()))? {
        let top = top?.path();
        if !top.is_dir() || top.ends_with("target") || top.ends_with(".git") {
            continue;
        }
        if top.join("Cargo.toml").is_file() {
            out.push(top.clone());
        }
        for sub in std::fs::read_dir(&top).with_context(|| format!("listing {}", top.display()))? {
            let sub = sub?.path();
            if sub.join("Cargo.toml").is_file() {
                out.push(sub);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Where cargo puts the host binaries: `$CARGO_TARGET_DIR`, else `<workspace>/target`.
pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map_or_else(
            || workspace_root().join("target"),
            |d| {
                if d.is_absolute() {
                    d
                } else {
                    workspace_root().join(d)
                }
            },
        )
}

/// Where the BPF object lands.
pub(crate) fn ebpf_object() -> PathBuf {
    workspace_root().join("target/ebpf/bpfel-unknown-none/release/redirect-ebpf")
}

/// A cargo command with the environment that `cargo run` leaks into us removed, so the
/// toolchain chosen with `+nightly` or by rustup is the one that runs.
pub(crate) fn cargo(toolchain: Option<&str>) -> Command {
    let mut cmd = Command::new("cargo");
    if let Some(tc) = toolchain {
        cmd.arg(format!("+{tc}"));
    }
    for var in [
        "RUSTUP_TOOLCHAIN",
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTDOC",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
    ] {
        cmd.env_remove(var);
    }
    cmd.current_dir(workspace_root());
    cmd
}

/// Runs a command, failing with its command line when it exits non-zero.
pub(crate) fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd.status().with_context(|| format!("starting {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

/// Runs a command and returns its stdout, or `None` if it cannot start or fails.
pub(crate) fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// True when running as root.
pub(crate) fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}
