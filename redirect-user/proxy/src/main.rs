//! The `redirect-proxy` binary: traffic listeners 15001/15006, admin ports, access log.
// The binary and the library share one dependency list: the library's own are unused here.
#![allow(unused_crate_dependencies)]
use std::{
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    process::ExitCode,
    sync::Arc,
    time::Duration,
};

use anyhow::{bail, Context as _};
use clap::{Parser, ValueEnum};
use redirect_proxy::{
    route_inbound, route_outbound, route_outbound_static, serve_admin, serve_listener,
    AccessLogFormat as Format, Direction, OutboundTrafficPolicy, Registry, Role, Shared,
};
use tokio::net::TcpListener;

/// Access log format.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    /// Envoy-like text: `[start] direction orig_dst cluster flags up down duration peer upstream`.
    Text,
    /// One JSON object per line (`"kind":"access"`).
    Json,
    /// No access log (Istio's default); the ready line is still printed.
    Off,
}

/// A small sidecar proxy with Istio's virtualOutbound/virtualInbound behaviour.
///
/// Outbound (15001): the original destination (getsockopt SO_ORIGINAL_DST, answered by
/// `redirect` or by iptables' conntrack) picks a cluster: a registry service
/// `outbound|<port>||<name>`, else `PassthroughCluster` (ALLOW_ANY) or `BlackHoleCluster`
/// (REGISTRY_ONLY: HTTP/1.x gets 503 "no healthy upstream", other TCP is closed).
/// Inbound (15006): `inbound|<port>||`, forwarded to the application at the original
/// destination from 127.0.0.6, which capture lets through.
/// Admin: 15021 GET /healthz/ready; 15090 GET /stats/prometheus (own metrics); 15020 GET
/// /stats/prometheus (own + BPF counters + the app's metrics); 127.0.0.1:15000 POST
/// /drain_listeners.
///
/// Run it as the proxy uid so its own connections are not captured:
///
///   setpriv --reuid 1337 --regid 1337 --clear-groups redirect-proxy
#[derive(Debug, Parser)]
#[command(name = "redirect-proxy", version, verbatim_doc_comment)]
struct Args {
    /// Outbound (virtualOutbound) listener.
    #[arg(long, default_value = "0.0.0.0:15001", value_name = "ADDR")]
    outbound: SocketAddr,
    /// Inbound (virtualInbound) listener.
    #[arg(long, default_value = "0.0.0.0:15006", value_name = "ADDR")]
    inbound: SocketAddr,
    /// Do not open the inbound listener.
    #[arg(long)]
    no_inbound: bool,
    /// Readiness listener (GET /healthz/ready).
    #[arg(long, default_value = "0.0.0.0:15021", value_name = "ADDR")]
    readiness: SocketAddr,
    /// The proxy's own Prometheus metrics (GET /stats/prometheus).
    #[arg(long, default_value = "0.0.0.0:15090", value_name = "ADDR")]
    stats: SocketAddr,
    /// Merged Prometheus metrics: own, BPF and the application's (GET /stats/prometheus).
    #[arg(long, default_value = "0.0.0.0:15020", value_name = "ADDR")]
    merged_stats: SocketAddr,
    /// Local admin listener (POST /drain_listeners, GET /ready, GET /stats/prometheus).
    #[arg(long, default_value = "127.0.0.1:15000", value_name = "ADDR")]
    admin: SocketAddr,
    /// Service registry (JSON): {"outbound_traffic_policy": "ALLOW_ANY"|"REGISTRY_ONLY",
    /// "services": [{"name", "addresses": [IP or CIDR], "ports": [...], "endpoints": ["ip:port"]}]}.
    #[arg(long, value_name = "FILE")]
    registry: Option<PathBuf>,
    /// Overrides the registry file's policy for unknown destinations.
    #[arg(long, value_name = "POLICY", value_parser = parse_policy)]
    outbound_traffic_policy: Option<OutboundTrafficPolicy>,
    /// Source address of inbound connections to the application.
    #[arg(long, default_value = "127.0.0.6", value_name = "IP")]
    inbound_source: IpAddr,
    /// Application metrics merged into 15020, e.g. http://127.0.0.1:9091/metrics.
    #[arg(long, value_name = "URL")]
    app_metrics: Option<String>,
    /// Prometheus text file written by `redirect attach --metrics-file`, merged into 15020.
    #[arg(long, value_name = "FILE")]
    bpf_metrics_file: Option<PathBuf>,
    /// Readiness waits until a captured connection with an original destination was seen.
    #[arg(long)]
    validate: bool,
    /// Upstream connect timeout in milliseconds.
    #[arg(long, default_value_t = 10_000, value_name = "MS")]
    connect_timeout_ms: u64,
    /// Access log format (stdout); diagnostics go to stderr.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Static listener LISTEN=UPSTREAM: everything accepted on LISTEN goes to UPSTREAM (cluster
    /// `outbound|<port>||static`), for clients that dial the proxy explicitly. Repeatable.
    #[arg(long = "static", value_name = "LISTEN=UPSTREAM", value_parser = parse_static)]
    statics: Vec<(SocketAddr, SocketAddr)>,
    /// Allow running as root. As root, the proxy's own connections are captured again unless
    /// root is the configured proxy uid, which is almost always a mistake.
    #[arg(long)]
    allow_root: bool,
    /// TPROXY mode (Istio's interceptionMode TPROXY): the inbound listener is transparent and
    /// each inbound connection reaches the application from the client's own address
    /// (IP_TRANSPARENT, this socket mark; Envoy's original_src; Istio marks 1337), so the
    /// application sees who called. Needs CAP_NET_ADMIN: run it as Istio runs istio-proxy in a
    /// TPROXY pod, uid 0 and gid 1337 (the capture bypasses it by gid):
    ///   setpriv --regid 1337 --clear-groups redirect-proxy --tproxy-mark 1337
    #[arg(long, value_name = "MARK", verbatim_doc_comment)]
    tproxy_mark: Option<u32>,
    /// Connect to this address (the control plane, e.g. istiod:15012) before opening any
    /// listener, once a second until it answers, as Envoy waits for its first xDS answer:
    /// the proxy never forwards before its own connections leave the pod uncaptured.
    #[arg(long, value_name = "ADDR")]
    control_plane: Option<SocketAddr>,
    /// How long --control-plane is tried before the proxy gives up (exit 1).
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    control_plane_timeout: u64,
}

fn parse_static(s: &str) -> Result<(SocketAddr, SocketAddr), String> {
    let (l, u) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}' is not LISTEN=UPSTREAM"))?;
    let parse = |v: &str| {
        v.parse::<SocketAddr>()
            .map_err(|_| format!("'{v}' is not an address like 127.0.0.1:15010"))
    };
    Ok((parse(l)?, parse(u)?))
}

fn parse_policy(s: &str) -> Result<OutboundTrafficPolicy, String> {
    s.parse()
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn bind(flag: &str, addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.with_context(|| {
        format!("binding {flag} on {addr}: another process may already listen there; pick another address with {flag}")
    })
}

fn run(args: Args) -> anyhow::Result<()> {
    // TPROXY mode runs as root by design (Istio: uid 0, gid 1337), bypassed by its gid.
    if rustix::process::geteuid().is_root() && !args.allow_root && args.tproxy_mark.is_none() {
        bail!(
            "refusing to run as root: run as the proxy uid (e.g. `setpriv --reuid 1337 --regid \
            1337 --clear-groups redirect-proxy`) or pass --allow-root"
        );
    }
    let mut registry = match &args.registry {
        Some(path) => Registry::load(path)?,
        None => Registry::default(),
    };
    if let Some(policy) = args.outbound_traffic_policy {
        registry.set_policy(policy);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(async move {
        if let Some(addr) = args.control_plane {
            let timeout = Duration::from_secs(args.control_plane_timeout);
            redirect_proxy::wait_reachable(addr, timeout)
                .await
                .context("--control-plane")?;
        }
        let outbound_l = bind("--outbound", args.outbound).await?;
        let inbound_l = if args.no_inbound {
            None
        } else {
            Some(match args.tproxy_mark {
                None => bind("--inbound", args.inbound).await?,
                Some(_) => redirect_proxy::bind_transparent(args.inbound).with_context(|| {
                    format!(
                        "binding --inbound on {} as a transparent listener (--tproxy-mark)",
                        args.inbound
                    )
                })?,
            })
        };
        let admins = [
            (bind("--readiness", args.readiness).await?, Role::Readiness),
            (bind("--stats", args.stats).await?, Role::Stats),
            (
                bind("--merged-stats", args.merged_stats).await?,
                Role::MergedStats,
            ),
            (bind("--admin", args.admin).await?, Role::Admin),
        ];
        let mut statics = Vec::new();
        for (listen, upstream) in &args.statics {
            statics.push((bind("--static", *listen).await?, *upstream));
        }
        let mut shared = Shared::new(
            registry,
            match args.log_format {
                LogFormat::Text => Format::Text,
                LogFormat::Json => Format::Json,
                LogFormat::Off => Format::Off,
            },
            Duration::from_millis(args.connect_timeout_ms),
            args.inbound_source,
            args.validate,
            1 + usize::from(inbound_l.is_some()),
            args.app_metrics.clone(),
            args.bpf_metrics_file.clone(),
        );
        shared.statics = args.statics.clone();
        shared.tproxy_mark = args.tproxy_mark;
        let shared = Arc::new(shared);
        for (l, _) in statics {
            tokio::spawn(serve_listener(
                l,
                Arc::clone(&shared),
                Direction::Outbound,
                route_outbound_static,
            ));
        }
        for (l, role) in admins {
            tokio::spawn(serve_admin(l, Arc::clone(&shared), role));
        }
        tokio::spawn(serve_listener(
            outbound_l,
            Arc::clone(&shared),
            Direction::Outbound,
            route_outbound,
        ));
        if let Some(l) = inbound_l {
            tokio::spawn(serve_listener(
                l,
                Arc::clone(&shared),
                Direction::Inbound,
                route_inbound,
            ));
        }
        tracing::info!(
            outbound = %args.outbound,
            inbound = %if args.no_inbound { "off".to_owned() } else { args.inbound.to_string() },
            policy = ?shared.registry.policy(),
            uid = rustix::process::getuid().as_raw(),
            "listeners ready"
        );
        println!(
            "{}",
            match shared.log_format {
                Format::Json =>
                    serde_json::json!({"kind": "ready", "outbound": args.outbound.to_string()})
                        .to_string(),
                Format::Text | Format::Off =>
                    format!("redirect-proxy ready: outbound {}", args.outbound),
            }
        );
        shutdown().await;
        tracing::info!("shutting down");
        Ok(())
    })
}

async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
}
