//! Unpacks the downloaded Debian packages and the `kubernetes` source package, then builds the
//! control plane and kubelet with Debian's Go 1.19 in GOPATH mode (no module download: the
//! source package carries `vendor/`), stamping the binaries with their release version.
use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context as _;

use super::step::{remove_dir, Step};

/// Debian's Go, as unpacked from `golang-1.19-go` (+ `-src`).
const GOROOT: &str = "usr/lib/go-1.19";
/// Where `libpopt0` puts the library the unpacked rsync needs.
const LIB_DIR: &str = "usr/lib/x86_64-linux-gnu";
/// The packages whose version variables are set (`hack/lib/version.sh` sets both).
const VERSION_PACKAGES: [&str; 2] = [
    "k8s.io/kubernetes/vendor/k8s.io/component-base/version",
    "k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version",
];

/// `dpkg-deb -x` of each of `debs` into a fresh `root`.
pub(super) fn unpack_packages(step: &Step, debs: &[PathBuf], root: &Path) -> anyhow::Result<()> {
    remove_dir(root)?;
    for deb in debs {
        step.command(Command::new("dpkg-deb").arg("-x").arg(deb).arg(root))?;
    }
    Ok(())
}

/// `dpkg-source -x` of the source package `dsc` into a fresh `tree` (Debian's patches applied).
pub(super) fn unpack_source(step: &Step, dsc: &Path, tree: &Path) -> anyhow::Result<()> {
    remove_dir(tree)?;
    if let Some(parent) = tree.parent() {
        std::fs::create_dir_all(parent)?;
    }
    step.command(Command::new("dpkg-source").arg("-x").arg(dsc).arg(tree))
}

/// The `-ldflags` value that makes the binaries report `version` (`v1.20.2`).
fn ldflags(version: &str) -> String {
    let v = version.trim_start_matches('v');
    let mut parts = v.split('.');
    let (major, minor) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let mut flags = vec!["-s".to_owned(), "-w".to_owned()];
    for package in VERSION_PACKAGES {
        for (key, value) in [
            ("gitVersion", version),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
        ] {
            flags.push(format!("-X {package}.{key}={value}"));
        }
    }
    flags.join(" ")
}

/// The environment the Kubernetes build runs in: the unpacked Go and rsync first on PATH,
/// GOPATH mode, no module proxy, no cgo, nothing of the caller's Go settings.
#[derive(Debug)]
pub(super) struct GoEnv {
    root: PathBuf,
    tree: PathBuf,
    gopath: PathBuf,
    gocache: PathBuf,
}

impl GoEnv {
    /// `root`: the unpacked packages; `work`: where the source tree, GOPATH and Go's cache are.
    pub(super) fn new(root: &Path, work: &Path) -> Self {
        Self {
            root: root.to_owned(),
            tree: work.join("kubernetes"),
            gopath: work.join("gopath"),
            gocache: work.join("go-cache"),
        }
    }

    pub(super) fn tree(&self) -> &Path {
        &self.tree
    }

    /// The tree as GOPATH mode sees it: `$GOPATH/src/k8s.io/kubernetes`.
    fn package_dir(&self) -> PathBuf {
        self.gopath.join("src/k8s.io/kubernetes")
    }

    fn command(&self, program: &str, dir: &Path) -> Command {
        let mut path: OsString = self.root.join(GOROOT).join("bin").into();
        path.push(":");
        path.push(self.root.join("usr/bin"));
        if let Some(host) = std::env::var_os("PATH") {
            path.push(":");
            path.push(host);
        }
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .env("PATH", path)
            .env("HOME", &self.gopath)
            .env("LANG", "C.UTF-8")
            .env("LD_LIBRARY_PATH", self.root.join(LIB_DIR))
            .env("GOROOT", self.root.join(GOROOT))
            .env("GOPATH", &self.gopath)
            .env("GOCACHE", &self.gocache)
            .env("GO111MODULE", "off")
            .env("GOPROXY", "off")
            .env("GOFLAGS", "")
            .env("GOENV", "off")
            .env("CGO_ENABLED", "0")
            // GOPATH mode finds `vendor/` only when the working directory is inside GOPATH:
            // Go takes it from PWD when that names the directory (here, through the link).
            .env("PWD", dir)
            .current_dir(dir);
        cmd
    }

    /// Links the tree into GOPATH and runs `make generated_files` (the openapi definitions,
    /// deep copies, conversions and defaulters are not in the source package).
    pub(super) fn generate(&self, step: &Step) -> anyhow::Result<()> {
        let link = self.package_dir();
        if let Some(parent) = link.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let _ = std::fs::remove_file(&link);
        let target = self.tree.canonicalize()?;
        std::os::unix::fs::symlink(&target, &link)
            .with_context(|| format!("linking {} to {}", link.display(), target.display()))?;
        step.command(self.command("make", &self.tree).arg("generated_files"))
    }

    /// `go build ./cmd/<name>` into `bin/<name>`, reporting `version`.
    pub(super) fn build(
        &self,
        step: &Step,
        name: &str,
        bin: &Path,
        version: &str,
    ) -> anyhow::Result<()> {
        std::fs::create_dir_all(bin)?;
        step.command(
            self.command("go", &self.package_dir())
                .args(["build", "-o"])
                .arg(bin.join(name))
                .args(["-ldflags", &ldflags(version)])
                .arg(format!("./cmd/{name}")),
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ldflags_set_every_version_variable() {
        let flags = super::ldflags("v1.20.2");
        assert!(flags.starts_with("-s -w "));
        for package in super::VERSION_PACKAGES {
            assert!(flags.contains(&format!("-X {package}.gitVersion=v1.20.2 ")));
            assert!(flags.contains(&format!("-X {package}.gitMajor=1 ")));
            assert!(flags.contains(&format!("-X {package}.gitMinor=20 ")));
        }
    }
}
