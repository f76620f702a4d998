//! The image index (manifest list): one image per architecture under `<tag>-<arch>`, listed
//! under the plain tag, and the OCI archive of the whole index. A node's runtime (`podman load`,
//! `ctr images import`, the kubelet's pull) picks the image of its own architecture.
use std::{path::Path, process::Stdio};

use anyhow::Context as _;

use super::{arch::Arch, Storage};
use crate::util::run;

/// `localhost/redirect:0.1.0` -> `localhost/redirect:0.1.0-arm64`.
pub(super) fn arch_tag(tag: &str, arch: Arch) -> String {
    format!("{tag}-{}", arch.oci())
}

/// (Re)creates the manifest list `tag` holding `images` (whatever `tag` named before, a list or
/// an image of an older single-architecture build, is removed first).
pub(super) fn create(storage: &Storage, tag: &str, images: &[String]) -> anyhow::Result<()> {
    for how in [["manifest", "rm"], ["rmi", "--force"]] {
        let _ = storage
            .buildah()
            .args(how)
            .arg(tag)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    run(storage
        .buildah()
        .args(["manifest", "create", tag])
        .stdout(Stdio::null()))
    .with_context(|| format!("creating the image index {tag}"))?;
    for image in images {
        run(storage
            .buildah()
            .args(["manifest", "add", tag, image])
            .stdout(Stdio::null()))
        .with_context(|| format!("adding {image} to the image index {tag}"))?;
    }
    Ok(())
}

/// Writes the index `tag` with every image it lists to the OCI archive `archive`, named `tag`.
pub(super) fn write_archive(storage: &Storage, tag: &str, archive: &Path) -> anyhow::Result<()> {
    if let Some(dir) = archive.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let _ = std::fs::remove_file(archive);
    run(storage
        .buildah()
        .args(["manifest", "push", "--all", "--quiet", tag])
        .arg(format!("oci-archive:{}:{tag}", archive.display())))
    .with_context(|| format!("writing the image index {tag} to {}", archive.display()))
}

/// (`linux/arm64`, manifest digest) of each image the index `tag` lists.
pub(super) fn platforms(storage: &Storage, tag: &str) -> anyhow::Result<Vec<(String, String)>> {
    let out = storage
        .buildah()
        .args(["manifest", "inspect", tag])
        .output()
        .with_context(|| format!("buildah manifest inspect {tag}"))?;
    anyhow::ensure!(
        out.status.success(),
        "buildah manifest inspect {tag}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let index: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("buildah manifest inspect {tag} printed no JSON"))?;
    Ok(parse_platforms(&index))
}

fn parse_platforms(index: &serde_json::Value) -> Vec<(String, String)> {
    index["manifests"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let p = &m["platform"];
            (
                format!(
                    "{}/{}",
                    p["os"].as_str().unwrap_or("?"),
                    p["architecture"].as_str().unwrap_or("?")
                ),
                m["digest"].as_str().unwrap_or("?").to_owned(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{arch_tag, parse_platforms, Arch};

    #[test]
    fn arch_tags_and_index_platforms() {
        assert_eq!(
            arch_tag("localhost/redirect:0.1.0", Arch::Arm64),
            "localhost/redirect:0.1.0-arm64"
        );
        let index = serde_json::json!({"manifests": [
            {"digest": "sha256:aa", "platform": {"os": "linux", "architecture": "amd64"}},
            {"digest": "sha256:bb", "platform": {"os": "linux", "architecture": "arm64"}},
        ]});
        assert_eq!(
            parse_platforms(&index),
            [
                ("linux/amd64".to_owned(), "sha256:aa".to_owned()),
                ("linux/arm64".to_owned(), "sha256:bb".to_owned())
            ]
        );
    }
}
