//! `cargo xtask run`: a dev cgroup, a pod and a server-host namespace, the node daemon with the
//! pod enrolled, the proxy, and one real redirected HTTP request shown through list, trace,
//! stats and explain; everything is removed on exit (`redirect uninstall` first).
use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use anyhow::{bail, Context as _};
use nix::sys::signal::{kill, SigSet, Signal};

use crate::{build, setup, util};

const POD_IP: &str = "198.18.0.1";
const SERVER_IP: &str = "198.18.0.2";
const SERVER_PORT: u16 = 8080;

/// Everything the demo created, undone in reverse order on drop.
#[derive(Debug, Default)]
struct Scene {
    /// Commands run first on exit (`redirect uninstall`).
    undo: Vec<Command>,
    children: Vec<(String, Child)>,
    netns: Vec<String>,
    cgroup: Option<PathBuf>,
    /// Directories removed last (the demo daemon's state directory).
    dirs: Vec<PathBuf>,
}

impl Drop for Scene {
    fn drop(&mut self) {
        for mut cmd in self.undo.drain(..).rev() {
            let _ = cmd.status();
        }
        // Then the processes (the daemon last started, first stopped), then the rest.
        for (name, child) in self.children.iter_mut().rev() {
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = kill(nix::unistd::Pid::from_raw(pid), Signal::SIGTERM);
            }
            let waited = (0..50).any(|_| {
                std::thread::sleep(Duration::from_millis(20));
                matches!(child.try_wait(), Ok(Some(_)))
            });
            if !waited {
                let _ = child.kill();
                let _ = child.wait();
            }
            eprintln!("xtask run: stopped {name}");
        }
        if let Some(cg) = &self.cgroup {
            let _ = std::fs::remove_dir(cg);
            eprintln!("xtask run: removed cgroup {}", cg.display());
        }
        for ns in self.netns.iter().rev() {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
            eprintln!("xtask run: removed netns {ns}");
        }
        for dir in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    util::run(Command::new("ip").args(args))
}

/// The cgroup v2 mount point, from /proc/self/mountinfo.
pub fn cgroup2_root() -> anyhow::Result<PathBuf> {
    let text =
        std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    text.lines()
        .find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mount_point = left.split_whitespace().nth(4)?;
            (right.split_whitespace().next()? == "cgroup2").then(|| PathBuf::from(mount_point))
        })
        .context("no cgroup v2 filesystem is mounted")
}

/// Spawns a child whose stdout lines are echoed with a prefix and forwarded to a channel.
fn spawn_logged(
    scene: &mut Scene,
    name: &str,
    cmd: &mut Command,
) -> anyhow::Result<mpsc::Receiver<String>> {
    // Own process group: Ctrl-C reaches only xtask, which then stops children in order.
    let mut child = std::os::unix::process::CommandExt::process_group(cmd, 0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    let stdout = child.stdout.take().context("piped stdout")?;
    let (tx, rx) = mpsc::channel();
    let prefix = name.to_owned();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("[{prefix}] {line}");
            let _ = tx.send(line);
        }
    });
    scene.children.push((name.to_owned(), child));
    Ok(rx)
}

fn wait_for(
    rx: &mpsc::Receiver<String>,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> anyhow::Result<()> {
    loop {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) if pred(&line) => return Ok(()),
            Ok(_) => {}
            Err(_) => bail!("timed out waiting for {what}"),
        }
    }
}

/// Runs the demo; with `once`, exits after the request instead of waiting for Ctrl-C.
pub fn run(once: bool) -> anyhow::Result<()> {
    if !util::is_root() {
        bail!(
            "`cargo xtask run` needs root (BPF, cgroups, network namespaces): rerun it with sudo"
        );
    }
    setup::setup()?;
    build::build_ebpf()?;
    build::build_bins(false)?;
    let bin = util::workspace_root().join("target/debug");
    let redirect = bin.join("redirect");

    let mut signals = SigSet::empty();
    signals.add(Signal::SIGINT);
    signals.add(Signal::SIGTERM);
    signals.thread_block().context("blocking SIGINT")?;

    let mut scene = Scene::default();
    let id = std::process::id();
    let (pod, srv) = (format!("rdev-pod-{id}"), format!("rdev-srv-{id}"));
    for ns in [&pod, &srv] {
        ip(&["netns", "add", ns])?;
        scene.netns.push(ns.clone());
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
    }
    ip(&[
        "-n", &pod, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", &srv,
    ])?;
    ip(&[
        "-n",
        &pod,
        "addr",
        "add",
        &format!("{POD_IP}/24"),
        "dev",
        "eth0",
    ])?;
    ip(&[
        "-n",
        &srv,
        "addr",
        "add",
        &format!("{SERVER_IP}/24"),
        "dev",
        "eth0",
    ])?;
    ip(&["-n", &pod, "link", "set", "eth0", "up"])?;
    ip(&["-n", &srv, "link", "set", "eth0", "up"])?;
    let cgroup = cgroup2_root()?.join(format!("redirect-dev-{id}"));
    std::fs::create_dir(&cgroup).with_context(|| format!("mkdir {}", cgroup.display()))?;
    scene.cgroup = Some(cgroup.clone());
    println!(
        "xtask run: pod netns {pod} ({POD_IP}), server netns {srv} ({SERVER_IP}), cgroup {}",
        cgroup.display()
    );

    let server = spawn_logged(
        &mut scene,
        "server",
        Command::new("ip")
            .args(["netns", "exec", &srv])
            .arg(bin.join("probe-server"))
            .args([
                "--listen",
                &format!("{SERVER_IP}:{SERVER_PORT}"),
                "--tag",
                "demo",
                "--http",
            ]),
    )?;
    wait_for(&server, "the server", |l| l.starts_with("listening"))?;
    // The node daemon of this demo (its own pin and state directories, attached at the dev
    // cgroup), then the pod enrolled with istio-init's arguments.
    let dev_dir = format!("/run/redirect/dev-{id}");
    let dev_pins = format!("/sys/fs/bpf/redirect-dev-{id}");
    std::env::set_var("REDIRECT_DAEMON_DIR", &dev_dir);
    std::env::set_var("REDIRECT_BPFFS", &dev_pins);
    let mut uninstall = Command::new(&redirect);
    uninstall.arg("uninstall");
    scene.undo.push(uninstall);
    scene.dirs.push(PathBuf::from(&dev_dir));
    let daemon = spawn_logged(
        &mut scene,
        "redirect daemon",
        Command::new(&redirect)
            .arg("daemon")
            .arg("--cgroup")
            .arg(&cgroup),
    )?;
    wait_for(&daemon, "redirect daemon", |l| l.starts_with("ready"))?;
    util::run(Command::new(&redirect).args([
        "enroll",
        "--netns",
        &pod,
        "--istio-args",
        "-p 15001 -z 15006 -u 1337 -m REDIRECT -i '*' -x '' -b '*' -d 15090,15021,15020",
    ]))?;
    // The proxy runs in the pod's cgroup, where the datapath answers SO_ORIGINAL_DST.
    let proxy = spawn_logged(
        &mut scene,
        "proxy",
        Command::new(&redirect)
            .args(["exec", "--cgroup"])
            .arg(&cgroup)
            .arg("--")
            .arg("ip")
            .args(util::proxy_user_args(&pod))
            .arg(bin.join("redirect-proxy")),
    )?;
    wait_for(&proxy, "the proxy", |l| l.contains("redirect-proxy ready"))?;
    let url = format!("http://{SERVER_IP}:{SERVER_PORT}/");
    let explain_dst = format!("{SERVER_IP}:{SERVER_PORT}");
    let show = |title: &str, args: &[&str]| -> anyhow::Result<()> {
        println!("\nxtask run: redirect {}  ({title})", args.join(" "));
        util::run(Command::new(&redirect).args(args))
    };
    show("the pod and its policy", &["list"])?;
    let trace = spawn_logged(
        &mut scene,
        "redirect trace",
        Command::new(&redirect).args(["trace", "--netns", &pod, "--count", "1", "--seconds", "10"]),
    )?;
    std::thread::sleep(Duration::from_millis(500));
    println!("\nxtask run: curl {url} inside the captured cgroup (as root, so it is captured):");
    demo_request(&redirect, &cgroup, &pod, &url)?;
    wait_for(&trace, "the traced decision", |l| l.starts_with("pid="))?;
    std::thread::sleep(Duration::from_millis(200));
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
    println!("\nxtask run: capture stays active; try: {} exec --cgroup {} -- ip netns exec {pod} curl -s {url}", redirect.display(), cgroup.display());
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
