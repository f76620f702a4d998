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
    bench_smoke()
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
