//! The control plane of a test cluster, in the node's network namespace: etcd on the node's
//! loopback, kube-apiserver on the node's address (certificates of [`Pki`], Node and RBAC
//! authorization, no anonymous requests, the service-account signing key, an audit log of
//! every request's user and status), kube-controller-manager and kube-scheduler with client
//! certificates of their own. Each is a child ended by PID on drop; its log is a file in the
//! cluster's directory.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::Context as _;
use redirect_testkit::{Child, Spawn};

use super::pki::Pki;

/// The `kubernetes` Service's range; its first address is the in-cluster apiserver address.
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// The `kubernetes` Service's cluster IP (the kubelet gives it to every pod as
/// `KUBERNETES_SERVICE_HOST`).
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";
/// The apiserver's secure port.
pub const API_PORT: u16 = 6443;
/// The service-account tokens' issuer and audience.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Where the Kubernetes binaries are: `REDIRECT_KUBE_BIN` (`cargo xtask test` sets it to the
/// directory `cargo xtask setup` built them into).
pub fn kube_bin_dir() -> Result<PathBuf, String> {
    let dir = std::env::var_os("REDIRECT_KUBE_BIN").map(PathBuf::from).ok_or(
        "REDIRECT_KUBE_BIN is not set (cargo xtask test sets it; cargo xtask setup builds Kubernetes)",
    )?;
    for bin in [
        "etcd",
        "etcdctl",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubelet",
        "kubectl",
    ] {
        if !dir.join(bin).exists() {
            return Err(format!(
                "{} is missing (cargo xtask setup builds it)",
                dir.join(bin).display()
            ));
        }
    }
    Ok(dir)
}

/// etcd, the apiserver, the controller-manager and the scheduler.
#[derive(Debug)]
pub struct ControlPlane {
    /// The apiserver's URL.
    pub server: String,
    /// The apiserver's audit log (JSON lines).
    pub audit_log: PathBuf,
    bin: PathBuf,
    dir: PathBuf,
    netns: PathBuf,
    pki: Pki,
    node_ip: String,
    // Stopped in reverse order of start (the fields drop in declaration order).
    scheduler: Option<Child>,
    controllers: Option<Child>,
    apiserver: Option<Child>,
    etcd: Option<Child>,
}

/// The audit policy: every request's metadata (user, verb, resource, status).
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n";

impl ControlPlane {
    /// Starts etcd and the apiserver and waits until it is ready, then the controllers.
    pub fn start(
        bin: &Path,
        dir: &Path,
        netns: &Path,
        pki: &Pki,
        node_ip: &str,
    ) -> anyhow::Result<Self> {
        let audit_policy = dir.join("audit-policy.yaml");
        std::fs::write(&audit_policy, AUDIT_POLICY).context("the audit policy")?;
        let mut cp = Self {
            server: format!("https://{node_ip}:{API_PORT}"),
            audit_log: dir.join("audit.log"),
            bin: bin.to_owned(),
            dir: dir.to_owned(),
            netns: netns.to_owned(),
            pki: pki.clone(),
            node_ip: node_ip.to_owned(),
            scheduler: None,
            controllers: None,
            apiserver: None,
            etcd: None,
        };
        cp.start_etcd()?;
        cp.start_apiserver(&[])?;
        cp.start_controllers()?;
        Ok(cp)
    }

    fn spawn(&self, name: &str, args: &[String]) -> anyhow::Result<Child> {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", self.netns.display()))
            .arg(self.bin.join(name))
            .args(args);
        Spawn::new(name)
            .terminate_on_drop(Duration::from_secs(10))
            .stderr_to(&self.dir.join(format!("{name}.log")))
            .start(cmd)
    }

    fn start_etcd(&mut self) -> anyhow::Result<()> {
        let data = self.dir.join("etcd");
        let args = [
            "--name=node".to_owned(),
            format!("--data-dir={}", data.display()),
            "--listen-client-urls=http://127.0.0.1:2379".to_owned(),
            "--advertise-client-urls=http://127.0.0.1:2379".to_owned(),
            "--listen-peer-urls=http://127.0.0.1:2380".to_owned(),
            "--initial-advertise-peer-urls=http://127.0.0.1:2380".to_owned(),
            "--initial-cluster=node=http://127.0.0.1:2380".to_owned(),
            "--listen-metrics-urls=".to_owned(),
        ];
        self.etcd = Some(self.spawn("etcd", &args)?);
        Ok(())
    }

    /// Starts the apiserver with `extra` arguments and waits until `/readyz` answers.
    pub fn start_apiserver(&mut self, extra: &[String]) -> anyhow::Result<()> {
        let pki = &self.pki;
        let ip = &self.node_ip;
        let serving = pki.server(
            "apiserver",
            &[
                ip,
                KUBERNETES_SERVICE_IP,
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
        )?;
        let kubelet_client = pki.client(
            "apiserver-kubelet-client",
            "kube-apiserver-kubelet-client",
            &["system:masters"],
        )?;
        let p = |p: &Path| p.display().to_string();
        let mut args = vec![
            format!("--advertise-address={ip}"),
            format!("--bind-address={ip}"),
            format!("--secure-port={API_PORT}"),
            "--etcd-servers=http://127.0.0.1:2379".to_owned(),
            "--authorization-mode=Node,RBAC".to_owned(),
            "--anonymous-auth=false".to_owned(),
            "--enable-admission-plugins=NodeRestriction".to_owned(),
            "--allow-privileged=true".to_owned(),
            format!("--client-ca-file={}", p(&pki.ca())),
            format!("--tls-cert-file={}", p(&serving.cert)),
            format!("--tls-private-key-file={}", p(&serving.key)),
            format!("--kubelet-client-certificate={}", p(&kubelet_client.cert)),
            format!("--kubelet-client-key={}", p(&kubelet_client.key)),
            // The node's name resolves nowhere here: logs and exec dial its address.
            "--kubelet-preferred-address-types=InternalIP".to_owned(),
            format!("--service-account-issuer={ISSUER}"),
            format!("--api-audiences={ISSUER}"),
            format!("--service-account-key-file={}", p(&pki.sa_pub())),
            format!("--service-account-signing-key-file={}", p(&pki.sa_key())),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            format!(
                "--audit-policy-file={}",
                p(&self.dir.join("audit-policy.yaml"))
            ),
            format!("--audit-log-path={}", p(&self.audit_log)),
            "--profiling=false".to_owned(),
        ];
        args.extend_from_slice(extra);
        self.apiserver = Some(self.spawn("kube-apiserver", &args)?);
        self.wait_ready()
    }

    /// Stops the apiserver (SIGTERM, as a restart does).
    pub fn stop_apiserver(&mut self) {
        if let Some(mut c) = self.apiserver.take() {
            c.terminate(Duration::from_secs(20));
        }
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let admin = self.admin_kubeconfig()?;
        let log = self.dir.join("kube-apiserver.log");
        let (bin, netns) = (self.bin.join("kubectl"), self.netns.clone());
        let apiserver = &mut self.apiserver;
        redirect_testkit::eventually("the apiserver's /readyz", Duration::from_secs(120), || {
            if let Some(status) = apiserver.as_mut().and_then(Child::exited) {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(30).collect();
                panic!("kube-apiserver exited ({status}): {}", tail.join("\n"));
            }
            let out = Command::new("nsenter")
                .arg(format!("--net={}", netns.display()))
                .arg(&bin)
                .arg(format!("--kubeconfig={}", admin.display()))
                .args(["get", "--raw", "/readyz"])
                .output()
                .map_err(|e| e.to_string())?;
            if out.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).into_owned())
            }
        })
        .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// The cluster administrator's kubeconfig (`kubernetes-admin`, group `system:masters`).
    pub fn admin_kubeconfig(&self) -> anyhow::Result<PathBuf> {
        let path = self.pki.dir.join("admin.conf");
        if !path.exists() {
            let pair = self
                .pki
                .client("admin", "kubernetes-admin", &["system:masters"])?;
            self.pki.kubeconfig("admin", &self.server, &pair)?;
        }
        Ok(path)
    }

    fn start_controllers(&mut self) -> anyhow::Result<()> {
        let p = |p: &Path| p.display().to_string();
        let cm = self
            .pki
            .client("controller-manager", "system:kube-controller-manager", &[])?;
        let cm_conf = self
            .pki
            .kubeconfig("controller-manager", &self.server, &cm)?;
        let args = [
            format!("--kubeconfig={}", p(&cm_conf)),
            format!("--authentication-kubeconfig={}", p(&cm_conf)),
            format!("--authorization-kubeconfig={}", p(&cm_conf)),
            "--leader-elect=false".to_owned(),
            "--use-service-account-credentials=true".to_owned(),
            format!(
                "--service-account-private-key-file={}",
                p(&self.pki.sa_key())
            ),
            format!("--root-ca-file={}", p(&self.pki.ca())),
            format!("--cluster-signing-cert-file={}", p(&self.pki.ca())),
            format!("--cluster-signing-key-file={}", p(&self.pki.ca_key())),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            "--port=0".to_owned(),
            "--bind-address=127.0.0.1".to_owned(),
            "--profiling=false".to_owned(),
        ];
        self.controllers = Some(self.spawn("kube-controller-manager", &args)?);
        let sched = self.pki.client("scheduler", "system:kube-scheduler", &[])?;
        let sched_conf = self.pki.kubeconfig("scheduler", &self.server, &sched)?;
        let args = [
            format!("--kubeconfig={}", p(&sched_conf)),
            format!("--authentication-kubeconfig={}", p(&sched_conf)),
            format!("--authorization-kubeconfig={}", p(&sched_conf)),
            "--leader-elect=false".to_owned(),
            "--port=0".to_owned(),
            "--bind-address=127.0.0.1".to_owned(),
            "--profiling=false".to_owned(),
        ];
        self.scheduler = Some(self.spawn("kube-scheduler", &args)?);
        Ok(())
    }

    /// `etcdctl compact` to etcd's current revision (a watch older than it gets `410 Gone`).
    pub fn compact(&self) -> anyhow::Result<()> {
        let etcdctl = |args: &[&str]| {
            Command::new("nsenter")
                .arg(format!("--net={}", self.netns.display()))
                .arg(self.bin.join("etcdctl"))
                .args(["--endpoints=http://127.0.0.1:2379"])
                .args(args)
                .env("ETCDCTL_API", "3")
                .output()
                .context("etcdctl")
        };
        let out = etcdctl(&["endpoint", "status", "--write-out=json"])?;
        let status: serde_json::Value =
            serde_json::from_slice(&out.stdout).context("etcdctl endpoint status")?;
        let rev = status[0]["Status"]["header"]["revision"]
            .as_u64()
            .context("etcd's revision")?;
        let out = etcdctl(&["compact", &rev.to_string()])?;
        anyhow::ensure!(
            out.status.success(),
            "etcdctl compact {rev}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }
}
