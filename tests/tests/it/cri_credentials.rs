//! Credential rotation on containerd (`redirect_tests::mesh`): the DaemonSet's daemon runs with
//! the in-cluster credentials the kubelet-lite gives it, the recorded apiserver behind TLS and a
//! projected service-account token. The kubelet rotates the token; the apiserver then refuses the
//! old one and ends the open watches, as it does at a watch's timeout. The daemon's watch
//! resumes with the new token, and a pod scheduled after the rotation, known to the apiserver only
//! through the watch (no GET answers it), starts captured.
use std::time::Duration;

use redirect_testkit::{eventually, unique_name};
use redirect_tests::mesh::{parts_or_skip, MeshNode};

#[test]
fn a_rotated_service_account_token_is_read_again_and_the_watch_goes_on() {
    let Some((image, archive)) = parts_or_skip(redirect_testkit::test_path!()) else {
        return;
    };
    let mut mesh = MeshNode::new(&image, &archive);
    mesh.start_daemonset();
    let before = mesh
        .run_meshed(&unique_name("before-"), "0.2")
        .unwrap_or_else(|e| panic!("the pod before the rotation: {e}"));
    let bearers = mesh.api.bearers();
    assert!(
        !bearers.is_empty(),
        "the daemon asked the apiserver nothing"
    );
    for (token, target) in &bearers {
        assert_eq!(token.as_deref(), Some("token-1"), "{target}: {bearers:?}");
    }

    // The kubelet writes the new token; then the old one expires and the watches end.
    mesh.rotate_token("token-2");
    mesh.api.expire_older_tokens();
    let since = mesh.api.bearers().len();
    mesh.api.end_watches();
    eventually(
        "the pod watch to resume with the rotated token",
        Duration::from_secs(30),
        || {
            let after = mesh.api.bearers().split_off(since);
            after
                .iter()
                .any(|(t, target)| {
                    t.as_deref() == Some("token-2")
                        && target.starts_with("/api/v1/pods?")
                        && target.contains("watch=true")
                })
                .then_some(())
                .ok_or(after)
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));

    // A pod scheduled now: in the watch only.
    let name = unique_name("after-");
    let (pod, overrides) = mesh.meshed(&name, "0.2");
    mesh.api.remove("shop", &name);
    let object = serde_json::to_value(&pod).expect("the pod as JSON");
    mesh.api.event("ADDED", &object);
    let after = eventually(
        "the pod scheduled after the rotation to start",
        Duration::from_secs(30),
        || {
            mesh.kubelet()
                .run(&pod, &overrides)
                .map_err(|e| e.to_string())
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));

    // The ADD may race the watch event and GET the pod first: that GET answers 404 (removed
    // above), so the pod started, enrolled and captured below was known through the watch.
    // Every request since the rotation carried the new token: none was refused.
    let since_rotation = mesh.api.bearers().split_off(since);
    for (token, target) in &since_rotation {
        assert_eq!(
            token.as_deref(),
            Some("token-2"),
            "{target}: {since_rotation:?}"
        );
    }
    let log = mesh.kubelet().logs(mesh.ds(), "redirect");
    assert!(
        log.contains("bearer token changed: read again"),
        "no re-read in the daemon's log: {log}"
    );

    assert_eq!(mesh.listed().len(), 2, "both pods enrolled");
    eventually(
        "connections of the new pod",
        Duration::from_secs(60),
        || match mesh.proxied(&after).len() {
            n if n >= 3 => Ok(()),
            n => Err(n),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(mesh.assert_all_proxied(&after) >= 3);
    assert!(mesh.assert_all_proxied(&before) >= 1);
}
