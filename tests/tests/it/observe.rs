//! Proxy identity bound to the proxy's cgroup, and what an operator sees: `redirect stats`,
//! `redirect trace` and the warning in `redirect status`.
use std::time::Duration;

use redirect_testkit::{eventually, privileged, Child};
use redirect_tests::{
    conformance::{listen, probe, reach, World},
    node::Node,
};

#[test]
fn proxy_uid_elsewhere_is_captured_counted_traced_and_warned_about() {
    privileged!();
    let node = Node::new();
    let proxy_cg = node.cgroup.child("proxy").expect("proxy cgroup");
    let app_cg = node.cgroup.child("app").expect("app cgroup");
    let w = World::new("rob", false);
    let _daemon = node.daemon();
    let netns = w.pod.path().display().to_string();
    let args = format!(
        "-u 1337 -i '*' --bind-proxy-cgroup {}",
        proxy_cg.path().display()
    );
    node.ok(&["enroll", "--netns", &netns, "--istio-args", &args]);
    let _proxy = listen(
        &w.pod,
        Some(proxy_cg.path()),
        Some((1337, 1337)),
        "proxy",
        &["[::]:15001".into()],
        &[],
    );
    let _world = listen(
        &w.world,
        None,
        None,
        "world",
        &["192.0.2.10:80".into()],
        &[],
    );

    let trace = redirect_tests::trace::start(&node, &netns, 3);
    // The stream has one reader: a second trace is refused naming the first, which keeps it.
    let second = node.run(&["trace", "--count", "1", "--seconds", "1"]);
    assert!(!second.status.success(), "{second:?}");
    let e = String::from_utf8_lossy(&second.stderr);
    assert!(
        e.contains(&format!("another `redirect trace` (pid {})", trace.pid())),
        "{e}"
    );

    // The real proxy (uid 1337 in its cgroup) leaves directly; an app that happens to run as
    // uid 1337 in another container is captured like any app.
    let direct = "at=world/192.0.2.10:80 orig=192.0.2.10:80";
    let captured = "at=proxy/[::]:15001 orig=192.0.2.10:80";
    assert_eq!(
        reach(&w, proxy_cg.path(), (1337, 1337), "192.0.2.10:80"),
        direct
    );
    assert_eq!(
        reach(&w, app_cg.path(), (1337, 1337), "192.0.2.10:80"),
        captured
    );
    assert_eq!(
        reach(&w, app_cg.path(), (1000, 1000), "192.0.2.10:80"),
        captured
    );

    let events = redirect_tests::trace::events(&trace, 3);
    let decisions: Vec<(&str, &str, u64)> = events
        .iter()
        .map(|e| {
            (
                e["outcome"].as_str().unwrap_or(""),
                e["counter"].as_str().unwrap_or(""),
                e["caller"]["uid"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        decisions,
        [
            ("untouched", "bypass_uid", 1337),
            ("proxy:15001", "redirected", 1337),
            ("proxy:15001", "redirected", 1000)
        ],
        "{events:?}"
    );
    assert_eq!(events[0]["dst"], "192.0.2.10:80");
    assert_eq!(events[0]["caller"]["comm"], "probe-matrix");
    assert_eq!(events[0]["direction"], "outbound");
    assert_eq!(
        events[0]["netns"],
        netns.as_str(),
        "the path, the cookie beside it"
    );
    assert!(events[0]["cookie"].is_u64(), "{:?}", events[0]);

    let stats = node.ok(&["stats", "--netns", &netns, "--json"]);
    let stats: serde_json::Value = serde_json::from_str(&stats).expect("json");
    let counters = &stats[0]["counters"];
    assert_eq!(counters["redirected"], 2, "{stats}");
    assert_eq!(counters["bypass_uid"], 1, "{stats}");
    assert_eq!(counters["proxy_id_elsewhere"], 1, "{stats}");
    let text = node.ok(&["stats", "--netns", &netns]);
    assert!(
        text.contains("-j ISTIO_REDIRECT"),
        "stats name the rule: {text}"
    );

    let status = node.ok(&["status"]);
    assert!(
        status.contains("WARNING") && status.contains("outside the proxy's cgroup"),
        "{status}"
    );

    let explain_from = |cg: &std::path::Path| {
        let cg = cg.display().to_string();
        node.ok(&[
            "explain",
            "--netns",
            &netns,
            "--uid",
            "1337",
            "--dst",
            "192.0.2.10:80",
            "--cgroup",
            &cg,
        ])
    };
    let why = explain_from(app_cg.path());
    assert!(why.contains("proxy:15001"), "{why}");
    let why = explain_from(proxy_cg.path());
    assert!(
        why.contains("untouched") && why.contains("bypass_uid"),
        "{why}"
    );
    node.ok(&["uninstall"]);
}

#[test]
fn app_before_proxy_is_refused_or_passed_through_until_the_proxy_listens() {
    privileged!();
    let node = Node::new();
    let (a, b, c) = (
        World::new("roa", false),
        World::new("rob", false),
        World::new("roc", false),
    );
    b.renumber("10.200.0.3", "10.201.0.3");
    c.renumber("10.200.0.4", "10.201.0.4");
    let _daemon = node.daemon();
    let cg = node.cgroup.path();
    let enroll = |w: &World, extra: &str| {
        let args = format!("-u 1337 -i '*' {extra}");
        node.ok(&[
            "enroll",
            "--netns",
            &w.pod.path().display().to_string(),
            "--istio-args",
            &args,
        ]);
    };
    let worlds: Vec<Child> = [&a, &b, &c]
        .iter()
        .map(|w| {
            listen(
                &w.world,
                None,
                None,
                "world",
                &["192.0.2.10:80".into()],
                &[],
            )
        })
        .collect();
    let proxy = |w: &World| {
        listen(
            &w.pod,
            Some(cg),
            Some((1337, 1337)),
            "proxy",
            &["[::]:15001".into()],
            &[],
        )
    };
    // c's proxy is up before enrollment: found at enrollment, no listen() needed.
    let _proxy_c = proxy(&c);
    enroll(&a, "--no-proxy passthrough");
    enroll(&b, "");
    enroll(&c, "");
    let direct = "at=world/192.0.2.10:80 orig=192.0.2.10:80";
    let captured = "at=proxy/[::]:15001 orig=192.0.2.10:80";
    let app = (1000, 1000);

    assert_eq!(
        reach(&a, cg, app, "192.0.2.10:80"),
        direct,
        "a: passthrough while down"
    );
    let refused = probe(&b.pod, Some(cg), Some(app), &["tcp:192.0.2.10:80".into()]);
    assert_eq!(
        refused[0].error.as_deref(),
        Some("refused"),
        "b: refused while down: {refused:?}"
    );
    assert_eq!(
        reach(&c, cg, app, "192.0.2.10:80"),
        captured,
        "c: its proxy was already up"
    );
    let list = node.ok(&["list"]);
    let state = |w: &World| {
        list.lines()
            .find(|l| l.starts_with(&w.pod.path().display().to_string()))
            .map(|l| l.split_whitespace().nth(4).unwrap_or("").to_owned())
            .unwrap_or_default()
    };
    assert_eq!(
        (state(&a), state(&b), state(&c)),
        ("down".into(), "down".into(), "up".into()),
        "{list}"
    );

    // The proxy comes up: captured from then on; it goes away: passthrough again.
    let proxy_a = proxy(&a);
    assert_eq!(reach(&a, cg, app, "192.0.2.10:80"), captured, "a: proxy up");
    drop(proxy_a);
    eventually(
        "a: passthrough again once its proxy stopped listening",
        Duration::from_secs(5),
        || match reach(&a, cg, app, "192.0.2.10:80") {
            at if at == direct => Ok(()),
            at => Err(at),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));

    // explain says what happens, not where the rewrite points: b's connect is refused.
    let explained = node.ok(&[
        "explain",
        "--netns",
        &b.pod.path().display().to_string(),
        "--uid",
        "1000",
        "--dst",
        "192.0.2.10:80",
    ]);
    assert!(
        explained.contains("refused (nothing listens on proxy:15001)")
            && explained.contains("no_proxy_refused"),
        "{explained}"
    );

    for (w, name, n) in [(&a, "no_proxy_passthrough", 2), (&b, "no_proxy_refused", 1)] {
        let stats = node.ok(&[
            "stats",
            "--netns",
            &w.pod.path().display().to_string(),
            "--json",
        ]);
        let stats: serde_json::Value = serde_json::from_str(&stats).expect("json");
        assert_eq!(stats[0]["counters"][name], n, "{stats}");
    }
    drop(worlds);
    node.ok(&["uninstall"]);
}
