//! The `redirect` binary: parses the CLI and runs attach, exec or status.
// Every dependency of the product build is used (the test build has dev-dependencies too).
#![cfg_attr(test, allow(unused_crate_dependencies))]
mod attach_args;
mod attach_cmd;
mod captured;
mod cli;
mod cli_values;
mod dir_args;
mod direct_record;
mod error_chain;
#[cfg(test)]
mod fuzz_tests;
mod install_cni_args;
mod install_cni_cmd;
mod istio;
mod istio_args;
mod istio_daemon;
mod json_views;
mod kube_args;
mod list_cmd;
mod missing_inputs;
mod node_cmds;
mod observe_cmds;
mod ping_cmd;
mod pod_policy_cmd;
#[cfg(test)]
mod schemas;
mod sizing_args;
mod status_cmd;
mod untaint_controller_cmd;
mod upgrade_cmd;
mod validation;
mod vm_cmd;
mod writer;

use std::{os::unix::process::CommandExt as _, path::PathBuf, process::ExitCode};

use anyhow::{bail, Context as _};
use clap::Parser as _;
use redirect_datapath::{
    enter_cgroup, kernel_release, missing_feature, probe_all, probe_detail, probe_feature,
    read_instances, validate_cgroup, AttachOptions, NONEXISTENT_FEATURE,
};

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
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.kind() == clap::error::ErrorKind::InvalidUtf8 => {
            eprintln!(
                "error: {}",
                cli_values::non_utf8_argument(std::env::args_os())
            );
            return ExitCode::from(2);
        }
        Err(e) => e.exit(),
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_chain::chain_once(&e));
            ExitCode::FAILURE
        }
    }
}

/// The subcommand's name when it needs root: every command but `istio-iptables --dry-run`,
/// `--run-validation` (istio-validation's check, run as the proxy's uid) and `--help` reads
/// or writes the datapath's maps, pins, links or the root-only daemon socket.
fn needs_root(cmd: &Command) -> Option<&'static str> {
    Some(match cmd {
        Command::IstioIptables { args } => {
            let harmless = ["--dry-run", "--run-validation", "-h", "--help"];
            if args.iter().any(|a| harmless.contains(&a.as_str())) {
                return None;
            }
            "istio-iptables"
        }
        Command::Attach(_) => "attach",
        Command::Exec { .. } => "exec",
        Command::Daemon { .. } => "daemon",
        Command::Enroll { .. } => "enroll",
        Command::Unenroll { .. } => "unenroll",
        Command::List { .. } => "list",
        Command::Ping { .. } => "ping",
        Command::Uninstall { .. } => "uninstall",
        Command::Upgrade { .. } => "upgrade",
        Command::Validate { .. } => "validate",
        Command::Vm { .. } => "vm",
        Command::Stats { .. } => "stats",
        Command::Trace { .. } => "trace",
        Command::Explain { .. } => "explain",
        Command::Status { .. } => "status",
        Command::Probe { .. } => "probe",
        // Files only; a directory it may not write names itself in the error. The untaint
        // controller talks to the apiserver only.
        Command::PodPolicy { .. }
        | Command::InstallCni(_)
        | Command::UninstallCni(_)
        | Command::UntaintController(_) => return None,
    })
}

fn run(cli: Cli) -> anyhow::Result<()> {
    // The directories, resolved once here and handed down: no library reads the environment
    // for them.
    let (daemon_dir, state_dir) = cli.command.dirs();
    let dirs = dir_args::Dirs::resolve(daemon_dir, state_dir, |name| std::env::var_os(name));
    // The features to treat as missing (a test and demo knob), handed to the datapath once.
    if let Some(ids) = std::env::var_os(redirect_datapath::ASSUME_MISSING_ENV) {
        redirect_datapath::assume_missing(&ids.to_string_lossy())?;
    }
    if let Some(name) = needs_root(&cli.command) {
        let euid = rustix::process::geteuid().as_raw();
        if euid != 0 {
            bail!(
                "redirect {name} must run as root (effective uid is {euid}): it reads and writes \
                the datapath's BPF maps, pins and links and the root-only daemon socket, which \
                needs CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN; rerun it with sudo"
            );
        }
    }
    match cli.command {
        Command::Attach(attach_args::AttachArgs {
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
            max_connections,
            ..
        }) => attach_cmd::attach(
            &dirs,
            AttachOptions {
                cgroup,
                proxy_cgroup,
                proxy_uid,
                proxy_gid,
                outbound_port,
                bpf_log_level: bpf_log,
                inbound,
                exclude_cidrs: attach_cmd::with_cidr_file(
                    exclude_cidr,
                    exclude_cidr_file.as_deref(),
                )?,
                max_connections,
            },
            metrics_file.as_deref(),
        ),
        Command::Exec {
            cgroup, command, ..
        } => exec(&dirs, cgroup, &command),
        Command::IstioIptables { args } => istio::run(&dirs, &args),
        Command::Daemon {
            bpffs,
            cgroup,
            proxy_cgroup,
            attach_scope,
            metrics,
            metrics_per_namespace,
            metrics_cache_ms,
            sizing,
            kube,
            ..
        } => node_cmds::daemon(
            &dirs,
            bpffs,
            redirect_datapath::NodeAttach {
                cgroup,
                proxy_cgroup,
                quotas: sizing.quotas(),
                scope: attach_scope,
            },
            metrics.map(|addr| redirect_daemon::MetricsEndpoint {
                addr,
                per_namespace: metrics_per_namespace,
                cache: std::time::Duration::from_millis(metrics_cache_ms),
            }),
            kube.options()?,
        ),
        Command::Enroll {
            netns,
            istio_args,
            cluster_env,
            policy,
            dry_run,
            ..
        } => node_cmds::enroll(
            &dirs,
            &netns,
            istio_args.as_deref(),
            cluster_env.as_deref(),
            policy.as_deref(),
            dry_run,
        ),
        Command::Unenroll { netns, .. } => node_cmds::unenroll(&dirs, &netns),
        Command::List { json, .. } => list_cmd::list(&dirs, json),
        Command::Ping {
            timeout_ms,
            no_alarm,
            ..
        } => ping_cmd::ping(
            &dirs,
            std::time::Duration::from_millis(timeout_ms),
            no_alarm,
        ),
        Command::Uninstall { bpffs, .. } => node_cmds::uninstall(&dirs, bpffs),
        Command::Upgrade { bpffs, check } => {
            upgrade_cmd::upgrade(dirs.bpffs_or_default(bpffs), check)
        }
        Command::Validate {
            netns,
            cgroup,
            timeout_ms,
            bpffs,
            json,
        } => observe_cmds::validate(
            &netns,
            cgroup.as_deref(),
            timeout_ms,
            dirs.bpffs_or_default(bpffs),
            json,
        ),
        Command::Vm {
            cluster_env,
            netns,
            args,
            cgroup,
            dry_run,
            ..
        } => vm_cmd::vm(
            &dirs,
            vm_cmd::VmArgs {
                cluster_env: &cluster_env,
                netns: netns.as_deref(),
                extra: args.as_deref(),
                cgroup,
                dry_run,
            },
        ),
        Command::Stats {
            netns, bpffs, json, ..
        } => observe_cmds::stats(&dirs, netns.as_deref(), dirs.bpffs_or_default(bpffs), json),
        Command::Trace {
            netns,
            count,
            seconds,
            bpffs,
            json,
            ..
        } => observe_cmds::trace(
            &dirs,
            netns.as_deref(),
            count,
            seconds,
            dirs.bpffs_or_default(bpffs),
            json,
        ),
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
            dirs.bpffs_or_default(bpffs),
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
            mark,
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
            observe_cmds::explain(observe_cmds::ExplainOptions {
                netns: &netns,
                uid,
                gid: gid.unwrap_or(uid),
                dst,
                tcp: !udp,
                src,
                cgroup: cgroup.as_deref(),
                mark,
                bpffs: dirs.bpffs_or_default(bpffs),
                json,
            })
        }
        Command::Probe { json, demo_missing } => probe(json, demo_missing),
        Command::InstallCni(args) => install_cni_cmd::run(&args),
        Command::UninstallCni(dirs) => install_cni_cmd::uninstall_cni(&dirs),
        Command::UntaintController(args) => untaint_controller_cmd::run(&args),
        Command::PodPolicy {
            file,
            json,
            migrate,
            cluster_dns,
        } => pod_policy_cmd::run(&file, json, migrate, cluster_dns),
        Command::Status { bpffs, json, .. } => status_cmd::status(&dirs, bpffs, json),
    }
}

/// `redirect probe`: every feature, present or not; the first missing one is the error.
fn probe(json: bool, demo_missing: bool) -> anyhow::Result<()> {
    let mut probed = probe_all();
    if demo_missing {
        probed.push(probe_feature(&NONEXISTENT_FEATURE));
    }
    if json {
        // One object: the kernel, the overall result, every feature.
        let out = json_views::ProbeReport {
            kernel: kernel_release(),
            ok: missing_feature(&probed).is_none(),
            features: &probed,
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("kernel {}", kernel_release());
        for p in &probed {
            println!(
                "  {:<7} {:<58} since {:<6} for {}{}",
                if p.present { "yes" } else { "MISSING" },
                p.name,
                p.since,
                p.needed_by,
                if p.present {
                    String::new()
                } else {
                    probe_detail(p)
                }
            );
            if let (false, Some(without)) = (p.present, p.without) {
                println!("          optional: without it {without}");
            }
        }
    }
    match missing_feature(&probed) {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

fn exec(
    dirs: &dir_args::Dirs,
    cgroup_arg: Option<PathBuf>,
    command: &[String],
) -> anyhow::Result<()> {
    let target = match cgroup_arg {
        Some(path) => validate_cgroup(&path)?,
        None => {
            let (live, _) = read_instances(&dirs.state)?;
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
    enter_cgroup(&target)?;
    let (program, args) = command.split_first().context("no command given after --")?;
    let err = std::process::Command::new(program).args(args).exec();
    bail!("running {program}: {err}")
}
