//! The CRI client: containerd's `runtime.v1` RuntimeService over its Unix socket (tonic, the
//! `k8s-cri` bindings), with blocking calls for the synchronous tests; one client may be used
//! from many threads at once (the calls of a node booting its pods together).
use std::{path::Path, sync::Arc, time::Duration};

use anyhow::Context as _;
use k8s_cri::v1::{
    runtime_service_client::RuntimeServiceClient, ContainerConfig, ContainerState,
    ContainerStatusRequest, CreateContainerRequest, ExecSyncRequest, ListPodSandboxRequest,
    PodSandbox, PodSandboxConfig, PodSandboxState, PodSandboxStatusRequest,
    PodSandboxStatusResponse, RemoveContainerRequest, RemovePodSandboxRequest,
    RunPodSandboxRequest, StartContainerRequest, StopContainerRequest, StopPodSandboxRequest,
    VersionRequest,
};
use tonic::transport::{Channel, Endpoint, Uri};

/// How long one CRI call may take: the kubelet's default `--runtime-request-timeout` (2 min).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// What a CRI call answered when it failed: the gRPC code and message (the CNI plugin's error
/// comes back inside the message of a failed `RunPodSandbox`).
#[derive(Debug, Clone)]
pub struct CriError {
    /// The call, e.g. `RunPodSandbox`.
    pub call: &'static str,
    /// The gRPC status code.
    pub code: tonic::Code,
    /// The runtime's message.
    pub message: String,
}

impl std::fmt::Display for CriError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {:?}: {}", self.call, self.code, self.message)
    }
}

impl std::error::Error for CriError {}

/// A connected RuntimeService client.
#[derive(Debug, Clone)]
pub struct Cri {
    rt: Arc<tokio::runtime::Runtime>,
    channel: Channel,
}

impl Cri {
    /// Connects to the CRI socket at `socket` and asks the runtime's version (`v1`).
    pub fn connect(socket: &Path) -> anyhow::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("the CRI client's runtime")?;
        let path = socket.to_owned();
        let channel = rt
            .block_on(async move {
                // The URI is not used: every connection goes to the Unix socket.
                Endpoint::try_from("http://cri.invalid")?
                    .timeout(REQUEST_TIMEOUT)
                    .connect_with_connector(tower::service_fn(move |_: Uri| {
                        let path = path.clone();
                        async move {
                            let stream = tokio::net::UnixStream::connect(path).await?;
                            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                        }
                    }))
                    .await
            })
            .with_context(|| format!("connecting to the CRI at {}", socket.display()))?;
        let cri = Self {
            rt: Arc::new(rt),
            channel,
        };
        let version = cri
            .call("Version", |mut c| async move {
                c.version(VersionRequest {
                    version: "v1".into(),
                })
                .await
            })
            .with_context(|| format!("CRI Version at {}", socket.display()))?;
        anyhow::ensure!(
            version.runtime_api_version == "v1",
            "the runtime at {} speaks CRI {:?}, not v1",
            socket.display(),
            version.runtime_api_version
        );
        Ok(cri)
    }

    fn call<T, F>(
        &self,
        call: &'static str,
        f: impl FnOnce(RuntimeServiceClient<Channel>) -> F,
    ) -> Result<T, CriError>
    where
        F: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let client = RuntimeServiceClient::new(self.channel.clone());
        self.rt
            .block_on(f(client))
            .map(tonic::Response::into_inner)
            .map_err(|s| CriError {
                call,
                code: s.code(),
                message: s.message().to_owned(),
            })
    }

    /// `RunPodSandbox`: the sandbox's id.
    pub fn run_pod_sandbox(&self, config: &PodSandboxConfig) -> Result<String, CriError> {
        let config = Some(config.clone());
        self.call("RunPodSandbox", |mut c| async move {
            c.run_pod_sandbox(RunPodSandboxRequest {
                config,
                runtime_handler: String::new(),
            })
            .await
        })
        .map(|r| r.pod_sandbox_id)
    }

    /// `PodSandboxStatus` with the runtime's verbose info (its pid and spec).
    pub fn pod_sandbox_status(&self, id: &str) -> Result<PodSandboxStatusResponse, CriError> {
        let pod_sandbox_id = id.to_owned();
        self.call("PodSandboxStatus", |mut c| async move {
            c.pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id,
                verbose: true,
            })
            .await
        })
    }

    /// `StopPodSandbox` (the runtime's CNI DEL runs).
    pub fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let pod_sandbox_id = id.to_owned();
        self.call("StopPodSandbox", |mut c| async move {
            c.stop_pod_sandbox(StopPodSandboxRequest { pod_sandbox_id })
                .await
        })
        .map(drop)
    }

    /// `RemovePodSandbox` (its containers go too; containerd runs CNI DEL again).
    pub fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let pod_sandbox_id = id.to_owned();
        self.call("RemovePodSandbox", |mut c| async move {
            c.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id })
                .await
        })
        .map(drop)
    }

    /// The ids of every sandbox the runtime has.
    pub fn list_pod_sandboxes(&self) -> Result<Vec<String>, CriError> {
        Ok(self.sandboxes()?.into_iter().map(|s| s.id).collect())
    }

    /// Every sandbox the runtime has.
    pub fn sandboxes(&self) -> Result<Vec<PodSandbox>, CriError> {
        self.call("ListPodSandbox", |mut c| async move {
            c.list_pod_sandbox(ListPodSandboxRequest { filter: None })
                .await
        })
        .map(|r| r.items)
    }

    /// Whether sandbox `id` is ready (runs, with its network).
    pub fn sandbox_ready(&self, id: &str) -> Result<bool, CriError> {
        let status = self.pod_sandbox_status(id)?;
        Ok(status
            .status
            .is_some_and(|s| s.state == i32::from(PodSandboxState::SandboxReady)))
    }

    /// `CreateContainer` in the sandbox `sandbox` (created from `sandbox_config`): its id.
    pub fn create_container(
        &self,
        sandbox: &str,
        config: &ContainerConfig,
        sandbox_config: &PodSandboxConfig,
    ) -> Result<String, CriError> {
        let request = CreateContainerRequest {
            pod_sandbox_id: sandbox.to_owned(),
            config: Some(config.clone()),
            sandbox_config: Some(sandbox_config.clone()),
        };
        self.call("CreateContainer", |mut c| async move {
            c.create_container(request).await
        })
        .map(|r| r.container_id)
    }

    /// `StartContainer`.
    pub fn start_container(&self, id: &str) -> Result<(), CriError> {
        let container_id = id.to_owned();
        self.call("StartContainer", |mut c| async move {
            c.start_container(StartContainerRequest { container_id })
                .await
        })
        .map(drop)
    }

    /// `StopContainer` with `timeout` seconds between the stop signal and SIGKILL.
    pub fn stop_container(&self, id: &str, timeout: i64) -> Result<(), CriError> {
        let container_id = id.to_owned();
        self.call("StopContainer", |mut c| async move {
            c.stop_container(StopContainerRequest {
                container_id,
                timeout,
            })
            .await
        })
        .map(drop)
    }

    /// `RemoveContainer`.
    pub fn remove_container(&self, id: &str) -> Result<(), CriError> {
        let container_id = id.to_owned();
        self.call("RemoveContainer", |mut c| async move {
            c.remove_container(RemoveContainerRequest { container_id })
                .await
        })
        .map(drop)
    }

    /// Whether container `id` runs, and its process's pid (0 when it does not run).
    pub fn container_state(&self, id: &str) -> Result<(bool, u32), CriError> {
        let container_id = id.to_owned();
        let r = self.call("ContainerStatus", |mut c| async move {
            c.container_status(ContainerStatusRequest {
                container_id,
                verbose: true,
            })
            .await
        })?;
        let running = r
            .status
            .is_some_and(|s| s.state == i32::from(ContainerState::ContainerRunning));
        let info: serde_json::Value = r
            .info
            .get("info")
            .and_then(|i| serde_json::from_str(i).ok())
            .unwrap_or_default();
        let pid = info["pid"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .unwrap_or(0);
        Ok((running, pid))
    }

    /// The exit code of container `id` once it exited, `None` while it has not.
    pub fn container_exit(&self, id: &str) -> Result<Option<i32>, CriError> {
        let container_id = id.to_owned();
        let r = self.call("ContainerStatus", |mut c| async move {
            c.container_status(ContainerStatusRequest {
                container_id,
                verbose: false,
            })
            .await
        })?;
        Ok(r.status
            .filter(|s| s.state == i32::from(ContainerState::ContainerExited))
            .map(|s| s.exit_code))
    }

    /// `ExecSync` of `cmd` in the container `id` (what the kubelet runs for an exec probe):
    /// the exit code, stdout and stderr.
    pub fn exec_sync(
        &self,
        id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<(i32, String, String), CriError> {
        let request = ExecSyncRequest {
            container_id: id.to_owned(),
            cmd: cmd.to_vec(),
            timeout: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        };
        self.call(
            "ExecSync",
            |mut c| async move { c.exec_sync(request).await },
        )
        .map(|r| {
            (
                r.exit_code,
                String::from_utf8_lossy(&r.stdout).into_owned(),
                String::from_utf8_lossy(&r.stderr).into_owned(),
            )
        })
    }
}
