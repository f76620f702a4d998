//! `cargo xtask image`: the node image. Static (musl) `redirect` and `redirect-cni` in an OCI
//! image built FROM scratch with buildah (nothing downloaded; the host's CA bundle for the
//! Kubernetes client), tagged with the crate version, entrypoint `redirect`; also written as an OCI
//! archive (`podman load`, `kind load
//! image-archive`, `ctr images import`). `cargo xtask test` builds it in storage of its own and
//! hands the archive to `tests/tests/it/image.rs`.
pub(crate) mod arch;
mod index;
pub(crate) mod musl;
pub(crate) mod next;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::Context as _;

use self::arch::Arch;
use crate::util::{self, run};

/// The image's repository.
pub(crate) const REPOSITORY: &str = "localhost/redirect";

/// Where the binaries go inside the image (and `PATH`).
const BIN_DIR: &str = "/usr/local/bin";

/// The CA bundle of Debian's ca-certificates, copied to the same path in the image.
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The workspace's version, which tags the image.
pub(crate) fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// The default tags: `localhost/redirect:<version>` and `:latest`.
pub(crate) fn default_tags() -> Vec<String> {
    vec![
        format!("{REPOSITORY}:{}", version()),
        format!("{REPOSITORY}:latest"),
    ]
}

/// Where buildah keeps images.
#[derive(Debug, Clone)]
pub(crate) enum Storage {
    /// The host's default containers storage (`podman images` lists the result).
    Host,
    /// A directory of our own (vfs driver: plain directories, no mounts), e.g. for the tests.
    Private(PathBuf),
}

impl Storage {
    fn buildah(&self) -> Command {
        let mut cmd = Command::new("buildah");
        if let Self::Private(dir) = self {
            cmd.arg("--root")
                .arg(dir.join("root"))
                .arg("--runroot")
                .arg(dir.join("runroot"))
                .args(["--storage-driver", "vfs"]);
        }
        cmd
    }
}

/// What was built.
#[derive(Debug)]
pub(crate) struct Built {
    /// The tags, first the main one.
    pub tags: Vec<String>,
    /// The OCI archive of the image (the first tag inside).
    pub archive: PathBuf,
}

/// Builds the static binaries and one image per architecture of `arches` in `storage`, an image
/// index (manifest list) holding them under each of `tags`, and the OCI archive of the index at
/// `archive`. Prints how long each part took and the index's digests per platform.
pub(crate) fn build(
    tags: &[String],
    storage: &Storage,
    archive: &Path,
    arches: &[Arch],
) -> anyhow::Result<Built> {
    anyhow::ensure!(!tags.is_empty(), "no tag for the image");
    anyhow::ensure!(!arches.is_empty(), "no architecture for the image");
    let mut images = Vec::new();
    for &arch in arches {
        let started = Instant::now();
        let binaries = musl::build(arch)?;
        let musl_secs = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let tag = index::arch_tag(&tags[0], arch);
        assemble(&binaries, std::slice::from_ref(&tag), storage, arch)?;
        println!(
            "xtask image: {tag} ({}) from scratch: static binaries {musl_secs:.0} s, image {:.1} s",
            binaries
                .iter()
                .filter_map(|b| b.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(", "),
            started.elapsed().as_secs_f64(),
        );
        images.push(tag);
    }
    let started = Instant::now();
    for tag in tags {
        index::create(storage, tag, &images)?;
    }
    index::write_archive(storage, &tags[0], archive)?;
    println!(
        "xtask image: {} ({}) index and archive {:.1} s; archive {}",
        tags.join(", "),
        arches
            .iter()
            .map(|a| a.oci())
            .collect::<Vec<_>>()
            .join(" + "),
        started.elapsed().as_secs_f64(),
        archive.display()
    );
    for (platform, digest) in index::platforms(storage, &tags[0])? {
        println!("xtask image:   {platform} {digest}");
    }
    Ok(Built {
        tags: tags.to_vec(),
        archive: archive.to_owned(),
    })
}

/// A buildah working container, removed on drop.
struct Working<'s> {
    storage: &'s Storage,
    id: String,
}

impl Drop for Working<'_> {
    fn drop(&mut self) {
        if self.id.is_empty() {
            return;
        }
        let _ = self
            .storage
            .buildah()
            .args(["rm", &self.id])
            .stdout(std::process::Stdio::null())
            .status();
    }
}

/// FROM scratch: the binaries in [`BIN_DIR`], entrypoint `redirect`, default command `daemon`.
fn assemble(
    binaries: &[PathBuf],
    tags: &[String],
    storage: &Storage,
    arch: Arch,
) -> anyhow::Result<()> {
    let out = storage
        .buildah()
        .args(["from", "--quiet", "scratch"])
        .output()
        .context("starting buildah (cargo xtask setup installs it)")?;
    anyhow::ensure!(
        out.status.success(),
        "buildah from scratch failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let mut working = Working {
        storage,
        id: String::from_utf8_lossy(&out.stdout).trim().to_owned(),
    };
    let mut copy = storage.buildah();
    copy.args(["copy", "--quiet", "--chmod", "0755", &working.id])
        .args(binaries)
        .arg(format!("{BIN_DIR}/"));
    run(&mut copy)?;
    // kube-rs verifies an apiserver named by a kubeconfig without its own CA against the
    // system's roots (in-cluster it uses the ServiceAccount's CA): Debian's bundle.
    anyhow::ensure!(
        Path::new(CA_BUNDLE).is_file(),
        "{CA_BUNDLE} is missing: cargo xtask setup installs ca-certificates"
    );
    run(storage.buildah().args([
        "copy",
        "--quiet",
        "--chmod",
        "0644",
        &working.id,
        CA_BUNDLE,
        CA_BUNDLE,
    ]))?;
    let entrypoint = format!("[\"{BIN_DIR}/redirect\"]");
    run(storage.buildah().args([
        "config",
        "--entrypoint",
        &entrypoint,
        "--cmd",
        "daemon",
        "--env",
        &format!("PATH={BIN_DIR}"),
        "--os",
        "linux",
        "--arch",
        arch.oci(),
        "--label",
        &format!("org.opencontainers.image.version={}", version()),
        "--label",
        "org.opencontainers.image.title=redirect",
        "--label",
        "org.opencontainers.image.description=eBPF traffic capture for sidecar meshes: node daemon and CNI plugin",
        &working.id,
    ]))?;
    let previous = image_id(storage, &tags[0]);
    // Timestamps at the epoch: the same binaries give the same image id.
    run(storage
        .buildah()
        .args([
            "commit",
            "--quiet",
            "--format",
            "oci",
            "--timestamp",
            "0",
            "--rm",
        ])
        .args([&working.id, &tags[0]])
        .stdout(std::process::Stdio::null()))?;
    // `--rm` removed the working container.
    working.id.clear();
    for tag in &tags[1..] {
        run(storage.buildah().args(["tag", &tags[0], tag]))?;
    }
    // The image these tags named before, unless still tagged or used (buildah refuses then).
    if let Some(old) = previous.filter(|old| image_id(storage, &tags[0]).as_ref() != Some(old)) {
        let _ = storage
            .buildah()
            .args(["rmi", &old])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
    Ok(())
}

/// The id of the image `tag` names in `storage`, if any.
fn image_id(storage: &Storage, tag: &str) -> Option<String> {
    let out = storage
        .buildah()
        .args([
            "inspect",
            "--type",
            "image",
            "--format",
            "{{.FromImageID}}",
            tag,
        ])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !id.is_empty()).then_some(id)
}

/// `cargo xtask image`: into the host's storage, archive under `target/image`.
pub(crate) fn image(tags: Vec<String>, arch: &str) -> anyhow::Result<()> {
    let arches = arch::parse(arch)?;
    crate::setup::setup()?;
    crate::build::build_ebpf()?;
    let tags = if tags.is_empty() {
        default_tags()
    } else {
        tags
    };
    build(&tags, &Storage::Host, &archive_path(), &arches)?;
    Ok(())
}

/// `target/image/redirect-<version>.oci.tar`.
pub(crate) fn archive_path() -> PathBuf {
    util::target_dir()
        .join("image")
        .join(format!("redirect-{}.oci.tar", version()))
}

/// The image `cargo xtask test` hands to the tests (`REDIRECT_IMAGE`, `REDIRECT_IMAGE_ARCHIVE`):
/// built in storage of its own under `target/image/storage` (removed once the archive is
/// written), so the host's images are left alone. `None` when not root (buildah needs it here):
/// the image test then skips, saying so; with `CI=true` that is an error.
pub(crate) fn for_tests() -> anyhow::Result<Option<Built>> {
    if !util::is_root() {
        anyhow::ensure!(
            std::env::var("CI").as_deref() != Ok("true"),
            "the image for tests/tests/it/image.rs cannot be built in CI: not root"
        );
        eprintln!("SKIPPED the image build (not root): tests/tests/it/image.rs will skip");
        return Ok(None);
    }
    let storage = util::target_dir().join("image/storage");
    let _ = std::fs::remove_dir_all(&storage);
    let built = build(
        &default_tags()[..1],
        &Storage::Private(storage.clone()),
        &archive_path(),
        &Arch::ALL,
    );
    std::fs::remove_dir_all(&storage)
        .with_context(|| format!("removing the image build's storage {}", storage.display()))?;
    built.map(Some)
}
