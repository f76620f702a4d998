//! The benchmark's namespaces, cgroups and processes, removed on drop.
use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{bail, Context as _};
use nix::sys::signal::{kill, Signal};

/// How a pod's outbound traffic reaches the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
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
    pub const ALL: [Mode; 5] = [
        Mode::Direct,
        Mode::Explicit,
        Mode::Ebpf,
        Mode::IptablesLegacy,
        Mode::IptablesNft,
    ];

    /// Report name.
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Direct => "direct",
            Mode::Explicit => "explicit",
            Mode::Ebpf => "ebpf",
            Mode::IptablesLegacy => "iptables-legacy",
            Mode::IptablesNft => "iptables-nft",
        }
    }

    /// The iptables-restore binary of an iptables mode.
    pub const fn restore(self) -> Option<&'static str> {
        match self {
            Mode::IptablesLegacy => Some("iptables-legacy-restore"),
            Mode::IptablesNft => Some("iptables-nft-restore"),
            _ => None,
        }
    }
}

/// Runs `ip ARGS`.
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

/// A spawned process that is stopped on drop.
#[derive(Debug)]
pub struct Proc {
    child: Child,
}

impl Proc {
    /// Spawns `cmd` (stdout piped) and waits up to 20 s for a stdout line containing `ready`.
    pub fn spawn(name: &str, cmd: &mut Command, ready: &str) -> anyhow::Result<Self> {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let stdout = child.stdout.take().context("stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        let want = ready.to_owned();
        std::thread::spawn(move || {
            let mut signalled = false;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if !signalled && line.contains(&want) {
                    let _ = tx.send(());
                    signalled = true;
                }
            }
        });
        let proc = Self { child };
        rx.recv_timeout(Duration::from_secs(20))
            .with_context(|| format!("{name} did not become ready"))?;
        Ok(proc)
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = kill(nix::unistd::Pid::from_raw(pid), Signal::SIGTERM);
        }
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A network namespace deleted on drop.
#[derive(Debug)]
pub struct Ns(pub String);

impl Ns {
    /// Creates it with lo up, TIME_WAIT reuse and the full ephemeral port range: at thousands
    /// of short connections per second the default range runs out in seconds (the same tuning
    /// in every mode).
    pub fn new(name: String) -> anyhow::Result<Self> {
        ip(&["netns", "add", &name])?;
        let ns = Self(name);
        ip(&["-n", &ns.0, "link", "set", "lo", "up"])?;
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.0,
                "sysctl",
                "-q",
                "-w",
                "net.ipv4.tcp_tw_reuse=1",
            ])
            .arg("net.ipv4.ip_local_port_range=1024 65535")
            .output()
            .context("running sysctl")?;
        if !out.status.success() {
            bail!(
                "sysctl in {}: {}",
                ns.0,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(ns)
    }

    /// Its bind-mount path.
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.0)
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// A cgroup directory removed on drop.
#[derive(Debug)]
pub struct Cg(pub PathBuf);

impl Cg {
    /// Creates `<cgroup2 root>/name`.
    pub fn new(root: &Path, name: &str) -> anyhow::Result<Self> {
        let path = root.join(name);
        std::fs::create_dir(&path).with_context(|| format!("mkdir {}", path.display()))?;
        Ok(Self(path))
    }
}

impl Drop for Cg {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() || !self.0.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Joins `pod` to `app` with a veth: pod `198.18.N.1/24` (eth0), app `198.18.N.2/24` (ethN).
pub fn link(pod: &Ns, app: &Ns, subnet: u8) -> anyhow::Result<SocketAddr> {
    let app_if = format!("eth{subnet}");
    ip(&[
        "-n", &pod.0, "link", "add", "eth0", "type", "veth", "peer", "name", &app_if, "netns",
        &app.0,
    ])?;
    ip(&[
        "-n",
        &pod.0,
        "addr",
        "add",
        &format!("198.18.{subnet}.1/24"),
        "dev",
        "eth0",
    ])?;
    ip(&[
        "-n",
        &app.0,
        "addr",
        "add",
        &format!("198.18.{subnet}.2/24"),
        "dev",
        &app_if,
    ])?;
    ip(&["-n", &pod.0, "link", "set", "eth0", "up"])?;
    ip(&["-n", &app.0, "link", "set", &app_if, "up"])?;
    Ok(format!("198.18.{subnet}.2:8080").parse()?)
}

/// Istio's rules for the default sidecar flags (`-i '*' -b '*' -d 15090,15021,15020`):
/// the inbound-ports-wildcard golden plus its `-d` returns and the `-i '*'` redirect, with
/// `exclusions` non-matching `-d CIDR -j RETURN` rules before the redirect.
pub fn sidecar_rules(golden: &str, exclusions: &[String]) -> String {
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
pub fn exclusions(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("100.{}.{}.{}/32", 64 + i / 65_536, (i / 256) % 256, i % 256))
        .collect()
}

/// Loads `rules` into `ns` with `restore` (iptables-legacy-restore / iptables-nft-restore).
pub fn restore(ns: &Ns, restore: &str, rules: &str) -> anyhow::Result<()> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", &ns.0, restore])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("spawning iptables-restore")?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(rules.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("{restore}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// User + system CPU milliseconds of a process so far.
pub fn cpu_ms(pid: u32) -> f64 {
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
pub fn rss_kib(pid: u32) -> u64 {
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
pub fn steal() -> (u64, u64) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecar_rules_add_excludes_and_redirect() {
        let golden = "iptables-save\n* nat\n-N ISTIO_OUTPUT\n-A ISTIO_INBOUND -p tcp --dport 15008 -j RETURN\n-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN\nCOMMIT\niptables-save\n";
        let rules = sidecar_rules(golden, &exclusions(2));
        assert!(rules.starts_with("* nat\n"));
        assert!(rules.contains("--dport 15021 -j RETURN"));
        assert!(rules.ends_with("-A ISTIO_OUTPUT -d 100.64.0.1/32 -j RETURN\n-A ISTIO_OUTPUT -j ISTIO_REDIRECT\nCOMMIT\n"), "{rules}");
    }

    #[test]
    fn exclusions_are_distinct() {
        let e = exclusions(70_000);
        assert_eq!(e[65_536], "100.65.0.0/32");
        let set: std::collections::HashSet<_> = e.iter().collect();
        assert_eq!(set.len(), 70_000);
    }
}
