//! What makes Prometheus scrape the daemon as job "redirect", the job the alert rules select:
//! deploy/monitoring/prometheus-scrape.yaml passes `promtool check config` (its rule file
//! too), and podmonitor.yaml selects the DaemonSet's pods, names its metrics port and takes
//! the job from their `app` label. Debian's promtool is built without Kubernetes service
//! discovery, so its `kubernetes_sd_configs` block is checked field by field and replaced by a
//! file discovery for promtool; the PodMonitor CRD's schema is not available offline, so its
//! fields are checked against daemonset.yaml.
use std::process::Command;

use redirect_testkit::{runs_or_skip, unique_name};
use serde::Deserialize as _;
use serde_json::Value;

use crate::{
    deploy::{manifests, one},
    monitoring::{monitoring_dir, promtool_missing, PROMTOOL},
};

fn yaml(name: &str) -> (String, Value) {
    let text = std::fs::read_to_string(monitoring_dir().join(name)).expect("read");
    let v = Value::deserialize(serde_norway::Deserializer::from_str(&text)).expect("YAML");
    (text, v)
}

/// The DaemonSet's pod labels and its daemon container's port names.
fn daemonset() -> (Value, Vec<String>) {
    let m = manifests();
    let ds = one(&m, "DaemonSet");
    let labels = ds["spec"]["template"]["metadata"]["labels"].clone();
    let ports = ds["spec"]["template"]["spec"]["containers"][0]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    (labels, ports)
}

#[test]
fn the_scrape_config_passes_promtool_and_gives_the_alerts_their_job() {
    if !runs_or_skip(redirect_testkit::test_path!(), promtool_missing()) {
        return;
    }
    let (text, v) = yaml("prometheus-scrape.yaml");
    let job = &v["scrape_configs"][0];
    assert_eq!(job["job_name"], "redirect", "{job}");
    let sd = &job["kubernetes_sd_configs"][0];
    assert_eq!(sd["role"], "pod", "{sd}");
    assert_eq!(sd["namespaces"]["names"][0], "istio-system", "{sd}");
    let (labels, ports) = daemonset();
    let keeps: Vec<(&str, &str)> = job["relabel_configs"]
        .as_array()
        .expect("relabel_configs")
        .iter()
        .filter(|r| r["action"] == "keep")
        .map(|r| {
            (
                r["source_labels"][0].as_str().expect("label"),
                r["regex"].as_str().expect("regex"),
            )
        })
        .collect();
    assert!(
        keeps.contains(&("__meta_kubernetes_pod_label_app", "redirect"))
            && labels["app"] == "redirect",
        "{keeps:?} against the pods' labels {labels}"
    );
    assert!(
        keeps.contains(&("__meta_kubernetes_pod_container_port_name", "metrics"))
            && ports.iter().any(|p| p == "metrics"),
        "{keeps:?} against the ports {ports:?}"
    );
    // promtool, with the Kubernetes discovery its Debian build lacks replaced by a file one.
    let dir = std::env::temp_dir().join(unique_name("prom-config"));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let at = text.find("  kubernetes_sd_configs:").expect("sd block");
    let end = text.find("  relabel_configs:").expect("relabel block");
    let checked = format!(
        "{}  file_sd_configs:\n  - files: [targets.json]\n{}",
        &text[..at],
        &text[end..]
    );
    std::fs::write(dir.join("prometheus.yaml"), checked).expect("write");
    std::fs::copy(
        monitoring_dir().join("alerts.yaml"),
        dir.join("alerts.yaml"),
    )
    .expect("copy");
    let out = Command::new(PROMTOOL)
        .args(["check", "config", "prometheus.yaml"])
        .current_dir(&dir)
        .output()
        .expect("promtool");
    let _ = std::fs::remove_dir_all(&dir);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.contains("rules found"),
        "{said}"
    );
}

#[test]
fn the_pod_monitor_selects_the_daemonsets_pods_and_port_as_job_redirect() {
    let (_, pm) = yaml("podmonitor.yaml");
    assert_eq!(pm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(pm["kind"], "PodMonitor");
    let spec = &pm["spec"];
    let (labels, ports) = daemonset();
    let selected = spec["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    for (k, v) in selected {
        assert_eq!(
            &labels[k], v,
            "the selector's {k} against the pods' labels {labels}"
        );
    }
    assert_eq!(spec["namespaceSelector"]["matchNames"][0], "istio-system");
    // The job is the pods' `app` label: "redirect", what alerts.yaml selects.
    let job_label = spec["jobLabel"].as_str().expect("jobLabel");
    assert_eq!(labels[job_label], "redirect");
    let alerts = std::fs::read_to_string(monitoring_dir().join("alerts.yaml")).expect("read");
    assert!(alerts.contains("job=\"redirect\""));
    let endpoint = &spec["podMetricsEndpoints"][0];
    let port = endpoint["port"].as_str().expect("port");
    assert!(ports.iter().any(|p| p == port), "{port} not in {ports:?}");
    assert_eq!(endpoint["path"], "/metrics");
}
