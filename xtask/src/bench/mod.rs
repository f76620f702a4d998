//! `cargo xtask bench`: direct, explicit proxy, eBPF and Istio's iptables (legacy and nft), side
//! by side in one process tree, interleaved rounds, reported as medians and per-round ratios.
mod report;
mod scene;
mod stats;
mod workloads;

use std::{
    collections::BTreeMap,
    io::Write as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::{AtomicBool, Ordering},
    time::Instant,
};

use anyhow::{bail, Context as _};
use nix::sys::signal::{SigSet, Signal};
use scene::{Cg, Mode, Ns, Proc};
use serde_json::Value;
use stats::Sample;

use crate::{build, demo, setup, util};

/// How big a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// The published run (BENCHMARKS.md).
    Full,
    /// Under two minutes.
    Quick,
    /// Seconds; keeps the harness working in `cargo xtask test`.
    Tiny,
}

struct Params {
    rounds: usize,
    duration_ms: u64,
    concurrency: usize,
    bulk_mib: u64,
    rule_counts: Vec<usize>,
}

impl Params {
    fn of(size: Size) -> Self {
        match size {
            Size::Full => Self {
                rounds: 7,
                duration_ms: 2000,
                concurrency: 16,
                bulk_mib: 512,
                rule_counts: vec![0, 100, 1000, 10_000],
            },
            Size::Quick => Self {
                rounds: 5,
                duration_ms: 400,
                concurrency: 16,
                bulk_mib: 64,
                rule_counts: vec![0, 100, 1000, 10_000],
            },
            Size::Tiny => Self {
                rounds: 5,
                duration_ms: 60,
                concurrency: 4,
                bulk_mib: 2,
                rule_counts: vec![0, 100],
            },
        }
    }
}

/// One pod namespace set up for one mode. Fields drop in order: capture, proxy, cgroup, netns.
struct Pod {
    attach: Option<Proc>,
    proxy: Option<Proc>,
    cgroup: Option<Cg>,
    mode: Mode,
    target: SocketAddr,
    ns: Ns,
}

struct Bench {
    bin: PathBuf,
    golden: String,
    state_dir: PathBuf,
    cg_root: PathBuf,
    id: u32,
    app: Ns,
    app_server: Proc,
    pods: Vec<Pod>,
    samples: Vec<Sample>,
    scratch: PathBuf,
}

/// Set by the signal thread on SIGINT/SIGTERM/SIGHUP; the run stops at the next sample and
/// its guards remove every namespace, cgroup and process.
static ABORT: AtomicBool = AtomicBool::new(false);

fn progress(msg: &str) -> anyhow::Result<()> {
    if ABORT.load(Ordering::SeqCst) {
        bail!("interrupted; cleaning up");
    }
    eprint!("\r\x1b[2K[bench] {msg}");
    let _ = std::io::stderr().flush();
    Ok(())
}

fn watch_signals() -> anyhow::Result<()> {
    let mut set = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(s);
    }
    // Blocked here and in every thread spawned later; children get a clean mask from std.
    set.thread_block().context("blocking signals")?;
    std::thread::spawn(move || {
        if set.wait().is_ok() {
            ABORT.store(true, Ordering::SeqCst);
            eprintln!("\n[bench] signal received: stopping after the current sample");
        }
    });
    Ok(())
}

impl Bench {
    /// Starts the proxy in `ns` as uid 1337; inside `cgroup` when given (the pod model: the
    /// proxy shares the pod's cgroup, where the getsockopt and sock_ops programs attach).
    fn proxy(&self, ns: &Ns, cgroup: Option<&Path>, extra: &[String]) -> anyhow::Result<Proc> {
        let mut cmd = match cgroup {
            Some(cg) => {
                let mut c = Command::new(self.bin.join("redirect"));
                c.arg("exec").arg("--cgroup").arg(cg).args(["--", "ip"]);
                c
            }
            None => Command::new("ip"),
        };
        cmd.args([
            "netns",
            "exec",
            &ns.0,
            "setpriv",
            "--reuid",
            "1337",
            "--regid",
            "1337",
            "--clear-groups",
        ])
        .arg(self.bin.join("redirect-proxy"))
        .args(["--log-format", "off", "--no-inbound"])
        .args(extra)
        .env("RUST_LOG", "warn");
        Proc::spawn("redirect-proxy", &mut cmd, "ready")
    }

    fn attach(&self, cgroup: &Path, exclusions: usize) -> anyhow::Result<Proc> {
        let mut cmd = Command::new(self.bin.join("redirect"));
        cmd.arg("attach")
            .arg("--cgroup")
            .arg(cgroup)
            .arg("--proxy-cgroup")
            .arg(cgroup)
            .env("REDIRECT_STATE_DIR", &self.state_dir)
            .env("RUST_LOG", "warn");
        if exclusions > 0 {
            let file = self.scratch.join(format!("exclusions-{exclusions}.txt"));
            std::fs::write(&file, scene::exclusions(exclusions).join("\n"))?;
            cmd.arg("--exclude-cidr-file").arg(file);
        }
        Proc::spawn("redirect attach", &mut cmd, "ready")
    }

    fn client(&self, pod: &Pod, args: &[String]) -> anyhow::Result<Value> {
        let mut cmd = Command::new(self.bin.join("probe-load"));
        cmd.arg("--netns").arg(pod.ns.path());
        if let Some(cg) = &pod.cgroup {
            cmd.arg("--cgroup").arg(&cg.0);
        }
        let out = cmd.args(args).output().context("running probe-load")?;
        if !out.status.success() {
            bail!(
                "probe-load {args:?} ({}): {}",
                pod.mode.name(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(text.lines().last().unwrap_or_default()).context("probe-load output")
    }

    fn setup_pod(&mut self, index: u8, mode: Mode) -> anyhow::Result<()> {
        let ns = Ns::new(format!("rb{index}-{}", self.id))?;
        let app_addr = scene::link(&ns, &self.app, index)?;
        let mut pod = Pod {
            mode,
            ns,
            target: app_addr,
            proxy: None,
            cgroup: None,
            attach: None,
        };
        match mode {
            Mode::Direct => {}
            Mode::Explicit => {
                pod.proxy = Some(self.proxy(
                    &pod.ns,
                    None,
                    &["--static".into(), format!("127.0.0.1:15010={app_addr}")],
                )?);
                pod.target = "127.0.0.1:15010".parse()?;
            }
            Mode::Ebpf => {
                let cg = Cg::new(&self.cg_root, &format!("rb-{}", self.id))?;
                pod.proxy = Some(self.proxy(&pod.ns, Some(&cg.0), &[])?);
                pod.attach = Some(self.attach(&cg.0, 0)?);
                pod.cgroup = Some(cg);
            }
            Mode::IptablesLegacy | Mode::IptablesNft => {
                pod.proxy = Some(self.proxy(&pod.ns, None, &[])?);
                let restore = mode.restore().context("restore binary")?;
                scene::restore(&pod.ns, restore, &scene::sidecar_rules(&self.golden, &[]))?;
            }
        }
        self.pods.push(pod);
        Ok(())
    }

    /// Checks every proxied mode really went through its proxy (a broken capture would
    /// otherwise be measured as a fast "direct").
    fn verify(&self) -> anyhow::Result<()> {
        for pod in &self.pods {
            // A warm-up that connects at all, without errors; retried so one slow start on a
            // busy machine does not fail the run.
            let mut last = Value::Null;
            let warm = (0..3).any(|_| {
                let args = [
                    "cps",
                    "--connect",
                    &pod.target.to_string(),
                    "--duration-ms",
                    "200",
                ]
                .map(String::from);
                last = self.client(pod, &args).unwrap_or(Value::Null);
                last["connections"].as_u64().unwrap_or(0) > 0 && last["errors"].as_u64() == Some(0)
            });
            if !warm {
                bail!("{}: warm-up failed: {last}", pod.mode.name());
            }
            if pod.proxy.is_some() {
                let out = Command::new("ip")
                    .args([
                        "netns",
                        "exec",
                        &pod.ns.0,
                        "curl",
                        "-s",
                        "http://127.0.0.1:15090/stats/prometheus",
                    ])
                    .output()?;
                let text = String::from_utf8_lossy(&out.stdout);
                let through = text
                    .lines()
                    .filter(|l| {
                        l.starts_with("redirect_proxy_connections_total{direction=\"outbound\"")
                    })
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                    .sum::<u64>();
                if through == 0 {
                    bail!(
                        "{}: no connection went through the proxy; capture is not working",
                        pod.mode.name()
                    );
                }
            }
        }
        Ok(())
    }
}

fn environment(size: Size, steal_pct: f64, elapsed: f64) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let cmd = |c: &str, a: &[&str]| {
        util::output(c, a)
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    env.insert("kernel".into(), cmd("uname", &["-r"]));
    env.insert("cpus".into(), cmd("nproc", &[]));
    let model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|c| {
        c.lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
    });
    env.insert("cpu model".into(), model.unwrap_or_default());
    env.insert(
        "command".into(),
        match size {
            Size::Full => "cargo xtask bench".into(),
            Size::Quick => "cargo xtask bench --quick".into(),
            Size::Tiny => "cargo xtask bench --tiny".into(),
        },
    );
    env.insert("steal during the run".into(), format!("{steal_pct:.1}%"));
    env.insert("duration".into(), format!("{elapsed:.0} s"));
    env.insert("date".into(), cmd("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]));
    env
}

/// Runs the benchmark of `size` and writes the report into `out`.
pub fn run(size: Size, out: &Path) -> anyhow::Result<()> {
    if !util::is_root() {
        bail!("`cargo xtask bench` needs root (BPF, cgroups, network namespaces, iptables): rerun it with sudo");
    }
    watch_signals()?;
    setup::setup()?;
    build::build_ebpf()?;
    let release = size != Size::Tiny;
    build::build_bins(release)?;
    let bin = util::workspace_root().join(if release {
        "target/release"
    } else {
        "target/debug"
    });
    let golden_path = util::workspace_root()
        .join("../shared/istio-reference/capture-golden/inbound-ports-wildcard.golden");
    let golden = std::fs::read_to_string(&golden_path)
        .with_context(|| format!("reading {}", golden_path.display()))?;
    let p = Params::of(size);
    let id = std::process::id();
    let scratch = std::env::temp_dir().join(format!("redirect-bench-{id}"));
    std::fs::create_dir_all(&scratch)?;
    let app = Ns::new(format!("rba-{id}"))?;
    let mut server = Command::new("ip");
    server
        .args(["netns", "exec", &app.0])
        .arg(bin.join("probe-load"))
        .args(["server", "--listen", "0.0.0.0:8080"]);
    let app_server = Proc::spawn("app server", &mut server, "listening")?;
    let mut b = Bench {
        bin,
        golden,
        state_dir: scratch.join("state"),
        cg_root: demo::cgroup2_root()?,
        id,
        app,
        app_server,
        pods: Vec::new(),
        samples: Vec::new(),
        scratch: scratch.clone(),
    };
    let start = Instant::now();
    let steal0 = scene::steal();
    let result = (|| -> anyhow::Result<BTreeMap<String, Value>> {
        for (i, mode) in Mode::ALL.iter().enumerate() {
            progress(&format!("setting up {}", mode.name()))?;
            b.setup_pod(u8::try_from(i + 1)?, *mode)?;
        }
        b.verify()?;
        for round in 0..p.rounds {
            b.cps_round("cps", "c=1", &Mode::ALL, round, &p, 1)?;
            b.cps_round(
                "cps",
                &format!("c={}", p.concurrency),
                &Mode::ALL,
                round,
                &p,
                p.concurrency,
            )?;
        }
        for round in 0..p.rounds {
            b.keepalive_round(round, &p)?;
        }
        for round in 0..p.rounds {
            b.bulk_round(round, &p)?;
        }
        let memory = b.memory();
        let scaled = [Mode::Ebpf, Mode::IptablesLegacy, Mode::IptablesNft];
        for n in p.rule_counts.clone() {
            progress(&format!("loading {n} exclusion rules"))?;
            b.set_rules(n)?;
            for round in 0..p.rounds {
                b.cps_round(
                    "rules",
                    &format!("rules={n}"),
                    &scaled,
                    round,
                    &p,
                    p.concurrency,
                )?;
            }
        }
        let mut subnet = 100u8;
        for round in 0..p.rounds {
            for (i, _) in scaled.iter().enumerate() {
                let mode = scaled[(i + round) % scaled.len()];
                progress(&format!(
                    "enrollment round {}/{} {}",
                    round + 1,
                    p.rounds,
                    mode.name()
                ))?;
                let ms = b.enroll_once(mode, subnet)?;
                subnet += 1;
                b.push(
                    "enroll",
                    "default sidecar policy, new netns",
                    mode,
                    round,
                    ms,
                    "ms",
                    false,
                    None,
                );
            }
        }
        Ok(memory)
    })();
    let memory = result?;
    let steal1 = scene::steal();
    let steal_pct = 100.0 * (steal1.0.saturating_sub(steal0.0)) as f64
        / (steal1.1.saturating_sub(steal0.1)).max(1) as f64;
    eprintln!();
    let report = report::Report {
        environment: environment(size, steal_pct, start.elapsed().as_secs_f64()),
        samples: b.samples.clone(),
        memory,
    };
    drop(b);
    let _ = std::fs::remove_dir_all(&scratch);
    report::write(&report, out)?;
    print!("{}", report::markdown(&report));
    println!(
        "\nreport: {}/report.md, raw samples: report.json, charts: *.svg",
        out.display()
    );
    Ok(())
}

/// Checks a report has samples from every mode and parses; used by `cargo xtask test`.
pub fn check(out: &Path) -> anyhow::Result<usize> {
    let report = report::read(out)?;
    for mode in report::MODES {
        let n = report
            .samples
            .iter()
            .filter(|s| s.mode == mode && s.workload == "cps")
            .count();
        if n == 0 {
            bail!("bench smoke: mode {mode} produced no samples");
        }
    }
    for w in ["cps", "keepalive-rps", "bulk", "rules", "enroll"] {
        if !report.samples.iter().any(|s| s.workload == w) {
            bail!("bench smoke: workload {w} produced no samples");
        }
    }
    Ok(report.samples.len())
}
