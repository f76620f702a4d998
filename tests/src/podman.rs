//! Podman (Debian's 4.3) with all of its state the test's own: `containers.conf` and
//! `storage.conf` in a private directory (vfs storage, cgroupfs, runc, the CNI backend with a
//! private network config and plugin directory, events in a file), images loaded from the
//! archive `cargo xtask test` built and containers removed by id on drop, and the cgroup v1
//! directories runc makes for a cgroup parent on a hybrid host removed too. The host's own
//! podman storage, networks and configuration are never read or written.
use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use redirect_testkit::unique_name;

/// The tag of the image under test (set by `cargo xtask test`).
pub const IMAGE_ENV: &str = "REDIRECT_IMAGE";
/// Its OCI archive (set by `cargo xtask test`).
pub const ARCHIVE_ENV: &str = "REDIRECT_IMAGE_ARCHIVE";

/// The image `cargo xtask test` built, or why there is none.
pub fn image_under_test() -> Result<(String, PathBuf), String> {
    match (std::env::var(IMAGE_ENV), std::env::var_os(ARCHIVE_ENV)) {
        (Ok(tag), Some(archive)) if Path::new(&archive).is_file() => Ok((tag, archive.into())),
        (Ok(_), Some(archive)) => Err(format!(
            "{ARCHIVE_ENV}={} is not a file",
            Path::new(&archive).display()
        )),
        _ => Err(format!(
            "{IMAGE_ENV}/{ARCHIVE_ENV} are not set: run the test with `cargo xtask test`, which builds the image"
        )),
    }
}

/// The first tool the image tests need that is missing, if any.
pub fn missing_tool() -> Option<&'static str> {
    [
        ("podman", "/usr/bin/podman"),
        ("runc", "/usr/sbin/runc"),
        ("busybox-static", "/bin/busybox"),
        ("nsenter (util-linux)", "/usr/bin/nsenter"),
    ]
    .into_iter()
    .find(|(_, path)| !Path::new(path).exists())
    .map(|(name, _)| name)
}

/// Soft = hard limits for the containers no higher than ours (podman asks for 1048576 open
/// files by default, which a process without CAP_SYS_RESOURCE and a lower hard limit cannot
/// grant; podman lowers its own process limit to 32768 before starting the runtime).
fn ulimits() -> [String; 2] {
    use nix::sys::resource::{getrlimit, Resource};
    let hard = |r, cap: u64| getrlimit(r).map_or(1024, |(_, h)| h.min(cap));
    [
        format!("nofile={0}:{0}", hard(Resource::RLIMIT_NOFILE, 65_536)),
        format!("nproc={0}:{0}", hard(Resource::RLIMIT_NPROC, 32_768)),
    ]
}

/// A private podman: its directory holds both configuration files, the storage, the CNI
/// networks (`cni-conf`) and plugins (`cni-bin`); removed on drop.
#[derive(Debug)]
pub struct Podman {
    /// The private directory.
    pub dir: PathBuf,
}

impl Default for Podman {
    fn default() -> Self {
        Self::new()
    }
}

impl Podman {
    /// Writes the configuration under a unique directory of the temp dir.
    pub fn new() -> Self {
        let dir = std::env::temp_dir().join(unique_name("rpm"));
        for sub in ["root", "runroot", "tmp", "cni-conf", "cni-bin"] {
            std::fs::create_dir_all(dir.join(sub)).expect("podman state dir");
        }
        let d = dir.display();
        let [nofile, nproc] = ulimits();
        // runc: crun (1.8) refuses a hybrid cgroup host where a controller (hugetlb here) is
        // left on cgroup v2; runc joins the v2 hierarchy too, so capture sees the container.
        let conf = format!(
            "[containers]\ndefault_ulimits = [\"{nofile}\", \"{nproc}\"]\n\
             [engine]\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n\
             events_logfile_path = \"{d}/events.log\"\ntmp_dir = \"{d}/tmp\"\n\
             runtime = \"runc\"\nvolume_path = \"{d}/volumes\"\nstatic_dir = \"{d}/libpod\"\n\
             [network]\nnetwork_backend = \"cni\"\ncni_plugin_dirs = [\"{d}/cni-bin\"]\n\
             network_config_dir = \"{d}/cni-conf\"\n"
        );
        std::fs::write(dir.join("containers.conf"), conf).expect("containers.conf");
        let storage = format!(
            "[storage]\ndriver = \"vfs\"\ngraphroot = \"{d}/root\"\nrunroot = \"{d}/runroot\"\n"
        );
        std::fs::write(dir.join("storage.conf"), storage).expect("storage.conf");
        Self { dir }
    }

    /// Where the CNI plugins podman runs are (`cni_plugin_dirs`).
    pub fn plugin_dir(&self) -> PathBuf {
        self.dir.join("cni-bin")
    }

    /// Where the conflists are (`network_config_dir`).
    pub fn network_dir(&self) -> PathBuf {
        self.dir.join("cni-conf")
    }

    /// `podman` with this configuration, run in the network namespace at `netns` (by
    /// `nsenter --net`, which leaves the mounts alone, unlike `ip netns exec`) or in ours.
    pub fn command(&self, netns: Option<&Path>) -> Command {
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net={}", ns.display())).arg("podman");
                c
            }
            None => Command::new("podman"),
        };
        cmd.env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", self.dir.join("storage.conf"));
        cmd
    }

    /// Runs `podman ARGS`, asserting success; returns stdout, trimmed.
    pub fn ok(&self, netns: Option<&Path>, args: &[&str]) -> String {
        let out = self
            .command(netns)
            .args(args)
            .output()
            .expect("start podman");
        ok(&out, args)
    }

    /// `podman load` of the OCI archive `archive` holding `tag`; the tag is removed on drop.
    pub fn load(&self, archive: &Path, tag: &str) -> Loaded<'_> {
        let archive = archive.display().to_string();
        self.ok(None, &["load", "--quiet", "--input", &archive]);
        let shown = self.ok(None, &["image", "inspect", "--format", "{{.Id}}", tag]);
        assert!(!shown.is_empty(), "{tag} not loaded from {archive}");
        Loaded {
            podman: self,
            tag: tag.to_owned(),
        }
    }

    /// `podman run --detach ARGS` (in `netns`, see [`Podman::command`]); the container is
    /// removed by its id on drop.
    pub fn start(
        &self,
        netns: Option<&Path>,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Container<'_> {
        let mut cmd = self.command(netns);
        cmd.args(["run", "--detach"]).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("start podman run");
        let id = ok(&out, args);
        Container {
            podman: self,
            netns: netns.map(Path::to_owned),
            id,
        }
    }

    /// Copies `path` out of `image` into `dest` (`podman create` + `podman cp`, the created
    /// container removed again).
    pub fn extract(&self, image: &str, path: &str, dest: &Path) {
        let id = self.ok(None, &["create", "--network", "none", image]);
        let from = format!("{id}:{path}");
        let out = self
            .command(None)
            .arg("cp")
            .arg(&from)
            .arg(dest)
            .output()
            .expect("start podman cp");
        let _ = self.command(None).args(["rm", "--force", &id]).output();
        ok(&out, &["cp", &from]);
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ok(out: &Output, args: &[&str]) -> String {
    assert!(
        out.status.success(),
        "podman {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// An image tag in the private storage, removed on drop.
#[derive(Debug)]
pub struct Loaded<'p> {
    podman: &'p Podman,
    /// The tag.
    pub tag: String,
}

impl Drop for Loaded<'_> {
    fn drop(&mut self) {
        let _ = self
            .podman
            .command(None)
            .args(["rmi", "--force", &self.tag])
            .output();
    }
}

/// A running container, stopped and removed by its id on drop (or by [`Container::remove`]).
#[derive(Debug)]
pub struct Container<'p> {
    podman: &'p Podman,
    netns: Option<PathBuf>,
    /// Its full id.
    pub id: String,
}

impl Container<'_> {
    /// `podman ARGS... ID EXTRA...` (`inspect`, `logs`, `exec`), in the namespace it was
    /// started from; the output, whatever the exit status.
    pub fn podman(&self, args: &[&str], extra: &[&str]) -> Output {
        self.podman
            .command(self.netns.as_deref())
            .args(args)
            .arg(&self.id)
            .args(extra)
            .output()
            .expect("start podman")
    }

    /// `podman inspect --format FORMAT ID`.
    pub fn inspect(&self, format: &str) -> String {
        let out = self.podman(&["inspect", "--format", format], &[]);
        ok(&out, &["inspect", format])
    }

    /// `podman exec ID CMD...`, asserting success; stdout trimmed.
    pub fn exec(&self, cmd: &[&str]) -> String {
        let out = self.podman(&["exec"], cmd);
        ok(&out, cmd)
    }

    /// Its log (stdout and stderr of its process).
    pub fn logs(&self) -> String {
        let out = self.podman(&["logs"], &[]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// `podman rm --force --time 10 ID` now (SIGTERM, then SIGKILL after 10 s; the runtime's
    /// CNI DEL runs), asserting success.
    pub fn remove(&mut self) {
        if self.id.is_empty() {
            return;
        }
        let out = self.podman(&["rm", "--force", "--time", "10"], &[]);
        ok(&out, &["rm", &self.id]);
        self.id.clear();
    }
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        if !self.id.is_empty() {
            let _ = self.podman(&["rm", "--force", "--time", "10"], &[]);
        }
    }
}

/// The cgroup directories named `rel` (a path relative to a hierarchy's root, e.g. a podman
/// `--cgroup-parent`) in every cgroup v1 hierarchy, which runc and podman (`conmon` below it)
/// create on a hybrid host beside the v2 one (a testkit `Cgroup` guards that): removed on drop
/// with what is below them, deepest first.
#[derive(Debug)]
pub struct V1Parents {
    rel: Vec<PathBuf>,
}

impl V1Parents {
    /// Guards `rels`, listed parent first.
    pub fn new(rels: &[&Path]) -> Self {
        Self {
            rel: rels.iter().map(|r| r.to_path_buf()).collect(),
        }
    }
}

impl Drop for V1Parents {
    fn drop(&mut self) {
        // podman's `conmon` cgroup beside the container's is one of those left behind.
        for rel in self.rel.iter().rev() {
            redirect_testkit::cgroup::remove_trees(rel, false);
        }
    }
}

/// A busybox-static root filesystem under `dir` (`/bin/busybox` and the applets the tests
/// use as links to it): a container with nothing downloaded.
pub fn busybox_rootfs(dir: &Path) -> PathBuf {
    let root = dir.join("rootfs");
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).expect("rootfs/bin");
    std::fs::copy("/bin/busybox", bin.join("busybox")).expect("copy /bin/busybox");
    for applet in ["sh", "nc", "sleep", "echo", "cat"] {
        std::os::unix::fs::symlink("busybox", bin.join(applet)).expect("applet link");
    }
    root
}
