//! A pod of the test's own joined to a "world" namespace that holds every remote destination,
//! the probe listener and client (their answers are `redirect_testkit::probe` types).
use std::{path::Path, process::Command, time::Duration};

use redirect_testkit::{ip, probe::ProbeResult, Child, Netns};

use crate::env::bin_path;

/// The pod's IPv4 address (inside the `-i 10.0.0.0/8` case's range on purpose: it is local).
pub const POD4: &str = "10.200.0.2";
/// The pod's IPv6 address (dual-stack cases).
pub const POD6: &str = "fd00:200::2";

/// A pod joined to its own "world" namespace that holds every remote destination.
#[derive(Debug)]
pub struct World {
    /// The pod's namespace.
    pub pod: Netns,
    /// The remote side.
    pub world: Netns,
}

/// Remote addresses the world namespace holds (IPv4): inside 10/8, 1.1/16 (mapped), 9.9/16
/// (mapped), outside everything, and behind the excluded interface.
pub const WORLD4: [&str; 5] = [
    "10.1.2.3",
    "198.18.1.1",
    "198.19.9.9",
    "192.0.2.10",
    "203.0.113.10",
];
/// Remote IPv6 addresses: inside 2001:db8::/32 and outside.
pub const WORLD6: [&str; 2] = ["2001:db8::10", "fd00:99::10"];

impl World {
    /// Builds pod + world: `eth0` (pod 10.200.0.2, fd00:200::2) to the world's default
    /// gateway, and `not-istio-nic` (10.201.0.2) routing 203.0.113.0/24.
    pub fn new(prefix: &str, ipv6: bool) -> Self {
        Self::build(prefix, ipv6, "not-istio-nic").expect("building the pod and world namespaces")
    }

    /// The same IPv4 world with the second link named `nic` (such as a Multus `net1`).
    pub fn with_nic(prefix: &str, nic: &str) -> Self {
        Self::build(prefix, false, nic).expect("building the pod and world namespaces")
    }

    fn build(prefix: &str, ipv6: bool, nic: &str) -> anyhow::Result<Self> {
        let pod = Netns::new(prefix)?;
        let world = Netns::new("rcw")?;
        let (p, w) = (pod.name().to_owned(), world.name().to_owned());
        for (dev, peer) in [("eth0", "weth0"), (nic, "wnic")] {
            ip(&[
                "-n", &p, "link", "add", dev, "type", "veth", "peer", "name", peer, "netns", &w,
            ])?;
            ip(&["-n", &p, "link", "set", dev, "up"])?;
            ip(&["-n", &w, "link", "set", peer, "up"])?;
        }
        ip(&[
            "-n",
            &p,
            "addr",
            "add",
            &format!("{POD4}/24"),
            "dev",
            "eth0",
        ])?;
        ip(&["-n", &w, "addr", "add", "10.200.0.1/24", "dev", "weth0"])?;
        ip(&["-n", &p, "addr", "add", "10.201.0.2/24", "dev", nic])?;
        ip(&["-n", &w, "addr", "add", "10.201.0.1/24", "dev", "wnic"])?;
        ip(&["-n", &p, "route", "add", "default", "via", "10.200.0.1"])?;
        ip(&[
            "-n",
            &p,
            "route",
            "add",
            "203.0.113.0/24",
            "via",
            "10.201.0.1",
            "dev",
            nic,
        ])?;
        for a in WORLD4 {
            ip(&["-n", &w, "addr", "add", &format!("{a}/32"), "dev", "lo"])?;
        }
        if ipv6 {
            ip(&[
                "-n",
                &p,
                "addr",
                "add",
                &format!("{POD6}/64"),
                "dev",
                "eth0",
                "nodad",
            ])?;
            ip(&[
                "-n",
                &w,
                "addr",
                "add",
                "fd00:200::1/64",
                "dev",
                "weth0",
                "nodad",
            ])?;
            ip(&["-n", &p, "route", "add", "default", "via", "fd00:200::1"])?;
            for a in WORLD6 {
                ip(&[
                    "-n",
                    &w,
                    "addr",
                    "add",
                    &format!("{a}/128"),
                    "dev",
                    "lo",
                    "nodad",
                ])?;
            }
            // The IPv6 DNS server of the dns-uid-gid case lives on the pod's loopback, and
            // ::6 is the proxy's IPv6 passthrough source (istio-proxy adds it to lo too).
            ip(&[
                "-n",
                &p,
                "addr",
                "add",
                "::127.0.0.53/128",
                "dev",
                "lo",
                "nodad",
            ])?;
            ip(&["-n", &p, "addr", "add", "::6/128", "dev", "lo", "nodad"])?;
        }
        Ok(Self { pod, world })
    }

    /// Gives the pod other addresses on its two links (instead of [`POD4`] and 10.201.0.2;
    /// a world of [`World::new`]):
    /// pods sharing one datapath need addresses of their own, as on a node.
    pub fn renumber(&self, eth0: &str, nic: &str) {
        self.try_renumber(eth0, nic).expect("renumbering the pod");
    }

    fn try_renumber(&self, eth0: &str, nic: &str) -> anyhow::Result<()> {
        let p = self.pod.name();
        ip(&["-n", p, "addr", "del", &format!("{POD4}/24"), "dev", "eth0"])?;
        ip(&["-n", p, "addr", "add", &format!("{eth0}/24"), "dev", "eth0"])?;
        ip(&[
            "-n",
            p,
            "addr",
            "del",
            "10.201.0.2/24",
            "dev",
            "not-istio-nic",
        ])?;
        ip(&[
            "-n",
            p,
            "addr",
            "add",
            &format!("{nic}/24"),
            "dev",
            "not-istio-nic",
        ])?;
        ip(&["-n", p, "route", "replace", "default", "via", "10.200.0.1"])?;
        Ok(())
    }
}

/// Starts `probe-listen` (as `id` when given) and waits for it to be ready.
pub fn listen(
    ns: &Netns,
    cgroup: Option<&Path>,
    id: Option<(u32, u32)>,
    name: &str,
    tcp: &[String],
    udp: &[String],
) -> Child {
    listen_at(&ns.path(), cgroup, id, name, tcp, udp)
}

/// [`listen`] in the network namespace at `netns` (one the test did not create itself, e.g.
/// a container runtime's).
pub fn listen_at(
    netns: &Path,
    cgroup: Option<&Path>,
    id: Option<(u32, u32)>,
    name: &str,
    tcp: &[String],
    udp: &[String],
) -> Child {
    let mut cmd = Command::new(bin_path("probe-listen"));
    cmd.arg("--netns").arg(netns).arg("--name").arg(name);
    if let Some((uid, gid)) = id {
        cmd.args(["--uid", &uid.to_string(), "--gid", &gid.to_string()]);
    }
    if let Some(cg) = cgroup {
        cmd.arg("--cgroup").arg(cg);
    }
    for a in tcp {
        cmd.arg("--tcp").arg(a);
    }
    for a in udp {
        cmd.arg("--udp").arg(a);
    }
    let mut child = Child::spawn(&format!("probe-listen {name}"), cmd).expect("start probe-listen");
    child
        .wait_line("its ready line", Duration::from_secs(10), |l| l == "ready")
        .expect("probe-listen ready");
    child
}

/// Runs `probe-matrix` as (uid, gid) and returns one result per probe.
pub fn probe(
    ns: &Netns,
    cgroup: Option<&Path>,
    id: Option<(u32, u32)>,
    probes: &[String],
) -> Vec<ProbeResult> {
    let mut cmd = Command::new(bin_path("probe-matrix"));
    cmd.arg("--netns").arg(ns.path());
    if let Some(cg) = cgroup {
        cmd.arg("--cgroup").arg(cg);
    }
    if let Some((uid, gid)) = id {
        cmd.args(["--uid", &uid.to_string(), "--gid", &gid.to_string()]);
    }
    cmd.arg("--");
    cmd.args(probes);
    let out = cmd.output().expect("run probe-matrix");
    assert!(
        out.status.success(),
        "probe-matrix: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    redirect_testkit::probe::parse_lines(&out.stdout).expect("probe-matrix output")
}

/// A sidecar pod's usual listeners: the proxy (15001, 15006, as uid/gid 1337), the app (80,
/// 8000, 15021, 22) and a server at 192.0.2.10:80 in the world.
pub fn sidecar_listeners(w: &World, cgroup: &Path) -> Vec<Child> {
    vec![
        listen(
            &w.pod,
            Some(cgroup),
            Some((1337, 1337)),
            "proxy",
            &["[::]:15001".into(), "[::]:15006".into()],
            &[],
        ),
        listen(
            &w.pod,
            Some(cgroup),
            None,
            "app",
            &[
                "[::]:80".into(),
                "[::]:8000".into(),
                "[::]:15021".into(),
                "[::]:22".into(),
            ],
            &[],
        ),
        listen(
            &w.world,
            None,
            None,
            "world",
            &["192.0.2.10:80".into()],
            &[],
        ),
    ]
}

/// Where a TCP connect from `(uid, gid)` in the pod (in `cgroup`) to `dst` lands (`at=... orig=...`).
pub fn reach(w: &World, cgroup: &Path, id: (u32, u32), dst: &str) -> String {
    probe(&w.pod, Some(cgroup), Some(id), &[format!("tcp:{dst}")])[0].at()
}

/// Where TCP connects from the world to the pod's [`POD4`] on each port land.
pub fn inbound_at(w: &World, ports: &[u16]) -> Vec<String> {
    let probes: Vec<String> = ports.iter().map(|p| format!("tcp:{POD4}:{p}")).collect();
    probe(&w.world, None, None, &probes)
        .iter()
        .map(ProbeResult::at)
        .collect()
}
