//! What the guest holds: busybox, the host's real tools (ip, iptables legacy/nft, setpriv, timeout,
//! bpftool, strace) with their libraries (an arm64 guest: Debian's arm64 packages instead), the
//! project's binaries and data at their host paths, the kernel modules, and the /init that
//! mounts, loads modules, runs each test binary and powers off.
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::{initramfs::Tree, modules::Module};

/// Real tools the tests run (found in the host's PATH; busybox covers the rest).
const TOOLS: &[&str] = &[
    "ip", "setpriv", "timeout", "bpftool", "sysctl", "sleep", "strace",
];
const PATH_DIRS: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// Debian's CA bundle (ca-certificates).
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// One test binary to run in the guest.
#[derive(Debug, Clone)]
pub(super) struct TestRun {
    /// Test target name (`outbound`).
    pub name: String,
    /// Its executable on the host (and in the guest).
    pub exe: PathBuf,
    /// libtest arguments after `--test-threads=1` (name filters).
    pub args: Vec<String>,
}

fn which(tool: &str) -> Option<PathBuf> {
    PATH_DIRS
        .iter()
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file())
}

/// iptables, iptables-restore, iptables-legacy-save, ip6tables-nft-restore, ...
fn iptables_tools() -> Vec<String> {
    let mut out = Vec::new();
    for family in ["iptables", "ip6tables"] {
        for variant in ["", "-legacy", "-nft"] {
            for op in ["", "-restore", "-save"] {
                out.push(format!("{family}{variant}{op}"));
            }
        }
    }
    out
}

/// The parts every amd64 kernel's guest shares: busybox, the host's tools and libraries, /etc,
/// project files. `stripped` maps a project binary to its debug-stripped copy.
pub(super) fn base(
    tree: &mut Tree,
    project_bins: &[(PathBuf, PathBuf)],
    data_dirs: &[PathBuf],
) -> anyhow::Result<Vec<String>> {
    let mut missing = Vec::new();
    skeleton(tree);
    let tools = TOOLS
        .iter()
        .map(|t| (*t).to_owned())
        .chain(iptables_tools());
    for tool in tools {
        match which(&tool) {
            Some(path) => tree.host_file(&path, None)?,
            None => missing.push(tool),
        }
    }
    for plugins in ["/usr/lib/x86_64-linux-gnu/xtables", "/usr/lib/xtables"] {
        if Path::new(plugins).is_dir() {
            tree.host_dir(Path::new(plugins))?;
        }
    }
    for etc in ["/etc/protocols", "/etc/services", "/etc/ethertypes"] {
        if Path::new(etc).is_file() {
            tree.host_file(Path::new(etc), None)?;
        }
    }
    project(tree, project_bins, data_dirs)?;
    let bb = which("busybox").context("busybox is missing (Debian package busybox-static)")?;
    let real = bb.canonicalize()?;
    tree.host_file(&bb, None)?;
    let list = crate::util::output(&real.to_string_lossy(), &["--list-full"])
        .context("busybox --list-full")?;
    let applets: Vec<String> = list.lines().map(str::to_owned).collect();
    busybox(tree, &real, &applets);
    Ok(missing)
}

/// The arm64 guest's base: the unpacked arm64 userland at `sysroot` (its tools and libraries
/// at their own paths), /etc, project files, a symlink for each busybox applet of `applets`
/// that no real tool provides.
pub(super) fn base_arm64(
    tree: &mut Tree,
    sysroot: &Path,
    applets: &[String],
    project_bins: &[(PathBuf, PathBuf)],
    data_dirs: &[PathBuf],
) -> anyhow::Result<()> {
    skeleton(tree);
    super::arm64::add_sysroot(tree, sysroot)?;
    // ca-certificates builds its bundle when installed, so the package has none: the host's
    // (the same bytes on every architecture), as the image carries it, for kube-rs's roots.
    if Path::new(CA_BUNDLE).is_file() {
        tree.host_file(Path::new(CA_BUNDLE), None)?;
    }
    project(tree, project_bins, data_dirs)?;
    let real = tree.resolve(Path::new("/bin/busybox"));
    busybox(tree, &real, applets);
    Ok(())
}

/// The top-level layout, device nodes and the users the tests name.
fn skeleton(tree: &mut Tree) {
    tree.host_root_symlinks();
    for dir in ["/proc", "/sys", "/dev", "/run", "/tmp", "/root", "/etc"] {
        tree.dir(dir);
    }
    tree.char_dev("/dev/console", 5, 1);
    tree.char_dev("/dev/null", 1, 3);
    tree.bytes(
        Path::new("/etc/passwd"),
        b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
            .to_vec(),
        0o644,
    );
    tree.bytes(
        Path::new("/etc/group"),
        b"root:x:0:\nnogroup:x:65534:\n".to_vec(),
        0o644,
    );
}

/// The project's binaries (stripped copies at the real paths) and data directories.
fn project(
    tree: &mut Tree,
    project_bins: &[(PathBuf, PathBuf)],
    data_dirs: &[PathBuf],
) -> anyhow::Result<()> {
    for (bin, stripped) in project_bins {
        tree.host_file(bin, Some(stripped))?;
    }
    for dir in data_dirs {
        tree.host_dir(dir)?;
    }
    Ok(())
}

/// A symlink to the busybox at `real` for each applet no real tool already provides.
fn busybox(tree: &mut Tree, real: &Path, applets: &[String]) {
    for applet in applets.iter().filter(|l| !l.is_empty()) {
        let path = tree.resolve(&Path::new("/").join(applet));
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let shadowed = name.is_some_and(|n| {
            PATH_DIRS
                .iter()
                .any(|d| tree.contains(&tree.resolve(&Path::new(d).join(&n))))
        });
        if !shadowed {
            tree.symlink(&path.to_string_lossy(), &real.to_string_lossy());
        }
    }
}

/// Single-quotes `s` for /bin/sh.
fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.:/=,".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Adds the modules under /lib/modules/<release> and the /init that runs `runs`.
pub(super) fn init(
    tree: &mut Tree,
    release: &str,
    modules: Vec<Module>,
    runs: &[TestRun],
    cwd: &Path,
    per_binary_secs: u64,
) {
    let mut s = String::from(
        "#!/bin/sh\n\
         export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n\
         mnt() { mount \"$@\" || echo \"@@@ error mount $*\"; }\n\
         mnt -t proc proc /proc\n\
         mnt -t sysfs sysfs /sys\n\
         mnt -t devtmpfs devtmpfs /dev\n\
         mkdir -p /dev/pts /dev/shm\n\
         mnt -t devpts devpts /dev/pts\n\
         mnt -t tmpfs tmpfs /dev/shm\n\
         mnt -t cgroup2 cgroup2 /sys/fs/cgroup\n\
         mnt -t bpf bpf /sys/fs/bpf\n\
         mnt -t debugfs debugfs /sys/kernel/debug\n\
         mnt -t tmpfs tmpfs /run\n\
         mnt -t tmpfs tmpfs /tmp\n\
         now() { cut -d' ' -f1 /proc/uptime; }\n\
         echo \"@@@ init $(uname -r) t=$(now)\"\n",
    );
    let dir = format!("/lib/modules/{release}");
    let names: Vec<String> = modules.iter().map(|m| m.name.clone()).collect();
    for m in modules {
        tree.bytes(
            &Path::new(&dir).join(format!("{}.ko", m.name)),
            m.bytes,
            0o644,
        );
    }
    s.push_str(&format!(
        "for m in {}; do insmod {dir}/$m.ko || echo \"@@@ error insmod $m\"; done\n",
        names.join(" ")
    ));
    s.push_str(
        "ip link set lo up || echo \"@@@ error ip link set lo up\"\n\
         echo \"@@@ modules t=$(now)\"\n\
         export CI=true HOME=/root RUST_BACKTRACE=1 REDIRECT_TEST_TIMEOUT_SCALE=10\n",
    );
    s.push_str(&format!(
        "export CARGO_MANIFEST_DIR={0}\ncd {0}\n",
        quote(&cwd.to_string_lossy())
    ));
    for run in runs {
        let args: Vec<String> = run.args.iter().map(|a| quote(a)).collect();
        s.push_str(&format!(
            "echo \"@@@ begin {name} t=$(now)\"\n\
             timeout -k 10 {per_binary_secs} {exe} --test-threads=1 {args}\n\
             rc=$?\n\
             echo \"@@@ end {name} rc=$rc t=$(now)\"\n",
            name = run.name,
            exe = quote(&run.exe.to_string_lossy()),
            args = args.join(" "),
        ));
    }
    s.push_str("echo \"@@@ done t=$(now)\"\nsync\npoweroff -f\nsleep 5\nreboot -f\n");
    tree.bytes(Path::new("/init"), s.into_bytes(), 0o755);
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn quotes_for_sh() {
        assert_eq!(quote("daemon::x"), "daemon::x");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
    }
}
