//! The next layout's image, for `cargo xtask test` only (never shipped): this build's image
//! with its `redirect` replaced by a static build of the next layout's (the programs of
//! `build-next-layout`, this layout + 1, one map wider), tagged `localhost/redirect:next-layout`.
//! tests/tests/it/cri.rs rolls the DaemonSet out from this build's image to it under live pods
//! (`REDIRECT_NEXT_IMAGE`, `REDIRECT_NEXT_IMAGE_ARCHIVE`). The static build of the next layout
//! shares the image build's target directory: only the crates the feature changes are built
//! again, each way.
use std::path::PathBuf;

use anyhow::Context as _;

use super::{arch::Arch, assemble, musl, Built, Storage};
use crate::util::{self, run};

/// The tag.
pub(crate) const TAG: &str = "localhost/redirect:next-layout";

/// Builds the next layout's image after this build's (its static `redirect-cni` and
/// `redirect-proxy` reused), into `target/image/redirect-next-layout.oci.tar`.
pub(crate) fn for_tests() -> anyhow::Result<Built> {
    let object_next =
        util::workspace_root().join("target/ebpf-next/bpfel-unknown-none/release/redirect-ebpf");
    anyhow::ensure!(
        object_next.is_file(),
        "{} is missing: the next layout's programs come from build-next-layout",
        object_next.display()
    );
    let mut cmd = util::cargo(None);
    cmd.args(["build", "--release", "--target", musl::TARGET])
        .args(["-p", "redirect-cli", "--bin", "redirect"])
        .args(["--features", "redirect-datapath/layout-next"])
        .env("REDIRECT_EBPF_OBJECT", util::ebpf_object())
        .env("REDIRECT_EBPF_OBJECT_NEXT", &object_next);
    run(&mut cmd).context("building the next layout's static redirect")?;
    let release = util::target_dir().join(musl::TARGET).join("release");
    let dir = util::target_dir().join("image/next");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let redirect = dir.join("redirect");
    std::fs::copy(release.join("redirect"), &redirect)
        .with_context(|| format!("copying the next layout's redirect into {}", dir.display()))?;
    let data =
        std::fs::read(&redirect).with_context(|| format!("reading {}", redirect.display()))?;
    musl::check_static(&redirect, &data)?;
    let binaries: Vec<PathBuf> = vec![
        redirect,
        release.join("redirect-cni"),
        release.join("redirect-proxy"),
    ];
    let storage = util::target_dir().join("image/storage-next");
    let _ = std::fs::remove_dir_all(&storage);
    let archive = util::target_dir().join("image/redirect-next-layout.oci.tar");
    let private = Storage::Private(storage.clone());
    let tags = vec![TAG.to_owned()];
    let built = assemble(&binaries, &tags, &private, Arch::Amd64).and_then(|()| {
        let _ = std::fs::remove_file(&archive);
        run(private
            .buildah()
            .args(["push", "--quiet", TAG])
            .arg(format!("oci-archive:{}:{TAG}", archive.display())))
        .context("writing the next layout image's archive")
    });
    std::fs::remove_dir_all(&storage).with_context(|| format!("removing {}", storage.display()))?;
    built?;
    Ok(Built { tags, archive })
}
