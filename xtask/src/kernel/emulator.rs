//! The qemu the guests boot in: Debian's `qemu-system-x86` (or `qemu-system-arm` for arm64
//! guests), `-common`, `-data` and `seabios` extracted under target/kernels (`apt-get
//! download` + `dpkg-deb -x`), never installed, so a host whose own qemu packages are of
//! another version (e.g. backports' `qemu-utils`) is left alone; only the plain libraries the
//! binary links against are installed with apt (`--no-remove`).
use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context as _};

use super::fetch::{self, Archive};
use crate::{image::arch::Arch, setup, util::run};

/// Packages extracted (not installed): the emulator, its modules (the TCG accelerator), its
/// firmware and option ROMs, the BIOS (x86 only: an arm64 `virt` machine boots the kernel
/// directly).
const EXTRACTED: [&str; 5] = [
    "qemu-system-x86",
    "qemu-system-arm",
    "qemu-system-common",
    "qemu-system-data",
    "seabios",
];

/// The packages `arch`'s emulator is extracted from, its main package first.
fn extracted(arch: Arch) -> Vec<&'static str> {
    match arch {
        Arch::Amd64 => vec![
            "qemu-system-x86",
            "qemu-system-common",
            "qemu-system-data",
            "seabios",
        ],
        Arch::Arm64 => vec!["qemu-system-arm", "qemu-system-common", "qemu-system-data"],
    }
}

/// An extracted emulator (binary, TCG module, firmware).
#[derive(Debug)]
pub(super) struct Emulator {
    /// The extracted tree (usr/bin, usr/share/qemu, usr/share/seabios).
    pub root: PathBuf,
    /// The main package's version, for the report.
    pub version: String,
    /// The guests' architecture.
    pub arch: Arch,
}

impl Emulator {
    /// A command running this qemu with its firmware directories.
    pub(super) fn command(&self) -> Command {
        let mut cmd = Command::new(self.root.join("usr/bin").join(self.binary()));
        // The TCG accelerator is a loadable module of the package.
        cmd.env(
            "QEMU_MODULE_DIR",
            self.root.join("usr/lib/x86_64-linux-gnu/qemu"),
        );
        for dir in ["usr/share/qemu", "usr/share/seabios"] {
            cmd.arg("-L").arg(self.root.join(dir));
        }
        cmd
    }

    pub(super) fn binary(&self) -> &'static str {
        match self.arch {
            Arch::Amd64 => "qemu-system-x86_64",
            Arch::Arm64 => "qemu-system-aarch64",
        }
    }

    /// The machine (`virt` for arm64), CPU and accelerator: TCG, every feature the CPU model has.
    pub(super) fn machine(&self) -> &'static [&'static str] {
        match self.arch {
            Arch::Amd64 => &["-accel", "tcg,thread=multi", "-cpu", "max"],
            Arch::Arm64 => &["-M", "virt", "-accel", "tcg,thread=multi", "-cpu", "max"],
        }
    }

    /// The guest's serial console (the kernel's `console=`).
    pub(super) fn console(&self) -> &'static str {
        match self.arch {
            Arch::Amd64 => "ttyS0",
            Arch::Arm64 => "ttyAMA0",
        }
    }
}

/// The library packages `main` (`qemu-system-x86`) depends on (first alternative of each), without the
/// packages extracted instead (whose own dependencies serve modules a guest with no display,
/// sound or USB never loads) and without `ipxe-qemu` (network boot ROMs: the guest has no NIC).
fn library_deps(main: &str) -> anyhow::Result<Vec<String>> {
    let text = crate::util::output(
        "apt-cache",
        &[
            "depends",
            "--no-recommends",
            "--no-suggests",
            "--no-conflicts",
            "--no-breaks",
            "--no-replaces",
            "--no-enhances",
            main,
        ],
    )
    .with_context(|| format!("apt-cache depends {main}"))?;
    Ok(parse_depends(&text))
}

/// `  Depends: libaio1` lines -> `libaio1`; an alternative group (`|Depends:`) keeps its first.
fn parse_depends(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_group = false;
    for line in text.lines() {
        let l = line.trim();
        let (alt, rest) = match (l.strip_prefix("|Depends: "), l.strip_prefix("Depends: ")) {
            (Some(r), _) => (true, r),
            (None, Some(r)) => (false, r),
            _ => continue,
        };
        let pkg = rest.trim();
        let keep = !in_group
            && !pkg.starts_with('<')
            && !pkg.starts_with("qemu-")
            && !EXTRACTED.contains(&pkg)
            && pkg != "ipxe-qemu";
        if keep {
            out.push(pkg.to_owned());
        }
        in_group = alt;
    }
    out
}

/// Downloads and extracts the emulator once per version; installs its missing libraries.
pub(super) fn prepare(kernels_dir: &Path, arch: Arch) -> anyhow::Result<Emulator> {
    let packages = extracted(arch);
    let main = packages[0];
    let names: Vec<String> = packages.iter().map(|p| (*p).to_owned()).collect();
    let host = Archive::host();
    let mut found = fetch::candidates(&host, &names);
    if found.len() < names.len() {
        eprintln!("xtask: apt knows no candidate for some of {names:?}; apt-get update");
        run(Command::new("apt-get").args(["update", "-q"]))?;
        found = fetch::candidates(&host, &names);
    }
    let version_of = |pkg: &str| {
        found
            .iter()
            .find(|(p, _)| p == pkg)
            .map(|(_, v)| v.clone())
            .with_context(|| format!("apt knows no {pkg} package (needed to boot the kernels)"))
    };
    let version = version_of(main)?;
    let root = kernels_dir.join(format!("{main}_{}", version.replace(':', "%3a")));
    let done = root.join(".unpacked");
    let marker = packages.join(" ");
    if std::fs::read_to_string(&done).ok().as_deref() != Some(marker.as_str()) {
        let _ = std::fs::remove_dir_all(&root);
        for pkg in &packages {
            let deb = fetch::download(&host, kernels_dir, pkg, &version_of(pkg)?)?;
            run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root))?;
        }
        std::fs::write(&done, &marker)?;
    }
    setup::install_missing(&library_deps(main)?, true)?;
    let emulator = Emulator {
        root,
        version,
        arch,
    };
    // Starts TCG (loading its module) on an empty machine and quits from the monitor.
    let mut check = emulator
        .command()
        .args([
            "-accel",
            "tcg",
            "-M",
            "none",
            "-display",
            "none",
            "-nodefaults",
        ])
        .args(["-monitor", "stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", emulator.root.display()))?;
    if let Some(mut stdin) = check.stdin.take() {
        let _ = stdin.write_all(b"quit\n");
    }
    let out = check.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "the extracted {} {} cannot start TCG: {}",
            emulator.binary(),
            emulator.version,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(emulator)
}

#[cfg(test)]
mod tests {
    use super::parse_depends;

    #[test]
    fn depends_keep_libraries_and_first_alternatives() {
        let text =
            "qemu-system-x86\n  Depends: libaio1\n  |Depends: libfoo1\n  Depends: libbar1\n  \
                    Depends: qemu-system-common\n  Depends: seabios\n  Depends: ipxe-qemu\n  \
                    Depends: <virtual>\n  Depends: zlib1g\n";
        assert_eq!(parse_depends(text), ["libaio1", "libfoo1", "zlib1g"]);
    }
}
