//! The CNI ADD workload: `redirect-cni ADD` run as a runtime runs it (the `CNI_*` environment,
//! the configuration with a prevResult on stdin) against a running daemon that knows the pod
//! from its watch of a recorded-object apiserver (no kube-apiserver can run here), timed from
//! the exec to its exit (it exits only once the pod's policy is in the kernel's maps); beside
//! istio-cni's path, an `iptables-restore` of the pod's rules inside its netns (legacy and nft),
//! timed the same way. One at a time and many at once (the kubelet starts pods in parallel).
//! Every pod is then checked to be captured with a real connect, so a broken path is never
//! measured as a fast one.
use std::{
    io::Write as _,
    process::{Command, Stdio},
    sync::{Arc, Barrier},
    time::Instant,
};

use anyhow::{bail, Context as _};
use redirect_testkit::{probe::Load, Cgroup, Child, Netns};
use serde_json::json;

use super::{
    scene::{self, Mode},
    stats::Sample,
    Bench,
};

pub(super) const NODE: &str = "bench-node";
/// Where captured connects are sent: on the pod's own `eth0` network, where nothing answers, so
/// an uncaptured one goes nowhere (and never off the box).
const TARGET: &str = "198.19.255.254:80";

/// One pod of the workload: a netns with an address and the proxy's stand-in listening.
pub(super) struct CniPod {
    _detector: Child,
    ns: Netns,
    cg: Option<Cgroup>,
    ip: String,
    name: String,
}

impl Bench {
    /// A new pod namespace for `mode` with address `198.19.X.Y/16` on `eth0`, a veth whose peer
    /// stays in the namespace (nothing answers there).
    pub(super) fn cni_pod(&mut self, mode: Mode, index: usize) -> anyhow::Result<CniPod> {
        let ns = scene::netns("rbp-")?;
        let ip = format!("198.19.{}.{}", index / 250, index % 250 + 1);
        for args in [
            vec![
                "link", "add", "eth0", "type", "veth", "peer", "name", "eth1",
            ],
            vec!["addr", "add", &format!("{ip}/16"), "dev", "eth0"],
            vec!["link", "set", "eth0", "up"],
            vec!["link", "set", "eth1", "up"],
        ] {
            let mut full = vec!["-n", ns.name()];
            full.extend(args);
            redirect_testkit::ip(&full)?;
        }
        let mut detector = ns.exec(self.bin.join("probe-load"));
        detector.args(["server", "--listen", "127.0.0.1:15001", "--greeting", "C"]);
        let detector = scene::spawn("capture detector", detector, "listening")?;
        let (cg, name) = if mode == Mode::Ebpf {
            let node = self.cni.as_mut().context("CNI node")?;
            let name = format!("pod-{}", node.next);
            node.next += 1;
            (Some(node.node.cgroup.child(&name)?), name)
        } else {
            (None, String::new())
        };
        Ok(CniPod {
            _detector: detector,
            ns,
            cg,
            ip,
            name,
        })
    }

    /// The command that captures `pod` in `mode`, and what it reads on stdin.
    pub(super) fn capture_cmd(
        &self,
        mode: Mode,
        pod: &CniPod,
        command: &str,
    ) -> anyhow::Result<(Command, String)> {
        if mode != Mode::Ebpf {
            let mut cmd = pod.ns.exec(mode.restore().context("restore binary")?);
            cmd.stdin(Stdio::piped());
            return Ok((cmd, scene::sidecar_rules(&self.golden, &[])));
        }
        self.plugin_cmd(&self.plugin, pod, command)
    }

    /// `plugin` run for `pod` as a runtime runs it, and what it reads on stdin.
    fn plugin_cmd(
        &self,
        plugin: &std::path::Path,
        pod: &CniPod,
        command: &str,
    ) -> anyhow::Result<(Command, String)> {
        let node = self.cni.as_ref().context("CNI node")?;
        // `log_level` as `install-cni` writes it: the plugin's line per ADD (with its phases)
        // is part of what a node pays.
        let conf = json!({
            "cniVersion": "1.0.0", "name": "bench", "type": "redirect-cni",
            "daemon_socket": node.node.dir.join("daemon.sock"), "log_level": "info",
            "exclude_namespaces": ["kube-system"],
            "prevResult": {"cniVersion": "1.0.0", "ips": [{"address": format!("{}/16", pod.ip)}]},
        });
        let mut cmd = Command::new(plugin);
        cmd.env_clear()
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", format!("sandbox-{}", pod.name))
            .env("CNI_NETNS", pod.ns.path())
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", self.bin.as_os_str())
            .env(
                "CNI_ARGS",
                format!(
                    "IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME={0};K8S_POD_INFRA_CONTAINER_ID=sandbox-{0};K8S_POD_UID=uid-{0}",
                    pod.name
                ),
            )
            .stdin(Stdio::piped());
        Ok((cmd, conf.to_string()))
    }

    /// Checks `pod` is captured: a connect from it lands on its proxy's stand-in.
    pub(super) fn assert_captured(&self, mode: Mode, pod: &CniPod) -> anyhow::Result<()> {
        let mut cmd = Command::new(self.bin.join("probe-load"));
        cmd.arg("--netns").arg(pod.ns.path());
        if let Some(cg) = &pod.cg {
            cmd.arg("--cgroup").arg(cg.path());
        }
        let out = cmd
            .args([
                "until-captured",
                "--connect",
                TARGET,
                "--timeout-ms",
                "3000",
            ])
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let last = text.lines().last().unwrap_or_default();
        match serde_json::from_str(last) {
            Ok(Load::UntilCaptured { captured: true, .. }) => Ok(()),
            _ => bail!(
                "{}: a pod is not captured after its ADD returned: {last}",
                mode.name()
            ),
        }
    }

    /// The plugin's ADD request sent straight to the daemon's socket (what `redirect-cni`
    /// sends, without its exec): milliseconds from connect to the answer, which the daemon
    /// gives once the pod's policy is in the kernel's maps.
    fn socket_add(&self, pod: &CniPod) -> anyhow::Result<f64> {
        let request = json!({
            "v": 2,
            "call": "pod_add",
            "pod": {"namespace": "bench", "name": pod.name, "uid": format!("uid-{}", pod.name),
                    "container_id": format!("sandbox-{}", pod.name)},
            "netns": pod.ns.path(),
            "ips": [pod.ip],
        });
        let (ms, answer) = self.socket_request(&request)?;
        if answer["ok"] != true || answer["answer"]["pod"]["meshed"] != true {
            bail!("pod_add through the daemon's socket: {answer}");
        }
        Ok(ms)
    }

    /// The daemon's cheapest request (`status`: it answers, reading nothing) on the same
    /// socket: what an ADD's round trip costs before any enrollment work (the connect, the
    /// daemon's and the client's wake-ups, the frames), measured in the same state of the
    /// machine as the ADD next to it.
    fn socket_status(&self) -> anyhow::Result<f64> {
        let (ms, answer) = self.socket_request(&json!({"v": 2, "call": "status"}))?;
        if answer["ok"] != true {
            bail!("status through the daemon's socket: {answer}");
        }
        Ok(ms)
    }

    /// Sends one request line to the CNI daemon's socket: milliseconds from connect to the
    /// whole answer line, and the answer.
    fn socket_request(
        &self,
        request: &serde_json::Value,
    ) -> anyhow::Result<(f64, serde_json::Value)> {
        use std::io::BufRead as _;
        let node = self.cni.as_ref().context("CNI node")?;
        let mut line = request.to_string();
        line.push('\n');
        let t0 = Instant::now();
        let mut stream = std::os::unix::net::UnixStream::connect(node.node.dir.join("daemon.sock"))
            .context("connecting to the daemon's socket")?;
        stream.write_all(line.as_bytes())?;
        let mut answer = String::new();
        std::io::BufReader::new(&stream).read_line(&mut answer)?;
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        let v = serde_json::from_str(&answer)
            .with_context(|| format!("the daemon's answer {answer:?}"))?;
        Ok((ms, v))
    }

    /// Every line the CNI workload's daemon logged so far (its log file).
    pub(super) fn cni_daemon_lines(&self) -> anyhow::Result<Vec<String>> {
        let log = self.scratch.join("cni-daemon.log");
        let text = std::fs::read_to_string(&log)
            .with_context(|| format!("reading the CNI daemon's log {}", log.display()))?;
        Ok(text.lines().map(str::to_owned).collect())
    }

    /// Unenrolls an eBPF pod (CNI DEL, not timed).
    pub(super) fn cni_del(&self, mode: Mode, pod: &CniPod) -> anyhow::Result<()> {
        if mode == Mode::Ebpf {
            let (mut cmd, conf) = self.capture_cmd(mode, pod, "DEL")?;
            timed(&mut cmd, &conf).context("CNI DEL")?;
        }
        Ok(())
    }

    /// One round of the CNI workload: `serial` ADDs one at a time per mode (interleaved), then
    /// `parallel` at once per mode; samples paired across modes by (round, index).
    pub(super) fn cni_round(
        &mut self,
        round: usize,
        serial: usize,
        parallel: usize,
        pods: usize,
    ) -> anyhow::Result<()> {
        self.cni_node(pods)?;
        let modes = [Mode::Ebpf, Mode::IptablesLegacy, Mode::IptablesNft];
        for i in 0..serial {
            for mode in modes {
                let pod = self.cni_pod(mode, i)?;
                let (mut cmd, input) = self.capture_cmd(mode, &pod, "ADD")?;
                let ms = timed(&mut cmd, &input).with_context(|| format!("{} ADD", mode.name()))?;
                if mode == Mode::Ebpf {
                    let node = self.cni.as_mut().context("CNI node")?;
                    node.exec_ms.push((pod.name.clone(), ms));
                }
                self.assert_captured(mode, &pod)?;
                self.cni_del(mode, &pod)?;
                self.samples
                    .push(one_at_a_time(mode.name(), round * serial + i, ms));
            }
            // The same plugin built as this build's other binaries are (glibc, dynamically
            // linked), where the run execs the image's static one: what the link costs.
            let dynamic = self.bin.join("redirect-cni");
            if self.plugin != dynamic {
                let pod = self.cni_pod(Mode::Ebpf, i)?;
                let (mut cmd, input) = self.plugin_cmd(&dynamic, &pod, "ADD")?;
                let ms = timed(&mut cmd, &input).context("ADD of the dynamic plugin")?;
                self.assert_captured(Mode::Ebpf, &pod)?;
                self.cni_del(Mode::Ebpf, &pod)?;
                self.samples.push(one_at_a_time(
                    "ebpf: plugin linked dynamically",
                    round * serial + i,
                    ms,
                ));
            }
            // The floor of any exec-based path: one exec of a program that does nothing.
            let ms = timed(Command::new("true").stdin(Stdio::piped()), "")?;
            self.samples
                .push(one_at_a_time("floor: exec of true", round * serial + i, ms));
            // The floor of the socket path: a request the daemon answers with no work, after
            // the same kind of idle gap as the ADD below (the iptables modes' pods ran since
            // the daemon's last request; here the next pod is built).
            let ms = self.socket_status()?;
            self.samples.push(one_at_a_time(
                "floor: daemon socket, status",
                round * serial + i,
                ms,
            ));
            // The daemon's part alone: the same request on its socket, no exec.
            let pod = self.cni_pod(Mode::Ebpf, i)?;
            let ms = self.socket_add(&pod)?;
            self.assert_captured(Mode::Ebpf, &pod)?;
            self.cni_del(Mode::Ebpf, &pod)?;
            self.samples
                .push(one_at_a_time("ebpf: daemon socket", round * serial + i, ms));
        }
        for mode in modes {
            let pods: Vec<CniPod> = (0..parallel)
                .map(|i| self.cni_pod(mode, i))
                .collect::<anyhow::Result<_>>()?;
            let cmds = pods
                .iter()
                .map(|p| self.capture_cmd(mode, p, "ADD"))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let (_, runs) = at_once(cmds)?;
            for (i, run) in runs.into_iter().enumerate() {
                let (spawned, exited) = run.with_context(|| format!("{} ADD", mode.name()))?;
                let ms = exited.saturating_duration_since(spawned).as_secs_f64() * 1000.0;
                let variant = format!("{parallel} at once");
                self.samples.push(Sample::new(
                    "cni-add",
                    &variant,
                    mode.name(),
                    round * parallel + i,
                    ms,
                    "ms",
                    false,
                ));
            }
            for pod in &pods {
                self.assert_captured(mode, pod)?;
                self.cni_del(mode, pod)?;
            }
        }
        Ok(())
    }
}

/// Runs `cmd` with `input` on stdin; milliseconds from spawn to exit. Fails unless it exits 0.
fn timed(cmd: &mut Command, input: &str) -> anyhow::Result<f64> {
    let (spawned, exited) = run_to_exit(cmd, input)?;
    Ok(exited.saturating_duration_since(spawned).as_secs_f64() * 1000.0)
}

/// Runs `cmd` with `input` on stdin to its exit: the instants it was spawned and it exited.
/// Fails unless it exits 0.
fn run_to_exit(cmd: &mut Command, input: &str) -> anyhow::Result<(Instant, Instant)> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let spawned = Instant::now();
    let mut child = cmd.spawn().context("spawn")?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(input.as_bytes())?;
    let out = child.wait_with_output()?;
    let exited = Instant::now();
    if !out.status.success() {
        bail!(
            "exit {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok((spawned, exited))
}

/// Runs every command at once, one thread each, released together (as a kubelet starts
/// pods): the instant of the release, and each command's spawn and exit instants, in order.
pub(super) type Runs = Vec<anyhow::Result<(Instant, Instant)>>;

/// See [`Runs`].
pub(super) fn at_once(cmds: Vec<(Command, String)>) -> anyhow::Result<(Instant, Runs)> {
    let start = Arc::new(Barrier::new(cmds.len()));
    let handles: Vec<_> = cmds
        .into_iter()
        .map(|(mut cmd, input)| {
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                // Each thread's own view of the release: the first to run after the barrier
                // opens defines it (on a busy machine some are scheduled much later).
                let woke = Instant::now();
                (woke, run_to_exit(&mut cmd, &input))
            })
        })
        .collect();
    let mut released: Option<Instant> = None;
    let mut runs = Vec::new();
    for h in handles {
        let (woke, run) = h
            .join()
            .map_err(|_| anyhow::anyhow!("a thread running a command panicked"))?;
        released = Some(released.map_or(woke, |r| r.min(woke)));
        runs.push(run);
    }
    Ok((released.unwrap_or_else(Instant::now), runs))
}

/// A sample of the CNI ADD one at a time: `mode`'s `ms` for pod `index` of the run.
fn one_at_a_time(mode: &str, index: usize, ms: f64) -> Sample {
    Sample::new("cni-add", "one at a time", mode, index, ms, "ms", false)
}
