//! What an operator does to the cluster and reads back, all through kubectl: install the
//! DaemonSet from `deploy/kubernetes/`, deploy injected workloads, read pods, their logs and
//! their proxies' access records, exec `redirect` in the daemon's container; and the world, a
//! listener at the pods' gateway recording every token that reaches it (a connection that
//! reached the world without a record in its pod's proxy log escaped capture).
use std::time::Duration;

use anyhow::Context as _;
use redirect_testkit::eventually;
use serde_json::Value;

use super::{
    node::GATEWAY,
    workloads::{self, Injected, WORLD_PORT},
    Cluster,
};

/// The daemon's service account, as the apiserver's audit log names it.
pub const DAEMON_USER: &str = "system:serviceaccount:istio-system:redirect";

/// The untaint controller's service account, as the apiserver's audit log names it.
pub const UNTAINT_USER: &str = "system:serviceaccount:istio-system:redirect-untaint";

pub use crate::tokens::Reached;

/// The world: a listener at the node's side of the pods' network (the gateway).
pub fn world(cluster: &Cluster) -> anyhow::Result<Reached> {
    crate::tokens::listen(&cluster.node.netns.path(), WORLD_PORT)
}

/// Whether a pod object is Ready.
pub fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// The pod's name.
pub fn name_of(pod: &Value) -> String {
    pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

impl Cluster {
    /// `kubectl apply -f deploy/kubernetes/rbac.yaml -f deploy/kubernetes/daemonset.yaml -f
    /// deploy/kubernetes/untaint-controller.yaml` (the DaemonSet with
    /// [`workloads::daemonset`]'s overlay, the controller with the image under test), then
    /// waits until the DaemonSet's pod is Ready by the kubelet's own probes.
    pub fn install(&self) -> anyhow::Result<Value> {
        self.install_image(&self.parts.image.clone())
    }

    /// [`Cluster::install`] with the DaemonSet's image `tag`.
    pub fn install_image(&self, tag: &str) -> anyhow::Result<Value> {
        self.install_with(tag, &[])
    }

    /// [`Cluster::install_image`] with `args` appended to the daemon's.
    pub fn install_with(&self, tag: &str, args: &[&str]) -> anyhow::Result<Value> {
        let rbac = workloads::documents("deploy/kubernetes/rbac.yaml")?;
        let mut ds = workloads::daemonset(tag, self.node.cgroup.path())?;
        workloads::append_daemon_args(&mut ds, args)?;
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": rbac});
        self.kubectl.apply(&list.to_string())?;
        self.kubectl.apply(&ds.to_string())?;
        self.kubectl
            .apply(&workloads::untaint_controller(tag)?.to_string())?;
        self.daemon_pod_ready()
    }

    /// The DaemonSet's pod, once one is Ready (a new one after a rollout).
    pub fn daemon_pod_ready(&self) -> anyhow::Result<Value> {
        eventually(
            "the DaemonSet's pod to be Ready",
            Duration::from_secs(180),
            || {
                let pods = self
                    .pods("istio-system", "app=redirect")
                    .map_err(|e| format!("{e:#}"))?;
                match pods.as_slice() {
                    [one] if is_ready(one) && one["metadata"]["deletionTimestamp"].is_null() => {
                        Ok(one.clone())
                    }
                    other => Err(format!(
                        "{:?}",
                        other
                            .iter()
                            .map(|p| (name_of(p), p["status"].clone()))
                            .collect::<Vec<_>>()
                    )),
                }
            },
        )
        .map_err(|e| anyhow::anyhow!("{e}\n{}", self.describe("istio-system")))
    }

    /// `kubectl get pods -n NS -l SELECTOR`'s items.
    pub fn pods(&self, ns: &str, selector: &str) -> anyhow::Result<Vec<Value>> {
        let list = self.kubectl.get(&["pods", "-n", ns, "-l", selector])?;
        Ok(list["items"].as_array().cloned().unwrap_or_default())
    }

    /// `kubectl describe pods` and the recent events of `ns`, for a failure's message.
    pub fn describe(&self, ns: &str) -> String {
        let d = self
            .kubectl
            .run(&["describe", "pods", "-n", ns])
            .unwrap_or_else(|e| format!("{e:#}"));
        let ev = self
            .kubectl
            .run(&["get", "events", "-n", ns])
            .unwrap_or_else(|e| format!("{e:#}"));
        format!("{d}\n{ev}")
    }

    /// `kubectl apply` of the injected Deployment `w`; waits until its `replicas` pods run
    /// and are Ready; returns them.
    pub fn deploy(&self, w: &Injected) -> anyhow::Result<Vec<Value>> {
        self.kubectl.apply(&workloads::injected(w)?.to_string())?;
        self.ready_pods(&w.name, w.replicas as usize)
    }

    /// `kubectl apply` of `w`, then the time from the apply to each pod's first Ready as
    /// polled (every 100 ms), sorted: what the closing note's start-to-Ready figures are.
    pub fn time_to_ready(&self, w: &Injected) -> anyhow::Result<Vec<Duration>> {
        let start = std::time::Instant::now();
        self.kubectl.apply(&workloads::injected(w)?.to_string())?;
        let mut ready: std::collections::HashMap<String, Duration> = Default::default();
        let deadline = start + Duration::from_secs(240);
        while ready.len() < w.replicas as usize {
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "{} of {} Ready\n{}",
                ready.len(),
                w.replicas,
                self.describe("shop")
            );
            for p in self.pods("shop", &format!("app={}", w.name))? {
                if is_ready(&p) {
                    ready.entry(name_of(&p)).or_insert_with(|| start.elapsed());
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut times: Vec<Duration> = ready.into_values().collect();
        times.sort();
        Ok(times)
    }

    /// Waits until app `app` has exactly `n` pods, all Ready and none terminating.
    pub fn ready_pods(&self, app: &str, n: usize) -> anyhow::Result<Vec<Value>> {
        eventually(
            format!("{n} Ready pods of {app}"),
            Duration::from_secs(240),
            || {
                let pods = self
                    .pods("shop", &format!("app={app}"))
                    .map_err(|e| format!("{e:#}"))?;
                let ready = pods
                    .iter()
                    .filter(|p| is_ready(p) && p["metadata"]["deletionTimestamp"].is_null())
                    .count();
                if ready == n && pods.len() == n {
                    Ok(pods)
                } else {
                    Err(format!("{ready} of {} Ready", pods.len()))
                }
            },
        )
        .map_err(|e| anyhow::anyhow!("{e}\n{}", self.describe("shop")))
    }

    /// `kubectl logs POD -c CONTAINER -n NS`.
    pub fn logs(&self, ns: &str, pod: &str, container: &str) -> String {
        self.kubectl
            .run(&["logs", "-n", ns, pod, "-c", container])
            .unwrap_or_else(|e| format!("{e:#}"))
    }

    /// The access records of `pod`'s proxy in `direction` (`outbound`, `inbound`), of every
    /// istio-proxy container the pod has run: the kubelet's log files of each attempt
    /// (`/var/log/pods/shop_POD_UID/istio-proxy/N.log` on the node, kept across restarts and
    /// reboots; `kubectl logs` shows only the last two).
    pub fn proxied(&self, pod: &str, direction: &str) -> Vec<Value> {
        let dirs = std::fs::read_dir(self.node.dir.join("var-log/pods"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("shop_{pod}_"))
            })
            .map(|e| e.path().join("istio-proxy"));
        let mut files: Vec<_> = dirs
            .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
            .map(|e| e.path())
            .collect();
        files.sort();
        files
            .iter()
            .filter_map(|f| std::fs::read_to_string(f).ok())
            .flat_map(|text| {
                text.lines()
                    // CRI log lines: TIME STREAM TAG MESSAGE.
                    .filter_map(|l| l.splitn(4, ' ').nth(3))
                    .filter_map(|m| serde_json::from_str::<Value>(m).ok())
                    .filter(|v| v["kind"] == "access" && v["direction"] == direction)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// How often the kubelet restarted `container` of `pod` (namespace `shop`).
    pub fn restarts(&self, pod: &str, container: &str) -> u64 {
        self.restarts_in("shop", pod, container)
    }

    /// How often the kubelet restarted `container` of `pod` in namespace `ns`.
    pub fn restarts_in(&self, ns: &str, pod: &str, container: &str) -> u64 {
        let object = self
            .kubectl
            .get(&["pod", "-n", ns, pod])
            .unwrap_or_default();
        object["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == container)
            .and_then(|c| c["restartCount"].as_u64())
            .unwrap_or(0)
    }

    /// Kills `container` of `pod` (SIGKILL through containerd, as an OOM kill does); the
    /// kubelet restarts it.
    pub fn kill_container(&self, pod: &str, container: &str) -> anyhow::Result<()> {
        let object = self.kubectl.get(&["pod", "-n", "shop", pod])?;
        let id = object["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == container)
            .and_then(|c| c["containerID"].as_str())
            .and_then(|id| id.strip_prefix("containerd://"))
            .with_context(|| format!("{pod}/{container}'s containerID"))?
            .to_owned();
        let out = std::process::Command::new("ctr")
            .arg("--address")
            .arg(self.node.socket())
            .args([
                "--namespace",
                "k8s.io",
                "tasks",
                "kill",
                "--signal",
                "SIGKILL",
                &id,
            ])
            .output()
            .context("ctr tasks kill")?;
        anyhow::ensure!(
            out.status.success(),
            "ctr tasks kill {id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    /// `redirect ARGS` in the daemon's container (`kubectl exec`).
    pub fn redirect(&self, args: &[&str]) -> anyhow::Result<String> {
        let pod = name_of(&self.daemon_pod_ready()?);
        let mut all = vec![
            "exec",
            "-n",
            "istio-system",
            &pod,
            "-c",
            "redirect",
            "--",
            "redirect",
        ];
        all.extend_from_slice(args);
        self.kubectl.run(&all)
    }

    /// `redirect list --json` in the daemon's container.
    pub fn listed(&self) -> anyhow::Result<Vec<Value>> {
        let text = self.redirect(&["list", "--json"])?;
        serde_json::from_str(&text).with_context(|| format!("list --json: {text}"))
    }

    /// Checks that every token of `pod` that reached the world went through its own proxy to
    /// the original destination, once `n` did; returns the proxy's records.
    pub fn assert_proxied(&self, reached: &Reached, pod: &str, n: usize) -> Vec<Value> {
        let prefix = format!("{pod}-");
        let count = || {
            reached
                .lock()
                .expect("world")
                .iter()
                .filter(|t| t.starts_with(&prefix))
                .count()
        };
        let records = eventually(
            format!("{n} connections of {pod} through its proxy"),
            Duration::from_secs(60),
            || {
                let records = self.proxied(pod, "outbound");
                match (count(), records.len()) {
                    (r, p) if r == n && p == n => Ok(records),
                    (r, p) => Err(format!("reached the world {r}, proxied {p}, wanted {n}")),
                }
            },
        )
        .unwrap_or_else(|e| {
            let current = self.logs("shop", pod, "istio-proxy");
            let world = reached.lock().map(|r| r.join(" ")).unwrap_or_default();
            let records = self.proxied(pod, "outbound");
            panic!("{e}\nthe world: {world}\nrecords: {records:?}\nkubectl logs:\n{current}")
        });
        for r in &records {
            assert_eq!(r["orig_dst"], format!("{GATEWAY}:{WORLD_PORT}"), "{r}");
        }
        records
    }
}
