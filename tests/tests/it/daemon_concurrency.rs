//! A daemon that serves a node: one CNI ADD waiting on the apiserver (a pod it does not have
//! yet, read with istio-cni's 30 GETs 1 s apart) holds nothing else. While it waits, another
//! pod's ADD and DEL, `redirect list` and the tick (the address follower) are all served; the
//! waiting ADD then enrolls its pod as soon as the apiserver has it. An ADD for a pod the
//! watch saw deleted fails at once, without a GET. Asserted by order (each answer arrives
//! while the waiting ADD is still waiting), not by timing.
use std::time::Duration;

use redirect_testkit::{eventually, ip, privileged};
use redirect_tests::{
    apiserver::{recorded_pod, PodServer},
    cni::{entry, plugins_missing, CniHost},
    node::Node,
};
use serde_json::Value;

const NODE: &str = "node-busy";

fn listed(node: &Node) -> Vec<Value> {
    serde_json::from_str(&node.ok(&["list", "--json"])).expect("list --json")
}

#[test]
fn an_add_waiting_on_the_apiserver_holds_no_other_request_nor_the_tick() {
    privileged!(plugins_missing());
    let node = Node::new();
    let api = PodServer::start(&node.dir.join("api"));
    let extra = ["--pod-get-attempts", "30", "--pod-get-interval-ms", "1000"];
    let (_daemon, _) = node.pod_daemon(&api, Some(NODE), &extra);
    let conf = entry(&node.dir.join("daemon.sock"));
    let host = CniHost::new();
    let late = host.sandbox("shop", "late-1", "uid-late");
    let known = host.sandbox("shop", "known-1", "uid-known");
    api.put(&recorded_pod(
        "hello.yaml",
        "shop",
        "known-1",
        "uid-known",
        NODE,
    ));

    std::thread::scope(|s| {
        // The apiserver does not have late-1 yet: its ADD keeps reading it.
        let waiting = s.spawn(|| late.redirect_cni("ADD", &conf));
        eventually("the daemon to GET late-1", Duration::from_secs(20), || {
            let hits = api.hits();
            let gets = hits.iter().filter(|h| h.contains("/pods/late-1")).count();
            if gets >= 2 {
                Ok(())
            } else {
                Err(hits)
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));

        let ran = known.redirect_cni("ADD", &conf);
        assert!(ran.ok(), "another pod's ADD: {}", ran.text());
        let list = listed(&node);
        assert!(
            list.iter().any(|e| e["pod"]["name"] == "known-1"),
            "known-1 not enrolled: {list:?}"
        );
        // The tick follows an address the pod gains (nothing asks for it; a link-local one:
        // a pod claims no other address than its own).
        ip(&[
            "-n",
            known.netns.name(),
            "addr",
            "add",
            "fe80::99:7/64",
            "dev",
            "eth0",
        ])
        .expect("add an address");
        eventually(
            "the follower to see the new address",
            Duration::from_secs(10),
            || {
                let list = listed(&node);
                let seen = list.iter().any(|e| {
                    e["pod"]["name"] == "known-1"
                        && e["addrs"]
                            .as_array()
                            .is_some_and(|a| a.iter().any(|x| x == "fe80::99:7"))
                });
                if seen {
                    Ok(())
                } else {
                    Err(list)
                }
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let del = known.redirect_cni("DEL", &conf);
        assert!(del.ok(), "another pod's DEL: {}", del.text());
        assert!(
            !waiting.is_finished(),
            "late-1's ADD was answered before the apiserver had the pod"
        );
        assert!(
            listed(&node).iter().all(|e| e["pod"]["name"] != "known-1"),
            "known-1 still enrolled after DEL"
        );

        // The apiserver gets the pod: the waiting ADD's next GET finds it and enrolls it.
        api.put(&recorded_pod(
            "hello.yaml",
            "shop",
            "late-1",
            "uid-late",
            NODE,
        ));
        let ran = waiting.join().expect("the waiting ADD");
        assert!(ran.ok(), "late-1's ADD once the pod exists: {}", ran.text());
        assert!(listed(&node).iter().any(|e| e["pod"]["name"] == "late-1"));
        assert!(late.redirect_cni("DEL", &conf).ok());
    });
}
