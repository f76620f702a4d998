//! The image's binaries: built for the musl target (static, no libc on the node needed), each
//! checked to be static (no ELF `PT_INTERP`) and to embed the BPF object `build-ebpf` made.
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use object::{
    elf::{ET_EXEC, PT_INTERP},
    read::elf::{ElfFile64, FileHeader as _, ProgramHeader as _},
    Endianness,
};

use super::arch::Arch;
use crate::util::{self, run};

/// The host's static target (amd64): the next layout's image and the bench build for it.
pub(crate) const TARGET: &str = "x86_64-unknown-linux-musl";

/// (package, binary, embeds the BPF object) of what the image holds: the node agent the
/// DaemonSet runs (`redirect daemon`, `redirect list` for readiness, `redirect install-cni`),
/// which loads the datapath, and the CNI plugin it installs (a socket client: the linker drops
/// the object from it), and the reference sidecar proxy (`redirect-proxy`: the image is also
/// the proxy image of the containerd tests' meshed pods).
pub(crate) const BINARIES: [(&str, &str, bool); 3] = [
    ("redirect-cli", "redirect", true),
    ("redirect-cni", "redirect-cni", false),
    ("redirect-proxy", "redirect-proxy", false),
];

/// The CNI plugin's binary, built at a fixed address (see [`build`]).
const PLUGIN: &str = "redirect-cni";

/// Builds [`BINARIES`] in release for `arch`'s static target with the BPF object embedded (the
/// same bytes for every architecture: bpfel); returns their paths (under
/// `target/<target>/release`), each checked.
pub(crate) fn build(arch: Arch) -> anyhow::Result<Vec<PathBuf>> {
    let target = arch.target();
    let object = util::ebpf_object();
    let mut cmd = util::cargo(None);
    cmd.args(["build", "--release", "--target", target]);
    for (package, bin, _) in BINARIES.iter().filter(|(_, bin, _)| *bin != PLUGIN) {
        cmd.args(["-p", package, "--bin", bin]);
    }
    cmd.env("REDIRECT_EBPF_OBJECT", &object);
    let hint = || {
        format!(
            "building the image's static {} binaries (cargo xtask setup adds the {target} target, \
             musl-tools, gcc-aarch64-linux-gnu and libc6-dev-arm64-cross)",
            arch.oci()
        )
    };
    run(&mut cmd).with_context(hint)?;
    // The plugin is exec'd for every pod: linked at a fixed address (as a Go plugin such as
    // istio-cni's is), it skips static-pie's self-relocation at each start, about half of its
    // startup CPU and 66 of its 90 page faults. The daemon and the proxy, long-lived, keep
    // their randomised (PIE) layout.
    let mut cmd = util::cargo(None);
    cmd.args([
        "rustc",
        "--release",
        "--target",
        target,
        "-p",
        "redirect-cni",
    ])
    .args(["--bin", PLUGIN, "--", "-C", "relocation-model=static"]);
    run(&mut cmd).with_context(hint)?;
    let bpf = std::fs::read(&object).with_context(|| format!("reading {}", object.display()))?;
    let dir = util::target_dir().join(target).join("release");
    BINARIES
        .iter()
        .map(|(_, bin, embeds)| {
            let path = dir.join(bin);
            let data =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            check_static(&path, &data)?;
            check_machine(&path, &data, arch)?;
            if *bin == PLUGIN {
                check_fixed_address(&path, &data)?;
            }
            if *embeds {
                check_embeds(&path, &data, &object, &bpf)?;
            }
            Ok(path)
        })
        .collect()
}

/// Fails, naming the binary, unless it is an ELF with no program interpreter (a static or
/// static-pie executable: it runs in an image with nothing else in it).
pub(crate) fn check_static(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    let elf = ElfFile64::<Endianness>::parse(data)
        .with_context(|| format!("{} is not a 64-bit ELF file", path.display()))?;
    let endian = elf.endian();
    for header in elf.elf_program_headers() {
        if header.p_type(endian) == PT_INTERP {
            let interp = header
                .data(endian, data)
                .ok()
                .map(|d| String::from_utf8_lossy(d).trim_end_matches('\0').to_owned())
                .unwrap_or_default();
            bail!(
                "{} is dynamically linked (program interpreter {interp:?}): it cannot run in an \
                    image built from scratch",
                path.display()
            );
        }
    }
    Ok(())
}

/// Fails, naming the binary, unless it was built for `arch` (its ELF machine).
fn check_machine(path: &Path, data: &[u8], arch: Arch) -> anyhow::Result<()> {
    let elf = ElfFile64::<Endianness>::parse(data)
        .with_context(|| format!("{} is not a 64-bit ELF file", path.display()))?;
    let machine = elf.elf_header().e_machine(elf.endian());
    if machine != arch.elf_machine() {
        bail!(
            "{} is for ELF machine {machine}, not {} ({})",
            path.display(),
            arch.oci(),
            arch.elf_machine()
        );
    }
    Ok(())
}

/// Fails, naming the binary, unless it is linked at a fixed address (ELF type `EXEC`, not a
/// position-independent `DYN`).
fn check_fixed_address(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    let elf = ElfFile64::<Endianness>::parse(data)
        .with_context(|| format!("{} is not a 64-bit ELF file", path.display()))?;
    if elf.elf_header().e_type(elf.endian()) != ET_EXEC {
        bail!(
            "{} is position-independent: the plugin is built with -C relocation-model=static",
            path.display()
        );
    }
    Ok(())
}

/// Fails, naming the binary, when it does not carry the BPF object's bytes (a stub embedded
/// by a build without `REDIRECT_EBPF_OBJECT`, or another build's object).
fn check_embeds(path: &Path, data: &[u8], object: &Path, bpf: &[u8]) -> anyhow::Result<()> {
    if bpf.is_empty() {
        bail!(
            "{} is empty: run `cargo xtask build-ebpf`",
            object.display()
        );
    }
    if memchr::memmem::find(data, bpf).is_none() {
        bail!(
            "{} does not embed the BPF object {} ({} bytes)",
            path.display(),
            object.display(),
            bpf.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_static;

    #[test]
    fn a_dynamic_executable_is_refused_by_name() {
        // The test binary itself is linked against glibc (an interpreter).
        let me = std::env::current_exe().expect("current_exe");
        let data = std::fs::read(&me).expect("read");
        let err = check_static(&me, &data).expect_err("dynamic").to_string();
        assert!(
            err.contains(&me.display().to_string()) && err.contains("dynamically linked"),
            "{err}"
        );
        let text = std::path::Path::new("Cargo.toml");
        let err = check_static(text, b"[package]\n")
            .expect_err("not ELF")
            .to_string();
        assert!(err.contains("Cargo.toml is not a 64-bit ELF"), "{err}");
    }
}
