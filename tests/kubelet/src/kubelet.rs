//! The kubelet-lite: runs a Pod object on a [`CriNode`] as the kubelet's pod workers do
//! (hostPath directories made, `RunPodSandbox`, then `CreateContainer` + `StartContainer` of
//! each container in order; `StopPodSandbox` + `RemovePodSandbox` to remove it), runs exec
//! readiness probes by `ExecSync`, and reports the pod's status as the kubelet would write it
//! to the API server (container ids, pod IP). Init containers run first, in order: one that
//! runs to completion must exit 0 before the next starts, a native sidecar (`restartPolicy:
//! Always`) keeps running; [`Kubelet::run_reporting`] hands each status change on as the
//! kubelet writes it to the API server ([`crate::status`]).
use std::{collections::HashMap, path::PathBuf, time::Duration};

use anyhow::Context as _;
use k8s_cri::v1::{ContainerConfig, PodSandboxConfig};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

use crate::{
    cri::{Cri, CriError},
    node::CriNode,
    pod::{self, Override},
    status::{self, State},
};

/// A pod the runtime runs.
#[derive(Debug, Clone)]
pub struct RunningPod {
    /// The Pod object it was made from.
    pub pod: Pod,
    /// The sandbox's id.
    pub sandbox: String,
    /// (container name, container id), in the Pod's order.
    pub containers: Vec<(String, String)>,
    /// The pod's IP (empty on the host network).
    pub ip: String,
    /// The sandbox's network namespace as the runtime names it (`/var/run/netns/cni-...`);
    /// `None` on the host network.
    pub netns: Option<PathBuf>,
    /// The pause process.
    pub pid: u32,
    config: PodSandboxConfig,
    /// Each container's configuration (a restart creates it again, one attempt later).
    configs: HashMap<String, ContainerConfig>,
}

impl RunningPod {
    /// The id of the container `name`.
    pub fn container(&self, name: &str) -> &str {
        self.containers
            .iter()
            .find(|(n, _)| n == name)
            .map_or_else(|| panic!("no container {name}"), |(_, id)| id)
    }

    /// The Pod object with the status the kubelet reports: Running, the host and pod IPs and
    /// each container's `containerd://ID`.
    pub fn status_object(&self, host_ip: &str) -> Value {
        let mut object = serde_json::to_value(&self.pod).expect("a Pod serializes");
        let statuses: Vec<Value> = self
            .containers
            .iter()
            .map(|(name, id)| {
                json!({"name": name, "containerID": format!("containerd://{id}"), "ready": true,
                       "started": true, "restartCount": 0, "image": "", "imageID": "",
                       "state": {"running": {}}})
            })
            .collect();
        object["status"] = json!({
            "phase": "Running", "hostIP": host_ip, "podIP": self.ip,
            "podIPs": if self.ip.is_empty() { json!([]) } else { json!([{"ip": self.ip}]) },
            "containerStatuses": statuses,
        });
        object
    }
}

/// Why a pod did not start: the CRI call that failed, or the test's own input.
#[derive(Debug)]
pub enum StartError {
    /// The runtime refused (e.g. `RunPodSandbox` with the CNI plugin's error).
    Cri(CriError),
    /// Something else (a bad manifest, a status that does not parse).
    Other(anyhow::Error),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cri(e) => write!(f, "{e}"),
            Self::Other(e) => write!(f, "{e:#}"),
        }
    }
}

impl From<CriError> for StartError {
    fn from(e: CriError) -> Self {
        Self::Cri(e)
    }
}

impl From<anyhow::Error> for StartError {
    fn from(e: anyhow::Error) -> Self {
        Self::Other(e)
    }
}

/// The kubelet of one node.
#[derive(Debug)]
pub struct Kubelet<'n> {
    node: &'n CriNode,
}

impl<'n> Kubelet<'n> {
    /// The kubelet of `node`.
    pub fn new(node: &'n CriNode) -> Self {
        Self { node }
    }

    fn cri(&self) -> &Cri {
        self.node.cri()
    }

    /// Runs `pod`'s sandbox alone (`RunPodSandbox`: the runtime's network setup, our CNI
    /// ADD among it), as the kubelet does before any container.
    pub fn run_sandbox(&self, pod: &Pod) -> Result<RunningPod, StartError> {
        let spec = pod.spec.as_ref().context("the pod has no spec")?;
        for v in spec.volumes.iter().flatten() {
            let dir = match &v.host_path {
                Some(h) if h.type_.as_deref() == Some("DirectoryOrCreate") => {
                    self.node.host_path(&h.path)
                }
                Some(_) => continue,
                None => PathBuf::from(pod::volume_path(pod, &self.node.info, v)?),
            };
            std::fs::create_dir_all(&dir).with_context(|| format!("volume {}", dir.display()))?;
        }
        let mut config = pod::sandbox_config(pod, &self.node.info)?;
        // A pod's next sandbox (after a failed one, a dead one, a reboot) is its next attempt:
        // the runtime keeps the name of one it still has reserved.
        let meta = config.metadata.clone().unwrap_or_default();
        let next = self
            .cri()
            .sandboxes()?
            .iter()
            .filter_map(|s| s.metadata.as_ref())
            .filter(|m| m.uid == meta.uid && m.name == meta.name && m.namespace == meta.namespace)
            .map(|m| m.attempt + 1)
            .max()
            .unwrap_or(0);
        if let Some(m) = config.metadata.as_mut() {
            m.attempt = next;
        }
        std::fs::create_dir_all(&config.log_directory).context("the pod's log directory")?;
        // The kubelet makes the pod's cgroup before its sandbox, where its cgroupfs manager
        // does (on a hybrid host, the v1 hierarchies only): the per-pod attach scope finds it
        // at the ADD, before any process.
        if let Some(parent) = config.linux.as_ref().map(|l| l.cgroup_parent.as_str()) {
            redirect_testkit::make_pod_cgroup(std::path::Path::new(parent.trim_start_matches('/')))
                .context("the pod's cgroup")?;
        }
        let sandbox = self.cri().run_pod_sandbox(&config)?;
        Ok(self.sandbox_status(pod, &sandbox, config)?)
    }

    /// Runs `pod`, with `overrides` by container name; a sandbox whose container fails to
    /// start is removed again.
    pub fn run(
        &self,
        pod: &Pod,
        overrides: &HashMap<String, Override>,
    ) -> Result<RunningPod, StartError> {
        self.run_reporting(pod, overrides, &|_| {})
    }

    /// [`Kubelet::run`], handing `report` the Pod with its status ([`crate::status::object`])
    /// at each change the kubelet writes to the API server: the sandbox made (every container
    /// waiting), each container started, each init container exited.
    pub fn run_reporting(
        &self,
        pod: &Pod,
        overrides: &HashMap<String, Override>,
        report: &dyn Fn(Value),
    ) -> Result<RunningPod, StartError> {
        let spec = pod.spec.as_ref().context("the pod has no spec")?;
        let mut running = self.run_sandbox(pod)?;
        let mut states: HashMap<String, State> = HashMap::new();
        let host_ip = self.node.info.host_ip.clone();
        let publish = |states: &HashMap<String, State>, ip: &str| {
            report(status::object(pod, &host_ip, ip, states));
        };
        publish(&states, &running.ip);
        if let Err(e) = self.project_token(&running) {
            let _ = self.remove(&running);
            return Err(StartError::Other(e));
        }
        let (sandbox, next) = (
            running.sandbox.clone(),
            running.config.metadata.as_ref().map_or(0, |m| m.attempt),
        );
        let empty = Override::default();
        // Init containers first, in order: one that runs to completion (Istio's istio-init)
        // must exit 0 before the next starts; a native sidecar (`restartPolicy: Always`:
        // Istio's istio-proxy) starts and keeps running. Then the containers.
        let inits = spec.init_containers.iter().flatten();
        for c in inits.chain(&spec.containers) {
            let to_complete = spec
                .init_containers
                .iter()
                .flatten()
                .any(|i| i.name == c.name)
                && c.restart_policy.as_deref() != Some("Always");
            // containerd opens the container's log file, the kubelet makes its directory.
            let log_dir = PathBuf::from(&running.config.log_directory).join(&c.name);
            std::fs::create_dir_all(&log_dir).with_context(|| format!("{}", log_dir.display()))?;
            let started = pod::container_config(
                pod,
                c,
                &self.node.info,
                &running.ip,
                overrides.get(&c.name).unwrap_or(&empty),
            )
            .map_err(StartError::from)
            .and_then(|mut cc| {
                // Container names are reserved per pod across its sandboxes: the n-th sandbox's
                // containers start at attempt 1000 n (a restart in a sandbox adds one).
                if let Some(m) = cc.metadata.as_mut() {
                    m.attempt = next * 1000;
                }
                let id = self
                    .cri()
                    .create_container(&sandbox, &cc, &running.config)?;
                self.cri().start_container(&id)?;
                states.insert(c.name.clone(), State::Running(id.clone()));
                publish(&states, &running.ip);
                Ok((id, cc))
            })
            .and_then(|(id, cc)| {
                if to_complete {
                    let code = self.wait_exit(&c.name, &id);
                    if let Ok(code) = code {
                        states.insert(c.name.clone(), State::Exited(id.clone(), code));
                        publish(&states, &running.ip);
                    }
                    self.completed(&running, &c.name, code)?;
                }
                Ok((id, cc))
            });
            match started {
                Ok((id, cc)) => {
                    running.containers.push((c.name.clone(), id));
                    running.configs.insert(c.name.clone(), cc);
                }
                Err(e) => {
                    let _ = self.remove(&running);
                    return Err(e);
                }
            }
        }
        Ok(running)
    }

    /// Waits until init container `name` (`id`) exits: its exit code.
    fn wait_exit(&self, name: &str, id: &str) -> Result<i32, StartError> {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            match self.cri().container_exit(id)? {
                Some(code) => return Ok(code),
                None if std::time::Instant::now() > deadline => {
                    return Err(StartError::Other(anyhow::anyhow!(
                        "init container {name} still runs after 60 s"
                    )));
                }
                None => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// An init container's exit: 0 passes, another is an error with its log.
    fn completed(
        &self,
        pod: &RunningPod,
        name: &str,
        code: Result<i32, StartError>,
    ) -> Result<(), StartError> {
        match code? {
            0 => Ok(()),
            code => {
                let log = self.logs(pod, name);
                Err(StartError::Other(anyhow::anyhow!(
                    "init container {name} exited {code}: {log}"
                )))
            }
        }
    }

    fn sandbox_status(
        &self,
        pod: &Pod,
        sandbox: &str,
        config: PodSandboxConfig,
    ) -> anyhow::Result<RunningPod> {
        let status = self.cri().pod_sandbox_status(sandbox)?;
        let ip = status
            .status
            .as_ref()
            .and_then(|s| s.network.as_ref())
            .map(|n| n.ip.clone())
            .unwrap_or_default();
        let info: Value =
            serde_json::from_str(status.info.get("info").map_or("{}", String::as_str))
                .context("PodSandboxStatus's verbose info")?;
        let pid = info["pid"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .unwrap_or(0);
        let netns = info["runtimeSpec"]["linux"]["namespaces"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|n| n["type"] == "network")
            .and_then(|n| n["path"].as_str())
            .map(PathBuf::from);
        Ok(RunningPod {
            pod: pod.clone(),
            sandbox: sandbox.to_owned(),
            containers: Vec::new(),
            ip,
            netns,
            pid,
            config,
            configs: HashMap::new(),
        })
    }

    /// Restarts container `name` of `pod` as the kubelet restarts a container that exited
    /// (`restartPolicy: Always`): the exited one removed, the next attempt created and started.
    pub fn restart(&self, pod: &mut RunningPod, name: &str) -> Result<(), CriError> {
        let old = pod.container(name).to_owned();
        let _ = self.cri().stop_container(&old, 0);
        self.cri().remove_container(&old)?;
        let config = pod.configs.get_mut(name).expect("a container of the pod");
        if let Some(m) = config.metadata.as_mut() {
            m.attempt += 1;
        }
        let id = self
            .cri()
            .create_container(&pod.sandbox, config, &pod.config)?;
        self.cri().start_container(&id)?;
        if let Some(entry) = pod.containers.iter_mut().find(|(n, _)| n == name) {
            entry.1 = id;
        }
        Ok(())
    }

    /// Writes `pod`'s projected service-account token again with the one the apiserver issues
    /// now, as the kubelet rotates it (nothing when the node has no apiserver or the pod does
    /// not automount it).
    pub fn project_token(&self, pod: &RunningPod) -> anyhow::Result<()> {
        match &self.node.info.api {
            Some(api) if crate::service_account::automounts(&pod.pod) => {
                crate::service_account::project(&pod.pod, &self.node.info, api)
            }
            _ => Ok(()),
        }
    }

    /// `StopPodSandbox` then `RemovePodSandbox`, as the kubelet removes a deleted pod.
    pub fn remove(&self, pod: &RunningPod) -> Result<(), CriError> {
        self.cri().stop_pod_sandbox(&pod.sandbox)?;
        self.cri().remove_pod_sandbox(&pod.sandbox)
    }

    /// Whether the exec readiness probe of container `name` passes now (no probe: ready).
    pub fn ready(&self, pod: &RunningPod, name: &str) -> Result<bool, CriError> {
        let probe = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| c.name == name))
            .and_then(|c| c.readiness_probe.as_ref())
            .and_then(|p| p.exec.as_ref())
            .and_then(|e| e.command.clone());
        let Some(cmd) = probe else { return Ok(true) };
        let (code, _, _) =
            self.cri()
                .exec_sync(pod.container(name), &cmd, Duration::from_secs(10))?;
        Ok(code == 0)
    }

    /// Runs `cmd` in container `name` of `pod`: exit code, stdout, stderr.
    pub fn exec(
        &self,
        pod: &RunningPod,
        name: &str,
        cmd: &[&str],
    ) -> Result<(i32, String, String), CriError> {
        let cmd: Vec<String> = cmd.iter().map(|s| (*s).to_owned()).collect();
        self.cri()
            .exec_sync(pod.container(name), &cmd, Duration::from_secs(30))
    }

    /// The log file of container `name` (CRI log format: `TIME STREAM TAG LINE`), as text.
    pub fn logs(&self, pod: &RunningPod, name: &str) -> String {
        let path = PathBuf::from(&pod.config.log_directory).join(format!("{name}/0.log"));
        std::fs::read_to_string(path).unwrap_or_default()
    }
}
