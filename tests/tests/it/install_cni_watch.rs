//! `redirect install-cni --watch`: the watcher putting our entry back when another writer drops
//! it, slowing down (never stopping) on a fight, and leaving the plugin or removing it at exit.
use std::{path::Path, process::Command, time::Duration};

use redirect_testkit::{eventually, Child};
use redirect_tests::{
    bin_path,
    install_dirs::{default_entry, json_of, read, text, Dirs, BRIDGE},
};
use serde_json::Value;

fn watcher(d: &Dirs, extra: &[&str], env: &[(&str, &str)]) -> Child {
    let mut c = Command::new(bin_path("redirect"));
    c.arg("install-cni")
        .args(d.args())
        .arg("--watch")
        .args(extra)
        .envs(env.iter().copied());
    Child::spawn("install-cni --watch", c).expect("start the watcher")
}

fn has_entry(path: &Path) -> bool {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .is_some_and(|v| {
            v["plugins"]
                .as_array()
                .is_some_and(|p| p.contains(&default_entry()))
        })
}

const WAIT: Duration = Duration::from_secs(20);

#[test]
fn watch_waits_reinserts_and_stops_fighting() {
    let d = Dirs::new();
    let list = d.file("10-bridge.conflist");
    let mut w = watcher(
        &d,
        &[
            "--fight-limit",
            "3",
            "--fight-window",
            "600",
            "--fight-backoff",
            "600",
            "--fight-slow",
            "600",
        ],
        &[],
    );
    w.wait_stderr_line("waiting for a configuration", WAIT, |l| {
        l.contains("waiting for the primary plugin's configuration")
    })
    .expect("waiting");
    // The primary writes its file: the entry follows.
    std::fs::write(&list, BRIDGE).expect("write");
    eventually!(
        WAIT,
        has_entry(&list),
        "our entry in the new {}",
        list.display()
    );
    // The primary rewrites it (its restart) three times: the entry comes back each time.
    for round in 1..=3 {
        std::fs::write(&list, BRIDGE).expect("rewrite");
        eventually!(
            WAIT,
            has_entry(&list),
            "our entry back after rewrite #{round}"
        );
    }
    let state = d.file(".redirect-cni-install.state");
    eventually!(
        WAIT,
        json_of(&state)["reinserts"] == 3,
        "3 re-insertions recorded: {}",
        read(&state)
    );
    // A fourth within the window: a fight; reported, counted, not re-inserted.
    std::fs::write(&list, BRIDGE).expect("rewrite");
    let line = w
        .wait_stderr_line("the fight", WAIT, |l| l.contains("fight detected"))
        .expect("fight");
    assert!(line.contains("ERROR") && line.contains("limit=3"), "{line}");
    eventually!(
        WAIT,
        json_of(&state)["fights"] == 1,
        "the fight counted: {}",
        read(&state)
    );
    // Paused: a further change is seen and not answered.
    std::fs::write(&list, BRIDGE.replace("cni0", "cni1")).expect("rewrite");
    w.wait_stderr_line("the pause", WAIT, |l| l.contains("slow after a fight"))
        .expect("paused");
    assert!(!has_entry(&list), "re-inserted while paused");
    let out = d.redirect("install-cni", &["--check"]);
    assert!(
        !out.status.success() && text(&out).contains("holds no redirect-cni entry"),
        "{}",
        text(&out)
    );
    // SIGTERM without --uninstall-on-exit: the binary stays (an upgrade: new pods wait).
    let status = w.terminate(WAIT).expect("exit");
    assert!(status.success(), "{status:?}");
    assert!(d.plugin().exists(), "the plugin went with the watcher");
}

#[test]
fn watch_uninstalls_on_exit_when_told() {
    let d = Dirs::new();
    let list = d.file("10-bridge.conflist");
    std::fs::write(&list, BRIDGE).expect("write");
    let mut w = watcher(&d, &[], &[("REDIRECT_UNINSTALL_ON_EXIT", "true")]);
    eventually!(WAIT, has_entry(&list) && d.plugin().exists(), "installed");
    let status = w.terminate(WAIT).expect("exit");
    assert!(status.success(), "{status:?}");
    assert_eq!(read(&list), BRIDGE, "not restored at exit");
    assert!(!d.plugin().exists(), "the plugin is left");
}

/// A fight slows re-insertion down but never stops it (issue 31, finding 8): while our entry is
/// out, every pod that starts runs uncaptured until the daemon's reconcile finds it, so during
/// the backoff the entry still goes back once every `--fight-slow` seconds, each time an alarm.
#[test]
fn a_fight_slows_reinsertion_down_and_never_stops_it() {
    let d = Dirs::new();
    let list = d.file("10-bridge.conflist");
    std::fs::write(&list, BRIDGE).expect("write");
    let mut w = watcher(
        &d,
        &[
            "--fight-limit",
            "1",
            "--fight-window",
            "600",
            "--fight-backoff",
            "600",
            "--fight-slow",
            "2",
            "--poll-interval",
            "1",
        ],
        &[],
    );
    eventually!(WAIT, has_entry(&list), "our entry in {}", list.display());
    std::fs::write(&list, BRIDGE).expect("rewrite");
    eventually!(
        WAIT,
        has_entry(&list),
        "our entry back after the first rewrite"
    );
    // The second rewrite within the window: a fight.
    std::fs::write(&list, BRIDGE).expect("rewrite");
    w.wait_stderr_line("the fight", WAIT, |l| l.contains("fight detected"))
        .expect("fight");
    // Slow, not stopped: back within the slow interval, with the alarm, twice.
    for round in 1..=2 {
        let line = w
            .wait_stderr_line("the slow re-insertion's alarm", WAIT, |l| {
                l.contains("ALARM: our entry re-inserted during the fight's backoff")
            })
            .expect("alarm");
        assert!(line.contains("ERROR"), "{line}");
        eventually!(WAIT, has_entry(&list), "our entry back, slowly (#{round})");
        std::fs::write(&list, BRIDGE).expect("rewrite");
    }
    let status = w.terminate(WAIT).expect("exit");
    assert!(status.success(), "{status:?}");
}
