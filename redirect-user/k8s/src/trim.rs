//! [`trimmed`]: a pod cut down to the fields the node daemon reads, so that caching every pod of
//! a node costs about a kilobyte each, however much the pod carries (managedFields,
//! `last-applied-configuration`, an app's env, termination messages).
//!
//! What is kept is what [`crate::decide`], [`crate::policy`] and [`crate::reset_uncaptured`]
//! read, and what the daemon's reconcile reads beside them (the pod's identity, whether it is
//! being deleted, `hostUsers`, `nodeName`, its phase, addresses and containers' ids and running
//! states). The annotation, label and env names read are listed here, and [`crate::pod`]'s
//! accessors refuse (in debug builds, so in every test) a name missing from these lists: a new
//! read cannot be trimmed away unnoticed.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStatus, EnvVar, Pod, PodDNSConfig, PodSecurityContext,
    PodSpec, PodStatus, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::annotations::{
    EXCLUDE_INBOUND_PORTS, EXCLUDE_INTERFACES, EXCLUDE_OUTBOUND_IP_RANGES, EXCLUDE_OUTBOUND_PORTS,
    INCLUDE_INBOUND_PORTS, INCLUDE_OUTBOUND_IP_RANGES, INCLUDE_OUTBOUND_PORTS, INTERCEPTION_MODE,
    KUBEVIRT_INTERFACES, REROUTE_VIRTUAL_INTERFACES, STATUS_PORT,
};
use crate::binding::{PROXY_BINDING, RESET_UNCAPTURED};
use crate::containers::PROXY;
use crate::decide::{DATAPLANE_MODE, INJECT, SIDECAR_STATUS};

/// Every annotation read from a pod.
pub const READ_ANNOTATIONS: [&str; 16] = [
    INJECT,
    SIDECAR_STATUS,
    DATAPLANE_MODE,
    INTERCEPTION_MODE,
    INCLUDE_OUTBOUND_IP_RANGES,
    EXCLUDE_OUTBOUND_IP_RANGES,
    INCLUDE_INBOUND_PORTS,
    EXCLUDE_INBOUND_PORTS,
    INCLUDE_OUTBOUND_PORTS,
    EXCLUDE_OUTBOUND_PORTS,
    EXCLUDE_INTERFACES,
    REROUTE_VIRTUAL_INTERFACES,
    KUBEVIRT_INTERFACES,
    STATUS_PORT,
    PROXY_BINDING,
    RESET_UNCAPTURED,
];

/// Every label read from a pod.
pub const READ_LABELS: [&str; 2] = [INJECT, DATAPLANE_MODE];

/// Every env variable read from the istio-proxy container.
pub const READ_ENV: [&str; 5] = [
    "DISABLE_ENVOY",
    "ISTIO_META_DNS_CAPTURE",
    "ISTIO_DUAL_STACK",
    "INVALID_DROP",
    "ISTIO_META_INTERCEPTION_MODE",
];

/// `pod` with only the fields the daemon reads; everything else is dropped, not copied (the
/// kept strings are moved out of `pod`). Deciding, resolving the policy of and reconciling the
/// trimmed pod gives what the whole pod gives (`trim_tests` proves it on every test pod and
/// kube-inject manifest).
#[must_use]
pub fn trimmed(pod: Pod) -> Pod {
    let Pod {
        metadata,
        spec,
        status,
    } = pod;
    Pod {
        metadata: ObjectMeta {
            name: metadata.name,
            namespace: metadata.namespace,
            uid: metadata.uid,
            deletion_timestamp: metadata.deletion_timestamp,
            annotations: only(metadata.annotations, &READ_ANNOTATIONS),
            labels: only(metadata.labels, &READ_LABELS),
            ..ObjectMeta::default()
        },
        spec: spec.map(spec_read),
        status: status.map(status_read),
    }
}

/// The entries of `map` named in `read`; `None` stays `None` (an absent map is not an empty one
/// to anybody reading it, but neither differs for a key lookup).
fn only(map: Option<BTreeMap<String, String>>, read: &[&str]) -> Option<BTreeMap<String, String>> {
    map.map(|m| {
        m.into_iter()
            .filter(|(k, _)| read.contains(&k.as_str()))
            .collect()
    })
}

fn spec_read(spec: PodSpec) -> PodSpec {
    PodSpec {
        host_network: spec.host_network,
        host_users: spec.host_users,
        node_name: spec.node_name,
        dns_policy: spec.dns_policy,
        dns_config: spec.dns_config.map(|c| PodDNSConfig {
            nameservers: c.nameservers,
            ..PodDNSConfig::default()
        }),
        security_context: spec.security_context.map(|s| PodSecurityContext {
            run_as_user: s.run_as_user,
            run_as_group: s.run_as_group,
            ..PodSecurityContext::default()
        }),
        containers: spec.containers.into_iter().map(container_read).collect(),
        init_containers: spec
            .init_containers
            .map(|cs| cs.into_iter().map(container_read).collect()),
        ..PodSpec::default()
    }
}

/// Every container keeps its name and restart policy (how istio-proxy and istio-init are
/// found); istio-proxy also keeps the args, env and ids the policy reads.
fn container_read(c: Container) -> Container {
    let proxy = c.name == PROXY;
    Container {
        restart_policy: c.restart_policy,
        args: c.args.filter(|_| proxy).map(args_read),
        env: c.env.filter(|_| proxy).map(env_read),
        security_context: c
            .security_context
            .filter(|_| proxy)
            .map(|s| SecurityContext {
                run_as_user: s.run_as_user,
                run_as_group: s.run_as_group,
                ..SecurityContext::default()
            }),
        name: c.name,
        ..Container::default()
    }
}

/// istio-proxy's args as read: the first two (`proxy sidecar`), the first `--statusPort` with
/// the value after it, and the first `--statusPort=PORT`, in their order.
fn args_read(args: Vec<String>) -> Vec<String> {
    let flag = args.iter().position(|a| a == "--statusPort");
    let joined = args.iter().position(|a| a.starts_with("--statusPort="));
    args.into_iter()
        .enumerate()
        .filter(|(i, _)| {
            *i < 2 || flag.is_some_and(|f| *i == f || *i == f + 1) || joined == Some(*i)
        })
        .map(|(_, a)| a)
        .collect()
}

/// The env entries read, in their order (a later entry of a name wins); a `valueFrom` entry
/// keeps its name without a value, which is how it is read.
fn env_read(env: Vec<EnvVar>) -> Vec<EnvVar> {
    env.into_iter()
        .filter(|e| READ_ENV.contains(&e.name.as_str()))
        .map(|e| EnvVar {
            name: e.name,
            value: e.value,
            value_from: None,
        })
        .collect()
}

fn status_read(status: PodStatus) -> PodStatus {
    let statuses = |list: Option<Vec<ContainerStatus>>| {
        list.map(|l| l.into_iter().map(container_status_read).collect())
    };
    PodStatus {
        phase: status.phase,
        pod_ip: status.pod_ip,
        pod_ips: status.pod_ips,
        container_statuses: statuses(status.container_statuses),
        init_container_statuses: statuses(status.init_container_statuses),
        ephemeral_container_statuses: statuses(status.ephemeral_container_statuses),
        ..PodStatus::default()
    }
}

/// A container's name, runtime id and whether it runs (a terminated one's message is dropped).
fn container_status_read(c: ContainerStatus) -> ContainerStatus {
    ContainerStatus {
        name: c.name,
        container_id: c.container_id,
        state: c.state.map(|s| ContainerState {
            running: s.running,
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}
