//! A pod of the caller's own joined to a "world" namespace that holds every remote
//! destination: the differential conformance suite's topology.
use crate::{ip, Netns};

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
