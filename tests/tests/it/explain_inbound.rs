//! `redirect explain --inbound`: the shared inbound decision fed from the pinned maps answers
//! for connections arriving at a pod (istio's PREROUTING), rule by rule, in text and JSON.
use redirect_testkit::privileged;
use redirect_tests::{conformance::World, node::Node};

#[test]
fn explain_inbound_names_the_rule_for_each_arrival() {
    privileged!();
    let node = Node::new();
    let w = World::new("rxi", false);
    let netns = w.pod.path().display().to_string();
    node.apply(
        &w.pod.path(),
        &[
            "-u",
            "1337",
            "-i",
            "*",
            "-b",
            "*",
            "-d",
            "15090,15021,15020",
            "-c",
            "not-istio-nic",
        ],
    );
    let explain = |src: &str, dst: &str, iface: Option<&str>| {
        let mut args = vec![
            "explain",
            "--inbound",
            "--netns",
            &netns,
            "--src",
            src,
            "--dst",
            dst,
        ];
        if let Some(i) = iface {
            args.extend(["--iface", i]);
        }
        node.ok(&args)
    };
    let cases = [
        (
            "10.200.0.1:40000",
            "10.200.0.2:8080",
            Some("eth0"),
            "proxy:15006 while its listener is up, else refused",
            "inbound_steered",
        ),
        (
            "10.200.0.1",
            "10.200.0.2:15021",
            None,
            "untouched",
            "inbound_excluded_port",
        ),
        (
            "10.200.0.1",
            "10.200.0.2:15008",
            None,
            "untouched",
            "inbound_excluded_port",
        ),
        (
            "127.0.0.6",
            "10.200.0.2:8080",
            None,
            "untouched",
            "inbound_passthrough_source",
        ),
        (
            "10.200.0.2",
            "10.200.0.2:8080",
            None,
            "untouched",
            "inbound_local",
        ),
        (
            "10.201.0.1",
            "10.200.0.2:8080",
            Some("not-istio-nic"),
            "untouched",
            "inbound_interface",
        ),
        (
            "10.200.0.1",
            "10.9.9.9:8080",
            None,
            "untouched",
            "not an address of this namespace",
        ),
    ];
    for (src, dst, iface, outcome, why) in cases {
        let out = explain(src, dst, iface);
        assert!(
            out.contains(&format!(": {outcome} (")),
            "{src} -> {dst}: {out}"
        );
        assert!(out.contains(why), "{src} -> {dst}: {out}");
        // A source without a port is shown as given, never as port 0.
        assert!(
            out.starts_with(&format!("TCP {src} -> {dst}")) && !out.contains(":0 ->"),
            "{src} -> {dst}: {out}"
        );
    }
    let json = node.ok(&[
        "explain",
        "--inbound",
        "--netns",
        &netns,
        "--src",
        "10.200.0.1:1",
        "--dst",
        "10.200.0.2:9080",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(v["direction"], "inbound", "{v}");
    assert_eq!(v["dst"], "10.200.0.2:9080", "{v}");
    assert!(v["cookie"].is_u64(), "{v}");
    assert_eq!(v["counter"], "inbound_steered", "{v}");
    assert_eq!(v["outcome"], "proxy:15006", "the token trace says too: {v}");
    assert!(
        v["detail"].as_str().is_some_and(|d| d.contains("listener")),
        "{v}"
    );

    // Bad input names the flag.
    for (extra, names) in [
        (&["--src", "nope"][..], "--src \"nope\""),
        (
            &["--src", "10.200.0.1", "--iface", "nope0"],
            "--iface nope0",
        ),
    ] {
        let mut args = vec![
            "explain",
            "--inbound",
            "--netns",
            &netns,
            "--dst",
            "10.200.0.2:80",
        ];
        args.extend_from_slice(extra);
        let bad = node.run(&args);
        assert!(!bad.status.success(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&bad.stderr).contains(names),
            "{bad:?}"
        );
    }

    // Real arrivals count in the namespace's own stats, inbound decisions included: 15021 is
    // excluded (-d), 8080 is captured but no proxy listens (refused). `trace` shows both, with
    // the peer and no caller (a SYN arriving has none).
    let trace = redirect_tests::trace::start(&node, &netns, 2);
    let _ = redirect_tests::conformance::inbound_at(&w, &[15021, 8080]);
    let events = redirect_tests::trace::events(&trace, 2);
    let counters: Vec<&str> = events
        .iter()
        .map(|e| e["counter"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        counters,
        ["inbound_excluded_port", "inbound_no_listener"],
        "{events:?}"
    );
    for e in &events {
        assert_eq!(e["direction"], "inbound", "{e}");
        assert_eq!(e["netns"], netns.as_str(), "{e}");
        assert!(
            e["src"]
                .as_str()
                .is_some_and(|s| s.starts_with("10.200.0.1:")),
            "{e}"
        );
        assert!(
            e.get("caller").is_none(),
            "no caller for an arriving SYN: {e}"
        );
    }
    assert_eq!(events[1]["dst"], "10.200.0.2:8080", "{events:?}");
    let stats = node.ok(&["stats", "--netns", &netns, "--json"]);
    let stats: serde_json::Value = serde_json::from_str(&stats).expect("json");
    let counters = &stats[0]["counters"];
    assert_eq!(counters["inbound_excluded_port"], 1, "{stats}");
    assert_eq!(counters["inbound_no_listener"], 1, "{stats}");
    node.ok(&["istio-iptables", "--netns", &netns, "--cleanup-only"]);
}
