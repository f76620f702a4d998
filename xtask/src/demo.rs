//! `cargo xtask run`: a dev cgroup, a pod and a server-host namespace, the proxy, the capture,
//! and one real redirected HTTP request; everything is removed on exit.
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
    children: Vec<(String, Child)>,
    netns: Vec<String>,
    cgroup: Option<PathBuf>,
}

impl Drop for Scene {
    fn drop(&mut self) {
        // Capture first (redirect attach detaches on SIGTERM), then the rest.
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
    let proxy = spawn_logged(
        &mut scene,
        "proxy",
        Command::new("ip")
            .args(util::proxy_user_args(&pod))
            .arg(bin.join("redirect-proxy")),
    )?;
    wait_for(&proxy, "the proxy", |l| l.contains("redirect-proxy ready"))?;
    let attach = spawn_logged(
        &mut scene,
        "redirect attach",
        Command::new(&redirect)
            .arg("attach")
            .arg("--cgroup")
            .arg(&cgroup),
    )?;
    wait_for(&attach, "redirect attach", |l| l.starts_with("ready"))?;

    let url = format!("http://{SERVER_IP}:{SERVER_PORT}/");
    println!("\nxtask run: curl {url} inside the captured cgroup (as root, so it is captured):");
    demo_request(&redirect, &cgroup, &pod, &url)?;
    std::thread::sleep(Duration::from_millis(200));
    println!("\nxtask run: redirect status");
    util::run(Command::new(&redirect).arg("status"))?;

    if once {
        return Ok(());
    }
    println!("\nxtask run: capture stays active; try: {} exec --cgroup {} -- ip netns exec {pod} curl -s {url}", redirect.display(), cgroup.display());
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
