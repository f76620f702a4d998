//! The daemon's Prometheus endpoint: node-wide decision counters and map fill levels, and the
//! per-namespace counters (which name every enrolled namespace) only when the operator asks,
//! read from the pinned maps and served by redirect-http within its limits (each peer address
//! its share of the connections). One rendering serves every scrape within `cache`, and
//! scrapes that come together wait for one rendering: the maps are walked key by key, inside
//! the daemon's CPU limit, at most once per `cache` however many clients scrape.
use redirect_common::NetnsCookie;
use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use redirect_common::Counter;
use redirect_datapath::{
    collect_node_status, ns_counters, render_metrics, Exposition, NodeDatapath, Result,
};
use redirect_http::{Limits, Method, Request, Response, StatusCode};

/// Renders the exposition text for the datapath pinned at `bpffs`. With `per_netns` (netns
/// cookie -> the namespace's path) every enrolled namespace also exports every counter, zeros
/// included; without it only the node-wide counters and the map fill are rendered.
pub(crate) fn render(
    bpffs: &Path,
    per_netns: Option<&BTreeMap<NetnsCookie, String>>,
) -> Result<String> {
    let status = collect_node_status(bpffs)?;
    let mut rows = Vec::new();
    if let Some(names) = per_netns {
        let mut dp = NodeDatapath::open(bpffs)?;
        let mut per_ns = ns_counters(dp.maps())?;
        for cookie in names.keys() {
            per_ns.entry(*cookie).or_default();
        }
        rows = per_ns
            .into_iter()
            .map(|(cookie, seen)| {
                let all = Counter::ALL
                    .iter()
                    .map(|c| {
                        let n = seen
                            .iter()
                            .find(|(name, _)| *name == c.name())
                            .map_or(0, |(_, n)| *n);
                        (c.name(), n)
                    })
                    .collect();
                (cookie, names.get(&cookie).map_or("", String::as_str), all)
            })
            .collect();
    }
    let scope = status.scope.to_string();
    Ok(render_metrics(&Exposition {
        counters: status.counters.clone(),
        per_netns: rows,
        maps: status.fill.clone(),
        capacity: status.capacity.clone(),
        build: Some((env!("CARGO_PKG_VERSION"), status.layout, &scope)),
    }))
}

/// How the endpoint is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Whether every enrolled namespace's series are served too.
    pub per_namespace: bool,
    /// How long one rendering serves the scrapes that follow it.
    pub cache: Duration,
}

/// What a scrape reads.
struct Source<N> {
    bpffs: PathBuf,
    /// The daemon directory: the CNI plugin's count of ADDs that found the daemon unreachable.
    dir: PathBuf,
    names: N,
    per_namespace: bool,
    cache: Duration,
    /// The last rendering and when it was made.
    last: Mutex<Option<(Instant, String)>>,
}

impl<N: Fn() -> BTreeMap<NetnsCookie, String>> Source<N> {
    /// The text within `cache` of the last rendering, else rendered now (one at a time:
    /// scrapes arriving meanwhile wait for it and take it).
    fn text(&self) -> Result<String> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, text)) = last.as_ref() {
            if at.elapsed() < self.cache {
                return Ok(text.clone());
            }
        }
        let names = self.per_namespace.then(|| (self.names)());
        let text = render(&self.bpffs, names.as_ref())? + &render_cni_failures(&self.dir);
        *last = Some((Instant::now(), text.clone()));
        Ok(text)
    }
}

/// Serves `GET /metrics` (and `HEAD`) at `endpoint` as a task of the daemon's runtime `rt`
/// ([`crate::runtime`]); returns the bound address. `dir` is the daemon directory (its CNI
/// failure counter); `names` (netns cookie -> path) is asked at each rendering only with
/// `per_namespace`.
pub fn spawn(
    rt: &tokio::runtime::Handle,
    endpoint: Endpoint,
    bpffs: PathBuf,
    dir: PathBuf,
    names: impl Fn() -> BTreeMap<NetnsCookie, String> + Send + Sync + 'static,
) -> std::result::Result<SocketAddr, redirect_http::Error> {
    let source = Arc::new(Source {
        bpffs,
        dir,
        names,
        per_namespace: endpoint.per_namespace,
        cache: endpoint.cache,
        last: Mutex::new(None),
    });
    redirect_http::spawn_on(
        rt,
        "metrics endpoint",
        endpoint.addr,
        Limits::default(),
        move |req: Request| {
            let source = Arc::clone(&source);
            async move {
                if req.path != "/metrics" {
                    return Response::not_found(&req);
                }
                if req.method != Method::GET {
                    return Response::method_not_allowed(&req, "GET, HEAD");
                }
                // Reading the maps blocks: off the thread that serves the connections.
                let rendered = tokio::task::spawn_blocking(move || source.text()).await;
                match rendered {
                    Ok(Ok(text)) => Response::prometheus(text),
                    Ok(Err(e)) => {
                        Response::text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"))
                    }
                    Err(e) => Response::text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("rendering the metrics: {e}\n"),
                    ),
                }
            }
        },
    )
}

/// The Prometheus text of the counts of failed ADDs: the CNI plugin's (the daemon was
/// unreachable) and the daemon's (it answered with an error).
fn render_cni_failures(dir: &std::path::Path) -> String {
    use redirect_daemon_api::{
        read_cni_refused as read_refused, read_cni_unreachable as read, CounterError,
        CNI_REFUSED_METRIC as REFUSED_METRIC, CNI_UNREACHABLE_METRIC as METRIC,
    };
    use redirect_sys::{MetricKind as Kind, PrometheusText as Text};
    let count = |n: Result<u64, _>| {
        n.unwrap_or_else(|e: CounterError| {
            tracing::warn!(error = %e, "reading a CNI ADD failure count");
            0
        })
    };
    let (unreachable, refused) = (count(read(dir)), count(read_refused(dir)));
    let mut t = Text::new();
    let help = "CNI ADDs that found the redirect daemon unreachable (each failed closed).";
    t.family(METRIC, Kind::Counter, help)
        .sample(METRIC, &[], unreachable);
    let help = "CNI ADDs the redirect daemon answered with an error (each failed closed).";
    t.family(REFUSED_METRIC, Kind::Counter, help)
        .sample(REFUSED_METRIC, &[], refused);
    t.finish()
}
