//! `--help` tells the truth: every default it prints as a value (a number or a path) is the
//! value the code uses, and a directory flag is offered only by the commands that read it.
use std::collections::BTreeSet;

use clap::CommandFactory as _;
use redirect_datapath::Quotas;

use crate::cli::Cli;

/// Every subcommand's long help, with its name.
fn helps() -> Vec<(String, String)> {
    let mut cli = Cli::command();
    cli.build();
    cli.get_subcommands()
        .map(|c| {
            (
                c.get_name().to_owned(),
                c.clone().render_long_help().to_string(),
            )
        })
        .collect()
}

/// The values the code uses that a help may name as a default.
fn used() -> BTreeSet<String> {
    let q = Quotas::default();
    let mut v: BTreeSet<String> = [
        redirect_daemon_api::DEFAULT_DIR,
        redirect_datapath::DEFAULT_NODE_DIR,
        redirect_datapath::DEFAULT_STATE_DIR,
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    for n in [
        q.max_pods,
        q.ports,
        q.cidrs,
        q.addresses,
        q.interfaces,
        q.routes,
        q.handshakes,
        q.max_connections,
        redirect_datapath::DEFAULT_MAX_CONNECTIONS,
    ] {
        v.insert(n.to_string());
    }
    v
}

#[test]
fn every_default_shown_as_a_value_is_the_value_used() {
    let used = used();
    let mut cli = Cli::command();
    cli.build();
    for (name, help) in helps() {
        let sub = cli.find_subcommand(&name).expect("listed");
        let generated: BTreeSet<String> = sub
            .get_arguments()
            .flat_map(|a| a.get_default_values())
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        for shown in help.split("[default: ").skip(1) {
            let value = shown.split(']').next().unwrap_or_default();
            let value = value.split([',', ' ']).next().unwrap_or_default();
            let is_value =
                value.starts_with('/') || value.starts_with(|c: char| c.is_ascii_digit());
            if !is_value || generated.contains(value) {
                continue;
            }
            assert!(
                used.contains(value),
                "`redirect {name} --help` names the default {value:?}, which the code does not use"
            );
        }
    }
}

#[test]
fn istio_iptables_help_names_the_sizing_the_code_uses() {
    let q = Quotas::default();
    let help = crate::istio::help();
    for (var, value) in [
        ("REDIRECT_MAX_PODS", q.max_pods),
        ("REDIRECT_QUOTA_PORTS", q.ports),
        ("REDIRECT_QUOTA_CIDRS", q.cidrs),
        ("REDIRECT_QUOTA_ADDRESSES", q.addresses),
        ("REDIRECT_QUOTA_INTERFACES", q.interfaces),
        ("REDIRECT_QUOTA_ROUTES", q.routes),
        ("REDIRECT_MAX_CONNECTIONS", q.max_connections),
        ("REDIRECT_QUOTA_HANDSHAKES", q.handshakes),
    ] {
        let shown = help
            .split(&format!("{var} ["))
            .nth(1)
            .and_then(|rest| rest.split([' ', ']', '\n']).next())
            .unwrap_or_else(|| panic!("{var} is not in the help"));
        assert_eq!(shown, value.to_string(), "{var}");
    }
    assert!(help.contains("--bind-proxy-cgroup"), "{help}");
}

#[test]
fn directory_flags_only_where_they_are_read() {
    for (name, help) in helps() {
        let daemon_dir = matches!(
            name.as_str(),
            "daemon"
                | "enroll"
                | "unenroll"
                | "list"
                | "ping"
                | "uninstall"
                | "vm"
                | "stats"
                | "trace"
                | "status"
        );
        let state_dir = matches!(name.as_str(), "attach" | "exec" | "list" | "status");
        assert_eq!(help.contains("--daemon-dir"), daemon_dir, "redirect {name}");
        assert_eq!(help.contains("--state-dir"), state_dir, "redirect {name}");
    }
}
