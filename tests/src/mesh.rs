//! A meshed node on containerd for the CRI tests: the kubelet-lite's node with the pause and
//! app images and the image under test imported, Debian's bridge + host-local as the primary
//! conflist, the recorded apiserver in the node's network, the DaemonSet's pod from
//! `deploy/kubernetes/daemonset.yaml` with the in-cluster credentials the kubelet gives it (the
//! recorded server behind TLS, a projected service-account token it rotates), meshed pods (Istio's injected `hello.yaml` with DNS
//! capture on, its istio-proxy run as the image's `redirect-proxy`, its app a busybox loop that opens a new
//! connection to the world at a fixed pace, each with its own token) and the world: a listener
//! at the pods' gateway that records every token that reaches it. A connection that reached the
//! world without a record in its pod's proxy access log escaped capture.
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::api::core::v1::Pod;
use redirect_kubelet::{
    images, pod, service_account::ApiAccess, CriNode, Kubelet, Override, RunningPod, StartError,
};
use redirect_testkit::{eventually, privileged_or_skip, runs_or_skip, unique_name};
use serde_json::Value;

use crate::{
    apiserver::{recorded_pod, PodServer},
    apiserver_tls::TlsFront,
    podman::image_under_test,
};

/// The node's name (the pods' `spec.nodeName`, the daemon's `NODE_NAME`).
pub const NODE: &str = "node-cri";
/// The pods' subnet on the node's bridge; its gateway is the node's address on it.
pub const SUBNET: &str = "10.244.7.0/24";
/// The bridge's address: where the world listens.
pub const GATEWAY: &str = "10.244.7.1";
/// The kube-dns Service's cluster IP.
pub const CLUSTER_DNS: &str = "10.96.0.10";
/// The world's port.
pub const WORLD_PORT: u16 = 8080;

/// The image's tag and archive, or `None` (after saying why) when the test cannot run
/// outside CI; in CI a missing part is a failure.
pub fn parts_or_skip(test: &str) -> Option<(String, PathBuf)> {
    if !privileged_or_skip(test) {
        return None;
    }
    let missing = [
        "/usr/bin/containerd",
        "/usr/bin/ctr",
        "/usr/sbin/runc",
        "/usr/bin/buildah",
        "/bin/busybox",
    ]
    .into_iter()
    .find(|p| !Path::new(p).exists());
    let why = match (missing, image_under_test()) {
        (Some(tool), _) => format!("{tool} is not installed (cargo xtask setup installs it)"),
        (None, Err(why)) => why,
        (None, Ok(image)) => return Some(image),
    };
    runs_or_skip(test, Some(why));
    None
}

/// The node.
#[derive(Debug)]
pub struct MeshNode {
    /// The test's node (containerd, its CRI).
    pub node: CriNode,
    /// The recorded apiserver, reached through [`MeshNode::tls`].
    pub api: PodServer,
    /// Its TLS front in the node's network: what in-cluster credentials name.
    pub tls: TlsFront,
    /// The image under test (the DaemonSet's and the proxy's).
    pub image: String,
    /// Every token that reached the world, in order.
    pub world: Arc<Mutex<Vec<String>>>,
    /// The DaemonSet's pod, once started.
    pub ds: Option<RunningPod>,
}

impl MeshNode {
    /// Boots the node with the images imported and the primary conflist in place (no
    /// DaemonSet yet).
    pub fn new(image: &str, archive: &Path) -> Self {
        let mut node = CriNode::new(NODE).expect("boot the node");
        for built in images::build(&node.dir).expect("the pause and app images") {
            node.import(&built).expect("import");
        }
        node.import(archive).expect("import the node image");
        node.write_primary_conflist("1.0.0", SUBNET)
            .expect("the primary conflist");
        let api = PodServer::start(&node.dir.join("api"));
        let tls = TlsFront::start_in(&node.netns.path(), api.addr());
        api.issue_token("token-1");
        node.info.api = Some(ApiAccess {
            host: tls.in_cluster.host.clone(),
            port: tls.in_cluster.port,
            ca_pem: tls.in_cluster.ca_pem.clone(),
            token: Arc::new(Mutex::new(api.issued_token())),
        });
        // The daemon learns the cluster DNS address from it (the DaemonSet passes none).
        api.put_kube_dns(CLUSTER_DNS);
        let world = world(&node);
        Self {
            node,
            api,
            tls,
            image: image.to_owned(),
            world,
            ds: None,
        }
    }

    /// The node's kubelet.
    pub fn kubelet(&self) -> Kubelet<'_> {
        Kubelet::new(&self.node)
    }

    /// Runs the DaemonSet's pod and waits until both containers are ready (the daemon
    /// answers `redirect list`, install-cni's check passes).
    pub fn start_daemonset(&mut self) {
        self.start_daemonset_from(None);
    }

    /// [`MeshNode::start_daemonset`] with both containers from `image` in place of the
    /// DaemonSet's (a rollout to another image).
    pub fn start_daemonset_from(&mut self, image: Option<&str>) {
        self.start_daemonset_with(image, &[]);
    }

    /// [`MeshNode::start_daemonset_from`] with `extra` appended to the daemon's arguments (a
    /// datapath option under test, e.g. `--attach-scope per-pod`).
    pub fn start_daemonset_with(&mut self, image: Option<&str>, extra: &[&str]) {
        let mut append = node_cgroup_args(self.node.cgroup.path());
        append
            .extend(["--pod-get-attempts", "3", "--pod-get-interval-ms", "100"].map(str::to_owned));
        append.extend(extra.iter().map(|a| (*a).to_owned()));
        let daemon = Override {
            image: image.map(str::to_owned),
            append_args: append,
            ..Override::default()
        };
        let install = Override {
            image: image.map(str::to_owned),
            ..Override::default()
        };
        let overrides = HashMap::from([
            ("redirect".to_owned(), daemon),
            ("install-cni".to_owned(), install),
        ]);
        let ds = self
            .kubelet()
            .run(&daemonset_pod(), &overrides)
            .unwrap_or_else(|e| panic!("the DaemonSet's pod: {e}"));
        self.ds = Some(ds);
        self.wait_daemonset_ready();
    }

    /// Rotates the service-account token: the apiserver issues `token` (the old one still
    /// accepted) and the kubelet writes it into the DaemonSet's pod.
    pub fn rotate_token(&self, token: &str) {
        self.api.issue_token(token);
        let api = self.node.info.api.as_ref().expect("the node's apiserver");
        *api.token.lock().expect("token") = token.to_owned();
        self.kubelet()
            .project_token(self.ds())
            .expect("project the rotated token");
    }

    /// Waits until both containers of the DaemonSet's pod are ready.
    pub fn wait_daemonset_ready(&self) {
        let (kubelet, ds) = (self.kubelet(), self.ds());
        eventually(
            "the DaemonSet's pod to be ready",
            Duration::from_secs(90),
            || {
                let ready = ["redirect", "install-cni"]
                    .map(|c| kubelet.ready(ds, c).map_err(|e| e.to_string()));
                match ready {
                    [Ok(true), Ok(true)] => Ok(()),
                    other => Err(format!(
                        "{other:?}: {}{}",
                        kubelet.logs(ds, "redirect"),
                        kubelet.logs(ds, "install-cni")
                    )),
                }
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// The DaemonSet's pod goes as the controller rolls a node: SIGTERM (the kubelet's
    /// graceful stop, up to 10 s), then its sandbox. Its pins stay.
    pub fn stop_daemonset(&mut self) {
        let old = self.ds.take().expect("the DaemonSet's pod");
        for (_, id) in &old.containers {
            self.node
                .cri()
                .stop_container(id, 10)
                .expect("stop a DaemonSet container");
        }
        self.kubelet()
            .remove(&old)
            .expect("remove the old DaemonSet pod");
    }

    /// The DaemonSet's pod.
    pub fn ds(&self) -> &RunningPod {
        self.ds.as_ref().expect("the DaemonSet's pod runs")
    }

    /// `redirect list --json` in the daemon's container (the DaemonSet's readiness probe).
    pub fn listed(&self) -> Vec<Value> {
        let (code, out, err) = self
            .kubelet()
            .exec(self.ds(), "redirect", &["redirect", "list", "--json"])
            .expect("exec redirect list");
        assert_eq!(code, 0, "redirect list: {out}{err}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("list --json: {e}: {out}"))
    }

    /// The meshed pod `name` (served by the apiserver from now on) and what runs in it: the
    /// image's `redirect-proxy` as istio-proxy, the app connecting every `every` seconds.
    pub fn meshed(&self, name: &str, every: &str) -> (Pod, HashMap<String, Override>) {
        // The same uid for the same name: a pod started again after a failed sandbox or a
        // reboot is the same pod.
        let mut object = recorded_pod("hello.yaml", "shop", name, &format!("uid-{name}"), NODE);
        // Istio's DNS proxying (dnsPolicy ClusterFirst, the default): the daemon needs the
        // cluster DNS address.
        for c in object["spec"]["initContainers"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            if c["name"] == "istio-proxy" {
                let env = c["env"].as_array_mut().expect("istio-proxy's env");
                env.push(serde_json::json!({"name": "ISTIO_META_DNS_CAPTURE", "value": "true"}));
            }
        }
        self.api.put(&object);
        let pod: Pod = serde_json::from_value(object).expect("a Pod");
        let overrides = self.overrides(&pod, every);
        (pod, overrides)
    }

    /// What runs in meshed pod `pod`: the image's `redirect-proxy` as istio-proxy, the app
    /// connecting every `every` seconds, each connection with a token of the pod's name.
    pub fn overrides(&self, pod: &Pod, every: &str) -> HashMap<String, Override> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let app_name = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .expect("an app container")
            .name
            .clone();
        let proxy = Override {
            image: Some(self.image.clone()),
            command: Some(vec!["redirect-proxy".into()]),
            args: Some(["--log-format", "json"].map(str::to_owned).to_vec()),
            ..Override::default()
        };
        let script = format!(
            "i=0; while :; do i=$((i+1)); echo {name}-$i | nc -w 3 {GATEWAY} {WORLD_PORT} >/dev/null; sleep {every}; done"
        );
        let app = Override {
            image: Some(images::APP_IMAGE.into()),
            command: Some(vec!["/bin/sh".into(), "-c".into(), script]),
            args: Some(Vec::new()),
            ..Override::default()
        };
        HashMap::from([("istio-proxy".to_owned(), proxy), (app_name, app)])
    }

    /// Runs the meshed pod `name` (see [`MeshNode::meshed`]).
    pub fn run_meshed(&self, name: &str, every: &str) -> Result<RunningPod, StartError> {
        let (pod, overrides) = self.meshed(name, every);
        self.kubelet().run(&pod, &overrides)
    }

    /// Runs `pod` (with `overrides`) as [`Kubelet::run`] does, writing its status to the
    /// apiserver at each change as the kubelet writes it: its GET and the watch (`MODIFIED`)
    /// see each container's state (`Kubelet::run_reporting`).
    pub fn run_reported(
        &self,
        pod: &Pod,
        overrides: &HashMap<String, Override>,
    ) -> Result<RunningPod, StartError> {
        let report = |object: Value| {
            self.api.put(&object);
            self.api.event("MODIFIED", &object);
        };
        self.kubelet().run_reporting(pod, overrides, &report)
    }

    /// The sandbox of meshed pod `name` alone (`RunPodSandbox`: the network, our ADD).
    pub fn run_sandbox(&self, name: &str) -> Result<RunningPod, StartError> {
        let (pod, _) = self.meshed(name, "1");
        self.kubelet().run_sandbox(&pod)
    }

    /// The outbound access-log records of `pod`'s proxy.
    pub fn proxied(&self, pod: &RunningPod) -> Vec<Value> {
        self.kubelet()
            .logs(pod, "istio-proxy")
            .lines()
            // CRI log lines: TIME STREAM TAG MESSAGE.
            .filter_map(|l| l.splitn(4, ' ').nth(3))
            .filter_map(|m| serde_json::from_str::<Value>(m).ok())
            .filter(|v| v["kind"] == "access" && v["direction"] == "outbound")
            .collect()
    }

    /// Waits (up to a minute) until `pod`'s proxy logged `n` outbound connections.
    pub fn wait_proxied(&self, pod: &RunningPod, n: usize) {
        redirect_testkit::eventually(
            format!("{n} connections through the proxy"),
            Duration::from_secs(60),
            || {
                let seen = self.proxied(pod).len();
                if seen >= n {
                    Ok(())
                } else {
                    Err(seen)
                }
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// The tokens of pod `name` that reached the world.
    pub fn reached(&self, name: &str) -> usize {
        let prefix = format!("{name}-");
        let world = self.world.lock().expect("world");
        world.iter().filter(|t| t.starts_with(&prefix)).count()
    }

    /// Stops `pod`'s app and checks that every one of its connections that reached the world
    /// went through its proxy to the original destination; returns how many.
    pub fn assert_all_proxied(&self, pod: &RunningPod) -> usize {
        let name = pod.pod.metadata.name.clone().unwrap_or_default();
        let app = pod.containers.last().expect("the app").1.clone();
        self.node
            .cri()
            .stop_container(&app, 0)
            .expect("stop the app");
        let counts = || (self.reached(&name), self.proxied(pod).len());
        // The app connects one at a time; the one open when it is killed may have been proxied
        // (a record, the proxy's upstream made) before its tag was written, so it never
        // reaches the world: at most one record more than arrivals, never fewer.
        eventually(
            "a proxy record of every connection that reached the world",
            Duration::from_secs(20),
            || match counts() {
                (reached, records) if reached == records || reached + 1 == records => Ok(reached),
                (reached, records) => Err(format!("{name}: reached {reached}, proxied {records}")),
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        for r in self.proxied(pod) {
            assert_eq!(r["orig_dst"], format!("{GATEWAY}:{WORLD_PORT}"), "{r}");
        }
        counts().0
    }

    /// A power cut and a boot: every process, `/run`, the bpffs and every sandbox gone;
    /// containerd's root and the node's CNI directories kept.
    pub fn reboot(&mut self) {
        self.ds = None;
        self.node.power_off();
        self.node.boot().expect("boot again");
    }
}

/// The daemon's arguments that make a test's node a node: its cgroup `cgroup` in place of the
/// machine's root, for the attachment, the proxy cgroup and the kubelet's pod root.
pub fn node_cgroup_args(cgroup: &Path) -> Vec<String> {
    let cgroup = cgroup.display().to_string();
    ["--cgroup", "--proxy-cgroup", "--pod-cgroup-root"]
        .into_iter()
        .flat_map(|flag| [flag.to_owned(), cgroup.clone()])
        .collect()
}

/// The DaemonSet's pod template, as the DaemonSet controller makes a pod of it.
pub fn daemonset_pod() -> Pod {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/daemonset.yaml");
    let text = std::fs::read_to_string(&path).expect("daemonset.yaml");
    pod::from_yaml(&text, &unique_name("redirect-"), &unique_name("uid-ds"))
        .expect("the DaemonSet's pod")
}

/// A listener at the node's side of the pods' network: every connection's first line.
fn world(node: &CriNode) -> Arc<Mutex<Vec<String>>> {
    crate::tokens::listen(&node.netns.path(), WORLD_PORT).expect("the world listener")
}
