//! `test`: setup, lint, every build the tests need (the BPF object, the next layout, the
//! binaries, the image), then `cargo test` and the bench's smoke run. Above `build`, `image`
//! and `bench`, which never call back into it.
use anyhow::Context as _;

use crate::{
    build::{build_bins, build_ebpf, build_next_layout, lint},
    setup,
    util::{self, run},
};

/// Setup, lint, build (the image too: `REDIRECT_IMAGE`, `REDIRECT_IMAGE_ARCHIVE`), then every
/// test (unit and root integration tests).
pub(crate) fn test(extra: &[String]) -> anyhow::Result<()> {
    setup::setup()?;
    build_ebpf()?;
    lint()?;
    build_next_layout()?;
    build_bins(false)?;
    let image = crate::image::for_tests()?;
    let mut cmd = util::cargo(None);
    cmd.args(["test", "--workspace", "--exclude", "redirect-ebpf"])
        .env("REDIRECT_EBPF_OBJECT", util::ebpf_object())
        .env("REDIRECT_KUBE_BIN", crate::kube::bin_dir())
        .args(extra);
    if let Some(image) = image {
        let next = crate::image::next::for_tests()?;
        cmd.env("REDIRECT_IMAGE", &image.tags[0])
            .env("REDIRECT_IMAGE_ARCHIVE", &image.archive)
            .env("REDIRECT_NEXT_IMAGE", &next.tags[0])
            .env("REDIRECT_NEXT_IMAGE_ARCHIVE", &next.archive);
    }
    run(&mut cmd)?;
    arm64_unit_tests()?;
    bench_smoke()
}

/// The packages whose unit tests also run for arm64 (the image's user space and the shared ABI,
/// whose compile-time size assertions then hold for aarch64 too); the test harness crates and
/// xtask are host tools.
const ARM64_PACKAGES: [&str; 12] = [
    "redirect-common",
    "redirect-policy",
    "redirect-k8s",
    "redirect-sys",
    "redirect-http",
    "redirect-datapath",
    "redirect-daemon-api",
    "redirect-daemon",
    "redirect-cni",
    "redirect-install",
    "redirect-cli",
    "redirect-proxy",
];

/// The user space's unit tests built for `aarch64-unknown-linux-musl` and run under
/// `qemu-aarch64-static` (the cargo runner .cargo/config.toml names). qemu-user translates
/// system calls but has no bpf(2): tests that need the kernel's BPF run in the arm64 kernel
/// (`cargo xtask test --kernel arm64`).
fn arm64_unit_tests() -> anyhow::Result<()> {
    let arch = crate::image::arch::Arch::Arm64;
    let started = std::time::Instant::now();
    let mut cmd = util::cargo(None);
    cmd.args(["test", "--target", arch.target(), "--lib", "--bins"])
        .env("REDIRECT_EBPF_OBJECT", util::ebpf_object());
    for package in ARM64_PACKAGES {
        cmd.args(["-p", package]);
    }
    run(&mut cmd).context("the arm64 unit tests (under qemu-aarch64-static)")?;
    println!(
        "arm64 unit tests: passed under qemu-aarch64-static in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Runs the benchmark harness with tiny counts and checks its report (never its timings).
fn bench_smoke() -> anyhow::Result<()> {
    if !util::is_root() {
        anyhow::ensure!(
            std::env::var("CI").as_deref() != Ok("true"),
            "bench smoke test cannot run in CI: not root"
        );
        eprintln!("SKIPPED bench smoke test: not root");
        return Ok(());
    }
    let out = util::workspace_root().join("target/bench-smoke");
    let _ = std::fs::remove_dir_all(&out);
    crate::bench::run(crate::bench::Size::Tiny, &out, &[], false).context("bench smoke test")?;
    let samples = crate::bench::check(&out)?;
    println!("bench smoke: {samples} samples from every mode and workload; report.json parses");
    Ok(())
}
