//! Node sizing flags (`--max-pods`, `--max-connections`, `--quota-*`): they size the shared maps when a node
//! datapath is created and become its per-namespace quotas. The same names as environment
//! variables serve the commands that create a datapath without flags of their own
//! (`istio-iptables`, whose arguments are Istio's, and `vm`).
use clap::{Args, Parser};
use redirect_datapath::Quotas;

/// Node sizing, used only when the datapath is created (later runs use the pinned one's).
#[derive(Debug, Clone, Args)]
pub(crate) struct Sizing {
    /// Namespaces the node datapath holds; every shared map is sized from it times the quotas.
    #[arg(long, value_name = "N", env = "REDIRECT_MAX_PODS",
        default_value_t = Quotas::default().max_pods, value_parser = clap::value_parser!(u32).range(1..=65_535))]
    pub max_pods: u32,
    /// Connections in hand-off at once on the node (connected to a proxy, its side of the
    /// handshake not complete; a pod's connects to its own addresses in handshake): the size of
    /// TRACKED and LOCAL_CONNECTS; the inbound LRU (steered, not yet established; allocated up
    /// front) gets half of it, at least 256 per CPU, 1024 to 65536. It must hold every
    /// namespace's --quota-handshakes at once.
    /// [default: 16384, or (N + 1) x 16 + 1024 when that is larger]
    #[arg(long, value_name = "M", env = "REDIRECT_MAX_CONNECTIONS",
        value_parser = clap::value_parser!(u32).range(1025..=4_194_304))]
    pub max_connections: Option<u32>,
    /// Per namespace: ports in each port list (-b, -d, -o, -q).
    #[arg(long, value_name = "N", env = "REDIRECT_QUOTA_PORTS",
        default_value_t = Quotas::default().ports, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub quota_ports: u32,
    /// Per namespace: CIDRs in each of -i and -x, per address family.
    #[arg(long, value_name = "N", env = "REDIRECT_QUOTA_CIDRS",
        default_value_t = Quotas::default().cidrs, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub quota_cidrs: u32,
    /// Per namespace: its addresses.
    #[arg(long, value_name = "N", env = "REDIRECT_QUOTA_ADDRESSES",
        default_value_t = Quotas::default().addresses, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub quota_addresses: u32,
    /// Per namespace: interfaces named by -c and -k.
    #[arg(long, value_name = "N", env = "REDIRECT_QUOTA_INTERFACES",
        default_value_t = Quotas::default().interfaces, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub quota_interfaces: u32,
    /// Per namespace: routes followed for -c.
    #[arg(long, value_name = "N", env = "REDIRECT_QUOTA_ROUTES",
        default_value_t = Quotas::default().routes, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub quota_routes: u32,
    /// Per namespace: redirected connections in hand-off at once (connected to the proxy's
    /// port, its side of the handshake not yet complete); above it SO_ORIGINAL_DST is unanswered
    /// for that namespace only (counter handoff_quota). The same bound applies to the pod's
    /// connects to its own addresses in handshake (above it, steered inbound: local_quota).
    /// Default: an equal share of --max-connections, (M - 1024) / (N + 1) (138 at the defaults).
    #[arg(long, value_name = "N", env = "REDIRECT_QUOTA_HANDSHAKES",
        value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub quota_handshakes: Option<u32>,
}

impl Sizing {
    /// The quotas these flags say. Whether the connection maps hold every namespace's hand-off
    /// quota is checked only when a datapath is created with them (a pinned one keeps its own).
    pub(crate) fn quotas(&self) -> Quotas {
        let max_connections = self
            .max_connections
            .unwrap_or_else(|| Quotas::default_max_connections(self.max_pods));
        Quotas {
            max_pods: self.max_pods,
            ports: self.quota_ports,
            cidrs: self.quota_cidrs,
            addresses: self.quota_addresses,
            interfaces: self.quota_interfaces,
            routes: self.quota_routes,
            handshakes: self
                .quota_handshakes
                .unwrap_or_else(|| Quotas::handshakes_for(self.max_pods, max_connections)),
            ..Quotas::default()
        }
        .with_connections(max_connections)
    }

    /// The sizing the environment (`REDIRECT_MAX_PODS`, `REDIRECT_QUOTA_*`) asks for, else the
    /// defaults; a bad value is an error naming the variable.
    pub(crate) fn from_env() -> anyhow::Result<Quotas> {
        #[derive(Parser)]
        struct EnvOnly {
            #[command(flatten)]
            sizing: Sizing,
        }
        let parsed = EnvOnly::try_parse_from(["redirect"]).map_err(|e| {
            anyhow::anyhow!("node sizing from the environment: {}", e.to_string().trim())
        })?;
        Ok(parsed.sizing.quotas())
    }
}
