//! Command-line definition of `redirect` (clap), with value parsers that explain bad input.
use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub(crate) use crate::cli_values::*;

/// eBPF traffic capture for sidecar meshes: replaces istio-init's iptables rules.
///
/// Outbound TCP connects from processes in a cgroup are rewritten to the sidecar proxy on
/// 127.0.0.1:15001; the proxy's own traffic (uid/gid 1337) and loopback destinations are left
/// alone. The proxy reads the original destination with getsockopt(SOL_IP, SO_ORIGINAL_DST),
/// exactly as behind iptables, so Envoy and HAProxy work unchanged.
///
/// Typical session on a node (as root):
///
///   redirect daemon --metrics 127.0.0.1:9967 &       # owns the pinned datapath
///   redirect enroll --netns pod1 --istio-args "-p 15001 -z 15006 -u 1337 -m REDIRECT -i '*' -b '*'"
///   redirect list                                     # enrolled namespaces, proxy up/down
///   redirect trace --netns pod1                       # decisions as they happen
///   redirect explain --netns pod1 --uid 0 --dst 10.96.0.1:443
///   redirect status                                   # owner, cgroups, links, counters
///
/// Which command for which job:
///
///   capture a pod as istio-init does   redirect istio-iptables ARGS (the same flags)
///   a node with many pods               redirect daemon, then redirect enroll per namespace
///   Kubernetes                          deploy/kubernetes (the DaemonSet runs the daemon and
///                                       redirect install-cni; pods are enrolled by redirect-cni)
///   a VM joining the mesh               redirect vm --cluster-env FILE
///   what a pod manifest would get       redirect pod-policy FILE (no root)
///   everything captured on this node    redirect list (with or without a daemon), status, stats
///   debug one connection                redirect explain --netns NS --uid UID --dst IP:PORT,
///                                       then redirect trace --netns NS while it happens
///   prove capture before the proxy      redirect validate --netns NS --cgroup CG
///   a quick experiment on one cgroup    redirect attach --cgroup PATH (gone when it exits)
///   a new build on a running node       redirect upgrade (or start the new daemon)
///   remove everything                   redirect uninstall (and uninstall-cni on a node)
///
/// Environment (each also a flag): REDIRECT_BPFFS (--bpffs: the pin directory, default
/// /sys/fs/bpf/redirect), REDIRECT_DAEMON_DIR (--daemon-dir), REDIRECT_STATE_DIR
/// (--state-dir), REDIRECT_MAX_PODS and REDIRECT_QUOTA_PORTS|CIDRS|ADDRESSES|INTERFACES|ROUTES
/// (node sizing when a datapath is created; `daemon` takes them as flags too), RUST_LOG (log
/// filter, default info).
#[derive(Debug, Parser)]
#[command(
    name = "redirect",
    version,
    propagate_version = true,
    verbatim_doc_comment
)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Load and attach the capture programs, stay in the foreground, detach on SIGINT/SIGTERM.
    ///
    /// connect4/6, sendmsg, recvmsg and getpeername are attached at --cgroup; the getsockopt
    /// (SO_ORIGINAL_DST) and sock_ops programs at --proxy-cgroup (default: the cgroup v2 root), because a
    /// socket's cgroup is fixed when it is created and the proxy's accepted sockets inherit
    /// its listener's cgroup. Nothing stays attached after this command exits, even on
    /// SIGKILL (the kernel drops the links with the process).
    Attach(crate::attach_args::AttachArgs),
    /// Run a command inside a captured cgroup (moves itself there, then execs CMD).
    ///
    /// Without --cgroup, uses the cgroup of the one running `redirect attach`.
    Exec {
        /// Cgroup v2 directory to run in [default: the running attach's cgroup].
        #[arg(long, value_name = "PATH", value_parser = parse_cgroup)]
        cgroup: Option<PathBuf>,
        /// The command and its arguments (after `--`).
        #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
        command: Vec<String>,
        #[command(flatten)]
        state: crate::dir_args::StateDirArg,
    },
    /// Drop-in for istio-init's `istio-iptables`: apply a pod's capture policy and exit.
    ///
    /// Takes exactly the arguments (and ISTIO_* environment) istio-iptables takes, e.g. the
    /// args of an istio-init container, and applies them to the network namespace it runs in
    /// (or --netns) using the node's shared, pinned datapath. Capture stays active after it
    /// exits. --cleanup-only removes the namespace's policy; --dry-run prints the resolved
    /// policy beside the iptables rules istio-iptables would install. Run
    /// `redirect istio-iptables --help` for every flag.
    #[command(name = "istio-iptables", disable_help_flag = true)]
    IstioIptables {
        /// istio-iptables arguments, passed through unchanged.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// Run the node daemon: owns the pinned datapath and enrolls namespaces on request.
    ///
    /// Creates the datapath when none is pinned, adopts it when one is (nothing is attached
    /// twice), re-applies the enrollments recorded in its directory, and follows each enrolled
    /// namespace's addresses. Stopped or killed, capture goes on (the pins hold it); started
    /// again, it adopts. A second daemon refuses to start.
    Daemon {
        /// Pin directory [default: /sys/fs/bpf/redirect, or $REDIRECT_BPFFS].
        #[arg(long, value_name = "DIR")]
        bpffs: Option<PathBuf>,
        /// Cgroup to attach the capture hooks at when the datapath is created [default: the
        /// cgroup v2 root]. The proxy hooks attach at --proxy-cgroup, not here (`istio-iptables
        /// --cgroup` puts both at its cgroup).
        #[arg(long, value_name = "PATH", value_parser = parse_cgroup)]
        cgroup: Option<PathBuf>,
        /// Cgroup under which the proxies' listeners live (getsockopt and sock_ops attach
        /// there) [default: the cgroup v2 root, so a proxy in any cgroup works].
        #[arg(long, value_name = "PATH", value_parser = parse_cgroup)]
        proxy_cgroup: Option<PathBuf>,
        /// Where the cgroup programs are linked when the datapath is created: `root` links
        /// them once at --cgroup, so every socket below it runs them (exiting early where no
        /// policy is); `per-pod` links them at each pod's cgroup as its CNI ADD enrolls it
        /// (found by the pod's uid below --pod-cgroup-root; no directory: the ADD fails), so
        /// no other socket of the node runs a program. Per pod, a process in a pod's network
        /// namespace but outside its cgroup (`nsenter` from the host) is not captured, and
        /// only pods can be enrolled (not `redirect enroll`, `istio-iptables` or `vm`).
        #[arg(long, value_name = "SCOPE", default_value = "root", value_parser = parse_scope)]
        attach_scope: redirect_datapath::AttachScope,
        /// Serve Prometheus metrics (GET /metrics) on this address, e.g. 127.0.0.1:9967 or
        /// [NODE_IP]:9967 (no default: who may scrape is the operator's choice). Node-wide
        /// decision counters and map fill only, unless --metrics-per-namespace.
        #[arg(long, value_name = "ADDR", value_parser = parse_listen_addr)]
        metrics: Option<std::net::SocketAddr>,
        /// Also serve redirect_netns_decisions_total{netns,cookie,decision}: every enrolled
        /// namespace's path and counters, readable by whoever reaches --metrics.
        #[arg(long, requires = "metrics")]
        metrics_per_namespace: bool,
        /// Milliseconds one rendering of --metrics serves the scrapes that follow it (each
        /// rendering walks the maps; scrapes arriving together share one): a pod that scrapes
        /// in a loop costs the daemon one walk per period at most.
        #[arg(long, value_name = "MS", default_value_t = 1000, requires = "metrics",
            value_parser = clap::value_parser!(u64).range(0..=60_000))]
        metrics_cache_ms: u64,
        #[command(flatten)]
        sizing: crate::sizing_args::Sizing,
        #[command(flatten)]
        kube: crate::kube_args::KubeArgs,
        #[command(flatten)]
        dirs: crate::dir_args::DaemonDirArg,
    },
    /// Enroll a namespace (a pod, or a VM) with a policy, through the daemon.
    Enroll {
        /// Network namespace name (under /run/netns) or path.
        #[arg(long, value_name = "NAME|PATH")]
        netns: String,
        /// istio-iptables arguments, as one string (e.g. "-i '*' -b '*' -d 15090,15021,15020").
        #[arg(
            long,
            value_name = "ARGS",
            group = "source",
            allow_hyphen_values = true
        )]
        istio_args: Option<String>,
        /// A cluster.env (a VM's istio settings).
        #[arg(long, value_name = "FILE", group = "source")]
        cluster_env: Option<PathBuf>,
        /// A policy as JSON (the shape `redirect list --json` prints).
        #[arg(long, value_name = "FILE", group = "source")]
        policy: Option<PathBuf>,
        /// Print the resolved policy (and what it would replace); change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        dirs: crate::dir_args::DaemonDirArg,
    },
    /// Remove a namespace's policy, through the daemon.
    Unenroll {
        /// Network namespace name (under /run/netns) or path.
        #[arg(long, value_name = "NAME|PATH")]
        netns: String,
        #[command(flatten)]
        dirs: crate::dir_args::DaemonDirArg,
    },
    /// Everything captured on this node: every namespace the kernel holds a policy for, whoever
    /// wrote it (the daemon, istio-iptables, vm), with its writer and whether the daemon
    /// follows it, and each running `redirect attach`. Works with or without a daemon.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        dirs: crate::dir_args::DaemonDirArg,
        #[command(flatten)]
        state: crate::dir_args::StateDirArg,
    },
    /// Ask the node daemon whether it serves: exit 0 when it answers on its socket within the
    /// timeout, else exit 1 saying why. The DaemonSet's readiness and liveness probe (a hung
    /// daemon is restarted; capture stays pinned and the new daemon adopts it).
    Ping {
        /// How long to wait for the answer (the daemon serves one request at a time).
        #[arg(long, value_name = "MS", default_value_t = 3000,
              value_parser = clap::value_parser!(u64).range(1..=600_000))]
        timeout_ms: u64,
        /// Also fail when the daemon has a standing alarm (a datapath it cannot repair, a
        /// namespace it cannot re-apply; `redirect status` shows it).
        #[arg(long)]
        no_alarm: bool,
        #[command(flatten)]
        dirs: crate::dir_args::DaemonDirArg,
    },
    /// Remove every pin, attachment and enrollment (through the daemon when it runs).
    Uninstall {
        /// Pin directory [default: /sys/fs/bpf/redirect, or $REDIRECT_BPFFS].
        #[arg(long, value_name = "DIR")]
        bpffs: Option<PathBuf>,
        #[command(flatten)]
        dirs: crate::dir_args::DaemonDirArg,
    },
    /// Upgrade the pinned datapath in place to this build's programs, with no capture gap.
    ///
    /// Maps whose definition is unchanged are kept with all their state (policies, connections
    /// in hand-off, per-socket storage); a map whose size or flags changed is created anew and
    /// its entries copied; then every pinned link (each cgroup hook, each namespace's
    /// sk_lookup) gets its new program with an atomic BPF_LINK_UPDATE, readers of the state
    /// first and capture (connect4/6) last, so connections open meanwhile keep their original
    /// destination. Refused, with nothing changed, when a map's key or value format changed, the
    /// attach plan changed, or a running daemon owns the datapath (the daemon upgrades it when
    /// it starts). The same layout from another build (a fixed program) always upgrades; this
    /// build's layout and the older ones it upgrades from are printed by `redirect upgrade
    /// --check`.
    Upgrade {
        /// Pin directory [default: /sys/fs/bpf/redirect, or $REDIRECT_BPFFS].
        #[arg(long, value_name = "DIR")]
        bpffs: Option<PathBuf>,
        /// Only say whether an upgrade is needed and possible (exit 0 up to date, 1 needed).
        #[arg(long)]
        check: bool,
    },
    /// Enroll a VM: the host (or a namespace playing the VM) with the policy of Istio's
    /// cluster.env (ISTIO_INBOUND_PORTS, ISTIO_SERVICE_CIDR, ISTIO_LOCAL_EXCLUDE_PORTS,
    /// ISTIO_META_DNS_CAPTURE, ...). Through the daemon when it runs, else straight into the
    /// pinned datapath (created when absent). No iptables rule is written anywhere.
    Vm {
        /// The VM's cluster.env.
        #[arg(long, value_name = "FILE")]
        cluster_env: PathBuf,
        /// A namespace playing the VM [default: the host's own namespace].
        #[arg(long, value_name = "NAME|PATH")]
        netns: Option<String>,
        /// Extra istio-iptables arguments on top of cluster.env (e.g. "-u 999 --dns-servers 10.0.0.2").
        #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
        args: Option<String>,
        /// Cgroup to attach at when the datapath is created [default: the cgroup v2 root].
        #[arg(long, value_name = "PATH", value_parser = parse_cgroup)]
        cgroup: Option<PathBuf>,
        /// Print the resolved policy beside istio-iptables' rules; change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        dirs: crate::dir_args::DaemonDirArg,
    },
    /// Prove capture works in a namespace before its proxy starts (istio-validation's job):
    /// listens on the proxy's ports, dials a test address as an application and its own pod
    /// as the proxy, checks where each arrives and with which original destination. Exits 0
    /// when both checks pass, 1 otherwise.
    Validate {
        /// Network namespace name (under /run/netns) or path.
        #[arg(long, value_name = "NAME|PATH")]
        netns: String,
        /// The pod's cgroup (where its processes run) [default: stay where this runs].
        #[arg(long, value_name = "PATH", value_parser = parse_cgroup)]
        cgroup: Option<PathBuf>,
        /// How long to wait for each arrival, in milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 2000)]
        timeout_ms: u64,
        /// Pin directory [default: /sys/fs/bpf/redirect, or $REDIRECT_BPFFS].
        #[arg(long, value_name = "DIR")]
        bpffs: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Decision counters per enrolled namespace, like `iptables -L -v` counters.
    Stats {
        /// Only this namespace (name under /run/netns, or path).
        #[arg(long, value_name = "NAME|PATH")]
        netns: Option<String>,
        /// Pin directory [default: /sys/fs/bpf/redirect, or $REDIRECT_BPFFS].
        #[arg(long, value_name = "DIR")]
        bpffs: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        dirs: crate::dir_args::DaemonDirArg,
    },
    /// Live stream of capture decisions: pid, command, uid, namespace, original destination,
    /// decision and the istio-iptables rule that made it. Stops on Ctrl-C, or after --count.
    Trace {
        /// Only this namespace (name under /run/netns, or path).
        #[arg(long, value_name = "NAME|PATH")]
        netns: Option<String>,
        /// Stop after this many decisions.
        #[arg(long, value_name = "N")]
        count: Option<usize>,
        /// Stop after this many seconds.
        #[arg(long, value_name = "SECONDS")]
        seconds: Option<u64>,
        /// Pin directory [default: /sys/fs/bpf/redirect, or $REDIRECT_BPFFS].
        #[arg(long, value_name = "DIR")]
        bpffs: Option<PathBuf>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        dirs: crate::dir_args::DaemonDirArg,
    },
    /// What would happen to one connection, and which istio-iptables rule decides it.
    ///
    /// Reads the namespace's policy from the pinned maps and runs the same decision code as
    /// the kernel programs. Outbound (a connect from the pod, istio's OUTPUT chain):
    /// `redirect explain --netns pod1 --uid 1337 --dst 10.244.1.7:8080`. Inbound (a connection
    /// arriving at the pod, istio's PREROUTING chain):
    /// `redirect explain --inbound --netns pod1 --src 10.0.0.9:40000 --dst 10.244.1.7:8080 --iface eth0`.
    Explain {
        /// Network namespace name (under /run/netns) or path.
        #[arg(long, value_name = "NAME|PATH")]
        netns: String,
        /// Explain a connection arriving at the namespace (sk_lookup) instead of a connect from it.
        #[arg(long)]
        inbound: bool,
        /// The caller's uid (outbound; required there).
        #[arg(long, conflicts_with = "inbound", value_name = "UID", value_parser = parse_id,
            required_unless_present = "inbound")]
        uid: Option<u32>,
        /// The caller's gid [default: the uid].
        #[arg(long, conflicts_with = "inbound", value_name = "GID", value_parser = parse_id)]
        gid: Option<u32>,
        /// Destination address and port (port 1-65535).
        #[arg(long, value_name = "IP:PORT", value_parser = parse_dst)]
        dst: std::net::SocketAddr,
        /// A UDP datagram instead of a TCP connect.
        #[arg(long, conflicts_with = "inbound")]
        udp: bool,
        /// Outbound: the address the socket is bound to (127.0.0.6 is the proxy's passthrough).
        /// Inbound: the peer, IP or IP:PORT (required there).
        #[arg(long, value_name = "IP[:PORT]", required_if_eq("inbound", "true"))]
        src: Option<String>,
        /// Inbound: the interface of the namespace the connection arrives on (matters for -c/-k).
        #[arg(long, value_name = "NAME", requires = "inbound")]
        iface: Option<String>,
        /// The caller's cgroup (matters when the policy binds the proxy to its cgroup).
        #[arg(long, conflicts_with = "inbound", value_name = "PATH", value_parser = parse_cgroup)]
        cgroup: Option<PathBuf>,
        /// The socket's mark (SO_MARK). In TPROXY mode 1337 is the proxy's transparent hop,
        /// which goes straight to the application; unmarked, the proxy's connect to its own pod
        /// goes to the inbound port (Istio's mark 1338).
        #[arg(
            long,
            conflicts_with = "inbound",
            value_name = "MARK",
            default_value_t = 0
        )]
        mark: u32,
        /// Pin directory [default: /sys/fs/bpf/redirect, or $REDIRECT_BPFFS].
        #[arg(long, value_name = "DIR")]
        bpffs: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// What istio-cni would decide for a pod manifest and the policy it would apply, checked
    /// against the manifest's istio-init arguments (no root, no cluster: reads FILE only).
    #[command(after_long_help = crate::pod_policy_cmd::HELP)]
    PodPolicy {
        /// A Pod, or a Deployment, StatefulSet, DaemonSet, ReplicaSet, Job or CronJob (its pod
        /// template); YAML or JSON, several documents allowed; `-` reads standard input.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Print JSON: one object per pod (decision, policy, both argument lists, differences).
        #[arg(long, conflicts_with = "migrate")]
        json: bool,
        /// Print the manifest as Istio's injector emits it with istio-cni enabled: istio-init
        /// becomes istio-validation (its arguments plus --run-validation --skip-rule-apply, as
        /// the proxy's uid, without NET_ADMIN/NET_RAW), its settings as annotations.
        #[arg(long)]
        migrate: bool,
        /// The cluster DNS address (the kube-dns Service's IP), for pods that capture DNS
        /// (ISTIO_META_DNS_CAPTURE) with dnsPolicy ClusterFirst.
        #[arg(long, value_name = "IP")]
        cluster_dns: Option<std::net::IpAddr>,
    },
    /// Install the redirect-cni plugin on this node: the binary into the CNI bin directory,
    /// our entry at the end of the highest-priority conflist (after the primary plugin).
    #[command(name = "install-cni", after_long_help = crate::install_cni_cmd::HELP)]
    InstallCni(crate::install_cni_args::InstallCni),
    /// Remove each node's readiness taint once that node's DaemonSet pod is Ready: the one
    /// central holder of nodes patch (deploy/kubernetes/untaint-controller.yaml), so that no
    /// node's daemon needs it.
    #[command(name = "untaint-controller", after_long_help = crate::untaint_controller_cmd::HELP)]
    UntaintController(crate::untaint_controller_cmd::UntaintController),
    /// Undo exactly what install-cni did (from its state file): our entry removed (the file
    /// restored byte for byte when nobody changed it since, a converted .conf brought back),
    /// the binary it copied removed; others' changes left alone; nothing installed is fine.
    #[command(name = "uninstall-cni")]
    UninstallCni(crate::install_cni_args::Dirs),
    /// Probe this kernel for every feature the datapath uses: what needs it, the kernel that
    /// added it, and whether this one has it. Exits 1 when a required one is missing; without
    /// the optional one (sk_lookup ingress_ifindex, Linux 5.17) the datapath loads an sk_lookup
    /// program that does not read it and refuses policies with inbound -c/-k.
    ///
    /// REDIRECT_PROBE_ASSUME_MISSING=ID[,ID...] treats the named features as missing whatever
    /// the kernel says, here and in every command that loads the datapath (shown as "assumed
    /// missing by REDIRECT_PROBE_ASSUME_MISSING"); the ids are those of `--json`, e.g.
    /// sk_lookup_ingress_ifindex.
    Probe {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Also probe a feature no kernel has, to show what a missing feature says.
        #[arg(long)]
        demo_missing: bool,
    },
    /// Show what is attached where (checked against the kernel) and the decision counters.
    Status {
        /// Pin directory [default: /sys/fs/bpf/redirect, or $REDIRECT_BPFFS].
        #[arg(long, value_name = "DIR")]
        bpffs: Option<PathBuf>,
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        dirs: crate::dir_args::DaemonDirArg,
        #[command(flatten)]
        state: crate::dir_args::StateDirArg,
    },
}

impl Command {
    /// The directory flags this command takes (`--daemon-dir`, `--state-dir`).
    pub(crate) fn dirs(
        &self,
    ) -> (
        Option<&crate::dir_args::DaemonDirArg>,
        Option<&crate::dir_args::StateDirArg>,
    ) {
        match self {
            Command::Daemon { dirs, .. }
            | Command::Enroll { dirs, .. }
            | Command::Unenroll { dirs, .. }
            | Command::Ping { dirs, .. }
            | Command::Uninstall { dirs, .. }
            | Command::Vm { dirs, .. }
            | Command::Stats { dirs, .. }
            | Command::Trace { dirs, .. } => (Some(dirs), None),
            Command::List { dirs, state, .. } | Command::Status { dirs, state, .. } => {
                (Some(dirs), Some(state))
            }
            Command::Exec { state, .. } => (None, Some(state)),
            Command::Attach(a) => (None, Some(&a.state)),
            _ => (None, None),
        }
    }
}

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "help_tests.rs"]
mod help_tests;
