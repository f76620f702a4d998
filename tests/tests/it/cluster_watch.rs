//! The daemon's pod watch on a real apiserver (`redirect_tests::cluster`): etcd compacted and
//! the apiserver restarted under it, so the watch's reconnect from its last resourceVersion
//! gets `410 Gone` and must list again. What depends on the watch alone is checked after it: a
//! strict-binding pod's istio-proxy killed and restarted by the kubelet has a new container id,
//! which the daemon learns only from the pod's status; until it binds the proxy's uid/gid
//! bypass to the new container's cgroup, the proxy's own upstream connections are captured and
//! the application's connections fail. A pod created after the restart is captured too.
use std::time::Duration;

use redirect_testkit::eventually;
use redirect_tests::cluster::{
    installed,
    ops::{is_ready, name_of},
    workloads::Injected,
};

#[test]
fn the_daemons_watch_survives_a_compaction_and_an_apiserver_restart() {
    let Some((parts, mut cluster, reached)) = installed(redirect_testkit::test_path!()) else {
        return;
    };
    let mut w = Injected::new("strict", 1, &parts.image, 3);
    w.annotations = vec![("redirect.dev/proxy-binding".into(), "strict".into())];
    let pod = name_of(&cluster.deploy(&w).expect("the strict pod")[0]);
    cluster.assert_proxied(&reached, &pod, 3);

    // Writes the watch has not seen yet, then etcd compacted past them and the apiserver
    // restarted: the daemon's watch resumes from a compacted revision.
    cluster
        .kubectl
        .run(&["annotate", "pod", "-n", "shop", &pod, "test/touched=1"])
        .expect("annotate");
    cluster.control.stop_apiserver();
    cluster.control.compact().expect("etcdctl compact");
    cluster
        .control
        .start_apiserver(&[])
        .expect("the apiserver again");

    // The proxy restarted by the kubelet: a new container the daemon learns from the watch.
    let before = cluster.restarts(&pod, "istio-proxy");
    cluster
        .kill_container(&pod, "istio-proxy")
        .expect("kill istio-proxy");
    eventually(
        "istio-proxy restarted and Ready",
        Duration::from_secs(120),
        || {
            let o = cluster
                .kubectl
                .get(&["pod", "-n", "shop", &pod])
                .map_err(|e| e.to_string())?;
            (cluster.restarts(&pod, "istio-proxy") > before && is_ready(&o))
                .then_some(())
                .ok_or_else(|| "not yet".to_owned())
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    cluster.kill_container(&pod, "hello").expect("kill the app");
    cluster.assert_proxied(&reached, &pod, 6);

    let w = Injected::new("after", 1, &parts.image, 3);
    let after = name_of(&cluster.deploy(&w).expect("a pod after the restart")[0]);
    cluster.assert_proxied(&reached, &after, 3);
    let log = cluster.logs(
        "istio-system",
        &name_of(&cluster.daemon_pod_ready().expect("daemon")),
        "redirect",
    );
    eprintln!(
        "daemon log mentions of the watch: {:?}",
        log.lines()
            .filter(|l| l.contains("watch"))
            .collect::<Vec<_>>()
    );
}
