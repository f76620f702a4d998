//! `redirect daemon | enroll | unenroll | list | uninstall | explain`: the node daemon and the
//! commands that talk to it or read its pinned maps.
use std::{
    path::{Path, PathBuf},
    sync::{atomic::AtomicBool, Arc},
};

use anyhow::{bail, Context as _};
// nix: rustix has no safe signal mask (sigprocmask, sigwaitinfo).
use nix::sys::signal::{SigSet, Signal};
use redirect_daemon::{self as daemon, Daemon, Options};
use redirect_daemon_api::{Client, DaemonDir, NetnsFd};
use redirect_datapath::{
    lock_node, netns_cookie, remove_node_dir, resolve_netns, NodeAttach, NodeDatapath, Owner,
};
use redirect_policy::Policy;

use crate::dir_args::Dirs;

/// The daemon's socket: the one of the daemon that owns the datapath pinned at the default
/// pins (from its layout record), else the one in the daemon directory in effect.
pub(crate) fn socket(dirs: &Dirs) -> PathBuf {
    daemon::owner(&dirs.bpffs).map_or_else(|| dirs.daemon.socket(), |(_, s)| s)
}

/// The client of that daemon.
pub(crate) fn client(dirs: &Dirs) -> Client {
    Client::new(socket(dirs))
}

/// Runs the daemon until SIGINT/SIGTERM (capture stays pinned) or an uninstall; `metrics` is
/// the Prometheus endpoint, if any.
pub(crate) fn daemon(
    dirs: &Dirs,
    bpffs: Option<PathBuf>,
    mut attach: NodeAttach,
    metrics: Option<daemon::MetricsEndpoint>,
    kube: redirect_daemon::KubeOptions,
) -> anyhow::Result<()> {
    let mut signals = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        signals.add(s);
    }
    signals.thread_block().context("blocking SIGINT/SIGTERM")?;
    let bpffs = dirs.bpffs_or_default(bpffs);
    // One runtime for every wait of the daemon (clients, the apiserver, the metrics port).
    let rt = daemon::runtime().context("starting the daemon's runtime")?;
    // Before the datapath is touched: a broken kubeconfig stops the start, naming it.
    let pod_cgroup_roots = kube.pod_cgroup_roots.clone();
    let kube = redirect_daemon::Kube::new(kube, rt.handle().clone())?;
    // Never silently the capture cgroup: a proxy in a sibling cgroup must work too.
    if attach.proxy_cgroup.is_none() {
        attach.proxy_cgroup = Some(redirect_datapath::cgroup2_root()?);
    }
    let d = Daemon::start(Options {
        bpffs: bpffs.clone(),
        dir: dirs.daemon.path().to_path_buf(),
        attach,
        pod_cgroup_roots,
    })?
    .with_kube(kube);
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    std::thread::spawn(move || {
        let (signal, from) = wait_signal(&signals);
        // The flag first: logging can fail (a closed stderr) and must not keep us running.
        flag.store(true, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(signal, from_pid = from, "stopping");
    });
    let metrics = match metrics {
        Some(endpoint) => {
            let dir = dirs.daemon.path().to_path_buf();
            let names = dir.clone();
            let bound = daemon::spawn_metrics(rt.handle(), endpoint, bpffs, dir, move || {
                redirect_daemon_api::record_names(&names)
            })?;
            format!(" metrics=http://{bound}/metrics")
        }
        None => String::new(),
    };
    println!(
        "ready pid={} socket={}{metrics}",
        std::process::id(),
        socket(dirs).display()
    );
    d.run(rt.handle(), &stop)?;
    Ok(())
}

/// Waits for one of `signals`; returns its number and the sending pid (for the log: who
/// stopped the daemon matters to an operator).
/// The next of `signals` and its sender's pid. An interrupted wait (`EINTR`: a debugger
/// attaching, a stop and continue) is not a signal to stop on: it waits again.
fn wait_signal(signals: &SigSet) -> (i32, i32) {
    loop {
        // By hand: nix's SigSet::wait does not give the sender's pid, which the log names.
        // SAFETY: syscall edge: `info` is a zeroed siginfo_t the kernel fills; the set is valid.
        let (signal, from) = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let signal = libc::sigwaitinfo(signals.as_ref(), &mut info);
            (signal, info.si_pid())
        };
        if signal > 0 {
            return (signal, from);
        }
        tracing::info!(error = %std::io::Error::last_os_error(), "the wait for a stop signal was \
            interrupted (a debugger attaching, a stop and continue): still running");
    }
}

/// Splits `ARGS` into words as a POSIX shell would (shlex): whitespace, '...', "..." and
/// backslash escapes.
pub(crate) fn split_args(s: &str) -> anyhow::Result<Vec<String>> {
    shlex::split(s).with_context(|| {
        format!("--istio-args: unterminated quote or a trailing backslash in {s:?}")
    })
}

/// The words of `--istio-args`: istio-init's arguments as written (a leading `istio-iptables`
/// dropped), without a namespace of their own (`--netns` is `enroll`'s, outside them).
fn istio_args_words(args: &str) -> anyhow::Result<Vec<String>> {
    let mut words = split_args(args)?;
    if words
        .first()
        .is_some_and(|w| w.rsplit('/').next() == Some("istio-iptables"))
    {
        words.remove(0);
    }
    let names_netns = |w: &String| {
        ["--netns", "--network-namespace"]
            .iter()
            .any(|f| w == f || w.starts_with(&format!("{f}=")))
    };
    if let Some(w) = words.iter().find(|w| names_netns(w)) {
        bail!(
            "--istio-args: {w} names a namespace inside the istio-iptables arguments; the one \
                enrolled is enroll's own --netns, given outside them"
        );
    }
    Ok(words)
}

/// With no daemon running: what a daemon and the plugin left in its directory (the one the
/// layout recorded and ours): the node files, a stale socket and lock.
fn remove_daemon_files(dirs: &Dirs, bpffs: &Path) {
    let recorded = DaemonDir::new(crate::direct_record::records_dir(dirs, bpffs));
    for d in [&dirs.daemon, &recorded] {
        d.remove_node_files();
        let _ = std::fs::remove_file(d.socket());
        let _ = std::fs::remove_file(d.lock());
    }
}

/// `args` as one line a POSIX shell splits back into them (`-x ''` keeps its quotes), for the
/// record's source: what `list` shows and a re-run can paste.
pub(crate) fn join_args(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.,/:=@%+".contains(&b));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Enrolls a namespace with a policy from istio-iptables args, a cluster.env or a JSON file.
pub(crate) fn enroll(
    dirs: &Dirs,
    netns_name: &str,
    istio_args: Option<&str>,
    cluster_env: Option<&Path>,
    policy: Option<&Path>,
    dry_run: bool,
) -> anyhow::Result<()> {
    let (policy, source): (Policy, String) = match (istio_args, cluster_env, policy) {
        (Some(args), None, None) => {
            // The namespace first: a last flag missing its value (`-x`) is then named, rather
            // than taking `--netns` as its value and leaving the path as a stray argument.
            let mut argv = vec!["--netns".to_owned(), netns_name.to_owned()];
            argv.extend(istio_args_words(args)?);
            let inv =
                crate::missing_inputs::resolve(&argv, &crate::missing_inputs::Asking::ENROLL)?;
            crate::missing_inputs::say_notes(&inv);
            (
                inv.policy,
                crate::missing_inputs::with_notes(format!("--istio-args {args}"), &inv.notes),
            )
        }
        (None, Some(file), None) => {
            let argv = vec![
                "--cluster-env".to_owned(),
                file.display().to_string(),
                "--netns".to_owned(),
                netns_name.to_owned(),
            ];
            let inv =
                crate::missing_inputs::resolve(&argv, &crate::missing_inputs::Asking::ENROLL)?;
            crate::missing_inputs::say_notes(&inv);
            (
                inv.policy,
                crate::missing_inputs::with_notes(
                    format!("--cluster-env {}", file.display()),
                    &inv.notes,
                ),
            )
        }
        (None, None, Some(file)) => {
            let text = std::fs::read(file)
                .with_context(|| format!("--policy: reading {}", file.display()))?;
            let p = redirect_policy::policy_from_json(&text)
                .with_context(|| format!("--policy {}: not a valid policy", file.display()))?;
            (p, format!("--policy {}", file.display()))
        }
        _ => bail!("give exactly one of --istio-args, --cluster-env or --policy"),
    };
    if dry_run {
        return enroll_dry_run(dirs, netns_name, &policy);
    }
    let r = client(dirs).enroll(
        &open_netns(&resolve_netns(Some(netns_name)))?,
        policy,
        source,
        redirect_daemon_api::Writer::Enroll,
    )?;
    println!("{}", r.message);
    Ok(())
}

/// The namespace at `path`, opened here: its descriptor goes to the daemon with the request.
pub(crate) fn open_netns(path: &Path) -> anyhow::Result<NetnsFd> {
    NetnsFd::open(path).with_context(|| format!("opening network namespace {}", path.display()))
}

/// `enroll --dry-run`: the resolved policy, and what it would replace of the daemon's
/// enrollment of the namespace (read from its list; no daemon: from the policy alone).
fn enroll_dry_run(dirs: &Dirs, netns_name: &str, policy: &Policy) -> anyhow::Result<()> {
    let path = resolve_netns(Some(netns_name));
    let cookie = netns_cookie(&path)?;
    for line in redirect_policy::describe_policy(policy, policy.dual_stack) {
        println!("{line}");
    }
    let enrolled = client(dirs).list().ok().and_then(|l| {
        l.enrollments
            .into_iter()
            .find(|e| e.record.cookie == cookie)
    });
    match enrolled {
        Some(e) => {
            let lines = redirect_policy::describe_changes(&e.record.policy, policy, e.record.ipv6);
            if lines.is_empty() {
                println!(
                    "(dry run: {} is enrolled with this policy already; nothing changes)",
                    path.display()
                );
            } else {
                println!(
                    "(dry run: would replace the policy of {} from {} ({}):",
                    path.display(),
                    e.record.writer,
                    e.record.source
                );
                for l in lines {
                    println!("  {l}");
                }
                println!(")");
            }
        }
        None => println!("(dry run: nothing enrolled for {})", path.display()),
    }
    Ok(())
}

/// Removes a namespace's policy.
pub(crate) fn unenroll(dirs: &Dirs, netns_name: &str) -> anyhow::Result<()> {
    let r = client(dirs).unenroll(&resolve_netns(Some(netns_name)))?;
    println!("{}", r.message);
    Ok(())
}

/// Removes every pin, attachment and enrollment.
pub(crate) fn uninstall(dirs: &Dirs, bpffs: Option<PathBuf>) -> anyhow::Result<()> {
    let dir = dirs.bpffs_or_default(bpffs);
    let mut refused = None;
    if socket(dirs).exists() {
        match client(dirs).uninstall() {
            Ok(r) => {
                println!("{}", r.message);
                return Ok(());
            }
            Err(e) => refused = Some(e),
        }
    }
    if dirs.daemon.running() {
        let why = refused.map_or_else(String::new, |e| format!(" ({e})"));
        bail!(
            "a redirect daemon is running ({}) but did not uninstall{why}; stop it first, then run \
                `redirect uninstall` again",
            dirs.daemon.path().display()
        );
    }
    let _lock = lock_node(&dir)?;
    let enrollments = DaemonDir::new(crate::direct_record::records_dir(dirs, &dir)).enrollments();
    if !dir.exists() && !enrollments.exists() {
        remove_daemon_files(dirs, &dir);
        println!(
            "nothing to do: no datapath pinned at {} and no enrollment files in {}",
            dir.display(),
            dirs.daemon.path().display()
        );
        return Ok(());
    }
    if NodeDatapath::exists(&dir) {
        if let Ok(layout) = NodeDatapath::open(&dir).and_then(|dp| dp.layout()) {
            if let Owner::Daemon { pid, .. } = layout.owner {
                if layout.owner.is_live_daemon() {
                    bail!(
                        "the datapath at {} is owned by the redirect daemon pid {pid}, which is \
                            running with another daemon directory than {}: uninstall through it \
                            (REDIRECT_DAEMON_DIR) or stop it first",
                        dir.display(),
                        dirs.daemon.path().display()
                    );
                }
            }
        }
    }
    remove_node_dir(&dir)?;
    let _ = std::fs::remove_dir_all(&enrollments);
    remove_daemon_files(dirs, &dir);
    println!(
        "uninstalled: {} unpinned, every program detached",
        dir.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::split_args;

    #[test]
    fn splits_like_a_shell() {
        let v = split_args(r#"-i '*' -x "" -b '*' -d 15090,15021"#).expect("split");
        assert_eq!(v, ["-i", "*", "-x", "", "-b", "*", "-d", "15090,15021"]);
        assert!(split_args("-i '*").is_err());
    }

    #[test]
    fn joins_so_a_shell_splits_it_back() {
        let args: Vec<String> = [
            "-u",
            "1337",
            "-i",
            "*",
            "-x",
            "",
            "-d",
            "15090,15021",
            "a'b",
        ]
        .map(String::from)
        .to_vec();
        let line = super::join_args(&args);
        assert_eq!(line, r"-u 1337 -i '*' -x '' -d 15090,15021 'a'\''b'");
        assert_eq!(split_args(&line).expect("split"), args);
    }
}
