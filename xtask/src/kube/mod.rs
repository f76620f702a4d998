//! A real Kubernetes v1.20.2 (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
//! kubectl) built from Debian bookworm's `kubernetes` source package with Debian's Go, plus
//! Debian's etcd: all from Debian's archive through a private apt configuration, nothing
//! installed on the host, cached outside the repository (`REDIRECT_KUBE_CACHE`) and stamped.
pub(crate) mod apt;
mod build;
mod stamp;
mod step;

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{bail, ensure, Context as _};
use nix::fcntl::{Flock, FlockArg};

use self::{
    apt::Apt,
    build::GoEnv,
    stamp::{file_version, Stamp, RECIPE},
    step::{remove_dir, Steps},
};
use crate::util::output;

/// The Kubernetes release the binaries report.
pub(crate) const KUBE_VERSION: &str = "v1.20.2";
/// The Debian release whose archive everything comes from.
const SUITE: &str = "bookworm";
/// The source package (`apt-get source kubernetes/bookworm`).
const SOURCE_PACKAGE: &str = "kubernetes";
/// Binary packages downloaded and unpacked: the Go Debian builds 1.20 with, rsync (Kubernetes'
/// code generation runs it) with its library, and etcd 3.4.
const PACKAGES: [&str; 6] = [
    "golang-1.19-go",
    "golang-1.19-src",
    "rsync",
    "libpopt0",
    "etcd-server",
    "etcd-client",
];
/// The commands built from the source tree.
const KUBE_COMMANDS: [&str; 5] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kubectl",
];
/// The commands copied from the etcd packages.
const ETCD_COMMANDS: [&str; 2] = ["etcd", "etcdctl"];
/// Host tools the build runs (dpkg-source and patch: `dpkg-dev`).
const HOST_TOOLS: [&str; 6] = [
    "apt-get",
    "dpkg",
    "dpkg-deb",
    "dpkg-source",
    "patch",
    "make",
];

/// The cache: `$REDIRECT_KUBE_CACHE`, else `/var/cache/redirect-xtask/kubernetes-v1.20.2` (outside
/// the repository, so a fresh clone on the same machine reuses it).
pub(crate) fn cache_dir() -> PathBuf {
    std::env::var_os("REDIRECT_KUBE_CACHE")
        .filter(|d| !d.is_empty())
        .map_or_else(
            || {
                PathBuf::from(format!(
                    "/var/cache/redirect-xtask/kubernetes-{KUBE_VERSION}"
                ))
            },
            PathBuf::from,
        )
}

/// Where the binaries are (what the tests get as `REDIRECT_KUBE_BIN`).
pub(crate) fn bin_dir() -> PathBuf {
    cache_dir().join("bin")
}

fn stamp_path(bin: &Path) -> PathBuf {
    bin.join(".complete")
}

/// The stamp, when it is current and every binary it vouches for is there.
fn cached(bin: &Path) -> Option<Stamp> {
    let stamp = Stamp::read(&stamp_path(bin)).filter(|s| s.is_current(KUBE_VERSION))?;
    KUBE_COMMANDS
        .iter()
        .chain(&ETCD_COMMANDS)
        .all(|c| bin.join(c).is_file())
        .then_some(stamp)
}

/// Makes sure the binaries are in `bin_dir()`: nothing but a few stats when they are; otherwise
/// downloads and builds what is missing (about 10 minutes on 2 cores), resuming an interrupted
/// build. Any failure is an error naming the step, the command and its log.
pub(crate) fn ensure() -> anyhow::Result<()> {
    let cache = cache_dir();
    if cached(&cache.join("bin")).is_some() {
        return Ok(());
    }
    std::fs::create_dir_all(&cache).with_context(|| {
        format!(
            "creating the Kubernetes cache {} (run as root, or set REDIRECT_KUBE_CACHE to a \
             writable directory)",
            cache.display()
        )
    })?;
    let _lock = lock(&cache)?;
    if cached(&cache.join("bin")).is_some() {
        return Ok(());
    }
    build_all(&cache)
}

/// An exclusive lock on the cache, so two setups never build into it at once.
fn lock(cache: &Path) -> anyhow::Result<Flock<File>> {
    let path = cache.join(".lock");
    let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(lock),
        Err((file, _)) => {
            eprintln!(
                "xtask setup: kubernetes: waiting for another run building into {}",
                cache.display()
            );
            Flock::lock(file, FlockArg::LockExclusive)
                .map_err(|(_, e)| anyhow::anyhow!("locking {}: {e}", path.display()))
        }
    }
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// Files in `dir` whose name ends with `suffix`, sorted.
pub(crate) fn files_ending(dir: &Path, suffix: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.to_string_lossy().ends_with(suffix))
        .collect();
    out.sort();
    Ok(out)
}

/// The file of `package` in `dir` ending with `suffix` (a .deb or .dsc apt wrote), and its
/// Debian version.
fn file_of(dir: &Path, package: &str, suffix: &str) -> anyhow::Result<(PathBuf, String)> {
    files_ending(dir, suffix)?
        .into_iter()
        .find_map(|p| {
            let version = file_version(&p.file_name()?.to_string_lossy(), package)?;
            Some((p, version))
        })
        .with_context(|| format!("no {package}_*{suffix} in {}", dir.display()))
}

fn version_in(dir: &Path, package: &str, suffix: &str) -> anyhow::Result<String> {
    file_of(dir, package, suffix).map(|(_, v)| v)
}

/// Downloads, unpacks and builds everything, step by step; writes the stamp last.
fn build_all(cache: &Path) -> anyhow::Result<()> {
    let missing: Vec<&str> = HOST_TOOLS.into_iter().filter(|t| !on_path(t)).collect();
    if !missing.is_empty() {
        bail!(
            "building Kubernetes needs {} (apt-get install dpkg-dev make patch)",
            missing.join(", ")
        );
    }
    let (debs, source, root, work, bin) = (
        cache.join("debs"),
        cache.join("source"),
        cache.join("root"),
        cache.join("build"),
        cache.join("bin"),
    );
    let _ = std::fs::remove_file(stamp_path(&bin));
    eprintln!(
        "xtask setup: kubernetes {KUBE_VERSION}: building from Debian {SUITE}'s packages into {} \
         (about 10 minutes on 2 cores, once; logs in {}/logs)",
        cache.display(),
        cache.display()
    );
    let started = Instant::now();
    let steps = Steps::new(cache.join("logs"), cache.join("steps"))?;
    let apt_dir = cache.join("apt");
    let apt = Apt::new(&apt_dir, SUITE)?;
    steps.run("apt index", |s| {
        s.command(&mut apt.get(&apt_dir, &["update"]))
    })?;
    steps.run("download packages", |s| {
        std::fs::create_dir_all(&debs)?;
        let absent: Vec<&str> = PACKAGES
            .into_iter()
            .filter(|p| version_in(&debs, p, ".deb").is_err())
            .collect();
        if !absent.is_empty() {
            s.command(apt.get(&debs, &["download"]).args(&absent))?;
        }
        PACKAGES
            .iter()
            .try_for_each(|p| version_in(&debs, p, ".deb").map(drop))
    })?;
    steps.run("download source", |s| {
        std::fs::create_dir_all(&source)?;
        if version_in(&source, SOURCE_PACKAGE, ".dsc").is_err() {
            let what = format!("{SOURCE_PACKAGE}/{SUITE}");
            s.command(&mut apt.get(&source, &["source", "--download-only", &what]))?;
        }
        version_in(&source, SOURCE_PACKAGE, ".dsc").map(drop)
    })?;
    let go = GoEnv::new(&root, &work);
    steps.run("unpack packages", |s| {
        let files: Vec<PathBuf> = PACKAGES
            .iter()
            .map(|p| file_of(&debs, p, ".deb").map(|(f, _)| f))
            .collect::<anyhow::Result<_>>()?;
        build::unpack_packages(s, &files, &root)
    })?;
    steps.run("unpack source", |s| {
        let (dsc, _) = file_of(&source, SOURCE_PACKAGE, ".dsc")?;
        build::unpack_source(s, &dsc, go.tree())
    })?;
    steps.run("generate code", |s| go.generate(s))?;
    for name in KUBE_COMMANDS {
        steps.run(&format!("build {name}"), |s| {
            go.build(s, name, &bin, KUBE_VERSION)
        })?;
    }
    steps.run("install etcd", |_| {
        ETCD_COMMANDS.iter().try_for_each(|c| {
            let from = root.join("usr/bin").join(c);
            std::fs::copy(&from, bin.join(c))
                .map(drop)
                .with_context(|| format!("copying {}", from.display()))
        })
    })?;
    steps
        .timed("check versions", |_| check_versions(&bin))
        .inspect_err(|_| {
            // Rebuild (not re-check) next time: the binaries themselves are wrong.
            let _ = steps.forget();
        })?;
    let stamp = Stamp {
        recipe: RECIPE,
        kubernetes: KUBE_VERSION.to_owned(),
        source: version_in(&source, SOURCE_PACKAGE, ".dsc")?,
        etcd: version_in(&debs, "etcd-server", ".deb")?,
        go: version_in(&debs, PACKAGES[0], ".deb")?,
    };
    steps.timed("clean up the build tree", |_| {
        remove_dir(&work)?;
        remove_dir(&root)?;
        steps.forget()
    })?;
    let tmp = bin.join(".complete.tmp");
    std::fs::write(&tmp, stamp.render())?;
    std::fs::rename(&tmp, stamp_path(&bin))?;
    eprintln!(
        "xtask setup: kubernetes: ready in {} ({:.1} s in all)",
        bin.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Every binary runs and reports the expected version.
fn check_versions(bin: &Path) -> anyhow::Result<()> {
    let checks = KUBE_COMMANDS
        .iter()
        .map(|c| (*c, KUBE_VERSION))
        .chain(ETCD_COMMANDS.iter().map(|c| (*c, "3.4.")));
    for (name, expected) in checks {
        let path = bin.join(name);
        let args: &[&str] = match name {
            "kubectl" => &["version", "--client"],
            "etcdctl" => &["version"],
            _ => &["--version"],
        };
        let text = output(&path.to_string_lossy(), args).unwrap_or_default();
        ensure!(
            text.contains(expected),
            "kubernetes step `check versions`: `{} {}` printed {:?}, expected {expected}",
            path.display(),
            args.join(" "),
            text.trim()
        );
    }
    Ok(())
}

/// `cargo xtask kube`: builds (or finds cached) and prints what is there.
pub(crate) fn show() -> anyhow::Result<()> {
    ensure()?;
    let bin = bin_dir();
    let stamp = cached(&bin).context("the Kubernetes cache is incomplete after building it")?;
    println!("{}", bin.display());
    print!("{}", stamp.render());
    let _ = Command::new(bin.join("kubectl"))
        .args(["version", "--client", "--short"])
        .status();
    Ok(())
}
