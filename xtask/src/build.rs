//! `build-ebpf`, `build-next-layout`, the host binaries and `lint`.
use anyhow::Context as _;

use crate::{
    setup,
    util::{self, run},
};

const BPF_TARGET: &str = "bpfel-unknown-none";

fn ebpf_cargo(subcommand: &str) -> std::process::Command {
    ebpf_cargo_in(subcommand, "target/ebpf")
}

fn ebpf_cargo_in(subcommand: &str, target_dir: &str) -> std::process::Command {
    let mut cmd = util::cargo(Some("nightly"));
    cmd.args([
        subcommand,
        "-Z",
        "build-std=core",
        "--target",
        BPF_TARGET,
        "--release",
    ])
    .args(["-p", "redirect-ebpf", "--target-dir", target_dir])
    .env(
        "CARGO_ENCODED_RUSTFLAGS",
        "-Cdebuginfo=2\u{1f}-Clink-arg=--btf",
    );
    cmd
}

/// Builds the BPF object with BTF into target/ebpf.
pub(crate) fn build_ebpf() -> anyhow::Result<()> {
    run(&mut ebpf_cargo("build"))
        .context("building the BPF programs (cargo xtask setup installs the toolchain)")?;
    let object = util::ebpf_object();
    anyhow::ensure!(
        object.is_file(),
        "the BPF build produced no {}",
        object.display()
    );
    Ok(())
}

/// The upgrade test's `redirect` of the next layout (`layout-next` of redirect-ebpf and
/// redirect-datapath: this build's layout + 1, one map wider), built from this tree beside the real one, at
/// `<target>/debug/layout-next/redirect`. Never shipped.
pub(crate) fn build_next_layout() -> anyhow::Result<()> {
    run(ebpf_cargo_in("build", "target/ebpf-next").args(["--features", "layout-next"]))
        .context("building the next layout's BPF programs")?;
    let object = util::workspace_root()
        .join("target/ebpf-next")
        .join(BPF_TARGET)
        .join("release/redirect-ebpf");
    anyhow::ensure!(
        object.is_file(),
        "the BPF build produced no {}",
        object.display()
    );
    run(util::cargo(None)
        .args(["build", "-p", "redirect-cli", "--bin", "redirect"])
        .args(["--features", "redirect-datapath/layout-next"])
        .env("REDIRECT_EBPF_OBJECT", util::ebpf_object())
        .env("REDIRECT_EBPF_OBJECT_NEXT", &object))?;
    let built = util::target_dir().join("debug/redirect");
    let dest = util::target_dir().join("debug/layout-next");
    std::fs::create_dir_all(&dest).with_context(|| format!("creating {}", dest.display()))?;
    std::fs::copy(&built, dest.join("redirect"))
        .with_context(|| format!("copying {} into {}", built.display(), dest.display()))?;
    Ok(())
}

/// Builds the host binaries with the BPF object embedded.
pub(crate) fn build_bins(release: bool) -> anyhow::Result<()> {
    let mut cmd = util::cargo(None);
    cmd.args([
        "build",
        "--workspace",
        "--exclude",
        "redirect-ebpf",
        "--bins",
    ]);
    if release {
        cmd.arg("--release");
    }
    cmd.env("REDIRECT_EBPF_OBJECT", util::ebpf_object());
    run(&mut cmd)
}

/// rustfmt, the line width (`line_width`), clippy (-D warnings) on the host crates and the BPF
/// crate, and cargo-deny's licences, bans and sources (`deny.toml`).
pub(crate) fn lint() -> anyhow::Result<()> {
    setup::setup()?;
    run(util::cargo(None).args(["fmt", "--all", "--", "--check"]))
        .context("rustfmt: run `cargo fmt --all`")?;
    crate::line_width::check(&util::workspace_root())?;
    run(util::cargo(None)
        .args([
            "clippy",
            "--workspace",
            "--exclude",
            "redirect-ebpf",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ])
        .env("REDIRECT_EBPF_OBJECT", util::ebpf_object()))?;
    run(ebpf_cargo("clippy").args(["--", "-D", "warnings"]))?;
    deny()
}

/// `cargo deny --offline check licenses bans sources`, after a `cargo fetch` of every target's
/// crates (from crates.io, as any build; `--offline` then needs them all). No advisories: their
/// database is on GitHub, which is not reachable here (`deny.toml` says more).
fn deny() -> anyhow::Result<()> {
    run(util::cargo(None).arg("fetch")).context("fetching the crates cargo-deny reads")?;
    run(util::cargo(None).args(["deny", "--offline", "check", "licenses", "bans", "sources"]))
        .context("cargo-deny: fix the dependency, or deny.toml with a reason")
}
