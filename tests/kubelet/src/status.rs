//! The pod's status as the kubelet writes it to the API server while it starts the pod: the
//! phase (`Pending` until every init container that runs to completion has exited 0 and every
//! container started), the host and pod IPs, and each container's status in the spec's order
//! (`initContainerStatuses`, `containerStatuses`): waiting, running with its
//! `containerd://ID`, or terminated with its exit code.
use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use serde_json::{json, Value};

/// What the kubelet knows of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Not started yet.
    Waiting,
    /// Started: its runtime id.
    Running(String),
    /// Exited: its runtime id and exit code.
    Exited(String, i32),
}

fn container_status(c: &Container, state: Option<&State>, waiting_reason: &str) -> Value {
    let (id, state, ready) = match state.unwrap_or(&State::Waiting) {
        State::Waiting => (None, json!({"waiting": {"reason": waiting_reason}}), false),
        State::Running(id) => (
            Some(id),
            json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}}),
            true,
        ),
        State::Exited(id, code) => (
            Some(id),
            json!({"terminated": {"exitCode": code,
                   "reason": if *code == 0 { "Completed" } else { "Error" },
                   "containerID": format!("containerd://{id}")}}),
            false,
        ),
    };
    let mut status = json!({"name": c.name, "image": c.image.clone().unwrap_or_default(),
        "imageID": "", "ready": ready, "restartCount": 0, "started": ready, "state": state});
    if let Some(id) = id {
        status["containerID"] = format!("containerd://{id}").into();
    }
    status
}

/// `pod` with the status the kubelet reports for `states` (by container name) on a node at
/// `host_ip`, the sandbox holding `pod_ip` (empty: none yet).
pub fn object(pod: &Pod, host_ip: &str, pod_ip: &str, states: &HashMap<String, State>) -> Value {
    let mut object = serde_json::to_value(pod).expect("a Pod serializes");
    let spec = pod.spec.clone().unwrap_or_default();
    let inits = spec.init_containers.unwrap_or_default();
    // An init container that runs to completion holds the ones after it back.
    let to_complete = |c: &Container| c.restart_policy.as_deref() != Some("Always");
    let initialized = inits
        .iter()
        .filter(|c| to_complete(c))
        .all(|c| matches!(states.get(&c.name), Some(State::Exited(_, 0))));
    let waiting = if initialized {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let init_statuses: Vec<Value> = inits
        .iter()
        .map(|c| container_status(c, states.get(&c.name), waiting))
        .collect();
    let statuses: Vec<Value> = spec
        .containers
        .iter()
        .map(|c| container_status(c, states.get(&c.name), waiting))
        .collect();
    let all_started = spec
        .containers
        .iter()
        .all(|c| matches!(states.get(&c.name), Some(State::Running(_))));
    let phase = if initialized && all_started {
        "Running"
    } else {
        "Pending"
    };
    object["status"] = json!({
        "phase": phase, "hostIP": host_ip, "podIP": pod_ip,
        "podIPs": if pod_ip.is_empty() { json!([]) } else { json!([{"ip": pod_ip}]) },
        "initContainerStatuses": init_statuses,
        "containerStatuses": statuses,
    });
    object
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "u"},
            "spec": {
                "initContainers": [
                    {"name": "istio-validation", "image": "proxyv2"},
                    {"name": "istio-proxy", "image": "proxyv2", "restartPolicy": "Always"},
                ],
                "containers": [{"name": "app", "image": "app"}],
            },
        }))
        .expect("a Pod")
    }

    #[test]
    fn statuses_follow_the_pods_start_as_the_kubelet_reports_it() {
        let mut states = HashMap::new();
        let o = object(&pod(), "10.0.0.1", "10.244.0.5", &states);
        assert_eq!(o["status"]["phase"], "Pending");
        assert_eq!(o["status"]["podIPs"], json!([{"ip": "10.244.0.5"}]));
        assert_eq!(
            o["status"]["initContainerStatuses"][0]["state"]["waiting"]["reason"],
            "PodInitializing"
        );
        states.insert("istio-validation".into(), State::Running("c1".into()));
        let o = object(&pod(), "10.0.0.1", "10.244.0.5", &states);
        let check = &o["status"]["initContainerStatuses"][0];
        assert_eq!(check["containerID"], "containerd://c1");
        assert!(check["state"]["running"].is_object(), "{check}");
        states.insert("istio-validation".into(), State::Exited("c1".into(), 0));
        states.insert("istio-proxy".into(), State::Running("c2".into()));
        states.insert("app".into(), State::Running("c3".into()));
        let o = object(&pod(), "10.0.0.1", "10.244.0.5", &states);
        assert_eq!(o["status"]["phase"], "Running");
        let inits = &o["status"]["initContainerStatuses"];
        assert_eq!(inits[0]["state"]["terminated"]["exitCode"], 0);
        assert_eq!(inits[1]["containerID"], "containerd://c2");
        assert_eq!(
            o["status"]["containerStatuses"][0]["containerID"],
            "containerd://c3"
        );
        let parsed: Pod = serde_json::from_value(o).expect("the kubelet's status parses");
        assert!(parsed.status.is_some());
    }
}
