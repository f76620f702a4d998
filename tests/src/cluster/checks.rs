//! What the cluster tests assert of an installed node and its pods: the DaemonSet's promises
//! (entry, plugin, taint gone, and by whom: the audit log's Node PATCHes), a pod's istio-validation outcome, and an inbound connection
//! from the node through the pod's proxy to the application (what address the application saw).
use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    time::Duration,
};

use redirect_testkit::{eventually, netns::in_netns};
use serde_json::Value;

use super::{ops::name_of, Cluster};

/// Our entry in the node's conflist, the plugin in its bin directory, and the readiness taint
/// gone from the Node.
pub fn assert_installed(cluster: &Cluster) {
    let conflist = std::fs::read_to_string(cluster.node.cni_conf_dir().join("10-podnet.conflist"))
        .expect("the primary conflist");
    assert!(conflist.contains("redirect-cni"), "no entry in: {conflist}");
    assert!(
        cluster.node.cni_bin_dir().join("redirect-cni").exists(),
        "no plugin"
    );
    eventually(
        "the readiness taint to leave the Node",
        Duration::from_secs(60),
        || {
            let taints = cluster.taints();
            (!taints.iter().any(|t| t == "redirect.dev/not-ready"))
                .then_some(())
                .ok_or_else(|| format!("{taints:?}"))
        },
    )
    .unwrap_or_else(|e| {
        let logs = cluster
            .kubectl
            .run(&["logs", "-n", "istio-system", "deployment/redirect-untaint"])
            .unwrap_or_else(|e| format!("{e:#}"));
        panic!(
            "{e}\nthe untaint controller's log:\n{logs}\n{}",
            cluster.describe("istio-system")
        )
    });
}

/// Every PATCH of a Node by `user` in the apiserver's audit log, as `CODE URI`.
pub fn node_patches(cluster: &Cluster, user: &str) -> Vec<String> {
    let text = std::fs::read_to_string(&cluster.control.audit_log).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["user"]["username"] == user
                && e["verb"] == "patch"
                && e["objectRef"]["resource"] == "nodes"
        })
        .map(|e| format!("{} {}", e["responseStatus"]["code"], e["requestURI"]))
        .collect()
}

/// Pod `pod`'s istio-validation container exited 0.
pub fn validation_passed(cluster: &Cluster, pod: &Value) {
    let name = name_of(pod);
    let status = pod["status"]["initContainerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == "istio-validation")
        .unwrap_or_else(|| panic!("{name}: no istio-validation status: {pod}"));
    assert_eq!(
        status["state"]["terminated"]["exitCode"],
        0,
        "{name}: istio-validation: {status}\n{}",
        cluster.logs("shop", &name, "istio-validation")
    );
}

/// An HTTP GET of `/cgi-bin/peer` from the node to `pod`'s port 80: it must arrive through the
/// pod's proxy (an inbound record for `POD_IP:80`); returns the address the application saw.
pub fn inbound(cluster: &Cluster, pod: &Value) -> String {
    let name = name_of(pod);
    let ip = pod["status"]["podIP"].as_str().expect("podIP").to_owned();
    let addr = format!("{ip}:80");
    let answer = in_netns(
        &cluster.node.netns.path(),
        move || -> std::io::Result<String> {
            let mut s =
                TcpStream::connect_timeout(&addr.parse().expect("addr"), Duration::from_secs(5))?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.write_all(b"GET /cgi-bin/peer HTTP/1.0\r\n\r\n")?;
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            Ok(answer)
        },
    )
    .expect("the node's netns")
    .unwrap_or_else(|e| panic!("{name}: connecting to {ip}:80 from the node: {e}"));
    assert!(
        answer.starts_with("HTTP/1.") && answer.contains(" 200 "),
        "{name}: {answer:?}"
    );
    eventually("an inbound record", Duration::from_secs(20), || {
        let records = cluster.proxied(&name, "inbound");
        records
            .iter()
            .any(|r| r["orig_dst"] == format!("{ip}:80"))
            .then_some(())
            .ok_or_else(|| format!("{records:?}"))
    })
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    // The CGI's body, after its own header and blank line: the address alone (an IPv4
    // client of the dual-stack server as `[::ffff:A.B.C.D]`).
    let seen = answer
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or_default();
    seen.trim_start_matches("[::ffff:")
        .trim_end_matches(']')
        .to_owned()
}
