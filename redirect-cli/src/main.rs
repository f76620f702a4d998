//! The `redirect` binary: parses the CLI and runs attach, exec or status.
mod cli;
mod cli_values;
mod istio;
mod istio_daemon;
mod node_cmds;
mod observe_cmds;

use std::{
    io::Write as _,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::ExitCode,
};

use anyhow::{bail, Context as _};
use clap::Parser as _;
use nix::sys::signal::{SigSet, Signal};
use redirect_common::map_names;
use redirect_datapath::{cgroup, counters, metrics, state, status, AttachOptions, Datapath};

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The subcommand's name when it needs root: every command but `istio-iptables --dry-run` and
/// `--help` reads or writes the datapath's maps, pins, links or the root-only daemon socket.
fn needs_root(cmd: &Command) -> Option<&'static str> {
    Some(match cmd {
        Command::IstioIptables { args } => {
            let harmless = ["--dry-run", "-h", "--help"];
            if args.iter().any(|a| harmless.contains(&a.as_str())) {
                return None;
            }
            "istio-iptables"
        }
        Command::Attach { .. } => "attach",
        Command::Exec { .. } => "exec",
        Command::Daemon { .. } => "daemon",
        Command::Enroll { .. } => "enroll",
        Command::Unenroll { .. } => "unenroll",
        Command::List { .. } => "list",
        Command::Uninstall { .. } => "uninstall",
        Command::Validate { .. } => "validate",
        Command::Vm { .. } => "vm",
        Command::Stats { .. } => "stats",
        Command::Trace { .. } => "trace",
        Command::Explain { .. } => "explain",
        Command::Status { .. } => "status",
    })
}

fn run(cli: Cli) -> anyhow::Result<()> {
    // The directory flags stand for their environment variables, which the libraries read;
    // set before any thread starts.
    for (var, value) in [
        ("REDIRECT_DAEMON_DIR", &cli.daemon_dir),
        ("REDIRECT_STATE_DIR", &cli.state_dir),
    ] {
        if let Some(v) = value {
            std::env::set_var(var, v);
        }
    }
    if let Some(name) = needs_root(&cli.command) {
        let euid = nix::unistd::geteuid().as_raw();
        if euid != 0 {
            bail!("redirect {name} must run as root (effective uid is {euid}): it reads and writes the datapath's BPF maps, pins and links and the root-only daemon socket, which needs CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN; rerun it with sudo");
        }
    }
    match cli.command {
        Command::Attach {
            cgroup,
            proxy_cgroup,
            proxy_uid,
            proxy_gid,
            outbound_port,
            bpf_log,
            metrics_file,
            inbound,
            exclude_cidr,
            exclude_cidr_file,
        } => attach(
            AttachOptions {
                cgroup,
                proxy_cgroup,
                proxy_uid,
                proxy_gid,
                outbound_port,
                bpf_log_level: bpf_log,
                inbound,
                exclude_cidrs: with_cidr_file(exclude_cidr, exclude_cidr_file.as_deref())?,
            },
            metrics_file.as_deref(),
        ),
        Command::Exec { cgroup, command } => exec(cgroup, &command),
        Command::IstioIptables { args } => istio::run(&args),
        Command::Daemon {
            bpffs,
            cgroup,
            metrics,
        } => node_cmds::daemon(bpffs, cgroup, metrics),
        Command::Enroll {
            netns,
            istio_args,
            cluster_env,
            policy,
        } => node_cmds::enroll(
            &netns,
            istio_args.as_deref(),
            cluster_env.as_deref(),
            policy.as_deref(),
        ),
        Command::Unenroll { netns } => node_cmds::unenroll(&netns),
        Command::List { json } => node_cmds::list(json),
        Command::Uninstall { bpffs } => node_cmds::uninstall(bpffs),
        Command::Validate {
            netns,
            cgroup,
            timeout_ms,
            bpffs,
            json,
        } => observe_cmds::validate(&netns, cgroup.as_deref(), timeout_ms, bpffs, json),
        Command::Vm {
            cluster_env,
            netns,
            args,
            cgroup,
        } => node_cmds::vm(&cluster_env, netns.as_deref(), args.as_deref(), cgroup),
        Command::Stats { netns, bpffs, json } => observe_cmds::stats(netns.as_deref(), bpffs, json),
        Command::Trace {
            netns,
            count,
            seconds,
            bpffs,
            json,
        } => observe_cmds::trace(netns.as_deref(), count, seconds, bpffs, json),
        Command::Explain {
            netns,
            inbound: true,
            src,
            iface,
            dst,
            bpffs,
            json,
            ..
        } => observe_cmds::explain_inbound(
            &netns,
            src.as_deref().unwrap_or_default(),
            dst,
            iface.as_deref(),
            bpffs,
            json,
        ),
        Command::Explain {
            netns,
            uid,
            gid,
            dst,
            udp,
            src,
            cgroup,
            bpffs,
            json,
            ..
        } => {
            let uid = uid.context("--uid: the caller's uid is needed to explain a connect")?;
            let src = src
                .map(|s| {
                    s.parse::<std::net::IpAddr>()
                        .with_context(|| format!("--src {s:?}: not an IP address"))
                })
                .transpose()?;
            observe_cmds::explain(
                &netns,
                (uid, gid.unwrap_or(uid)),
                dst,
                !udp,
                src,
                cgroup.as_deref(),
                bpffs,
                json,
            )
        }
        Command::Status { bpffs, json } => {
            let dir = bpffs.unwrap_or_else(redirect_daemon::default_bpffs);
            let node = if redirect_datapath::node::NodeDatapath::exists(&dir) {
                Some(redirect_daemon::node_status(
                    &dir,
                    &redirect_daemon::daemon_dir(),
                )?)
            } else {
                None
            };
            let report = status::collect(node)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", status::render(&report));
            }
            Ok(())
        }
    }
}

fn attach(options: AttachOptions, metrics_file: Option<&Path>) -> anyhow::Result<()> {
    // Block the stop signals before loading so one arriving mid-attach is handled by the
    // orderly path below instead of killing us half-way (the kernel would still clean up).
    let mut signals = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        signals.add(s);
    }
    signals.thread_block().context("blocking SIGINT/SIGTERM")?;

    refuse_near_a_node_datapath(&options.cgroup)?;
    let mut datapath = Datapath::attach(&options)?;
    let instance = state::InstanceState {
        pid: std::process::id(),
        options: datapath.options().clone(),
        attachments: datapath.attachments().to_vec(),
        maps: datapath.map_ids(),
    };
    let state_file = state::StateFile::create(&state::state_dir(), &instance)?;
    for a in datapath.attachments() {
        tracing::info!(program = %a.program, hook = %a.attach_type, target = %a.target.display(), id = a.program_id, "attached");
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

    let publish = |ids: &state::InstanceState| -> anyhow::Result<()> {
        let Some(path) = metrics_file else {
            return Ok(());
        };
        let id = |name| ids.map_id(name).context("map id");
        let counters = counters::read_counters_by_id(id(map_names::COUNTERS)?)?;
        let tracked = counters::tracked_len_by_id(id(map_names::TRACKED)?)?;
        let pending = counters::pending_len_by_id(id(map_names::PENDING)?)?;
        let text = metrics::render(&metrics::Exposition {
            counters: counters.iter().map(|c| (c.name, c.value)).collect(),
            per_netns: Vec::new(),
            maps: vec![(map_names::TRACKED, tracked), (map_names::PENDING, pending)],
        });
        metrics::write_atomically(path, &text)?;
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
fn refuse_near_a_node_datapath(cgroup: &Path) -> anyhow::Result<()> {
    use redirect_datapath::node::layout::{self, Owner};
    let Ok(cgroup) = redirect_datapath::cgroup::validate(cgroup) else {
        return Ok(()); // Datapath::attach names the bad --cgroup
    };
    let mut roots = vec![PathBuf::from("/sys/fs/bpf")];
    roots.extend(
        redirect_daemon::default_bpffs()
            .parent()
            .map(Path::to_path_buf),
    );
    roots.dedup();
    for root in roots {
        if let Some((dir, record, at)) = layout::attached_near(&root, &cgroup) {
            let owner = match record.owner {
                Owner::Daemon { pid, .. } if record.owner.is_live_daemon() => {
                    format!("the redirect daemon, pid {pid}")
                }
                Owner::Daemon { pid, .. } => format!("the redirect daemon pid {pid} (down)"),
                Owner::Cli => "the CLI".to_owned(),
            };
            bail!(
                "--cgroup {}: the node datapath pinned at {} (owner: {owner}) already captures at {}, which is this cgroup, above or below it; a second datapath would capture the same processes twice. Enroll the namespace with it instead (`redirect enroll`, `redirect istio-iptables`), or remove it first (`redirect uninstall --bpffs {}`)",
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
fn with_cidr_file(
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
    datapath: &mut Datapath,
    signals: SigSet,
    tick: bool,
    mut on_tick: impl FnMut(&mut Datapath),
) -> anyhow::Result<Signal> {
    use std::os::fd::AsFd as _;

    use nix::{
        poll::{poll, PollFd, PollFlags, PollTimeout},
        sys::signalfd::{SfdFlags, SignalFd},
    };
    let sfd = SignalFd::with_flags(&signals, SfdFlags::SFD_CLOEXEC).context("signalfd")?;
    let readable = |fd: &PollFd<'_>| fd.revents().is_some_and(|r| r.contains(PollFlags::POLLIN));
    loop {
        let (signal_ready, log_ready) = {
            let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
            if let Some(fd) = datapath.log_fd() {
                fds.push(PollFd::new(fd, PollFlags::POLLIN));
            }
            let timeout = if tick {
                PollTimeout::from(1000u16)
            } else {
                PollTimeout::NONE
            };
            match poll(&mut fds, timeout) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
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

fn exec(cgroup_arg: Option<PathBuf>, command: &[String]) -> anyhow::Result<()> {
    let target = match cgroup_arg {
        Some(path) => cgroup::validate(&path)?,
        None => {
            let (live, _) = state::read_all(&state::state_dir())?;
            match live.as_slice() {
                [one] => one.options.cgroup.clone(),
                [] => bail!("no `redirect attach` is running: start one, or pass --cgroup PATH"),
                many => bail!(
                    "{} `redirect attach` instances are running (pids {}): pass --cgroup PATH to choose",
                    many.len(),
                    many.iter().map(|s| s.pid.to_string()).collect::<Vec<_>>().join(", ")
                ),
            }
        }
    };
    cgroup::enter(&target)?;
    let (program, args) = command.split_first().context("no command given after --")?;
    let err = std::process::Command::new(program).args(args).exec();
    bail!("running {program}: {err}")
}
