//! Per-mode pod setup: proxy, capture (eBPF attach or Istio's rules), client runs, warm-up check.
use std::{path::Path, process::Command};

use anyhow::{bail, Context as _};
use redirect_testkit::{probe::Load, Cgroup, Child, Netns, Node};

use super::{
    scene::{self, Mode},
    Bench, Pod,
};

impl Bench {
    /// Starts the proxy in `ns` as uid 1337; inside `cgroup` when given (the pod model: the
    /// proxy shares the pod's cgroup, where the getsockopt and sock_ops programs attach).
    pub(super) fn proxy(
        &self,
        ns: &Netns,
        cgroup: Option<&Path>,
        extra: &[String],
    ) -> anyhow::Result<Child> {
        let mut cmd = match cgroup {
            Some(cg) => {
                let mut c = Command::new(self.bin.join("redirect"));
                c.arg("exec").arg("--cgroup").arg(cg).args(["--", "ip"]);
                c
            }
            None => Command::new("ip"),
        };
        cmd.args(ns.exec_args_as(1337, 1337))
            .arg(self.bin.join("redirect-proxy"))
            .args(["--log-format", "off", "--no-inbound"])
            .args(extra)
            .env("RUST_LOG", "warn");
        scene::spawn("redirect-proxy", cmd, "ready")
    }

    pub(super) fn attach(&self, cgroup: &Path, exclusions: usize) -> anyhow::Result<Child> {
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
        scene::spawn("redirect attach", cmd, "ready")
    }

    /// Runs `probe-load ARGS` in the pod (and its cgroup) and returns its result line.
    pub(super) fn client(&self, pod: &Pod, args: &[String]) -> anyhow::Result<Load> {
        let cgroup = pod.cgroup.as_ref().map(Cgroup::path);
        self.load_in(&pod.ns, cgroup, pod.mode.name(), args)
    }

    pub(super) fn setup_pod(&mut self, index: u8, mode: Mode) -> anyhow::Result<()> {
        let ns = scene::netns(&format!("rb{index}-"))?;
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
                let cg = Cgroup::new("rb-")?;
                pod.proxy = Some(self.proxy(&pod.ns, Some(cg.path()), &[])?);
                pod.attach = Some(self.attach(cg.path(), 0)?);
                pod.cgroup = Some(cg);
            }
            Mode::IptablesLegacy | Mode::IptablesNft => {
                pod.proxy = Some(self.proxy(&pod.ns, None, &[])?);
                let restore = mode.restore().context("restore binary")?;
                pod.ns
                    .restore(restore, &scene::sidecar_rules(&self.golden, &[]))?;
            }
        }
        self.pods.push(pod);
        Ok(())
    }

    /// Checks every proxied mode really went through its proxy (a broken capture would
    /// otherwise be measured as a fast "direct").
    pub(super) fn verify(&self) -> anyhow::Result<()> {
        for pod in &self.pods {
            // A warm-up that connects at all, without errors; retried so one slow start on a
            // busy machine does not fail the run.
            let mut last = None;
            let warm = (0..3).any(|_| {
                let args = [
                    "cps",
                    "--connect",
                    &pod.target.to_string(),
                    "--duration-ms",
                    "200",
                ]
                .map(String::from);
                last = self.client(pod, &args).ok();
                matches!(last, Some(Load::Cps { connections, errors: 0, .. }) if connections > 0)
            });
            if !warm {
                bail!("{}: warm-up failed: {last:?}", pod.mode.name());
            }
            if pod.proxy.is_some() {
                let out = pod
                    .ns
                    .exec("curl")
                    .args(["-s", "http://127.0.0.1:15090/stats/prometheus"])
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

/// A node datapath pinned for the enrollment workload: attached at a cgroup of its own, kept
/// alive by one bootstrap namespace's policy; enrolling a pod is then what a node does for
/// every new pod (`redirect istio-iptables` writing that namespace's maps). Unpinned on drop.
#[derive(Debug)]
pub(super) struct NodeDatapath {
    /// Its pins (`node.pins`) and where it is attached (`node.cgroup`: enrolled pods'
    /// processes run in children of it); no daemon.
    pub node: Node,
    _boot: Netns,
}

impl Bench {
    /// `redirect istio-iptables ARGS` with the sidecar's default flags, against `dir`.
    pub(super) fn istio_iptables(
        &self,
        dir: &Path,
        netns: &Path,
        extra: &[&str],
    ) -> anyhow::Result<()> {
        let out = Command::new(self.bin.join("redirect"))
            .arg("istio-iptables")
            .arg("--bpffs")
            .arg(dir)
            .arg("--netns")
            .arg(netns)
            .args(extra)
            .env("RUST_LOG", "warn")
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "redirect istio-iptables: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    /// The node datapath for enrollments, created (and timed nowhere) on first use.
    pub(super) fn node_datapath(&mut self) -> anyhow::Result<&NodeDatapath> {
        if self.node.is_none() {
            let node = Node::new(&self.bin.join("redirect"))?;
            let boot = scene::netns("rbn-")?;
            let cgroup = node.cgroup.path().display().to_string();
            self.istio_iptables(
                &node.pins,
                &boot.path(),
                &["--cgroup", &cgroup, "-u", "1337", "-i", "*"],
            )?;
            self.node = Some(NodeDatapath { node, _boot: boot });
        }
        self.node.as_ref().context("node datapath")
    }
}
