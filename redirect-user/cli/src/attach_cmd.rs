//! `redirect attach`: the datapath with process-owned links, in the foreground until a stop
//! signal; refused next to a pinned node datapath.
use std::{
    io::Write as _,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context as _};
// nix: rustix has no safe signal mask (sigprocmask) nor signalfd.
use nix::sys::signal::{SigSet, Signal};
use redirect_common::map_names;
use redirect_datapath::{
    attached_near, read_counters_by_id, render_metrics, tracked_len_by_id, write_atomically,
    AttachDatapath, AttachOptions, Exposition, InstanceState, StateFile,
};

use crate::{cli, dir_args::Dirs};

pub(crate) fn attach(
    dirs: &Dirs,
    options: AttachOptions,
    metrics_file: Option<&Path>,
) -> anyhow::Result<()> {
    // Block the stop signals before loading so one arriving mid-attach is handled by the
    // orderly path below instead of killing us half-way (the kernel would still clean up).
    let mut signals = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        signals.add(s);
    }
    signals.thread_block().context("blocking SIGINT/SIGTERM")?;

    refuse_near_a_node_datapath(dirs, &options.cgroup)?;
    let mut datapath = AttachDatapath::attach(&options)?;
    let instance = InstanceState {
        pid: std::process::id(),
        options: datapath.options().clone(),
        attachments: datapath.attachments().to_vec(),
        maps: datapath.map_ids(),
    };
    let state_file = StateFile::create(&dirs.state, &instance)?;
    for a in datapath.attachments() {
        tracing::info!(program = %a.program, hook = %a.attach_type, target = %a.target.display(),
            id = a.program_id, "attached");
    }
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "ready pid={} state={}",
        instance.pid,
        state_file.path().display()
    )?;
    stdout.flush()?;
    drop(stdout);

    let publish = |ids: &InstanceState| -> anyhow::Result<()> {
        let Some(path) = metrics_file else {
            return Ok(());
        };
        let id = |name| ids.map_id(name).context("map id");
        let counters = read_counters_by_id(id(map_names::COUNTERS)?)?;
        let tracked = tracked_len_by_id(id(map_names::TRACKED)?)?;
        let inbound = tracked_len_by_id(id(map_names::INBOUND)?)?;
        let text = render_metrics(&Exposition {
            counters: counters.iter().map(|c| (c.name, c.value)).collect(),
            per_netns: Vec::new(),
            maps: vec![(map_names::TRACKED, tracked), (map_names::INBOUND, inbound)],
            ..Exposition::default()
        });
        write_atomically(path, &text)?;
        Ok(())
    };
    publish(&instance)?;
    let tick = metrics_file.is_some() || !datapath.enrolled().is_empty();
    let signal = wait_for_stop(&mut datapath, signals, tick, |dp| {
        if let Err(e) = dp.refresh_addresses() {
            tracing::warn!(error = %e, "refreshing enrolled namespaces' addresses failed");
        }
        if let Err(e) = publish(&instance) {
            tracing::warn!(error = %e, "writing the metrics file failed");
        }
    })?;
    tracing::info!(signal = %signal, "stopping: detaching capture first, then tracking");
    datapath.detach();
    drop(datapath);
    drop(state_file);
    if let Some(path) = metrics_file {
        let _ = std::fs::remove_file(path);
    }
    tracing::info!("detached; nothing of this instance stays attached");
    Ok(())
}

/// `attach` at, above or below the cgroup a pinned node datapath captures would capture the
/// same processes twice: refused, naming that datapath and its owner.
fn refuse_near_a_node_datapath(dirs: &Dirs, cgroup: &Path) -> anyhow::Result<()> {
    use redirect_datapath::Owner;
    let Ok(cgroup) = redirect_datapath::validate_cgroup(cgroup) else {
        return Ok(()); // AttachDatapath::attach names the bad --cgroup
    };
    let mut roots = vec![PathBuf::from("/sys/fs/bpf")];
    roots.extend(dirs.bpffs.parent().map(Path::to_path_buf));
    roots.dedup();
    for root in roots {
        if let Some((dir, record, at)) = attached_near(&root, &cgroup) {
            let owner = match record.owner {
                Owner::Daemon { pid, .. } if record.owner.is_live_daemon() => {
                    format!("the redirect daemon, pid {pid}")
                }
                Owner::Daemon { pid, .. } => format!("the redirect daemon pid {pid} (down)"),
                Owner::Cli => "the CLI".to_owned(),
            };
            bail!(
                "--cgroup {}: the node datapath pinned at {} (owner: {owner}) already captures at \
                    {}, which is this cgroup, above or below it; a second datapath would capture \
                    the same processes twice. Enroll the namespace with it instead (`redirect \
                    enroll`, `redirect istio-iptables`), or remove it first (`redirect uninstall \
                    --bpffs {}`)",
                cgroup.display(),
                dir.display(),
                at.display(),
                dir.display()
            );
        }
    }
    Ok(())
}

/// Adds the CIDRs listed in `file` (one per line, `#` comments) to `cidrs`.
pub(crate) fn with_cidr_file(
    mut cidrs: Vec<ipnet::Ipv4Net>,
    file: Option<&Path>,
) -> anyhow::Result<Vec<ipnet::Ipv4Net>> {
    let Some(file) = file else { return Ok(cidrs) };
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    for (no, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if !line.is_empty() {
            let net = cli::parse_cidr(line)
                .map_err(|e| anyhow::anyhow!("{}:{}: {e}", file.display(), no + 1))?;
            cidrs.push(net);
        }
    }
    Ok(cidrs)
}

/// Forwards BPF log records until one of `signals` arrives; returns it.
/// With `tick`, `on_tick` runs about once a second.
fn wait_for_stop(
    datapath: &mut AttachDatapath,
    signals: SigSet,
    tick: bool,
    mut on_tick: impl FnMut(&mut AttachDatapath),
) -> anyhow::Result<Signal> {
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    use rustix::{
        event::{poll, PollFd, PollFlags, Timespec},
        io::Errno,
    };
    let sfd = SignalFd::with_flags(&signals, SfdFlags::SFD_CLOEXEC).context("signalfd")?;
    let readable = |fd: &PollFd<'_>| fd.revents().contains(PollFlags::IN);
    let second = Timespec {
        tv_sec: 1,
        tv_nsec: 0,
    };
    loop {
        let (signal_ready, log_ready) = {
            let log_fd = datapath.log_fd();
            let mut fds = vec![PollFd::new(&sfd, PollFlags::IN)];
            if let Some(fd) = &log_fd {
                fds.push(PollFd::new(fd, PollFlags::IN));
            }
            match poll(&mut fds, tick.then_some(&second)) {
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => return Err(e).context("poll"),
            }
            (readable(&fds[0]), fds.get(1).is_some_and(readable))
        };
        if log_ready {
            datapath.flush_logs();
        }
        if tick {
            on_tick(datapath);
        }
        if signal_ready {
            if let Some(info) = sfd.read_signal().context("reading signalfd")? {
                let signal = i32::try_from(info.ssi_signo)
                    .ok()
                    .and_then(|n| Signal::try_from(n).ok())
                    .unwrap_or(Signal::SIGTERM);
                return Ok(signal);
            }
        }
    }
}
