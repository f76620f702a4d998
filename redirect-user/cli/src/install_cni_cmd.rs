//! `redirect install-cni` and `redirect uninstall-cni`, on redirect-install: one pass, the
//! readiness check, or the watcher (stopped by SIGTERM/SIGINT, uninstalling only when told).
use std::time::Duration;

use anyhow::Context as _;
// nix: rustix has no safe signal mask (sigprocmask, sigwait).
use nix::sys::signal::{SigSet, Signal};
use redirect_daemon::{plugin_still_wanted, PluginExit as Exit};
use redirect_install::{check, install, uninstall, watch, Change, Wake};

use crate::install_cni_args::{Dirs, InstallCni};

/// `install-cni --help`'s closing text.
pub(crate) const HELP: &str = "\
Examples:
  # One pass (idempotent: a second run writes nothing):
  redirect install-cni --cni-bin-dir /opt/cni/bin --cni-conf-dir /etc/cni/net.d
  # The DaemonSet's install-cni container: stay, put the entry back when the primary
  # plugin rewrites its file; at SIGTERM uninstall only when the DaemonSet is gone or no
  # longer selects this node (or REDIRECT_UNINSTALL_ON_EXIT=true):
  redirect install-cni --watch --daemonset istio-system/redirect --node-name \"$NODE_NAME\"
  # The readiness probe: exit 0 only with the binary and our entry in place:
  redirect install-cni --check
  # Undo exactly what install-cni did:
  redirect uninstall-cni

Which file: the one the runtime uses, found as libcni finds it: *.conflist, *.conf and
*.json in --cni-conf-dir by name, the first valid one. Our entry goes last in its \"plugins\"
(after the primary plugin; an entry of ours already there is replaced in place). A .conf
(or .json) becomes NAME.conflist holding it as the only plugin before ours, and the .conf
is removed (uninstall-cni restores it when the conflist is still what install-cni wrote).
Every other field and plugin keeps its value and order; writes are atomic (temporary file,
fsync, rename). No standalone 02-redirect.conflist is written: a chained plugin has no result
of its own, and a list of it alone would outrank the primary's and break every new pod.
Without a configuration it fails naming the directory, or waits for one with --watch.

The fight rule (--watch): our entry is put back when another writer drops it, at most
--fight-limit times within --fight-window seconds; the next one needed within the window is
not made: an error is logged (\"fight detected\"), the count is kept in the state file
(\"fights\"), and re-insertion pauses for --fight-backoff seconds, then starts afresh.";

pub(crate) fn run(args: &InstallCni) -> anyhow::Result<()> {
    let opts = args.options()?;
    if args.check {
        let what = check(&opts)?;
        println!("in place: {what}");
        return Ok(());
    }
    if !args.watch {
        let done = install(&opts)?;
        println!(
            "plugin {} ({}); entry in {} ({}{})",
            done.plugin.path.display(),
            if done.plugin.written {
                "written"
            } else {
                "unchanged"
            },
            done.config.display(),
            match done.change {
                Change::Unchanged => "unchanged",
                Change::Inserted => "inserted",
                Change::Reinserted => "re-inserted",
                Change::Held => "held",
                Change::StandingBy => "standing by: istio-cni is chained",
            },
            done.converted_from
                .map(|f| format!(", converted from {}", f.display()))
                .unwrap_or_default()
        );
        return Ok(());
    }
    // Signals are taken by a thread of ours: blocked here before any thread starts.
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGINT);
    signals
        .thread_block()
        .context("blocking SIGTERM and SIGINT")?;
    let (tx, rx) = std::sync::mpsc::channel();
    let stop = tx.clone();
    std::thread::spawn(move || {
        if let Ok(signal) = signals.wait() {
            tracing::info!(signal = %signal, "stopping");
        }
        let _ = stop.send(Wake::Stop);
    });
    tracing::info!(
        conf_dir = %opts.conf_dir.display(),
        bin_dir = %opts.bin_dir.display(),
        state_file = %opts.state_file.display(),
        uninstall_on_exit = args.uninstall_on_exit,
        "watching"
    );
    watch(
        &opts,
        args.rule(),
        Duration::from_secs(args.poll_interval),
        &tx,
        &rx,
    )?;
    let exit = match (&args.daemonset, &args.node_name) {
        _ if args.uninstall_on_exit => Exit::Remove("told to (--uninstall-on-exit)".into()),
        (Some(ds), Some(node)) => plugin_still_wanted(args.kubeconfig.as_deref(), ds, node),
        _ => Exit::Keep("no --daemonset to ask about (an upgrade keeps the plugin)".into()),
    };
    match exit {
        Exit::Remove(reason) => {
            tracing::info!(%reason, "uninstalling the plugin at exit");
            uninstall_cni(&args.dirs)?;
        }
        Exit::Keep(reason) => tracing::info!(
            %reason,
            "exiting with the plugin installed (new pods wait for the daemon: fail closed)"
        ),
    }
    Ok(())
}

/// `uninstall-cni`.
pub(crate) fn uninstall_cni(dirs: &Dirs) -> anyhow::Result<()> {
    // One line per change, on stdout only (a log line beside it said everything twice).
    for done in uninstall(&dirs.state_file(), &dirs.cni_conf_dir)? {
        println!("{done}");
    }
    Ok(())
}
