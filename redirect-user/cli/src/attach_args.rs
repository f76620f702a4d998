//! The flags of `attach`: the capture and proxy cgroups, istio-iptables' `-u -g -p -x`, the
//! inbound specs, the BPF log level, the metrics file and the connection-map size.
use std::path::PathBuf;

use clap::Args;

use crate::cli_values::{
    parse_bpf_log, parse_cgroup, parse_cidr, parse_id, parse_inbound, parse_port,
};

/// `redirect attach`'s flags.
#[derive(Debug, Args)]
pub(crate) struct AttachArgs {
    #[command(flatten)]
    pub state: crate::dir_args::StateDirArg,
    /// Cgroup v2 directory whose processes are captured.
    #[arg(long, value_name = "PATH", value_parser = parse_cgroup)]
    pub cgroup: PathBuf,
    /// Cgroup v2 directory containing the proxy's listener [default: the cgroup v2 root].
    #[arg(long, value_name = "PATH", value_parser = parse_cgroup)]
    pub proxy_cgroup: Option<PathBuf>,
    /// Connects by this uid are never captured (istio-iptables -u).
    #[arg(long, value_name = "UID", default_value = "1337", value_parser = parse_id)]
    pub proxy_uid: u32,
    /// Connects by this gid are never captured (istio-iptables -g).
    #[arg(long, value_name = "GID", default_value = "1337", value_parser = parse_id)]
    pub proxy_gid: u32,
    /// Captured connects go to 127.0.0.1 on this port (istio-iptables -p).
    #[arg(long, value_name = "PORT", default_value = "15001", value_parser = parse_port)]
    pub outbound_port: u16,
    /// Most verbose log level the BPF programs emit (off, error, warn, info, debug, trace).
    /// Records appear in this process's log; also raise RUST_LOG to see debug/trace.
    #[arg(long, value_name = "LEVEL", default_value = "warn", value_parser = parse_bpf_log)]
    pub bpf_log: u8,
    /// Also write the counters as Prometheus text to FILE every second (atomically, mode
    /// 0644), for `redirect-proxy --bpf-metrics-file FILE` to merge into port 15020.
    #[arg(long, value_name = "FILE")]
    pub metrics_file: Option<PathBuf>,
    /// Steer inbound TCP of a network namespace (a pod) to its proxy's inbound
    /// listener with sk_lookup (no NAT). Repeatable. Istio's flags as keys:
    ///   NETNS[:b=PORTS|*][:d=PORTS][:z=PORT][:e=PORT][:no-listener=refuse|passthrough]
    ///   NETNS        a name in /run/netns or a path (/proc/PID/ns/net)
    ///   b            captured ports, * for all, empty to disable        [*]
    ///   d            ports never captured                 [15090,15021,15020]
    ///   z            the proxy's inbound listener port                [15006]
    ///   e            the tunnel port, never captured                  [15008]
    ///   no-listener  with nothing listening on z: refuse, like iptables, or
    ///                passthrough to the app                          [refuse]
    /// The listener is found when the proxy calls listen(), or at enrollment if it
    /// already listens. Example: --inbound pod1:b=*:d=22,15090,15021,15020
    #[arg(long, value_name = "SPEC", value_parser = parse_inbound, verbatim_doc_comment)]
    pub inbound: Vec<redirect_policy::InboundSpec>,
    /// Outbound IPv4 destinations never captured (istio-iptables -x), comma-separated
    /// CIDRs; repeatable.
    #[arg(long, value_name = "CIDRS", value_delimiter = ',', value_parser = parse_cidr)]
    pub exclude_cidr: Vec<ipnet::Ipv4Net>,
    /// File with one excluded CIDR per line (# comments allowed), for long lists.
    #[arg(long, value_name = "FILE")]
    pub exclude_cidr_file: Option<PathBuf>,
    /// Connections in hand-off at once (connected to the proxy, its side of the handshake
    /// not complete): the size of TRACKED and LOCAL_CONNECTS; the inbound LRU gets half of it
    /// (at least 256 per CPU, 1024 to 65536).
    #[arg(long, value_name = "M", env = "REDIRECT_MAX_CONNECTIONS",
        default_value_t = redirect_datapath::DEFAULT_MAX_CONNECTIONS,
        value_parser = clap::value_parser!(u32).range(1025..=4_194_304))]
    pub max_connections: u32,
}
