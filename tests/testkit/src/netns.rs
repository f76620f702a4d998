//! Network namespaces of our own (`ip netns add`, unique names, deleted on drop), veth links
//! between them, the pod/server-host topology and a host link; nothing routes off the machine.
use std::{
    ffi::OsStr,
    fs::File,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context as _};

use crate::env::unique_name;

/// Runs `ip ARGS`; fails with its stderr.
pub fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Runs `f` on a fresh thread that has entered the network namespace at `path`; sockets
/// created there stay in it wherever they are used later. A panic in `f` is resumed here.
pub fn in_netns<T: Send + 'static>(
    path: &Path,
    f: impl FnOnce() -> T + Send + 'static,
) -> anyhow::Result<T> {
    let path = path.to_path_buf();
    let thread = std::thread::spawn(move || -> anyhow::Result<T> {
        let file = File::open(&path).with_context(|| format!("open {}", path.display()))?;
        nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET)
            .with_context(|| format!("setns {}", path.display()))?;
        Ok(f())
    });
    match thread.join() {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// A named network namespace with a unique name and its loopback up, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates `<PREFIX><unique suffix>` with `lo` up.
    pub fn new(prefix: &str) -> anyhow::Result<Self> {
        let name = unique_name(prefix);
        ip(&["netns", "add", &name])?;
        let ns = Self { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its bind-mount path, usable with setns.
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    /// Runs `f` on a thread inside this namespace (see [`in_netns`]).
    pub fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> anyhow::Result<T> {
        in_netns(&self.path(), f)
    }

    /// `ip netns exec NAME PROGRAM`.
    pub fn exec(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// `ip` arguments that run what follows inside this namespace as `uid`/`gid` with no
    /// supplementary groups: `netns exec NAME setpriv --reuid U --regid G --clear-groups`.
    pub fn exec_args_as(&self, uid: u32, gid: u32) -> Vec<String> {
        let (uid, gid) = (uid.to_string(), gid.to_string());
        ["netns", "exec", &self.name, "setpriv", "--reuid", &uid]
            .into_iter()
            .chain(["--regid", &gid, "--clear-groups"])
            .map(str::to_owned)
            .collect()
    }

    /// Sets sysctls (`key=value`) inside the namespace.
    pub fn sysctl(&self, settings: &[&str]) -> anyhow::Result<()> {
        let out = self
            .exec("sysctl")
            .args(["-q", "-w"])
            .args(settings)
            .output()
            .context("running sysctl")?;
        if !out.status.success() {
            bail!(
                "sysctl in {}: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Loads `rules` with `tool` (`iptables-restore`, `ip6tables-restore`,
    /// `iptables-nft-restore`, ...) inside the namespace.
    pub fn restore(&self, tool: &str, rules: &str) -> anyhow::Result<()> {
        let mut child = self
            .exec(tool)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {tool}"))?;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(rules.as_bytes())
            .with_context(|| format!("writing rules to {tool}"))?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "{tool} in {}: {}\n{rules}",
                self.name,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Joins `a` and `b` with a veth pair: `a_if` with `a_cidr` in `a`, `b_if` with `b_cidr` in
/// `b`, both up.
pub fn veth(
    (a, a_if, a_cidr): (&Netns, &str, &str),
    (b, b_if, b_cidr): (&Netns, &str, &str),
) -> anyhow::Result<()> {
    ip(&[
        "-n",
        a.name(),
        "link",
        "add",
        a_if,
        "type",
        "veth",
        "peer",
        "name",
        b_if,
        "netns",
        b.name(),
    ])?;
    for (ns, dev, cidr) in [(a, a_if, a_cidr), (b, b_if, b_cidr)] {
        ip(&["-n", ns.name(), "addr", "add", cidr, "dev", dev])?;
        ip(&["-n", ns.name(), "link", "set", dev, "up"])?;
    }
    Ok(())
}

/// A "pod" namespace joined by a veth pair (`eth0` on both ends) to a "server host" namespace,
/// in one /24. Both are ours and have no other links, so nothing can leave the machine.
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
    /// Pod 198.18.0.1, server host 198.18.0.2 (namespaces `rtp...`, `rts...`).
    pub fn new() -> anyhow::Result<Self> {
        Self::with_addresses("198.18.0.1", "198.18.0.2")
    }

    /// Same, with chosen addresses in one /24.
    pub fn with_addresses(pod_ip: &'static str, server_ip: &'static str) -> anyhow::Result<Self> {
        Self::build(("rtp", pod_ip), ("rts", server_ip))
    }

    /// Same, with chosen namespace name prefixes.
    pub fn build(
        (pod_prefix, pod_ip): (&str, &'static str),
        (server_prefix, server_ip): (&str, &'static str),
    ) -> anyhow::Result<Self> {
        let pod = Netns::new(pod_prefix)?;
        let server = Netns::new(server_prefix)?;
        veth(
            (&pod, "eth0", &format!("{pod_ip}/24")),
            (&server, "eth0", &format!("{server_ip}/24")),
        )?;
        Ok(Self {
            pod,
            server,
            pod_ip,
            server_ip,
        })
    }
}

/// A veth between the host (the root namespace) and a namespace, so the host itself can be a
/// client. The host end is deleted on drop (and with the namespace in any case).
#[derive(Debug)]
pub struct HostLink {
    name: String,
}

impl HostLink {
    /// Links `ns` to the host: host end `host_ip/30`, namespace end `eth1` with `ns_ip/30`.
    pub fn new(ns: &Netns, host_ip: &str, ns_ip: &str) -> anyhow::Result<Self> {
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
            ns.name(),
        ])?;
        let link = Self { name };
        ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &link.name])?;
        ip(&[
            "-n",
            ns.name(),
            "addr",
            "add",
            &format!("{ns_ip}/30"),
            "dev",
            "eth1",
        ])?;
        ip(&["link", "set", &link.name, "up"])?;
        ip(&["-n", ns.name(), "link", "set", "eth1", "up"])?;
        Ok(link)
    }
}

impl Drop for HostLink {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.name])
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{env::privileged_or_skip, Listen};

    fn listed(name: &str) -> bool {
        let out = Command::new("ip").args(["netns", "list"]).output();
        out.is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.split_whitespace().next() == Some(name))
        })
    }

    #[test]
    fn a_topology_links_two_namespaces_and_is_gone_on_drop() {
        if !privileged_or_skip("a_topology_links_two_namespaces") {
            return;
        }
        let topo = Topology::new().expect("topology");
        let (pod, server) = (topo.pod.name().to_owned(), topo.server.name().to_owned());
        assert!(listed(&pod) && listed(&server));
        let listener = Listen::on("198.18.0.2:7999")
            .netns(&topo.server)
            .tcp()
            .expect("listen in the server host");
        let connected = topo
            .pod
            .run(|| std::net::TcpStream::connect("198.18.0.2:7999").map(|_| ()))
            .expect("enter the pod");
        assert!(connected.is_ok(), "{connected:?}");
        assert!(listener.accept().is_ok());
        assert_eq!(
            topo.pod.exec_args_as(1337, 1337)[..4],
            ["netns", "exec", pod.as_str(), "setpriv"]
        );
        drop(topo);
        assert!(!listed(&pod) && !listed(&server), "namespaces left");
    }
}
