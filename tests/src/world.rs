//! The conformance topology's probes: the probe listener and client in a [`World`] (the
//! testkit's pod and world namespaces; the answers are `redirect_testkit::probe` types).
use std::{path::Path, process::Command, time::Duration};

use redirect_testkit::{probe::ProbeResult, Child, Netns};

pub use redirect_testkit::world::{World, POD4, POD6, WORLD4, WORLD6};

use crate::env::bin_path;

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
