//! Resolves the newest Debian cloud kernel of a series, downloads and unpacks it under target/kernels
//! (`apt-get download` + `dpkg-deb -x`: nothing is installed on the host).
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _};

use crate::util::{output, run};

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
fn search(series: &str) -> Vec<String> {
    let pattern = format!(
        "^linux-image-{}\\.[^ ]*-cloud-amd64-unsigned$",
        series.replace('.', "\\.")
    );
    output("apt-cache", &["search", "--names-only", &pattern])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// `(package, candidate version)` for each package, from one `apt-cache policy` call.
pub(super) fn candidates(packages: &[String]) -> Vec<(String, String)> {
    let args: Vec<&str> = std::iter::once("policy")
        .chain(packages.iter().map(String::as_str))
        .collect();
    let text = output("apt-cache", &args).unwrap_or_default();
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
fn resolve(series: &str) -> anyhow::Result<(String, String)> {
    let mut found = candidates(&search(series));
    if found.is_empty() {
        eprintln!(
            "xtask: no linux-image-{series}.*-cloud-amd64-unsigned known to apt; apt-get update"
        );
        run(Command::new("apt-get").args(["update", "-q"]))?;
        found = candidates(&search(series));
    }
    let mut best: Option<(String, String)> = None;
    for (pkg, v) in found {
        if best.as_ref().is_none_or(|(_, bv)| version_gt(&v, bv)) {
            best = Some((pkg, v));
        }
    }
    best.with_context(|| {
        format!("apt knows no linux-image-{series}.*-cloud-amd64-unsigned package")
    })
}

/// Resolves, downloads (once) and unpacks (once) the newest cloud kernel of `series`.
pub(super) fn fetch(series: &str, kernels_dir: &Path) -> anyhow::Result<Kernel> {
    let (package, version) = resolve(series)?;
    std::fs::create_dir_all(kernels_dir)?;
    let unpacked = kernels_dir.join(format!("{package}_{version}"));
    let done = unpacked.join(".unpacked");
    if !done.is_file() {
        let deb = download(kernels_dir, &package, &version)?;
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
/// there already (apt writes an epoch's ':' as `%3a`; the architecture is amd64 or all).
pub(super) fn download(dir: &Path, package: &str, version: &str) -> anyhow::Result<PathBuf> {
    let find = || {
        ["amd64", "all"]
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
    run(Command::new("apt-get")
        .args(["download", "-q", &format!("{package}={version}")])
        .current_dir(dir))?;
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

/// Accepts `6.1`, `6.12` or `all`.
pub(super) fn series_list(arg: &str) -> anyhow::Result<Vec<String>> {
    match arg {
        "all" => Ok(vec!["6.1".into(), "6.12".into()]),
        s if s.split('.').count() == 2 && s.split('.').all(|p| p.parse::<u32>().is_ok()) => {
            Ok(vec![s.to_owned()])
        }
        other => bail!("--kernel {other:?}: expected a series like 6.1 or 6.12, or all"),
    }
}
