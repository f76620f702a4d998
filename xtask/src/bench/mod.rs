//! `cargo xtask bench`: direct, explicit proxy, eBPF and Istio's iptables (legacy and nft), side
//! by side in one process tree, interleaved rounds, reported as medians and per-round ratios.
mod boot;
mod cni;
mod cni_node;
mod cri;
mod environment;
mod floor;
mod footprint;
mod phases;
mod plugin_phases;
mod pods;
mod profile;
mod report;
pub(crate) use report::check;
mod scaling;
mod scene;
mod stacks;
mod stats;
mod tax;
mod tax_per_pod;
mod workloads;

use std::{
    collections::BTreeMap,
    io::Write as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::atomic::{AtomicBool, Ordering},
    time::Instant,
};

use anyhow::{bail, Context as _};
use nix::sys::signal::{SigSet, Signal};
use redirect_testkit::{Cgroup, Child, Netns};
use scene::Mode;
use serde_json::Value;
use stats::Sample;

use crate::{build, setup, util};

/// How big a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Size {
    /// The published run (BENCHMARKS.md).
    Full,
    /// About 11 minutes on a 2-vCPU machine.
    Quick,
    /// Seconds; keeps the harness working in `cargo xtask test`.
    Tiny,
}

struct Params {
    rounds: usize,
    /// Rounds of the workloads judged against the explicit hop (short connections, keep-alive,
    /// bulk): their per-round ratios spread the most (the machine's speed drifts by 10-25%
    /// between rounds) while their targets sit within 1-2% of 1, so their medians take more.
    cps_rounds: usize,
    /// Rounds of the exclusion-rule scaling (each round loads every rule count once).
    rule_rounds: usize,
    duration_ms: u64,
    concurrency: usize,
    bulk_mib: u64,
    rule_counts: Vec<usize>,
    /// CNI ADDs one at a time per mode and round, and how many at once.
    cni_serial: usize,
    cni_parallel: usize,
    /// A node's boot: pods whose ADDs are released at once, and rounds.
    boot: (usize, usize),
    /// Sandboxes through containerd's CRI one at a time per mode and round, how many at once,
    /// and rounds.
    cri: (usize, usize, usize),
    /// Namespaces enrolled in the scaled measurement, and connections churned.
    namespaces: usize,
    churn: u64,
}

impl Params {
    fn of(size: Size) -> Self {
        match size {
            Size::Full => Self {
                rounds: 7,
                cps_rounds: 15,
                rule_rounds: 11,
                duration_ms: 2000,
                concurrency: 16,
                bulk_mib: 512,
                rule_counts: vec![0, 100, 1000, 10_000],
                cni_serial: 20,
                cni_parallel: 20,
                boot: (110, 2),
                cri: (10, 20, 3),
                namespaces: 100,
                churn: 1_000_000,
            },
            Size::Quick => Self {
                rounds: 5,
                cps_rounds: 5,
                rule_rounds: 5,
                duration_ms: 400,
                concurrency: 16,
                bulk_mib: 64,
                rule_counts: vec![0, 100, 1000, 10_000],
                cni_serial: 10,
                cni_parallel: 20,
                boot: (110, 1),
                cri: (5, 20, 1),
                namespaces: 100,
                churn: 100_000,
            },
            Size::Tiny => Self {
                rounds: 5,
                cps_rounds: 5,
                rule_rounds: 5,
                duration_ms: 60,
                concurrency: 4,
                bulk_mib: 2,
                rule_counts: vec![0, 100],
                cni_serial: 2,
                cni_parallel: 4,
                boot: (8, 1),
                cri: (1, 2, 1),
                namespaces: 10,
                churn: 2_000,
            },
        }
    }
}

/// One pod namespace set up for one mode. Fields drop in order: capture, proxy, cgroup, netns.
struct Pod {
    attach: Option<Child>,
    proxy: Option<Child>,
    cgroup: Option<Cgroup>,
    mode: Mode,
    target: SocketAddr,
    ns: Netns,
}

struct Bench {
    bin: PathBuf,
    /// The CNI plugin the ADDs exec: in a release run the image's static binary, the one
    /// `install-cni` puts on a node; in the seconds-long run this build's own.
    plugin: PathBuf,
    golden: String,
    state_dir: PathBuf,
    id: u32,
    app: Netns,
    app_server: Child,
    pods: Vec<Pod>,
    samples: Vec<Sample>,
    scratch: PathBuf,
    /// The pinned node datapath that enrollments are timed against (created on first use).
    node: Option<pods::NodeDatapath>,
    /// The daemon and apiserver of the CNI ADD workload (started on first use).
    cni: Option<cni_node::CniNode>,
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

/// The workloads `--only` can name, in the order a run takes them.
pub(crate) const WORKLOADS: [&str; 12] = [
    "cps",
    tax::WORKLOAD,
    "keepalive",
    "bulk",
    "churn",
    "rules",
    "load",
    "enroll",
    "cni",
    boot::WORKLOAD,
    "namespaces",
    "cri",
];

/// Whether a run execs the CNI plugin (the CNI ADD and boot workloads).
fn want_plugin(want: &dyn Fn(&str) -> bool) -> bool {
    want("cni") || want(boot::WORKLOAD)
}

/// Runs the benchmark of `size` (only the workloads in `only`, when it names any) and writes
/// the report into `out`.
pub(crate) fn run(size: Size, out: &Path, only: &[String], profile: bool) -> anyhow::Result<()> {
    let want = |w: &str| only.is_empty() || only.iter().any(|o| o == w);
    if !util::is_root() {
        bail!("`cargo xtask bench` needs root (BPF, cgroups, network namespaces, iptables): rerun it with sudo");
    }
    watch_signals()?;
    setup::setup()?;
    if profile {
        // `perf record` and `perf script`, installed on demand (only `--profile` samples).
        setup::install_missing(&["linux-perf".to_owned()], true)?;
    }
    build::build_ebpf()?;
    let release = size != Size::Tiny;
    build::build_bins(release)?;
    let bin = util::target_dir().join(if release { "release" } else { "debug" });
    let plugin = if release && want_plugin(&want) {
        crate::image::musl::build(crate::image::arch::Arch::Amd64)?
            .into_iter()
            .find(|p| p.ends_with("redirect-cni"))
            .context("the image's binaries hold no redirect-cni")?
    } else {
        bin.join("redirect-cni")
    };
    let golden_path =
        redirect_testkit::reference::dir().join("capture-golden/inbound-ports-wildcard.golden");
    let golden = std::fs::read_to_string(&golden_path)
        .with_context(|| format!("reading {}", golden_path.display()))?;
    let p = Params::of(size);
    let id = std::process::id();
    let scratch = std::env::temp_dir().join(format!("redirect-bench-{id}"));
    std::fs::create_dir_all(&scratch)?;
    let app = scene::netns("rba-")?;
    let mut server = app.exec(bin.join("probe-load"));
    server.args(["server", "--listen", "0.0.0.0:8080"]);
    let app_server = scene::spawn("app server", server, "listening")?;
    let mut b = Bench {
        bin,
        plugin,
        golden,
        state_dir: scratch.join("state"),
        id,
        app,
        app_server,
        pods: Vec::new(),
        samples: Vec::new(),
        scratch: scratch.clone(),
        node: None,
        cni: None,
    };
    let start = Instant::now();
    let steal0 = scene::steal();
    let result = (|| -> anyhow::Result<BTreeMap<String, Value>> {
        let mut memory = BTreeMap::new();
        if profile
            || ["cps", "keepalive", "bulk", "churn", "rules"]
                .iter()
                .any(|w| want(w))
        {
            for (i, mode) in Mode::ALL.iter().enumerate() {
                progress(&format!("setting up {}", mode.name()))?;
                b.setup_pod(u8::try_from(i + 1)?, *mode)?;
            }
            b.verify()?;
        }
        for round in (0..p.cps_rounds).filter(|_| want("cps")) {
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
        if profile {
            memory.extend(b.profile_workload(&p)?);
        }
        if want(tax::WORKLOAD) {
            memory.extend(b.tax_workload(&p, profile)?);
        }
        for round in (0..p.cps_rounds).filter(|_| want("keepalive")) {
            b.keepalive_round(round, &p)?;
        }
        for round in (0..p.cps_rounds).filter(|_| want("bulk")) {
            b.bulk_round(round, &p)?;
        }
        // The per-hook table counts runs and run time (`kernel.bpf_stats_enabled`) over the
        // churn only: counting costs every program run two clock reads, which production never
        // pays, so every workload that compares modes runs with it off.
        if want("churn") {
            memory.extend(b.memory());
            let _stats = scene::BpfStats::enable();
            memory.extend(b.churn_workload(p.churn)?);
            memory.extend(b.keepalive_hooks(&p)?);
            memory.extend(b.hook_table());
        }
        let scaled = [Mode::Ebpf, Mode::IptablesLegacy, Mode::IptablesNft];
        // Rule counts interleaved within each round (rotated), so a slow stretch of the
        // machine does not land on one count.
        for round in (0..p.rule_rounds).filter(|_| want("rules")) {
            for i in 0..p.rule_counts.len() {
                let n = p.rule_counts[(i + round) % p.rule_counts.len()];
                progress(&format!("loading {n} exclusion rules"))?;
                b.set_rules(n)?;
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
        for round in (0..p.rounds).filter(|_| want("load")) {
            b.load_round(round)?;
        }
        let mut subnet = 100u8;
        for round in (0..p.rounds).filter(|_| want("enroll")) {
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
                let variant = "default sidecar policy, new netns";
                b.samples.push(Sample::new(
                    "enroll",
                    variant,
                    mode.name(),
                    round,
                    ms,
                    "ms",
                    false,
                ));
            }
        }
        // The pod names the CNI node's apiserver serves: every eBPF pod of both workloads (one
        // at a time: the plugin's, the dynamically linked plugin's and the socket's; then those
        // at once, and the boot's).
        let (boot_pods, boot_rounds) = p.boot;
        let pods = p.rounds * (3 * p.cni_serial + p.cni_parallel) + boot_pods * boot_rounds + 1;
        if want("cni") {
            for round in 0..p.rounds {
                progress(&format!("CNI ADD round {}/{}", round + 1, p.rounds))?;
                b.cni_round(round, p.cni_serial, p.cni_parallel, pods)?;
            }
            b.enrollment_phases()?;
            b.plugin_phases()?;
        }
        if want(boot::WORKLOAD) {
            for round in 0..boot_rounds {
                progress(&format!(
                    "a node's boot: {boot_pods} ADDs at once, round {}/{boot_rounds}",
                    round + 1
                ))?;
                b.boot_round(round, boot_pods, pods)?;
            }
            memory.extend(b.boot_summary());
        }
        if want("namespaces") {
            memory.extend(b.namespaces_workload(&p)?);
        }
        if want("cri") {
            progress("CRI RunPodSandbox (containerd)")?;
            let (serial, parallel, rounds) = p.cri;
            memory.extend(b.cri_workload(serial, parallel, rounds)?);
        }
        Ok(memory)
    })();
    let mut memory = match result {
        Ok(m) => m,
        Err(e) => {
            drop(b);
            let _ = std::fs::remove_dir_all(&scratch);
            return Err(e);
        }
    };
    floor::floor(&b.samples, p.concurrency, &mut memory);
    let steal1 = scene::steal();
    let steal_pct = 100.0 * (steal1.0.saturating_sub(steal0.0)) as f64
        / (steal1.1.saturating_sub(steal0.1)).max(1) as f64;
    eprintln!();
    let report = report::Report {
        environment: environment::environment(size, only, steal_pct, start.elapsed().as_secs_f64()),
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
