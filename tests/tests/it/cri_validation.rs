//! istio-cni's `istio-validation` init container (issue 45) as Istio's injector writes it with
//! `pilot.cni.enabled=true`: istio-iptables with the pod's own flags and `--run-validation
//! --skip-rule-apply`, as uid 1337, in its own container, before the (native sidecar)
//! istio-proxy; its image replaced by the image under test (`redirect istio-iptables`). Pods
//! containerd starts on a node whose DaemonSet's daemon enrolls them (`redirect_tests::mesh`),
//! the kubelet-lite writing each status change to the recorded apiserver as a kubelet writes
//! it. With the default binding the validation passes; with `redirect.dev/proxy-binding:
//! strict` it passes too (before issue 45's fix it could not: its dial was the closed bypass's,
//! `untouched loopback`), the bypass following the validation container while it runs; once
//! istio-proxy runs, uid 1337 outside the proxy's container is captured.
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use k8s_openapi::api::core::v1::Pod;
use redirect_kubelet::{Override, RunningPod};
use redirect_testkit::{eventually, unique_name};
use redirect_tests::{
    apiserver::{recorded_pod, recorded_pod_with_istio_init},
    bin_path,
    conformance::listen_at,
    mesh::{parts_or_skip, MeshNode, GATEWAY, NODE},
};
use serde_json::{json, Value};

/// Where uid 1337's probe goes: a listener at the node's side of the pods' network.
const PROBE_PORT: u16 = 9099;

/// Pod `name` as the injector writes it with istio-cni: hello.yaml's istio-init made
/// istio-validation (Istio's injection template: the same arguments and
/// `--run-validation --skip-rule-apply`, the proxy's uid, no capabilities), first among the
/// init containers; `strict`: with `redirect.dev/proxy-binding: strict`.
fn with_validation(mesh: &MeshNode, name: &str, strict: bool) -> (Pod, HashMap<String, Override>) {
    // A uid as the apiserver makes them: the daemon finds the pod's cgroup directory by it.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let uid = format!(
        "{:08x}-0000-4000-8000-{:012x}",
        std::process::id(),
        nanos % (1 << 48)
    );
    let mut object = recorded_pod("hello.yaml", "shop", name, &uid, NODE);
    let classic = recorded_pod_with_istio_init("hello.yaml", "shop", name, &uid, NODE);
    let mut check = classic["spec"]["initContainers"]
        .as_array()
        .and_then(|inits| inits.iter().find(|c| c["name"] == "istio-init"))
        .expect("istio-init")
        .clone();
    check["name"] = "istio-validation".into();
    let args = check["args"].as_array_mut().expect("its arguments");
    args.extend(["--run-validation", "--skip-rule-apply"].map(Value::from));
    check["securityContext"] = json!({
        "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
        "privileged": false, "readOnlyRootFilesystem": true,
        "runAsGroup": 1337, "runAsNonRoot": true, "runAsUser": 1337,
    });
    object["spec"]["initContainers"]
        .as_array_mut()
        .expect("init containers")
        .insert(0, check);
    if strict {
        object["metadata"]["annotations"]["redirect.dev/proxy-binding"] = "strict".into();
    }
    mesh.api.put(&object);
    let pod: Pod = serde_json::from_value(object).expect("a Pod");
    let mut overrides = mesh.overrides(&pod, "0.2");
    overrides.insert(
        "istio-validation".into(),
        Override {
            image: Some(mesh.image.clone()),
            command: Some(vec!["redirect".into()]),
            ..Override::default()
        },
    );
    (pod, overrides)
}

/// Runs pod `name`; its validation must pass.
fn passes(mesh: &MeshNode, name: &str, strict: bool) -> RunningPod {
    let (pod, overrides) = with_validation(mesh, name, strict);
    let running = mesh.run_reported(&pod, &overrides).unwrap_or_else(|e| {
        let daemon = mesh.kubelet().logs(mesh.ds(), "redirect");
        panic!("{name} (strict: {strict}) did not start: {e}\nthe daemon's log:\n{daemon}")
    });
    let log = mesh.kubelet().logs(&running, "istio-validation");
    assert!(
        log.contains(
            "validation passed: the probe arrived at 127.0.0.1:15006 with original destination 127.0.0.6:15002"
        ),
        "{log}"
    );
    running
}

/// The cgroup directory of container `id` below the node's cgroup.
fn container_cgroup(root: &Path, id: &str) -> PathBuf {
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = e.path();
            if !path.is_dir() {
                continue;
            }
            if path.file_name().is_some_and(|n| n == id) {
                return path;
            }
            todo.push(path);
        }
    }
    panic!("no cgroup of container {id} under {}", root.display())
}

#[test]
fn istio_validation_passes_with_the_default_and_the_strict_binding() {
    let Some((image, archive)) = parts_or_skip(redirect_testkit::test_path!()) else {
        return;
    };
    let mut mesh = MeshNode::new(&image, &archive);
    mesh.start_daemonset();

    let default = passes(&mesh, &unique_name("check-"), false);
    mesh.kubelet().remove(&default).expect("remove the pod");

    let name = unique_name("strict-");
    let strict = passes(&mesh, &name, true);
    let daemon = mesh.kubelet().logs(mesh.ds(), "redirect");
    assert!(
        daemon.contains("follows the istio-validation container's cgroup"),
        "{daemon}"
    );
    let validation = mesh.kubelet().logs(&strict, "istio-validation");
    eprintln!("istio-validation of {name}:\n{validation}");
    // The proxy runs: the bypass is its container's.
    let proxy = strict.container("istio-proxy").to_owned();
    eventually(
        "the bypass bound to the istio-proxy container",
        Duration::from_secs(30),
        || {
            let list = mesh.listed();
            let bound = list
                .iter()
                .find(|e| e["pod"]["name"] == name.as_str())
                .map(|e| e["policy"]["proxy_cgroup"].clone());
            match bound {
                Some(Value::String(cg)) if cg.ends_with(&proxy) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let daemon = mesh.kubelet().logs(mesh.ds(), "redirect");
    for line in daemon.lines().filter(|l| l.contains("bypass")) {
        eprintln!("{line}");
    }

    // uid 1337 in the app's container is captured: its connection goes through the proxy,
    // which logs its original destination.
    let _direct = listen_at(
        &mesh.node.netns.path(),
        None,
        None,
        "direct",
        &[format!("{GATEWAY}:{PROBE_PORT}")],
        &[],
    );
    let app = strict.containers.last().expect("the app").1.clone();
    let out = Command::new(bin_path("probe-matrix"))
        .arg("--netns")
        .arg(format!("/proc/{}/ns/net", strict.pid))
        .arg("--cgroup")
        .arg(container_cgroup(mesh.node.cgroup.path(), &app))
        .args(["--uid", "1337", "--gid", "1337", "--"])
        .arg(format!("tcp:{GATEWAY}:{PROBE_PORT}"))
        .output()
        .expect("probe-matrix");
    let probed = String::from_utf8_lossy(&out.stdout);
    assert!(probed.contains("\"ok\":true"), "{probed}");
    let orig = format!("{GATEWAY}:{PROBE_PORT}");
    eventually(
        "the proxy's record of uid 1337's connection from the app's container",
        Duration::from_secs(20),
        || {
            let seen = mesh
                .proxied(&strict)
                .iter()
                .any(|r| r["orig_dst"] == orig.as_str());
            seen.then_some(()).ok_or(())
        },
    )
    .unwrap_or_else(|e| {
        panic!("uid 1337 outside the proxy's container went out uncaptured: {e}: {probed}")
    });
    mesh.kubelet().remove(&strict).expect("remove the pod");
}
