//! The node image's archive as `cargo xtask image` writes it (`cargo xtask test` passes it):
//! one OCI image index holding a linux/amd64 and a linux/arm64 image, each image's config
//! naming its architecture and each of its binaries an ELF of that machine, static, the same
//! programs in both; `podman load` of the archive on this (amd64) host takes the amd64 image.
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use redirect_testkit::{runs_or_skip, unique_name};
use redirect_tests::podman::{image_under_test, missing_tool, Podman};
use serde_json::Value;

/// ELF `e_machine` of x86_64 and aarch64.
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;

/// The image's binaries.
const BINARIES: [&str; 3] = ["redirect", "redirect-cni", "redirect-proxy"];

/// A directory of the test's own, removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn untar(archive: &Path, into: &Path) {
    std::fs::create_dir_all(into).expect("mkdir");
    let out = Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(into)
        .output()
        .expect("start tar");
    assert!(
        out.status.success(),
        "tar -xf {}: {}",
        archive.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn blob(layout: &Path, digest: &str) -> PathBuf {
    let (algo, hex) = digest.split_once(':').expect("algo:hex digest");
    layout.join("blobs").join(algo).join(hex)
}

fn json(path: &Path) -> Value {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// (ELF machine, has a program interpreter) of an ELF64 little-endian file.
fn elf_machine(path: &Path) -> (u16, bool) {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&data[..4], b"\x7fELF", "{} is not ELF", path.display());
    let machine = u16::from_le_bytes([data[18], data[19]]);
    let phoff =
        usize::try_from(u64::from_le_bytes(data[32..40].try_into().expect("8"))).expect("offset");
    let (phentsize, phnum) = (
        usize::from(u16::from_le_bytes([data[54], data[55]])),
        usize::from(u16::from_le_bytes([data[56], data[57]])),
    );
    let interp = (0..phnum).any(|i| {
        let at = phoff + i * phentsize;
        u32::from_le_bytes(data[at..at + 4].try_into().expect("4")) == 3 // PT_INTERP
    });
    (machine, interp)
}

#[test]
fn the_archive_is_one_index_of_an_amd64_and_an_arm64_image_and_load_takes_the_hosts() {
    let test = redirect_testkit::test_path!();
    let (tag, archive) = match image_under_test() {
        Ok(found) => found,
        Err(why) => {
            runs_or_skip(test, Some(why));
            return;
        }
    };
    let scratch = Scratch(std::env::temp_dir().join(unique_name("image-index")));
    let layout = scratch.0.join("layout");
    untar(&archive, &layout);
    let top = json(&layout.join("index.json"));
    let entries = top["manifests"].as_array().expect("manifests");
    assert_eq!(entries.len(), 1, "one entry, the index: {top}");
    assert_eq!(
        entries[0]["mediaType"], "application/vnd.oci.image.index.v1+json",
        "{top}"
    );
    assert_eq!(
        entries[0]["annotations"]["org.opencontainers.image.ref.name"], tag,
        "{top}"
    );
    let index = json(&blob(
        &layout,
        entries[0]["digest"].as_str().expect("digest"),
    ));
    let mut seen = BTreeMap::new();
    for manifest in index["manifests"].as_array().expect("index manifests") {
        let arch = manifest["platform"]["architecture"]
            .as_str()
            .expect("platform.architecture")
            .to_owned();
        assert_eq!(manifest["platform"]["os"], "linux", "{manifest}");
        let image = json(&blob(&layout, manifest["digest"].as_str().expect("digest")));
        let config = json(&blob(
            &layout,
            image["config"]["digest"].as_str().expect("config"),
        ));
        assert_eq!(config["architecture"], arch.as_str(), "{config}");
        assert_eq!(config["os"], "linux", "{config}");
        let rootfs = scratch.0.join(format!("rootfs-{arch}"));
        for layer in image["layers"].as_array().expect("layers") {
            untar(
                &blob(&layout, layer["digest"].as_str().expect("digest")),
                &rootfs,
            );
        }
        let want = match arch.as_str() {
            "amd64" => EM_X86_64,
            "arm64" => EM_AARCH64,
            other => panic!("unexpected platform architecture {other:?} in {index}"),
        };
        for bin in BINARIES {
            let path = rootfs.join("usr/local/bin").join(bin);
            assert_eq!(
                elf_machine(&path),
                (want, false),
                "{bin} of the {arch} image: (ELF machine, dynamic)"
            );
        }
        seen.insert(arch, manifest["digest"].clone());
    }
    assert_eq!(
        seen.keys().collect::<Vec<_>>(),
        ["amd64", "arm64"],
        "{index}"
    );
    println!("image index {tag}: {seen:?}");

    // The host's runtime picks its own half.
    if !redirect_testkit::privileged_or_skip(test)
        || !runs_or_skip(
            test,
            missing_tool().map(|t| format!("{t} is not installed (cargo xtask setup)")),
        )
    {
        return;
    }
    let podman = Podman::new();
    let _loaded = podman.load(&archive, &tag);
    let arch = podman.ok(
        None,
        &["image", "inspect", "--format", "{{.Architecture}}", &tag],
    );
    assert_eq!(arch, "amd64", "podman load of the index on an amd64 host");
}
