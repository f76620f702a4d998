//! Guards for network namespaces and cgroups, removed on drop, and the pod/server topology.
use std::{
    fs::File,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use crate::env::{cgroup2_root, unique_name};

/// Runs `ip ARGS`, panicking with its stderr on failure.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A named network namespace (`ip netns add`), deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates a namespace with a unique name and its loopback up. It has no route off the machine.
    pub fn new(prefix: &str) -> Self {
        let name = unique_name(prefix);
        ip(&["netns", "add", &name]);
        let ns = Self { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its bind-mount path, usable with setns.
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    /// Runs `f` on a fresh thread that has entered this namespace; sockets created there stay
    /// in it wherever they are used later.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = self.path();
        std::thread::spawn(move || {
            let file = File::open(&path).expect("open netns");
            nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
        .join()
        .expect("netns thread panicked")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A cgroup v2 directory with a unique name, removed on drop (its processes are killed first).
#[derive(Debug)]
pub struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    /// Creates `<cgroup2 root>/<unique name>`.
    pub fn new(prefix: &str) -> Self {
        let root = cgroup2_root().expect("cgroup2 mount");
        let path = root.join(unique_name(prefix));
        std::fs::create_dir(&path).expect("mkdir cgroup");
        Self { path }
    }

    /// Its directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A child cgroup `name` below this one, removed on drop (declare it after its parent so
    /// it drops first).
    pub fn child(&self, name: &str) -> Self {
        let path = self.path.join(name);
        std::fs::create_dir(&path).expect("mkdir child cgroup");
        Self { path }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Processes the test started here are its own children; kill any that remain.
        if let Ok(procs) = std::fs::read_to_string(self.path.join("cgroup.procs")) {
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() || !self.path.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("warning: could not remove cgroup {}", self.path.display());
    }
}

/// A "pod" namespace joined by a veth pair to a "server host" namespace.
///
/// Pod: 198.18.0.1/24; server host: `server_ip`/24 (198.18.0.2 by default). Both namespaces are
/// created by the test and have no other links, so nothing can leave the machine.
#[derive(Debug)]
pub struct Topology {
    /// The pod's namespace: app, proxy and the captured clients live here.
    pub pod: Netns,
    /// The remote host's namespace: the servers live here.
    pub server: Netns,
    /// The pod's address.
    pub pod_ip: &'static str,
    /// The server host's address.
    pub server_ip: &'static str,
}

impl Topology {
    /// Builds the two namespaces and the veth link between them.
    pub fn new() -> Self {
        Self::with_addresses("198.18.0.1", "198.18.0.2")
    }

    /// Same, with chosen addresses in one /24.
    pub fn with_addresses(pod_ip: &'static str, server_ip: &'static str) -> Self {
        let pod = Netns::new("rtp");
        let server = Netns::new("rts");
        ip(&[
            "-n",
            pod.name(),
            "link",
            "add",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            server.name(),
        ]);
        ip(&[
            "-n",
            pod.name(),
            "addr",
            "add",
            &format!("{pod_ip}/24"),
            "dev",
            "eth0",
        ]);
        ip(&[
            "-n",
            server.name(),
            "addr",
            "add",
            &format!("{server_ip}/24"),
            "dev",
            "eth0",
        ]);
        ip(&["-n", pod.name(), "link", "set", "eth0", "up"]);
        ip(&["-n", server.name(), "link", "set", "eth0", "up"]);
        Self {
            pod,
            server,
            pod_ip,
            server_ip,
        }
    }
}

impl Default for Topology {
    fn default() -> Self {
        Self::new()
    }
}

/// A veth between the host (root namespace) and a pod, so the host itself can be a client.
/// The host end is deleted on drop (and with the pod's namespace in any case).
#[derive(Debug)]
pub struct HostLink {
    name: String,
}

impl HostLink {
    /// Links `pod` to the host: host end `host_ip/30`, pod end `eth1` with `pod_ip/30`.
    pub fn new(pod: &Netns, host_ip: &str, pod_ip: &str) -> Self {
        let name = unique_name("rth");
        ip(&[
            "link",
            "add",
            &name,
            "type",
            "veth",
            "peer",
            "name",
            "eth1",
            "netns",
            pod.name(),
        ]);
        let link = Self { name };
        ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &link.name]);
        ip(&[
            "-n",
            pod.name(),
            "addr",
            "add",
            &format!("{pod_ip}/30"),
            "dev",
            "eth1",
        ]);
        ip(&["link", "set", &link.name, "up"]);
        ip(&["-n", pod.name(), "link", "set", "eth1", "up"]);
        link
    }
}

impl Drop for HostLink {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.name])
            .status();
    }
}

/// Connects from the test process itself (the host's namespace) and reads one reply line,
/// in the probe client's JSON shape.
pub fn host_client(dst: &str) -> serde_json::Value {
    use std::io::{BufRead as _, Write as _};
    let result = (|| -> std::io::Result<serde_json::Value> {
        let addr = dst.parse().map_err(std::io::Error::other)?;
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(b"hi\n")?;
        let mut reply = String::new();
        std::io::BufReader::new(&s).read_line(&mut reply)?;
        Ok(serde_json::json!({"ok": true, "reply": reply.trim_end()}))
    })();
    result.unwrap_or_else(|e| serde_json::json!({"ok": false, "error": e.to_string()}))
}
