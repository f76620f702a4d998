//! The benchmark's modes, pods (namespaces, cgroups and processes are testkit guards,
//! removed on drop), Istio's rules for them and the process measurements.
use std::{net::SocketAddr, process::Command, time::Duration};

use anyhow::Context as _;
use redirect_testkit::{veth, Child, Netns, Spawn};

/// How a pod's outbound traffic reaches the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Client -> app.
    Direct,
    /// Client dials the proxy's static listener.
    Explicit,
    /// Captured by our programs.
    Ebpf,
    /// Captured by Istio's rules, iptables-legacy.
    IptablesLegacy,
    /// Captured by Istio's rules, iptables-nft.
    IptablesNft,
}

impl Mode {
    /// Every mode.
    pub(super) const ALL: [Mode; 5] = [
        Mode::Direct,
        Mode::Explicit,
        Mode::Ebpf,
        Mode::IptablesLegacy,
        Mode::IptablesNft,
    ];

    /// Report name.
    pub(super) const fn name(self) -> &'static str {
        match self {
            Mode::Direct => "direct",
            Mode::Explicit => "explicit",
            Mode::Ebpf => "ebpf",
            Mode::IptablesLegacy => "iptables-legacy",
            Mode::IptablesNft => "iptables-nft",
        }
    }

    /// The iptables-restore binary of an iptables mode.
    pub(super) const fn restore(self) -> Option<&'static str> {
        match self {
            Mode::IptablesLegacy => Some("iptables-legacy-restore"),
            Mode::IptablesNft => Some("iptables-nft-restore"),
            _ => None,
        }
    }
}

/// How long a bench process may take to say it is ready.
const READY: Duration = Duration::from_secs(20);

/// Spawns `cmd` as `name` (SIGTERM, then SIGKILL after a second, on drop) and waits for a
/// stdout line containing `ready`.
pub(super) fn spawn(name: &str, cmd: Command, ready: &str) -> anyhow::Result<Child> {
    let mut child = Spawn::new(name)
        .terminate_on_drop(Duration::from_secs(1))
        .start(cmd)?;
    child.wait_line(&format!("a line with {ready:?}"), READY, |l| {
        l.contains(ready)
    })?;
    Ok(child)
}

/// A namespace with TIME_WAIT reuse and the full ephemeral port range: at thousands of short
/// connections per second the default range runs out in seconds (the same tuning in every
/// mode).
pub(super) fn netns(prefix: &str) -> anyhow::Result<Netns> {
    let ns = Netns::new(prefix)?;
    ns.sysctl(&[
        "net.ipv4.tcp_tw_reuse=1",
        "net.ipv4.ip_local_port_range=1024 65535",
    ])?;
    Ok(ns)
}

/// Joins `pod` to `app` with a veth: pod `198.18.N.1/24` (eth0), app `198.18.N.2/24` (ethN);
/// returns the app server's address for the pod.
pub(super) fn link(pod: &Netns, app: &Netns, subnet: u8) -> anyhow::Result<SocketAddr> {
    veth(
        (pod, "eth0", &format!("198.18.{subnet}.1/24")),
        (
            app,
            &format!("eth{subnet}"),
            &format!("198.18.{subnet}.2/24"),
        ),
    )?;
    format!("198.18.{subnet}.2:8080")
        .parse()
        .context("app address")
}

/// Istio's rules for the default sidecar flags (`-i '*' -b '*' -d 15090,15021,15020`):
/// the inbound-ports-wildcard golden plus its `-d` returns and the `-i '*'` redirect, with
/// `exclusions` non-matching `-d CIDR -j RETURN` rules before the redirect.
pub(super) fn sidecar_rules(golden: &str, exclusions: &[String]) -> String {
    let mut out = String::new();
    let mut in_nat = false;
    for line in golden.lines() {
        if line == "* nat" {
            in_nat = true;
        }
        if !in_nat {
            continue;
        }
        if line == "COMMIT" {
            for cidr in exclusions {
                out.push_str(&format!("-A ISTIO_OUTPUT -d {cidr} -j RETURN\n"));
            }
            out.push_str("-A ISTIO_OUTPUT -j ISTIO_REDIRECT\nCOMMIT\n");
            break;
        }
        out.push_str(line);
        out.push('\n');
        if line == "-A ISTIO_INBOUND -p tcp --dport 15008 -j RETURN" {
            for port in [15090, 15021, 15020] {
                out.push_str(&format!(
                    "-A ISTIO_INBOUND -p tcp --dport {port} -j RETURN\n"
                ));
            }
        }
    }
    out
}

/// `n` distinct /32s in 100.64.0.0/10 that the benchmark never dials.
pub(super) fn exclusions(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("100.{}.{}.{}/32", 64 + i / 65_536, (i / 256) % 256, i % 256))
        .collect()
}

/// User + system CPU milliseconds of a process so far.
pub(super) fn cpu_ms(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some(after) = stat.rsplit_once(") ").map(|(_, a)| a) else {
        return 0.0;
    };
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 of /proc/PID/stat; `after` starts at field 3. Clock ticks are 100 Hz.
    (ticks(11) + ticks(12)) * 10.0
}

/// Resident set size of a process in KiB.
pub(super) fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// (steal, total) jiffies from /proc/stat.
pub(super) fn steal() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().next() else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    (v.get(7).copied().unwrap_or(0), v.iter().sum())
}

/// `kernel.bpf_stats_enabled` switched on while this lives (the kernel then counts each
/// program's runs and run time: the per-hook table), put back as it was on drop.
pub(super) struct BpfStats(Option<String>);

impl BpfStats {
    const PATH: &'static str = "/proc/sys/kernel/bpf_stats_enabled";

    pub(super) fn enable() -> Self {
        let before = std::fs::read_to_string(Self::PATH).ok();
        if std::fs::write(Self::PATH, "1").is_err() {
            eprintln!(
                "[bench] cannot enable {}: no per-hook cost table",
                Self::PATH
            );
        }
        Self(before)
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        if let Some(before) = &self.0 {
            let _ = std::fs::write(Self::PATH, before.trim());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecar_rules_add_excludes_and_redirect() {
        let golden =
            "iptables-save\n* nat\n-N ISTIO_OUTPUT\n-A ISTIO_INBOUND -p tcp --dport 15008 \
            -j RETURN\n-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN\nCOMMIT\niptables-save\n";
        let rules = sidecar_rules(golden, &exclusions(2));
        assert!(rules.starts_with("* nat\n"));
        assert!(rules.contains("--dport 15021 -j RETURN"));
        assert!(
            rules.ends_with(
                "-A ISTIO_OUTPUT -d 100.64.0.1/32 -j RETURN\n-A ISTIO_OUTPUT -j \
            ISTIO_REDIRECT\nCOMMIT\n"
            ),
            "{rules}"
        );
    }

    #[test]
    fn exclusions_are_distinct() {
        let e = exclusions(70_000);
        assert_eq!(e[65_536], "100.65.0.0/32");
        let set: std::collections::HashSet<_> = e.iter().collect();
        assert_eq!(set.len(), 70_000);
    }
}
