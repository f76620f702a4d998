//! Upgrading a pinned datapath in place (hardening finding 12): `redirect upgrade` of the next
//! layout (v6, built from this tree by `cargo xtask test` with a wider `COUNTERS` map, see
//! `xtask build-next-layout`) takes over this build's datapath while an application connects in a
//! loop: every connection before, during and after is captured with its original destination.
//! What it cannot carry over it refuses, changing nothing.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use redirect_testkit::{privileged, unique_name, until, Cgroup, Child, Netns};
use redirect_tests::{
    attached_program_ids, bin_path,
    conformance::listen,
    node::{istio_iptables, map_max_entries, ok, Node, Pins},
    wait_detached,
};

const SERVICE: &str = "192.0.2.10:80";
/// This build's layout, and the next build's (one more).
const LAYOUT: u32 = redirect_datapath::LAYOUT_VERSION;
const NEXT: u32 = LAYOUT + 1;
/// This build's `COUNTERS` slots (the next layout's map has one more).
const SLOTS: u64 = redirect_common::Counter::COUNT as u64;

/// The next layout's `redirect` (xtask builds it beside the real one).
fn next_redirect() -> PathBuf {
    let path = bin_path("redirect")
        .parent()
        .expect("bin dir")
        .join("layout-next/redirect");
    assert!(
        path.is_file(),
        "{} is missing: `cargo xtask test` builds it (or `cargo xtask build-next-layout`)",
        path.display()
    );
    path
}

fn upgrade(redirect: &Path, pins: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(redirect)
        .arg("upgrade")
        .arg("--bpffs")
        .arg(pins)
        .args(extra)
        .output()
        .expect("run redirect upgrade")
}

/// The pod's proxy on 15001, as uid 1337.
fn proxy(ns: &Netns, cgroup: &Cgroup) -> Child {
    proxy_in(ns, cgroup.path())
}

fn proxy_in(ns: &Netns, cgroup: &Path) -> Child {
    listen(
        ns,
        Some(cgroup),
        Some((1337, 1337)),
        "proxy",
        &["0.0.0.0:15001".into()],
        &[],
    )
}

/// `probe-loop` connecting from `pod` as an application (uid 1000) until stopped; its stop
/// file is removed on drop.
struct Looping {
    app: Child,
    stop: PathBuf,
}

impl Looping {
    fn start(pod: &Netns, cgroup: &Path) -> Self {
        let stop = std::env::temp_dir().join(unique_name("rupstop"));
        let mut cmd = Command::new(bin_path("probe-loop"));
        cmd.arg("--netns")
            .arg(pod.path())
            .arg("--cgroup")
            .arg(cgroup)
            .args([
                "--uid", "1000", "--gid", "1000", "--dst", SERVICE, "--every", "5",
            ])
            .arg("--until")
            .arg(&stop);
        let app = Child::spawn("probe-loop", cmd).expect("start probe-loop");
        Self { app, stop }
    }

    /// Connections done so far.
    fn done(&self) -> usize {
        self.app
            .lines()
            .iter()
            .filter_map(|l| l.strip_prefix("progress ")?.parse().ok())
            .max()
            .unwrap_or(0)
    }

    /// Waits until `n` more connections than now are done.
    fn wait_more(&self, n: usize, what: &str) {
        let from = self.done();
        until(what, Duration::from_secs(30), || self.done() >= from + n)
            .expect("the application keeps connecting");
    }

    /// Stops it and returns its summary, asserting no connection failed or escaped.
    fn finish(mut self) -> serde_json::Value {
        std::fs::write(&self.stop, b"").expect("stop file");
        self.app
            .wait_exit(Duration::from_secs(30))
            .expect("probe-loop exits");
        let summary: serde_json::Value = self
            .app
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .expect("probe-loop summary");
        assert_eq!(summary["failed"], 0, "{summary}");
        assert_eq!(summary["wrong"], 0, "{summary}");
        summary
    }
}

impl Drop for Looping {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.stop);
    }
}

/// A pod enrolled by this build (uid 1337 bypassed, all TCP captured) in a datapath of the
/// test's own.
fn enrolled_pod() -> (Pins, Cgroup, Netns) {
    let (pins, cgroup) = (Pins::new(), Cgroup::new("rup").expect("cgroup"));
    let pod = Netns::new("rupp").expect("netns");
    let out = istio_iptables(
        &pins.0,
        cgroup.path(),
        &pod.path(),
        &["-u", "1337", "-i", "*"],
    );
    ok(&out, "enroll with this build");
    (pins, cgroup, pod)
}

#[test]
fn the_next_layout_takes_over_in_place_while_an_application_keeps_connecting() {
    privileged!();
    let next = next_redirect();
    let (pins, cgroup, pod) = enrolled_pod();
    let _proxy = proxy(&pod, &cgroup);
    let before = attached_program_ids(cgroup.path());
    assert_eq!(before.len(), 12, "this build's cgroup links");

    let app = Looping::start(&pod, cgroup.path());
    app.wait_more(50, "50 connections before the upgrade");

    let out = upgrade(&next, &pins.0, &[]);
    let said = ok(&out, "redirect upgrade (next layout)");
    assert!(
        said.contains(&format!("layout v{LAYOUT}")) && said.contains(&format!("-> layout v{NEXT}")),
        "{said}"
    );
    assert!(
        said.contains("COUNTERS ("),
        "the wider map is carried over: {said}"
    );
    app.wait_more(50, "50 connections after the upgrade");
    let summary = app.finish();
    assert!(summary["ok"].as_u64().unwrap_or(0) >= 100, "{summary}");

    // The links are the same, each running a new program; the wider map is in place.
    let after = attached_program_ids(cgroup.path());
    assert_eq!(after.len(), 12, "same links");
    assert!(
        after.iter().all(|id| !before.contains(id)),
        "every link runs a new program: before {before:?}, after {after:?}"
    );
    assert_eq!(map_max_entries(&pins.0, "COUNTERS"), SLOTS + 1);
    let check = upgrade(&next, &pins.0, &["--check"]);
    assert!(check.status.success(), "up to date after the upgrade");
    // This build no longer reads it, and says what to do.
    let old = istio_iptables(
        &pins.0,
        cgroup.path(),
        &pod.path(),
        &["-u", "1337", "-i", "*"],
    );
    let err = String::from_utf8_lossy(&old.stderr);
    assert!(
        !old.status.success() && err.contains(&format!("layout v{NEXT}")),
        "{err}"
    );

    // The next build's cleanup unpins everything.
    cleanup_with(&next, &pins, &cgroup, &pod);
}

/// The next build's cleanup of `pod`, which unpins everything.
fn cleanup_with(next: &Path, pins: &Pins, cgroup: &Cgroup, pod: &Netns) {
    let out = Command::new(next)
        .arg("istio-iptables")
        .arg("--bpffs")
        .arg(&pins.0)
        .arg("--cgroup")
        .arg(cgroup.path())
        .arg("--netns")
        .arg(pod.path())
        .arg("--cleanup-only")
        .output()
        .expect("cleanup");
    ok(&out, "cleanup with the next build");
    wait_detached(cgroup.path());
}

/// Rewrites word 1 (the layout version) of the pinned layout record with bpftool.
fn set_record_version(pins: &Path, version: u8) {
    let record = pins.join("layout");
    let shown = Command::new("bpftool")
        .args(["-j", "map", "lookup", "pinned"])
        .arg(&record)
        .args(["key", "0", "0", "0", "0"])
        .output()
        .expect("bpftool lookup");
    let json: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("bpftool json");
    let mut bytes: Vec<String> = json["value"]
        .as_array()
        .expect("value bytes")
        .iter()
        .map(|b| {
            let s = b.as_str().expect("hex byte");
            s.trim_start_matches("0x").to_owned()
        })
        .collect();
    bytes[8] = format!("{version:02x}");
    let status = Command::new("bpftool")
        .args(["map", "update", "pinned"])
        .arg(&record)
        .args(["key", "0", "0", "0", "0", "value", "hex"])
        .args(&bytes)
        .status()
        .expect("bpftool update");
    assert!(status.success(), "bpftool map update");
}

#[test]
fn an_upgrade_it_cannot_carry_is_refused_and_changes_nothing() {
    privileged!();
    let next = next_redirect();
    let (pins, cgroup, _pod) = enrolled_pod();
    let same = upgrade(&bin_path("redirect"), &pins.0, &[]);
    assert!(
        ok(&same, "upgrade to the same build").contains("up to date"),
        "the same build has nothing to do"
    );
    // A datapath of a layout the next build does not upgrade from (v2: before SOCK_STATE).
    set_record_version(&pins.0, 2);
    let before = attached_program_ids(cgroup.path());
    let refused = upgrade(&next, &pins.0, &[]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "refused: {err}");
    assert!(
        err.contains("layout v2") && err.contains(&format!("layout v{NEXT}")),
        "{err}"
    );
    assert_eq!(
        attached_program_ids(cgroup.path()),
        before,
        "nothing changed"
    );
    assert_eq!(
        map_max_entries(&pins.0, "COUNTERS"),
        SLOTS,
        "no map replaced"
    );
    assert!(!pins.0.join("staged").exists(), "no staging left behind");
    drop(pins);
    wait_detached(cgroup.path());
}

/// `n` connections from `pod`, every one captured with its original destination.
fn captured_connections(pod: &Netns, cgroup: &Path, n: usize) {
    let app = Looping::start(pod, cgroup);
    app.wait_more(n, "connections");
    app.finish();
}

#[test]
fn a_new_daemon_upgrades_the_datapath_it_adopts_and_keeps_every_enrollment() {
    privileged!();
    let next = next_redirect();
    let node = Node::new();
    let pod = Netns::new("rupd").expect("netns");
    let mut daemon = node.daemon();
    let netns = pod.path().display().to_string();
    node.ok(&[
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        "-u 1337 -i '*'",
    ]);
    let _proxy = proxy_in(&pod, node.cgroup.path());
    captured_connections(&pod, node.cgroup.path(), 10);
    let before = node.link_ids();
    // The DaemonSet's rollout: the old daemon stops (capture stays pinned), the new one starts.
    daemon.terminate(Duration::from_secs(10));
    let mut cmd = Command::new(&next);
    cmd.arg("daemon")
        .arg("--cgroup")
        .arg(node.cgroup.path())
        .arg("--proxy-cgroup")
        .arg(node.cgroup.path())
        .env("REDIRECT_DAEMON_DIR", &node.dir)
        .env("REDIRECT_BPFFS", &node.pins);
    let mut new = Child::spawn("next redirect daemon", cmd).expect("start the next daemon");
    new.wait_line("its ready line", Duration::from_secs(40), |l| {
        l.starts_with("ready ")
    })
    .expect("the next daemon is ready");
    assert!(
        new.stderr_lines()
            .iter()
            .any(|l| l.contains("upgraded the pinned datapath in place")),
        "{:?}",
        new.stderr_lines()
    );
    let after = node.link_ids();
    assert_eq!(after.len(), before.len(), "same links");
    assert!(after.iter().all(|id| !before.contains(id)), "new programs");
    let list = Command::new(&next)
        .args(["list", "--json"])
        .env("REDIRECT_DAEMON_DIR", &node.dir)
        .env("REDIRECT_BPFFS", &node.pins)
        .output()
        .expect("list");
    let list = ok(&list, "list through the next daemon");
    assert!(
        list.contains(&netns),
        "the enrollment is still there: {list}"
    );
    captured_connections(&pod, node.cgroup.path(), 10);
    new.terminate(Duration::from_secs(10));
}

/// The pinned `NETNS_OUTBOUND` entries as (key bytes, value bytes), read with bpftool.
fn outbound_entries(pins: &Path) -> Vec<(Vec<String>, Vec<u8>)> {
    let shown = Command::new("bpftool")
        .args(["-j", "map", "dump", "pinned"])
        .arg(pins.join("maps").join("NETNS_OUTBOUND"))
        .output()
        .expect("bpftool dump");
    let json: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("bpftool json");
    let hex = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .expect("bytes")
            .iter()
            .map(|b| b.as_str().expect("hex byte").to_owned())
            .collect()
    };
    json.as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            let value = hex(&e["value"])
                .iter()
                .map(|b| u8::from_str_radix(b.trim_start_matches("0x"), 16).expect("hex"))
                .collect();
            (hex(&e["key"]), value)
        })
        .collect()
}

/// The `OUT_*` flags of a policy's bytes.
fn flags(value: &[u8]) -> u32 {
    let at = std::mem::offset_of!(redirect_common::outbound::OutboundPolicy, flags);
    u32::from_le_bytes(value[at..at + 4].try_into().expect("four bytes"))
}

#[test]
fn an_upgrade_completes_the_tproxy_step_of_an_older_builds_policy() {
    privileged!();
    let next = next_redirect();
    let (pins, cgroup) = (Pins::new(), Cgroup::new("rupt").expect("cgroup"));
    let pod = Netns::new("ruptp").expect("netns");
    let args = ["-u", "1337", "-m", "TPROXY", "-b", "*", "-i", "*"];
    ok(
        &istio_iptables(&pins.0, cgroup.path(), &pod.path(), &args),
        "enroll in TPROXY mode with this build",
    );
    let tproxy = redirect_common::outbound::OUT_TPROXY;
    let entries = outbound_entries(&pins.0);
    assert_eq!(entries.len(), 1, "one policy");
    let (key, value) = &entries[0];
    assert_ne!(
        flags(value) & tproxy,
        0,
        "this build writes the TPROXY step"
    );
    // As a build before layout v6 wrote it: the same policy without the flag.
    let at = std::mem::offset_of!(redirect_common::outbound::OutboundPolicy, flags);
    let mut old = value.clone();
    old[at..at + 4].copy_from_slice(&(flags(value) & !tproxy).to_le_bytes());
    let status = Command::new("bpftool")
        .args(["map", "update", "pinned"])
        .arg(pins.0.join("maps").join("NETNS_OUTBOUND"))
        .arg("key")
        .args(key)
        .args(["value", "hex"])
        .args(old.iter().map(|b| format!("{b:02x}")))
        .status()
        .expect("bpftool update");
    assert!(status.success(), "bpftool map update");
    assert_eq!(flags(&outbound_entries(&pins.0)[0].1) & tproxy, 0);

    let said = ok(
        &upgrade(&next, &pins.0, &[]),
        "redirect upgrade (next layout)",
    );
    assert!(
        said.contains("policies of older builds completed: 1"),
        "{said}"
    );
    assert_ne!(
        flags(&outbound_entries(&pins.0)[0].1) & tproxy,
        0,
        "the upgrade completes the policy"
    );
    cleanup_with(&next, &pins, &cgroup, &pod);
}
