//! `install-cni --watch`: installs, then watches the configuration and bin directories
//! (inotify through `notify`, plus a poll every `poll` in case an event is missed or the
//! directory does not exist yet) and installs again after every change: our entry goes back
//! into a file another writer rewrote, within the [`fight`](crate::fight) rule.
use std::{
    path::Path,
    sync::mpsc::{Receiver, RecvTimeoutError, Sender},
    time::{Duration, Instant},
};

use notify::{RecursiveMode, Watcher as _};

use crate::{
    error::{Error, Result},
    fight::{Rule, Tracker, Verdict},
    install::{install_gated, Change, IstioCni, Options},
    state,
};

/// What wakes the watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Something changed in a watched directory.
    Changed,
    /// Stop (a signal).
    Stop,
}

/// Watches until [`Wake::Stop`] arrives on `rx`; `tx` feeds the directory watcher.
pub fn watch(
    opts: &Options,
    rule: Rule,
    poll: Duration,
    tx: &Sender<Wake>,
    rx: &Receiver<Wake>,
) -> Result<()> {
    let feed = tx.clone();
    let mut watcher = notify::recommended_watcher(move |_: notify::Result<notify::Event>| {
        let _ = feed.send(Wake::Changed);
    })
    .map_err(|e| notify_error(&opts.conf_dir, e))?;
    let mut watching = false;
    let mut tracker = Tracker::new(rule);
    let mut waiting_said = false;
    loop {
        if !watching {
            watching = watch_dirs(&mut watcher, opts);
        }
        reconcile(opts, &mut tracker, &mut waiting_said);
        match rx.recv_timeout(poll) {
            Ok(Wake::Stop) | Err(RecvTimeoutError::Disconnected) => return Ok(()),
            Ok(Wake::Changed) | Err(RecvTimeoutError::Timeout) => {}
        }
        // A burst of events (our own writes among them) is one pass.
        while let Ok(w) = rx.try_recv() {
            if w == Wake::Stop {
                return Ok(());
            }
        }
    }
}

fn notify_error(dir: &Path, e: notify::Error) -> Error {
    Error::Io {
        call: "watching",
        path: dir.to_owned(),
        source: std::io::Error::other(e),
    }
}

/// Starts watching both directories; false while one does not exist (polled meanwhile).
fn watch_dirs(watcher: &mut notify::RecommendedWatcher, opts: &Options) -> bool {
    [&opts.conf_dir, &opts.bin_dir].iter().all(|dir| {
        match watcher.watch(dir, RecursiveMode::NonRecursive) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot watch yet: polling");
                false
            }
        }
    })
}

/// One pass: install, a re-insertion only when the rule allows.
fn reconcile(opts: &Options, tracker: &mut Tracker, waiting_said: &mut bool) {
    let mut verdict = None;
    let result = install_gated(
        opts,
        &mut || {
            let v = tracker.ask(Instant::now());
            verdict = Some(v);
            matches!(v, Verdict::Allowed | Verdict::Slow)
        },
        IstioCni::StandBy,
    );
    match verdict {
        Some(Verdict::Fight) => {
            let rule = tracker.rule();
            let fights = bump_fights(&opts.state_file);
            tracing::error!(
                conf_dir = %opts.conf_dir.display(),
                limit = rule.limit,
                window_s = rule.window.as_secs(),
                backoff_s = rule.backoff.as_secs(),
                slow_s = rule.slow.as_secs(),
                fights,
                "another writer keeps removing our entry: fight detected, re-inserting only once \
                    every slow_s for the backoff (install-cni --help: the fight rule)"
            );
            return;
        }
        Some(Verdict::Paused(left)) => {
            tracing::warn!(
                left_s = left.as_secs(),
                "our entry is missing; not re-inserting yet: slow after a fight"
            );
            return;
        }
        Some(Verdict::Slow) if result.is_ok() => {
            tracing::error!(
                conf_dir = %opts.conf_dir.display(),
                slow_s = tracker.rule().slow.as_secs(),
                "ALARM: our entry re-inserted during the fight's backoff; another writer keeps \
                    removing it, and pods that start while it is out run uncaptured until the \
                    daemon's reconcile enrolls them"
            );
        }
        _ => {}
    }
    match result {
        Ok(done) if done.change == Change::StandingBy => {
            if !*waiting_said {
                tracing::info!(config = %done.config.display(),
                    "istio-cni is chained and captures new pods: our entry stands by until \
                    istio-cni's leaves");
                *waiting_said = true;
            }
        }
        Ok(done) => {
            *waiting_said = false;
            match done.change {
                Change::Unchanged if !done.plugin.written => {}
                change => tracing::info!(
                    config = %done.config.display(),
                    converted_from = %done.converted_from.as_ref().map_or_else(|| "-".to_owned(),
                        |p| p.display().to_string()),
                    plugin = %done.plugin.path.display(),
                    ?change,
                    "installed"
                ),
            }
        }
        Err(e @ Error::NoConfig { .. }) => {
            if !*waiting_said {
                tracing::warn!(error = %e, "waiting for the primary plugin's configuration");
                *waiting_said = true;
            }
        }
        // Another writer's change is on its way as an event: the next pass reads it.
        Err(e @ Error::ChangedMeanwhile { .. }) => tracing::info!(error = %e, "not written"),
        Err(e) => tracing::error!(error = %e, "install failed; retrying at the next change"),
    }
}

fn bump_fights(path: &Path) -> u64 {
    let before = state::load(path).ok().flatten();
    let mut st = before.clone().unwrap_or_default();
    st.fights += 1;
    if let Err(e) = state::save(path, &st, before.as_ref()) {
        tracing::error!(error = %e, "recording the fight");
    }
    st.fights
}
