//! A quiet node keeps one watch of its pods open (issue 46, finding 9): the watch is read with
//! a timeout past the one it asks the apiserver for, not the GETs' 5 s. Over 12 s without a
//! change the daemon opens its watch once (before, it reconnected every 5 s, and every node's
//! daemon made the apiserver answer again).
use std::time::{Duration, Instant};

use redirect_testkit::{eventually, privileged};
use redirect_tests::{apiserver::PodServer, node::Node};

const NODE: &str = "node-quiet";

#[test]
fn a_quiet_node_keeps_one_watch_open() {
    privileged!();
    let node = Node::new();
    let api = PodServer::start(&node.dir.join("api"));
    let _daemon = node.pod_daemon(&api, Some(NODE), &[]).0;
    let watches = || {
        api.hits()
            .iter()
            .filter(|h| h.starts_with("/api/v1/pods?") && h.contains("watch=true"))
            .count()
    };
    eventually("the daemon's first watch", Duration::from_secs(20), || {
        (watches() > 0).then_some(()).ok_or(())
    })
    .expect("a watch");
    // Watched for 12 s (polled every 200 ms: it fails as soon as a second watch is opened).
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(12) {
        let n = watches();
        assert_eq!(n, 1, "{n} watches after {:?} of quiet", start.elapsed());
        std::thread::sleep(Duration::from_millis(200));
    }
}
