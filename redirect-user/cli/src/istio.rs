//! `redirect istio-iptables`: parse istio-iptables' arguments and environment, then apply the
//! policy to one namespace through the pinned node datapath (or print it with --dry-run).
use crate::{dir_args::Dirs, writer::NodeWriter};

use redirect_datapath::{
    daemon_up, ipv6_follows, lock_node, resolve_netns, AppliedAt, NetnsHandle, NodeAttach,
    NodeDatapath,
};
use redirect_policy::{self as policy, Invocation, Policy};

/// `redirect istio-iptables --help`; the defaults it names come from the code.
pub(crate) fn help() -> String {
    let q = redirect_datapath::Quotas::default();
    let istio = redirect_policy::Policy::default();
    format!(
        "\
redirect istio-iptables: drop-in for istio-init's istio-iptables, backed by eBPF.

Usage: redirect istio-iptables [ISTIO-IPTABLES FLAGS] [--netns NAME|PATH] [--cgroup PATH]
                               [--bpffs DIR] [--cluster-env FILE] [--dns-servers LIST]
                               [--cleanup-only] [--dry-run] [--run-validation]

Applies the capture policy to the network namespace it runs in (or --netns) and exits;
capture stays active. The first use on a node loads the programs, attaches them at the
cgroup (default: the cgroup v2 root) and pins programs, links and maps under --bpffs
(default {bpffs}, or $REDIRECT_BPFFS); later uses only add their namespace's
policy. --cleanup-only removes it; the datapath goes with the last policy.

istio-iptables flags (each also read from the environment under the name shown; a flag
on the command line wins over the environment, which wins over --cluster-env):
  -p, --envoy-port PORT                  outbound capture port [{p}]
  -z, --inbound-capture-port PORT        inbound capture port [{z}]    INBOUND_CAPTURE_PORT
  -e, --inbound-tunnel-port PORT         tunnel port, never captured [{e}]  INBOUND_TUNNEL_PORT
  -u, --proxy-uid UIDS|NAMES             proxy uids, never captured [ENVOY_USER's (istio-proxy) or 1337]  PROXY_UID
  -g, --proxy-gid GIDS|NAMES             proxy gids [same as -u]         PROXY_GID
  -m, --istio-inbound-interception-mode  REDIRECT, or TPROXY (the app sees the client's address)
  -b, --istio-inbound-ports PORTS|*      inbound ports captured; empty: none  ISTIO_INBOUND_PORTS
  -d, --istio-local-exclude-ports PORTS  inbound ports never captured (with -b *)  ISTIO_LOCAL_EXCLUDE_PORTS
  -i, --istio-service-cidr CIDRS|*       outbound CIDRs captured; empty: none  ISTIO_SERVICE_CIDR
  -x, --istio-service-exclude-cidr CIDRS outbound CIDRs never captured   ISTIO_SERVICE_EXCLUDE_CIDR
  -q, --istio-outbound-ports PORTS       outbound ports always captured  ISTIO_OUTBOUND_PORTS
  -o, --istio-local-outbound-ports-exclude PORTS  outbound ports never captured
  -c, --istio-exclude-interfaces NICS    traffic through these interfaces is left alone
  -k, --kube-virt-interfaces NICS        accepted (KubeVirt inbound redirect is not applied)
      --redirect-dns                     DNS (UDP/TCP 53) to the pod's resolv.conf servers -> 15053
      --capture-all-dns                  with --redirect-dns: DNS to any server
  -t, -r                                 TPROXY's mark and route table: Istio's 1337 and 133 only
      --run-validation                   apply nothing; check capture as istio-validation does:
                                         listen on 127.0.0.1:<-p> and :<-z> ([::1] for an IPv6
                                         pod), dial 127.0.0.6:<probe port> ([::6]) once a second;
                                         pass when it arrives with that original destination,
                                         else exit 126 after the timeout. Run it as the proxy uid
      --iptables-probe-port PORT         the port --run-validation dials [{probe_port}]  IPTABLES_PROBE_PORT
      --probe-timeout DURATION           how long --run-validation tries (5s, 1500ms) [{probe_timeout:?}]  PROBE_TIMEOUT
      --drop-invalid, --dual-stack, --log_* ...  accepted
  ISTIO_OUTBOUND_OWNER_GROUPS / _EXCLUDE, ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR: as istio-iptables.

Names and DNS servers come from the target namespace's files: this process's own /etc when
it runs in that namespace (no --netns), else its processes' /proc/PID/root/etc, then
/etc/netns/NAME; never the host's. Without any, pass --dns-servers (the proxy uid is then
istio-iptables' default, 1337).

redirect's own flags:
      --netns NAME|PATH    namespace to apply to (/run/netns/NAME) [the current one]
      --cgroup PATH        cgroup to attach at when the datapath is created [cgroup v2 root]; the
                           proxy hooks (getsockopt, sock_ops) attach there too (`daemon` keeps
                           them apart: its --proxy-cgroup)
      --bpffs DIR          pin directory [{bpffs}]
      --cluster-env FILE   a VM's cluster.env, read under the environment
      --dns-servers LIST   DNS servers instead of the pod's resolv.conf's
      --bind-proxy-cgroup PATH
                           bypass only the proxy uid/gid *inside* this cgroup (uid 1337 elsewhere
                           is captured like an app); not where hooks attach (that is --cgroup)
      --no-proxy refuse|passthrough
                           outbound while nothing listens on the proxy port [refuse]
      --cleanup-only       remove the namespace's policy
  -n, --dry-run            print the resolved policy and istio-iptables' rules; change nothing

Node sizing, read only by the run that creates the datapath (later runs use the pinned one's):
REDIRECT_MAX_PODS [{max_pods}], REDIRECT_QUOTA_PORTS [{ports} per port list], REDIRECT_QUOTA_CIDRS [{cidrs}
per -i/-x list and family], REDIRECT_QUOTA_ADDRESSES [{addresses}], REDIRECT_QUOTA_INTERFACES [{interfaces}],
REDIRECT_QUOTA_ROUTES [{routes}], REDIRECT_MAX_CONNECTIONS [{max_connections}],
REDIRECT_QUOTA_HANDSHAKES [{handshakes} connections in hand-off to the proxy]. A policy over a
quota is refused, naming it; nothing is written.

Examples:
  redirect istio-iptables -p 15001 -z 15006 -u 1337 -m REDIRECT -i '*' -x \"\" -b '*' -d 15090,15021,15020
  redirect istio-iptables --netns pod1 --dry-run -i 10.0.0.0/8 --redirect-dns
  redirect istio-iptables --netns pod1 --cleanup-only
  redirect istio-iptables -p 15001 -z 15006 -u 1337 --run-validation --skip-rule-apply
",
        max_pods = q.max_pods,
        ports = q.ports,
        cidrs = q.cidrs,
        addresses = q.addresses,
        interfaces = q.interfaces,
        routes = q.routes,
        max_connections = q.max_connections,
        handshakes = q.handshakes,
        p = istio.proxy_port,
        z = istio.inbound_capture_port,
        e = istio.tunnel_port,
        bpffs = redirect_datapath::DEFAULT_NODE_DIR,
        probe_port = redirect_policy::DEFAULT_PROBE_PORT,
        probe_timeout = redirect_policy::DEFAULT_PROBE_TIMEOUT,
    )
}

/// Runs `redirect istio-iptables ARGS`.
pub(crate) fn run(dirs: &Dirs, args: &[String]) -> anyhow::Result<()> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{}", help());
        return Ok(());
    }
    let inv = crate::missing_inputs::resolve(args, &crate::missing_inputs::Asking::ISTIO_IPTABLES)?;
    crate::missing_inputs::say_notes(&inv);
    for flag in &inv.ignored {
        tracing::debug!(flag = %flag, "accepted and ignored");
    }
    if inv.run_validation {
        return validate(&inv);
    }
    let ns = resolve_netns(inv.netns.as_deref());
    let dir = dirs.bpffs_or_default(inv.bpffs.clone());
    if inv.dry_run {
        let addrs = NetnsHandle::open(&ns)
            .and_then(|h| h.addresses())
            .unwrap_or_default();
        let ipv6 = ipv6_follows(&inv.policy, &addrs);
        print!("{}", side_by_side(&inv.policy, ipv6));
        return Ok(());
    }
    if let NodeWriter::Daemon { pid, client } = NodeWriter::for_node(&dir) {
        if let Some(asked) = &inv.cgroup {
            NodeDatapath::open(&dir)?.check_attach(&NodeAttach {
                cgroup: Some(asked.clone()),
                proxy_cgroup: None,
                quotas: Default::default(),
                scope: Default::default(),
            })?;
        }
        if crate::istio_daemon::run(pid, &client, &ns, &inv, args)? {
            return Ok(());
        }
    }
    let _lock = lock_node(&dir)?;
    if inv.cleanup_only {
        if !NodeDatapath::exists(&dir) {
            println!(
                "nothing to clean up: no datapath pinned at {}",
                dir.display()
            );
            return Ok(());
        }
        let mut dp = NodeDatapath::open(&dir)?;
        // A running daemon owns the datapath (whatever its directory) and keeps it empty.
        let daemon_owned = daemon_up(&dir, &dp.layout()?);
        let removed = dp.cleanup(&ns, daemon_owned)?;
        crate::direct_record::forget(dirs, &dir, &ns);
        println!(
            "policy removed for {}{}",
            ns.display(),
            if removed {
                "; datapath unpinned (last policy)"
            } else {
                ""
            }
        );
        return Ok(());
    }
    let attach = NodeAttach {
        cgroup: inv.cgroup.clone(),
        proxy_cgroup: None,
        quotas: crate::sizing_args::Sizing::from_env()?,
        scope: Default::default(),
    };
    // Opened once: the apply reads and attaches through this descriptor only.
    let handle = NetnsHandle::open(&ns)?;
    let replacing = crate::direct_record::replacing(dirs, &dir, handle.cookie(), &inv.policy);
    let AppliedAt { applied, created } =
        NodeDatapath::apply_at(&dir, &attach, &handle, &inv.policy)?;
    crate::direct_record::record(
        dirs,
        &dir,
        &handle,
        &inv.policy,
        &applied,
        redirect_daemon_api::Writer::IstioIptables,
        crate::missing_inputs::with_notes(
            format!("istio-iptables {}", crate::node_cmds::join_args(args)),
            &inv.notes,
        ),
    );
    let inbound = if applied.inbound {
        format!(", inbound capture to :{}", inv.policy.inbound_capture_port)
    } else {
        String::new()
    };
    println!(
        "applied to {} (netns cookie {}){}: outbound capture to :{}{inbound}{replacing}",
        ns.display(),
        applied.cookie,
        if created { ", datapath created" } else { "" },
        inv.policy.proxy_port,
    );
    Ok(())
}

/// `--run-validation`: istio-validation's check, nothing applied; a failure exits with
/// istio-iptables' code for it (126).
fn validate(inv: &Invocation) -> anyhow::Result<()> {
    match crate::validation::run(inv)? {
        crate::validation::Verdict::Passed(listener, orig) => {
            println!(
                "validation passed: the probe arrived at {listener} with original destination \
                {orig}: capture is in place"
            );
            Ok(())
        }
        crate::validation::Verdict::Failed(why) => {
            eprintln!("error: {why}");
            std::process::exit(crate::validation::FAILED_EXIT)
        }
    }
}

/// The resolved policy and istio-iptables' rules in two columns.
pub(crate) fn side_by_side(p: &Policy, ipv6: bool) -> String {
    let left = redirect_policy::describe_policy(p, ipv6);
    let (v4, v6) = policy::iptables_restore_text(p, ipv6);
    let mut right: Vec<String> = vec!["# iptables-restore (IPv4)".into()];
    right.extend(v4.lines().map(str::to_owned));
    if let Some(v6) = v6 {
        right.push("# ip6tables-restore (IPv6)".into());
        right.extend(v6.lines().map(str::to_owned));
    }
    let width = left
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0)
        .max(30)
        + 2;
    let mut out = format!(
        "{:width$}| {}\n",
        "resolved policy (redirect)", "rules istio-iptables would install"
    );
    out.push_str(&format!("{}+{}\n", "-".repeat(width), "-".repeat(40)));
    for i in 0..left.len().max(right.len()) {
        let l = left.get(i).map_or("", String::as_str);
        let r = right.get(i).map_or("", String::as_str);
        out.push_str(&format!("{l:width$}| {r}\n"));
    }
    out
}
