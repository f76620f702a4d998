//! What the cluster tests apply: the shipped DaemonSet with the overlay a 1.20 test node needs
//! (each field named with its reason), and Istio-injected workloads as Istio's injector emits
//! them with `pilot.cni.enabled=true` in the classic sidecar form 1.20 runs, made from the
//! recorded kube-inject output (`tests/data/istio/inject/hello.yaml.injected`) by the edits the
//! injector's CNI template makes: `istio-init` becomes `istio-validation` (the same flags plus
//! `--run-validation --skip-rule-apply`, as uid 1337, no capability), `istio-proxy` goes back
//! into `containers`, `sidecar.istio.io/status` lists them so. Only the images change: ours
//! (entrypoint `redirect`, so Istio's own `istio-iptables ...` arguments run ours) for
//! istio-validation and istio-proxy (`redirect-proxy`), busybox for the application.
use std::path::Path;

use anyhow::Context as _;
use serde_json::{json, Value};

use super::node::GATEWAY;

/// What every cluster has before a test: `istio-system` (deploy/README.md: the operator makes
/// it), the `kube-dns` Service's cluster IP (no DNS server runs here) and the application
/// namespace with the CA bundle istiod would publish (its ConfigMap mounted by every sidecar).
pub const BASE: &str = r#"{"apiVersion": "v1", "kind": "List", "items": [
 {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "istio-system"}},
 {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}},
 {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "istio-ca-root-cert", "namespace": "shop"},
  "data": {"root-cert.pem": "test"}},
 {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns", "namespace": "kube-system"},
  "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
   {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}}
]}"#;

/// The port the world listens on at the pods' gateway.
pub const WORLD_PORT: u16 = 8080;

fn repo_file(rel: &str) -> anyhow::Result<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel);
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// The YAML documents of a repository file, as JSON values.
pub fn documents(rel: &str) -> anyhow::Result<Vec<Value>> {
    let text = repo_file(rel)?;
    text.split("\n---")
        .filter(|d| {
            d.lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        })
        .map(|d| serde_norway::from_str(d).with_context(|| format!("a document of {rel}")))
        .collect()
}

/// `deploy/kubernetes/daemonset.yaml` as shipped, with the overlay of a test node on 1.20:
/// - the image under test's tag in place of the manifest's (`tag`: the same build);
/// - the AppArmor annotation in place of `securityContext.appArmorProfile` (1.30+; kubectl
///   1.20 refuses the manifest with the field: `unknown field "appArmorProfile"`);
/// - the daemon's `--cgroup`, `--proxy-cgroup` and `--pod-cgroup-root` at the node's cgroup
///   (`cgroup_v2`, the kubelet's `--cgroup-root`), not the machine's root: the test's node
///   shares the machine's cgroup tree with every other test.
pub fn daemonset(tag: &str, cgroup_v2: &Path) -> anyhow::Result<Value> {
    let mut ds = documents("deploy/kubernetes/daemonset.yaml")?
        .into_iter()
        .next()
        .context("daemonset.yaml holds no document")?;
    let template = &mut ds["spec"]["template"];
    template["metadata"]["annotations"]
        ["container.apparmor.security.beta.kubernetes.io/redirect"] = "unconfined".into();
    for c in template["spec"]["containers"]
        .as_array_mut()
        .context("containers")?
    {
        c["image"] = tag.into();
        // kubectl 1.20 refuses the manifest with it: `unknown field "appArmorProfile" in
        // io.k8s.api.core.v1.SecurityContext` (client-side validation).
        if let Some(sc) = c["securityContext"].as_object_mut() {
            sc.remove("appArmorProfile");
        }
    }
    let args = crate::mesh::node_cgroup_args(cgroup_v2);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    append_daemon_args(&mut ds, &args)?;
    Ok(ds)
}

/// `deploy/kubernetes/untaint-controller.yaml` as shipped (its ServiceAccount, roles, bindings
/// and Deployment), with the image under test's tag (`tag`) in place of the manifest's: a
/// `List` for one `kubectl apply`.
pub fn untaint_controller(tag: &str) -> anyhow::Result<Value> {
    let mut docs = documents("deploy/kubernetes/untaint-controller.yaml")?;
    for d in docs.iter_mut().filter(|d| d["kind"] == "Deployment") {
        for c in d["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .context("the controller's containers")?
        {
            c["image"] = tag.into();
        }
    }
    Ok(json!({"apiVersion": "v1", "kind": "List", "items": docs}))
}

/// Appends `args` to the daemon container's arguments in the DaemonSet `ds`.
pub fn append_daemon_args(ds: &mut Value, args: &[&str]) -> anyhow::Result<()> {
    let daemon = ds["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .and_then(|cs| cs.iter_mut().find(|c| c["name"] == "redirect"))
        .context("the DaemonSet's redirect container")?;
    let all = daemon["args"].as_array_mut().context("the daemon's args")?;
    all.extend(args.iter().map(|a| Value::from(*a)));
    Ok(())
}

/// How an injected workload is made.
#[derive(Debug, Clone)]
pub struct Injected {
    /// The Deployment's name.
    pub name: String,
    /// Its replicas.
    pub replicas: u32,
    /// The image under test.
    pub image: String,
    /// Pod annotations added to the injector's.
    pub annotations: Vec<(String, String)>,
    /// `ISTIO_META_DNS_CAPTURE=true` in the proxy's environment.
    pub dns_capture: bool,
    /// The application's connections to the world (then it idles; 0: none).
    pub connections: u32,
    /// A second container running as the proxy's uid, 1337, making as many connections
    /// (`POD-imp-N`): an application that took the proxy's uid.
    pub imposter: bool,
    /// Istio's TPROXY injection (`hello-tproxy.yaml.injected`: `-m TPROXY`, istio-proxy as
    /// uid 0 with NET_ADMIN) with the `sidecar.istio.io/interceptionMode: TPROXY` annotation.
    pub tproxy: bool,
    /// No istio-validation container (it cannot pass where nothing captures): the workload
    /// whose start is timed with and without our entry.
    pub no_validation: bool,
}

impl Injected {
    /// `replicas` pods of `name` from `image`, each making `connections` connections.
    pub fn new(name: &str, replicas: u32, image: &str, connections: u32) -> Self {
        Self {
            name: name.to_owned(),
            replicas,
            image: image.to_owned(),
            annotations: Vec::new(),
            dns_capture: false,
            connections,
            imposter: false,
            tproxy: false,
            no_validation: false,
        }
    }
}

/// The script of a container that waits for its pod's proxy to be ready (as an application
/// of `holdApplicationUntilProxyStarts` would), then makes `n` connections to the world, one a
/// second, each sending a token `POD-TAGRUN-N` (`RUN` new at each start of the container),
/// then idles.
fn client_script(n: u32, tag: &str) -> String {
    format!(
        "until wget -q -O /dev/null http://127.0.0.1:15021/healthz/ready; do sleep 1; done; \
         read RUN < /proc/sys/kernel/random/uuid; RUN=${{RUN%%-*}}; \
         i=0; while [ $i -lt {n} ]; do i=$((i+1)); \
         echo $POD_NAME-{tag}$RUN-$i | nc -w 3 {GATEWAY} {WORLD_PORT} >/dev/null; sleep 1; done; \
         exec sleep 2147483647"
    )
}

fn busybox(name: &str, script: String) -> Value {
    json!({
        "name": name,
        "image": redirect_kubelet::images::APP_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", script],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
    })
}

/// The application: an HTTP server on port 80 whose `/cgi-bin/peer` answers the address the
/// application sees its client at, and [`client_script`]'s connections.
fn app(connections: u32) -> Value {
    let server = "busybox mkdir -p /tmp/www/cgi-bin; \
        printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\necho $REMOTE_ADDR\\n' > /tmp/www/cgi-bin/peer; \
        busybox chmod +x /tmp/www/cgi-bin/peer; busybox httpd -p 80 -h /tmp/www; ";
    let mut c = busybox(
        "hello",
        format!("{server}{}", client_script(connections, "")),
    );
    c["ports"] = json!([{"containerPort": 80, "name": "http"}]);
    c
}

/// [`Injected::imposter`]'s container.
fn imposter(connections: u32) -> Value {
    let mut c = busybox("imposter", client_script(connections, "imp-"));
    c["securityContext"] = json!({"runAsUser": 1337, "runAsGroup": 1337});
    c
}

/// The Deployment Istio's injector emits with istio-cni, classic form (see the module).
pub fn injected(w: &Injected) -> anyhow::Result<Value> {
    let mut d = documents(if w.tproxy {
        "tests/data/istio/inject/hello-tproxy.yaml.injected"
    } else {
        "tests/data/istio/inject/hello.yaml.injected"
    })?
    .into_iter()
    .next()
    .context("hello.yaml.injected holds no document")?;
    d["metadata"]["name"] = w.name.clone().into();
    d["metadata"]["namespace"] = "shop".into();
    d["spec"]["replicas"] = w.replicas.into();
    let labels = json!({"app": w.name});
    d["spec"]["selector"] = json!({"matchLabels": labels});
    let template = &mut d["spec"]["template"];
    template["metadata"]["labels"]["app"] = w.name.clone().into();
    let annotations = &mut template["metadata"]["annotations"];
    annotations["sidecar.istio.io/status"] = json!({
        "initContainers": ["istio-validation"], "containers": ["istio-proxy"],
        "volumes": ["workload-socket", "credential-socket", "workload-certs", "istio-envoy",
            "istio-data", "istio-podinfo", "istio-token", "istiod-ca-cert", "istio-ca-crl"],
        "imagePullSecrets": null, "revision": "default"})
    .to_string()
    .into();
    if w.tproxy {
        annotations["sidecar.istio.io/interceptionMode"] = "TPROXY".into();
    }
    for (k, v) in &w.annotations {
        annotations[k] = v.clone().into();
    }
    let spec = &mut template["spec"];
    let inits = spec["initContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut init = inits
        .iter()
        .find(|c| c["name"] == "istio-init")
        .cloned()
        .context("no istio-init in the recorded injection")?;
    let mut proxy = inits
        .iter()
        .find(|c| c["name"] == "istio-proxy")
        .cloned()
        .context("no istio-proxy in the recorded injection")?;
    // istio-validation: istio-init's flags, validated instead of applied, as the proxy's uid.
    init["name"] = "istio-validation".into();
    init["image"] = w.image.clone().into();
    init["imagePullPolicy"] = "Never".into();
    let args = init["args"].as_array_mut().context("istio-init's args")?;
    args.push("--run-validation".into());
    args.push("--skip-rule-apply".into());
    init["securityContext"] = json!({"allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]}, "privileged": false, "readOnlyRootFilesystem": true,
        "runAsGroup": 1337, "runAsNonRoot": true, "runAsUser": 1337});
    // istio-proxy: a classic sidecar; our reference proxy in place of Envoy.
    if let Some(o) = proxy.as_object_mut() {
        o.remove("restartPolicy");
        o.remove("lifecycle");
    }
    proxy["image"] = w.image.clone().into();
    proxy["imagePullPolicy"] = "Never".into();
    proxy["command"] = json!(["redirect-proxy"]);
    // The world stands for istiod: like Envoy, the proxy opens its listeners once its
    // control plane answered.
    let mut args = vec!["--log-format".to_owned(), "json".to_owned()];
    args.extend([
        "--control-plane".to_owned(),
        format!("{GATEWAY}:{WORLD_PORT}"),
    ]);
    if w.tproxy {
        // Envoy's original_src: the upstream from the client's address, marked 1337.
        args.extend(["--tproxy-mark".to_owned(), "1337".to_owned()]);
    }
    proxy["args"] = json!(args);
    if w.dns_capture {
        if let Some(env) = proxy["env"].as_array_mut() {
            env.push(json!({"name": "ISTIO_META_DNS_CAPTURE", "value": "true"}));
        }
    }
    spec["initContainers"] = if w.no_validation {
        json!([])
    } else {
        json!([init])
    };
    let mut containers = vec![app(w.connections)];
    if w.imposter {
        containers.push(imposter(w.connections));
    }
    containers.push(proxy);
    spec["containers"] = Value::Array(containers);
    spec["dnsPolicy"] = "ClusterFirst".into();
    spec["terminationGracePeriodSeconds"] = 5.into();
    Ok(d)
}
