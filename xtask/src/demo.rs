//! `cargo xtask run`: a dev cgroup, a pod and a server-host namespace, the node daemon with the
//! pod enrolled, the proxy, and one real redirected HTTP request shown through list, trace,
//! stats and explain; everything is removed on exit (`redirect uninstall` first).
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{bail, Context as _};
use nix::sys::signal::{SigSet, Signal};
use redirect_testkit::{Cgroup, Child, Spawn, Topology};

use crate::{build, setup, util};

const POD_IP: &str = "198.18.0.1";
const SERVER_IP: &str = "198.18.0.2";
const SERVER_PORT: u16 = 8080;
/// How long a demo process may take to say it is ready (or to print what is awaited).
const PATIENCE: Duration = Duration::from_secs(20);

/// Everything the demo created, undone in reverse order on drop: `redirect uninstall` first,
/// then the processes (the last started first), the state directories, the cgroup and the
/// namespaces (the guards' own drops, in field order).
#[derive(Debug)]
struct Scene {
    /// Commands run first on exit (`redirect uninstall`).
    undo: Vec<Command>,
    children: Vec<Child>,
    /// Directories removed after the processes (the demo daemon's state directory).
    dirs: Vec<PathBuf>,
    cgroup: Cgroup,
    topo: Topology,
}

impl Drop for Scene {
    fn drop(&mut self) {
        for mut cmd in self.undo.drain(..).rev() {
            let _ = cmd.status();
        }
        while let Some(child) = self.children.pop() {
            let name = child.name().to_owned();
            drop(child);
            eprintln!("xtask run: stopped {name}");
        }
        for dir in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
        eprintln!(
            "xtask run: removing cgroup {}, netns {} and {}",
            self.cgroup.path().display(),
            self.topo.pod.name(),
            self.topo.server.name()
        );
    }
}

impl Scene {
    /// Starts `cmd` as `name`: its output echoed as `[name] ...`, in a process group of its
    /// own so that Ctrl-C reaches only xtask, which stops it in order.
    fn start(&mut self, name: &str, cmd: Command) -> anyhow::Result<&mut Child> {
        let child = Spawn::new(name)
            .echo()
            .own_process_group()
            .terminate_on_drop(Duration::from_secs(1))
            .start(cmd)?;
        self.children.push(child);
        self.children.last_mut().context("the child just started")
    }
}

/// Runs the demo; with `once`, exits after the request instead of waiting for Ctrl-C.
pub(crate) fn run(once: bool) -> anyhow::Result<()> {
    if !util::is_root() {
        bail!(
            "`cargo xtask run` needs root (BPF, cgroups, network namespaces): rerun it with sudo"
        );
    }
    setup::setup()?;
    build::build_ebpf()?;
    build::build_bins(false)?;
    let bin = util::target_dir().join("debug");
    let redirect = bin.join("redirect");

    let mut signals = SigSet::empty();
    signals.add(Signal::SIGINT);
    signals.add(Signal::SIGTERM);
    signals.thread_block().context("blocking SIGINT")?;

    let id = std::process::id();
    let topo = Topology::build(("rdev-pod-", POD_IP), ("rdev-srv-", SERVER_IP))?;
    let mut scene = Scene {
        undo: Vec::new(),
        children: Vec::new(),
        dirs: Vec::new(),
        cgroup: Cgroup::new("redirect-dev-")?,
        topo,
    };
    let (pod, srv) = (
        scene.topo.pod.name().to_owned(),
        scene.topo.server.name().to_owned(),
    );
    let cgroup = scene.cgroup.path().to_owned();
    println!(
        "xtask run: pod netns {pod} ({POD_IP}), server netns {srv} ({SERVER_IP}), cgroup {}",
        cgroup.display()
    );

    let mut server = scene.topo.server.exec(bin.join("probe-server"));
    server.args([
        "--listen",
        &format!("{SERVER_IP}:{SERVER_PORT}"),
        "--tag",
        "demo",
        "--http",
    ]);
    scene
        .start("server", server)?
        .wait_line("its listening line", PATIENCE, |l| {
            l.starts_with("listening")
        })?;
    // The node daemon of this demo (its own pin and state directories, attached at the dev
    // cgroup), then the pod enrolled with istio-init's arguments.
    let dev_dir = format!("/run/redirect/dev-{id}");
    let dev_pins = format!("/sys/fs/bpf/redirect-dev-{id}");
    // Every `redirect` of the demo (the undo's uninstall too) is given these two by value.
    let redirect_cmd = || {
        let mut c = Command::new(&redirect);
        c.env("REDIRECT_DAEMON_DIR", &dev_dir)
            .env("REDIRECT_BPFFS", &dev_pins);
        c
    };
    let mut uninstall = redirect_cmd();
    uninstall.arg("uninstall");
    scene.undo.push(uninstall);
    scene.dirs.push(PathBuf::from(&dev_dir));
    let mut daemon = redirect_cmd();
    daemon.arg("daemon").arg("--cgroup").arg(&cgroup);
    scene
        .start("redirect daemon", daemon)?
        .wait_line("its ready line", PATIENCE, |l| l.starts_with("ready"))?;
    util::run(redirect_cmd().args([
        "enroll",
        "--netns",
        &pod,
        "--istio-args",
        "-p 15001 -z 15006 -u 1337 -m REDIRECT -i '*' -x '' -b '*' -d 15090,15021,15020",
    ]))?;
    // The proxy runs in the pod's cgroup, where the datapath answers SO_ORIGINAL_DST.
    let mut proxy = redirect_cmd();
    proxy
        .args(["exec", "--cgroup"])
        .arg(&cgroup)
        .args(["--", "ip"])
        .args(scene.topo.pod.exec_args_as(1337, 1337))
        .arg(bin.join("redirect-proxy"));
    scene
        .start("proxy", proxy)?
        .wait_line("its ready line", PATIENCE, |l| {
            l.contains("redirect-proxy ready")
        })?;
    let proxy = scene.children.len() - 1;
    let url = format!("http://{SERVER_IP}:{SERVER_PORT}/");
    let explain_dst = format!("{SERVER_IP}:{SERVER_PORT}");
    let show = |title: &str, args: &[&str]| -> anyhow::Result<()> {
        println!("\nxtask run: redirect {}  ({title})", args.join(" "));
        util::run(redirect_cmd().args(args))
    };
    show("the pod and its policy", &["list"])?;
    let mut trace = redirect_cmd();
    trace.args(["trace", "--netns", &pod, "--count", "1", "--seconds", "10"]);
    scene.start("redirect trace", trace)?.wait_stderr_line(
        "the stream switched on",
        PATIENCE,
        |l| l.starts_with("tracing decisions"),
    )?;
    let trace = scene.children.len() - 1;
    println!("\nxtask run: curl {url} inside the captured cgroup (as root, so it is captured):");
    demo_request(&redirect, &cgroup, &pod, &url)?;
    scene.children[trace].wait_line("the traced decision", PATIENCE, |l| l.starts_with("pid="))?;
    // The proxy logs its access line when the connection is done: show it before the stats.
    scene.children[proxy].wait_line("the access line", PATIENCE, |l| {
        l.starts_with('[') && l.contains("] outbound ")
    })?;
    show(
        "decision counters of the pod, like iptables -L -v",
        &["stats", "--netns", &pod],
    )?;
    show(
        "why the app's connect went to the proxy",
        &[
            "explain",
            "--netns",
            &pod,
            "--uid",
            "0",
            "--dst",
            &explain_dst,
        ],
    )?;
    show(
        "why the proxy's own connect did not",
        &[
            "explain",
            "--netns",
            &pod,
            "--uid",
            "1337",
            "--dst",
            &explain_dst,
        ],
    )?;
    show("the node datapath", &["status"])?;

    if once {
        return Ok(());
    }
    println!(
        "\nxtask run: capture stays active; try: {} exec --cgroup {} -- ip netns exec {pod} curl \
        -s {url}",
        redirect.display(),
        cgroup.display()
    );
    println!(
        "xtask run: or watch decisions: REDIRECT_BPFFS={dev_pins} {} trace --netns {pod}",
        redirect.display()
    );
    println!("xtask run: press Ctrl-C to stop and clean up");
    let signal = signals.wait().context("waiting for Ctrl-C")?;
    println!("\nxtask run: got {signal}, cleaning up");
    Ok(())
}

fn demo_request(redirect: &Path, cgroup: &Path, pod: &str, url: &str) -> anyhow::Result<()> {
    let out = Command::new(redirect)
        .arg("exec")
        .arg("--cgroup")
        .arg(cgroup)
        .args([
            "--", "ip", "netns", "exec", pod, "curl", "-sS", "-m", "5", url,
        ])
        .output()
        .context("running curl")?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        bail!("the demo request failed ({})", out.status);
    }
    Ok(())
}
