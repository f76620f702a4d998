//! The per-pod attach scope (`redirect daemon --attach-scope per-pod`, issue 48) on a node as
//! the kubelet runs it (`redirect_tests::mesh`: containerd's CRI, the DaemonSet from its
//! image): the capture programs are linked at a meshed pod's own cgroup by its CNI ADD, before
//! its containers start, so the pod is captured as in the root scope; its DEL unlinks them;
//! and a pod that is not meshed runs no program at all (the kernel's run counts, with
//! `kernel.bpf_stats_enabled` on, do not move while its connections go out).
use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::api::core::v1::Pod;
use redirect_kubelet::{images::APP_IMAGE, pod::cgroup_parent};
use redirect_testkit::{cgroup2_root, eventually, unique_name};
use redirect_tests::mesh::{parts_or_skip, MeshNode, GATEWAY, NODE, WORLD_PORT};
use serde_json::{json, Value};

/// `redirect status --json` in the DaemonSet's container.
fn status(mesh: &MeshNode) -> Value {
    let (code, out, err) = mesh
        .kubelet()
        .exec(mesh.ds(), "redirect", &["redirect", "status", "--json"])
        .expect("redirect status");
    assert_eq!(code, 0, "redirect status: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Each pinned program of the datapath: its kernel run count, by "NAME (id ID)" (the kernel
/// keeps 15 bytes of a name: connect4 and connect6 are both `redirect_connec`).
fn runs(status: &Value) -> BTreeMap<String, u64> {
    let mut runs = BTreeMap::new();
    for p in status["node"]["programs"].as_array().into_iter().flatten() {
        if let (Some(id), Some(name)) = (p["id"].as_u64(), p["name"].as_str()) {
            runs.insert(format!("{name} (id {id})"), p["runs"].as_u64().unwrap_or(0));
        }
    }
    runs
}

/// The pod cgroup ids the datapath has linked.
fn linked(status: &Value) -> Vec<u64> {
    status["node"]["pod_cgroups"]
        .as_array()
        .expect("pod_cgroups")
        .iter()
        .filter_map(Value::as_u64)
        .collect()
}

/// `kernel.bpf_stats_enabled` on for the guard's life, the value before restored.
struct BpfStats(String);

impl BpfStats {
    const PATH: &'static str = "/proc/sys/kernel/bpf_stats_enabled";

    fn on() -> Self {
        let before = std::fs::read_to_string(Self::PATH).expect("bpf_stats_enabled");
        std::fs::write(Self::PATH, "1").expect("enable bpf_stats");
        Self(before.trim().to_owned())
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::PATH, &self.0);
    }
}

#[test]
fn per_pod_scope_captures_a_meshed_pod_at_its_cgroup_and_runs_nothing_for_others() {
    let Some((image, archive)) = parts_or_skip(redirect_testkit::test_path!()) else {
        return;
    };
    let mut mesh = MeshNode::new(&image, &archive);
    mesh.start_daemonset_with(None, &["--attach-scope", "per-pod"]);
    let s = status(&mesh);
    assert_eq!(s["node"]["scope"], "per-pod", "{s}");
    assert_eq!(
        s["node"]["links"],
        json!([]),
        "nothing linked at the node: {s}"
    );
    assert_eq!(linked(&s), Vec::<u64>::new(), "{s}");

    // A meshed pod: linked at its ADD, captured as in the root scope.
    let name = unique_name("hello-");
    let meshed = mesh
        .run_meshed(&name, "0.1")
        .unwrap_or_else(|e| panic!("the meshed pod: {e}"));
    let dir = cgroup2_root().expect("cgroup2").join(
        cgroup_parent(&meshed.pod, &mesh.node.info)
            .expect("its cgroup")
            .trim_start_matches('/'),
    );
    let id = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&dir).expect("its cgroup"));
    let s = status(&mesh);
    assert_eq!(
        linked(&s),
        vec![id],
        "the meshed pod's cgroup {}: {s}",
        dir.display()
    );
    mesh.wait_proxied(&meshed, 10);
    for r in mesh.proxied(&meshed) {
        assert_eq!(r["orig_dst"], format!("{GATEWAY}:{WORLD_PORT}"), "{r}");
    }
    assert!(mesh.assert_all_proxied(&meshed) >= 10);
    // An enrollment with no pod (no cgroup to link at) is refused, naming the scope, and the
    // pod's own stays as it was.
    let seen_at = std::path::Path::new("/run/netns").join(
        meshed
            .netns
            .as_ref()
            .and_then(|n| n.file_name())
            .expect("its netns"),
    );
    let seen_at = seen_at.display().to_string();
    let (code, out, err) = mesh
        .kubelet()
        .exec(
            mesh.ds(),
            "redirect",
            &[
                "redirect",
                "enroll",
                "--netns",
                &seen_at,
                "--istio-args",
                "-p 15001 -u 1337",
            ],
        )
        .expect("redirect enroll");
    assert_ne!(code, 0, "enroll with no pod in the per-pod scope: {out}");
    assert!(
        err.contains("per-pod"),
        "the refusal names the scope: {err}"
    );
    let list = mesh.listed();
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["writer"], "cni", "{list:?}");
    // Its DEL unlinks its cgroup (the kubelet removes the directory later, or never here).
    mesh.kubelet()
        .remove(&meshed)
        .expect("remove the meshed pod");
    let s = status(&mesh);
    assert_eq!(linked(&s), Vec::<u64>::new(), "after its DEL: {s}");

    // A pod that is not meshed: its connections go out as they are and run no program.
    let plain_name = unique_name("plain-");
    let script = format!(
        "i=0; while :; do i=$((i+1)); echo {plain_name}-$i | nc -w 3 {GATEWAY} {WORLD_PORT} >/dev/null; sleep 0.1; done"
    );
    let object = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": plain_name, "namespace": "shop", "uid": format!("uid-{plain_name}")},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "app", "image": APP_IMAGE, "command": ["/bin/sh", "-c", script]}],
        },
    });
    mesh.api.put(&object);
    let pod: Pod = serde_json::from_value(object).expect("a Pod");
    let plain = mesh
        .kubelet()
        .run(&pod, &Default::default())
        .unwrap_or_else(|e| panic!("the plain pod: {e}"));
    assert_eq!(
        linked(&status(&mesh)),
        Vec::<u64>::new(),
        "a plain pod is never linked"
    );
    let stats = BpfStats::on();
    let before = runs(&status(&mesh));
    let reached = mesh.reached(&plain_name);
    eventually(
        "ten more connections of the plain pod",
        Duration::from_secs(60),
        || {
            let n = mesh.reached(&plain_name);
            if n >= reached + 10 {
                Ok(())
            } else {
                Err(n)
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let after = runs(&status(&mesh));
    drop(stats);
    let cgroup_programs: Vec<&String> = after
        .keys()
        .filter(|n| n.starts_with("redirect_") && !n.contains("sk_lookup"))
        .collect();
    assert!(
        cgroup_programs.len() >= 10,
        "the pinned programs: {after:?}"
    );
    for name in cgroup_programs {
        assert_eq!(
            after[name],
            before.get(name).copied().unwrap_or(0),
            "{name} ran for a pod that is not meshed: {before:?} -> {after:?}"
        );
    }
    mesh.kubelet().remove(&plain).expect("remove the plain pod");
}
