//! Resolves the newest Debian cloud kernel of a series, downloads and unpacks it under target/kernels
//! (`apt-get download` + `dpkg-deb -x`: nothing is installed on the host).
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _};

use crate::{image::arch::Arch, kube::apt::Apt, util::run};

/// Where packages come from: the host's apt (amd64: kernels, qemu) or a private configuration
/// of arm64 packages under target/kernels (the arm64 kernels and the guest's userland).
#[derive(Debug)]
pub(crate) struct Archive {
    /// Debian's name of the packages' architecture.
    pub arch: &'static str,
    /// `None`: the host's own apt.
    apt: Option<Apt>,
}

impl Archive {
    pub(crate) fn host() -> Self {
        Self {
            arch: "amd64",
            apt: None,
        }
    }

    /// arm64 packages through a private apt configuration under `dir` (`apt-get update` once).
    pub(crate) fn arm64(dir: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            arch: "arm64",
            apt: Some(Apt::foreign(dir, "arm64")?),
        })
    }

    /// What `apt-cache ARGS` prints (nothing when it fails).
    fn cache(&self, args: &[&str]) -> String {
        let out = match &self.apt {
            Some(apt) => apt.cache(args).output(),
            None => Command::new("apt-cache").args(args).output(),
        };
        out.ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// `apt-get ARGS` run in `dir`.
    pub(crate) fn get(&self, dir: &Path, args: &[&str]) -> Command {
        match &self.apt {
            Some(apt) => apt.get(dir, args),
            None => {
                let mut cmd = Command::new("apt-get");
                cmd.arg("-q").args(args).current_dir(dir);
                cmd
            }
        }
    }
}

/// One unpacked kernel package.
#[derive(Debug)]
pub(super) struct Kernel {
    /// Series asked for (`6.1`, `6.12`).
    pub series: String,
    /// Debian package name, e.g. `linux-image-6.1.0-57-cloud-amd64-unsigned`.
    pub package: String,
    /// Debian package version, e.g. `6.1.192-3`.
    pub version: String,
    /// `uname -r` of the kernel (its directory under /lib/modules).
    pub release: String,
    /// The extracted package.
    pub root: PathBuf,
    /// target/kernels/<release>: console log and initramfs.
    pub dir: PathBuf,
}

impl Kernel {
    pub(super) fn vmlinuz(&self) -> PathBuf {
        self.root.join(format!("boot/vmlinuz-{}", self.release))
    }

    pub(super) fn modules(&self) -> PathBuf {
        self.root.join("lib/modules").join(&self.release)
    }
}

/// Package names of the series, e.g. `^linux-image-6\.1\.[^ ]*-cloud-amd64-unsigned$`.
fn search(archive: &Archive, series: &str) -> Vec<String> {
    let pattern = format!(
        "^linux-image-{}\\.[^ ]*-cloud-{}-unsigned$",
        series.replace('.', "\\."),
        archive.arch
    );
    archive
        .cache(&["search", "--names-only", &pattern])
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// `(package, candidate version)` for each package, from one `apt-cache policy` call.
pub(super) fn candidates(archive: &Archive, packages: &[String]) -> Vec<(String, String)> {
    let args: Vec<&str> = std::iter::once("policy")
        .chain(packages.iter().map(String::as_str))
        .collect();
    let text = archive.cache(&args);
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if !line.starts_with(' ') {
            current = line.strip_suffix(':').map(str::to_owned);
        } else if let (Some(pkg), Some(v)) = (&current, line.trim().strip_prefix("Candidate: ")) {
            if v != "(none)" {
                out.push((pkg.clone(), v.to_owned()));
            }
        }
    }
    out
}

fn version_gt(a: &str, b: &str) -> bool {
    Command::new("dpkg")
        .args(["--compare-versions", a, "gt", b])
        .status()
        .is_ok_and(|s| s.success())
}

/// The newest package of the series (running `apt-get update` once if apt knows none).
fn resolve(archive: &Archive, series: &str) -> anyhow::Result<(String, String)> {
    let arch = archive.arch;
    let mut found = candidates(archive, &search(archive, series));
    if found.is_empty() {
        eprintln!(
            "xtask: no linux-image-{series}.*-cloud-{arch}-unsigned known to apt; apt-get update"
        );
        run(&mut archive.get(Path::new("/"), &["update"]))?;
        found = candidates(archive, &search(archive, series));
    }
    let mut best: Option<(String, String)> = None;
    for (pkg, v) in found {
        if best.as_ref().is_none_or(|(_, bv)| version_gt(&v, bv)) {
            best = Some((pkg, v));
        }
    }
    best.with_context(|| {
        format!("apt knows no linux-image-{series}.*-cloud-{arch}-unsigned package")
    })
}

/// Resolves, downloads (once) and unpacks (once) the newest cloud kernel of `series`.
pub(super) fn fetch(archive: &Archive, series: &str, kernels_dir: &Path) -> anyhow::Result<Kernel> {
    let (package, version) = resolve(archive, series)?;
    std::fs::create_dir_all(kernels_dir)?;
    let unpacked = kernels_dir.join(format!("{package}_{version}"));
    let done = unpacked.join(".unpacked");
    if !done.is_file() {
        let deb = download(archive, kernels_dir, &package, &version)?;
        let _ = std::fs::remove_dir_all(&unpacked);
        run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked))?;
        std::fs::write(&done, "")?;
    }
    let release = single_dir(&unpacked.join("lib/modules"))?;
    let kernel = Kernel {
        series: series.to_owned(),
        dir: kernels_dir.join(&release),
        package,
        version,
        release,
        root: unpacked,
    };
    anyhow::ensure!(
        kernel.vmlinuz().is_file(),
        "{} has no {}",
        kernel.package,
        kernel.vmlinuz().display()
    );
    std::fs::create_dir_all(&kernel.dir)?;
    Ok(kernel)
}

/// The .deb of `package` at `version` in `dir`, downloaded with `apt-get download` unless it is
/// there already (apt writes an epoch's ':' as `%3a`; the architecture is the archive's or all).
pub(super) fn download(
    archive: &Archive,
    dir: &Path,
    package: &str,
    version: &str,
) -> anyhow::Result<PathBuf> {
    let find = || {
        [archive.arch, "all"]
            .iter()
            .map(|arch| {
                dir.join(format!(
                    "{package}_{}_{arch}.deb",
                    version.replace(':', "%3a")
                ))
            })
            .find(|p| p.is_file())
    };
    if let Some(deb) = find() {
        return Ok(deb);
    }
    std::fs::create_dir_all(dir)?;
    eprintln!("xtask: downloading {package} {version}");
    run(&mut archive.get(dir, &["download", &format!("{package}={version}")]))?;
    find().with_context(|| {
        format!(
            "apt-get download left no {package}_*.deb in {}",
            dir.display()
        )
    })
}

fn single_dir(dir: &Path) -> anyhow::Result<String> {
    let names: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    match names.as_slice() {
        [one] => Ok(one.clone()),
        _ => bail!(
            "expected one kernel under {}, found {names:?}",
            dir.display()
        ),
    }
}

/// Accepts `6.1`, `6.12` or `all` (amd64 kernels), `arm64-6.1`, `arm64-6.12` or `arm64` (both
/// arm64 kernels, under qemu-system-aarch64).
pub(super) fn series_list(arg: &str) -> anyhow::Result<(Arch, Vec<String>)> {
    let both = || vec!["6.1".to_owned(), "6.12".to_owned()];
    let (arch, series) = match arg.strip_prefix("arm64") {
        Some("") => return Ok((Arch::Arm64, both())),
        Some(rest) => (Arch::Arm64, rest.strip_prefix('-').unwrap_or("-")),
        None => (Arch::Amd64, arg),
    };
    match series {
        "all" if arch == Arch::Amd64 => Ok((arch, both())),
        s if s.split('.').count() == 2 && s.split('.').all(|p| p.parse::<u32>().is_ok()) => {
            Ok((arch, vec![s.to_owned()]))
        }
        _ => bail!(
            "--kernel {arg:?}: expected a series like 6.1 or 6.12, or all (amd64); arm64-6.1, \
             arm64-6.12 or arm64 (both arm64 kernels)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::{series_list, Arch};

    #[test]
    fn kernel_series_name_their_architecture() {
        assert_eq!(
            series_list("6.12").unwrap(),
            (Arch::Amd64, vec!["6.12".into()])
        );
        assert_eq!(series_list("all").unwrap().1, ["6.1", "6.12"]);
        assert_eq!(
            series_list("arm64").unwrap(),
            (Arch::Arm64, vec!["6.1".into(), "6.12".into()])
        );
        assert_eq!(
            series_list("arm64-6.1").unwrap(),
            (Arch::Arm64, vec!["6.1".into()])
        );
        for bad in ["arm64-all", "arm646.1", "7", "arm64-"] {
            let err = series_list(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }
}
