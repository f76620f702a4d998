//! A Pod object into the CRI's sandbox and container configurations, as the kubelet makes them:
//! metadata and annotations, the QoS class's cgroup parent (cgroupfs driver), host network
//! and PID, DNS, privileges and users, resources, environment with the downward API's fields,
//! `$(VAR)` expansion, hostPath volumes and their mount propagation.
use std::collections::{BTreeMap, HashMap};

use anyhow::{bail, Context as _};
use k8s_cri::v1::{
    Capability, ContainerConfig, ContainerMetadata, DnsConfig, ImageSpec, Int64Value, KeyValue,
    LinuxContainerConfig, LinuxContainerSecurityContext, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, Mount, MountPropagation, NamespaceMode, NamespaceOption,
    PodSandboxConfig, PodSandboxMetadata,
};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, Volume};

/// What the kubelet knows of its node.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// `spec.nodeName`.
    pub name: String,
    /// `status.hostIP`.
    pub host_ip: String,
    /// The kubelet's `--cgroup-root` (`/` on most nodes), below which `kubepods` is.
    pub cgroup_root: String,
    /// The kubelet's `--cluster-dns`.
    pub cluster_dns: String,
    /// Where the sandboxes' logs go (the kubelet's `/var/log/pods`).
    pub log_root: String,
    /// Where pods' volumes other than hostPath are (the kubelet's `/var/lib/kubelet/pods`).
    pub pods_root: String,
    /// The apiserver pods reach with in-cluster credentials, when the node has one.
    pub api: Option<crate::service_account::ApiAccess>,
}

/// Where the runtime finds `volume` of `pod`: a hostPath's own path; any other volume
/// (emptyDir, and the Secret, ConfigMap, downward-API and projected volumes, whose contents
/// no test here reads) an empty directory of the pod's, which [`crate::Kubelet`] makes.
pub fn volume_path(pod: &Pod, node: &NodeInfo, volume: &Volume) -> anyhow::Result<String> {
    if let Some(h) = &volume.host_path {
        return Ok(h.path.clone());
    }
    let uid = pod.metadata.uid.as_deref().context("the pod has no uid")?;
    Ok(format!("{}/{uid}/volumes/{}", node.pods_root, volume.name))
}

/// What the test puts in place of a container's image, command or arguments (images
/// cannot be pulled here), or adds (a mount, an argument, an environment variable).
#[derive(Debug, Clone, Default)]
pub struct Override {
    /// The image the runtime has, in place of the Pod's.
    pub image: Option<String>,
    /// In place of `command`.
    pub command: Option<Vec<String>>,
    /// In place of `args`.
    pub args: Option<Vec<String>>,
    /// After the arguments (after `$(VAR)` expansion).
    pub append_args: Vec<String>,
    /// More environment.
    pub env: Vec<(String, String)>,
    /// More hostPath mounts: (host path, container path).
    pub mounts: Vec<(String, String)>,
}

/// The Pod's QoS class, as the kubelet decides it from requests and limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qos {
    /// Every container has limits equal to its requests for cpu and memory.
    Guaranteed,
    /// Some requests or limits.
    Burstable,
    /// None at all.
    BestEffort,
}

fn spec(pod: &Pod) -> anyhow::Result<&PodSpec> {
    pod.spec.as_ref().context("the pod has no spec")
}

/// The QoS class of `pod`.
pub fn qos(pod: &Pod) -> anyhow::Result<Qos> {
    let mut any = false;
    let mut guaranteed = true;
    for c in &spec(pod)?.containers {
        let res = c.resources.clone().unwrap_or_default();
        let (requests, limits) = (
            res.requests.unwrap_or_default(),
            res.limits.unwrap_or_default(),
        );
        any |= !requests.is_empty() || !limits.is_empty();
        for r in ["cpu", "memory"] {
            let limit = limits.get(r);
            let request = requests.get(r).or(limit);
            guaranteed &= limit.is_some() && request == limit;
        }
    }
    Ok(match (any, guaranteed) {
        (false, _) => Qos::BestEffort,
        (true, true) => Qos::Guaranteed,
        (true, false) => Qos::Burstable,
    })
}

/// The pod's cgroup parent under the cgroupfs driver: `<root>/kubepods[/besteffort|/burstable]/pod<UID>`.
pub fn cgroup_parent(pod: &Pod, node: &NodeInfo) -> anyhow::Result<String> {
    let uid = pod.metadata.uid.as_deref().context("the pod has no uid")?;
    let class = match qos(pod)? {
        Qos::Guaranteed => String::new(),
        Qos::Burstable => "/burstable".into(),
        Qos::BestEffort => "/besteffort".into(),
    };
    let root = node.cgroup_root.trim_end_matches('/');
    Ok(format!("{root}/kubepods{class}/pod{uid}"))
}

fn namespaces(spec: &PodSpec) -> NamespaceOption {
    let mode = |host: Option<bool>| {
        if host == Some(true) {
            NamespaceMode::Node
        } else {
            NamespaceMode::Pod
        }
    };
    NamespaceOption {
        network: mode(spec.host_network).into(),
        pid: if spec.host_pid == Some(true) {
            NamespaceMode::Node
        } else {
            NamespaceMode::Container
        }
        .into(),
        ipc: mode(spec.host_ipc).into(),
        ..Default::default()
    }
}

/// The sandbox of `pod` on `node`.
pub fn sandbox_config(pod: &Pod, node: &NodeInfo) -> anyhow::Result<PodSandboxConfig> {
    let spec = spec(pod)?;
    let meta = &pod.metadata;
    let (name, namespace, uid) = (
        meta.name.clone().context("the pod has no name")?,
        meta.namespace.clone().unwrap_or_else(|| "default".into()),
        meta.uid.clone().context("the pod has no uid")?,
    );
    let host_network = spec.host_network == Some(true);
    // ClusterFirst (the default) on the pod network: the cluster DNS; on the host network
    // (without ClusterFirstWithHostNet) the node's own resolv.conf.
    let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    let cluster =
        policy == "ClusterFirstWithHostNet" || (policy == "ClusterFirst" && !host_network);
    let dns_config = cluster.then(|| DnsConfig {
        servers: vec![node.cluster_dns.clone()],
        searches: ["svc.cluster.local", "cluster.local"].iter().fold(
            vec![format!("{namespace}.svc.cluster.local")],
            |mut v, s| {
                v.push((*s).to_owned());
                v
            },
        ),
        options: vec!["ndots:5".into()],
    });
    let mut labels: HashMap<String, String> = meta
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    labels.insert("io.kubernetes.pod.name".into(), name.clone());
    labels.insert("io.kubernetes.pod.namespace".into(), namespace.clone());
    labels.insert("io.kubernetes.pod.uid".into(), uid.clone());
    let privileged = spec
        .containers
        .iter()
        .any(|c| c.security_context.as_ref().and_then(|s| s.privileged) == Some(true));
    Ok(PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.clone(),
            uid: uid.clone(),
            namespace: namespace.clone(),
            attempt: 0,
        }),
        hostname: if host_network {
            String::new()
        } else {
            name.clone()
        },
        log_directory: format!("{}/{namespace}_{name}_{uid}", node.log_root),
        dns_config,
        labels,
        annotations: meta
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent(pod, node)?,
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces(spec)),
                privileged,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The value of a downward-API field of `pod` on `node`.
fn field(pod: &Pod, node: &NodeInfo, pod_ip: &str, path: &str) -> anyhow::Result<String> {
    let meta = &pod.metadata;
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => node.name.clone(),
        "spec.serviceAccountName" => spec(pod)?.service_account_name.clone().unwrap_or_default(),
        "status.hostIP" => node.host_ip.clone(),
        "status.podIP" => pod_ip.to_owned(),
        other => bail!("fieldRef {other:?} is not one this kubelet-lite knows"),
    })
}

/// `$(VAR)` replaced by the variable's value when it is defined, `$$` by `$` (the kubelet's
/// expansion of command and args).
pub fn expand(text: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if let Some(after) = rest.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some((name, after)) = rest
            .strip_prefix("$(")
            .and_then(|r| r.split_once(')'))
            .filter(|(name, _)| vars.contains_key(*name))
        {
            out.push_str(&vars[name]);
            rest = after;
        } else {
            out.push('$');
            rest = &rest[1..];
        }
    }
    out + rest
}

/// The configuration of `pod`'s container `c`, with `ov` applied.
pub fn container_config(
    pod: &Pod,
    c: &Container,
    node: &NodeInfo,
    pod_ip: &str,
    ov: &Override,
) -> anyhow::Result<ContainerConfig> {
    let spec = spec(pod)?;
    let mut vars = BTreeMap::new();
    // The service's variables first: the container's own win.
    vars.extend(node.api.iter().flat_map(crate::service_account::env));
    for e in c.env.iter().flatten() {
        let value = match (
            &e.value,
            e.value_from.as_ref().and_then(|f| f.field_ref.as_ref()),
        ) {
            (Some(v), _) => expand(v, &vars),
            (None, Some(f)) => field(pod, node, pod_ip, &f.field_path)?,
            (None, None) => String::new(),
        };
        vars.insert(e.name.clone(), value);
    }
    for (k, v) in &ov.env {
        vars.insert(k.clone(), v.clone());
    }
    let expand_all = |v: &Option<Vec<String>>| -> Vec<String> {
        v.iter().flatten().map(|a| expand(a, &vars)).collect()
    };
    let mut args = ov.args.clone().unwrap_or_else(|| expand_all(&c.args));
    args.extend(ov.append_args.iter().cloned());
    let mut mounts = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let volume = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == m.name)
            .with_context(|| format!("container {}: no volume {:?}", c.name, m.name))?;
        let host_path = volume_path(pod, node, volume)?;
        let propagation = match m.mount_propagation.as_deref() {
            Some("Bidirectional") => MountPropagation::PropagationBidirectional,
            Some("HostToContainer") => MountPropagation::PropagationHostToContainer,
            None | Some("None") => MountPropagation::PropagationPrivate,
            Some(other) => bail!("mountPropagation {other:?}"),
        };
        mounts.push(Mount {
            container_path: m.mount_path.clone(),
            host_path,
            readonly: m.read_only == Some(true),
            propagation: propagation.into(),
            ..Default::default()
        });
    }
    if node.api.is_some() && crate::service_account::automounts(pod) {
        mounts.push(Mount {
            container_path: crate::service_account::MOUNT_PATH.into(),
            host_path: crate::service_account::volume_dir(pod, node),
            readonly: true,
            ..Default::default()
        });
    }
    mounts.extend(ov.mounts.iter().map(|(h, c)| Mount {
        container_path: c.clone(),
        host_path: h.clone(),
        readonly: true,
        ..Default::default()
    }));
    let sc = c.security_context.clone().unwrap_or_default();
    let pod_sc = spec.security_context.clone().unwrap_or_default();
    let user = sc.run_as_user.or(pod_sc.run_as_user);
    let group = sc.run_as_group.or(pod_sc.run_as_group);
    let caps = sc.capabilities.clone().unwrap_or_default();
    let security = LinuxContainerSecurityContext {
        capabilities: Some(Capability {
            add_capabilities: caps.add.unwrap_or_default(),
            drop_capabilities: caps.drop.unwrap_or_default(),
            ..Default::default()
        }),
        privileged: sc.privileged == Some(true),
        namespace_options: Some(namespaces(spec)),
        run_as_user: user.map(|value| Int64Value { value }),
        run_as_group: group.map(|value| Int64Value { value }),
        readonly_rootfs: sc.read_only_root_filesystem == Some(true),
        no_new_privs: sc.allow_privilege_escalation == Some(false),
        ..Default::default()
    };
    let image = ov
        .image
        .clone()
        .or_else(|| c.image.clone())
        .with_context(|| format!("container {} has no image", c.name))?;
    let mut labels = HashMap::new();
    labels.insert("io.kubernetes.container.name".to_owned(), c.name.clone());
    Ok(ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: c.name.clone(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image,
            ..Default::default()
        }),
        command: ov.command.clone().unwrap_or_else(|| expand_all(&c.command)),
        args,
        envs: vars
            .into_iter()
            .map(|(key, value)| KeyValue { key, value })
            .collect(),
        mounts,
        labels,
        log_path: format!("{}/0.log", c.name),
        linux: Some(LinuxContainerConfig {
            resources: Some(crate::quantity::resources(c)?),
            security_context: Some(security),
        }),
        ..Default::default()
    })
}

/// `pod` read from YAML (a Pod, or the Pod template of a DaemonSet or Deployment, given the
/// name and uid the controller would).
pub fn from_yaml(text: &str, name: &str, uid: &str) -> anyhow::Result<Pod> {
    let value: serde_json::Value = serde_norway::from_str(text).context("the manifest's YAML")?;
    let mut pod = match value["kind"].as_str() {
        Some("Pod") => value,
        Some("DaemonSet" | "Deployment" | "StatefulSet") => {
            let t = &value["spec"]["template"];
            let mut p = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": t["metadata"], "spec": t["spec"]});
            p["metadata"]["namespace"] = value["metadata"]["namespace"].clone();
            p
        }
        other => bail!("a manifest of kind {other:?} holds no pod"),
    };
    pod["metadata"]["name"] = name.into();
    pod["metadata"]["uid"] = uid.into();
    serde_json::from_value(pod).context("the pod object")
}
