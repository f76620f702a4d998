//! Admin HTTP endpoints: readiness (15021), own stats (15090), merged stats (15020, at most
//! `MERGED_AT_ONCE` fetches of the application's page at once), and the local admin port
//! (15000) with `POST /drain_listeners`; served by redirect-http within its limits.
use std::{sync::Arc, time::Duration};

use redirect_http::{Limits, Method, Request, Response, StatusCode};
use tokio::{net::TcpListener, sync::Semaphore};

use crate::state::Shared;

/// What an admin listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `GET /healthz/ready` (15021).
    Readiness,
    /// `GET /stats/prometheus`: the proxy's own metrics (15090).
    Stats,
    /// `GET /stats/prometheus`: own + BPF decision counters + the application's metrics (15020).
    MergedStats,
    /// Local admin (15000): `POST /drain_listeners`, `GET /stats/prometheus`, `GET /ready`.
    Admin,
}

/// How long the application's metrics may take (within the connection's deadline).
const APP_METRICS_DEADLINE: Duration = Duration::from_secs(2);
/// The largest application metrics page merged into 15020.
const APP_METRICS_MAX: usize = 8 * 1024 * 1024;
/// Merged pages fetched at once (each may hold `APP_METRICS_MAX` and wait
/// `APP_METRICS_DEADLINE` on the application); more are answered 503 at once.
const MERGED_AT_ONCE: usize = 4;

/// Serves `role` on `listener` for ever.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, role: Role) {
    let merging = Arc::new(Semaphore::new(MERGED_AT_ONCE));
    redirect_http::serve(listener, Limits::default(), move |req| {
        let shared = Arc::clone(&shared);
        let merging = Arc::clone(&merging);
        async move { route(&shared, role, &req, &merging).await }
    })
    .await;
}

/// The methods each (role, path) takes.
fn methods(role: Role, path: &str) -> Option<&'static str> {
    match (role, path) {
        (Role::Readiness, "/healthz/ready")
        | (Role::Admin, "/ready")
        | (Role::Stats | Role::MergedStats | Role::Admin, "/stats/prometheus") => Some("GET, HEAD"),
        (Role::Admin, "/drain_listeners") => Some("POST"),
        _ => None,
    }
}

async fn route(shared: &Shared, role: Role, req: &Request, merging: &Semaphore) -> Response {
    let Some(allow) = methods(role, &req.path) else {
        return Response::not_found(req);
    };
    let wanted = if allow == "POST" {
        Method::POST
    } else {
        Method::GET
    };
    if req.method != wanted {
        return Response::method_not_allowed(req, allow);
    }
    match (role, req.path.as_str()) {
        (Role::Admin, "/drain_listeners") => {
            shared.drain();
            Response::text(StatusCode::OK, "OK\n")
        }
        (Role::MergedStats, _) => match merging.try_acquire() {
            Ok(_merging) => Response::prometheus(merged(shared).await),
            Err(_) => Response::text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{MERGED_AT_ONCE} merged-stats requests are being served already: retry\n"),
            ),
        },
        (_, "/stats/prometheus") => Response::prometheus(shared.stats.render()),
        _ => match shared.readiness() {
            Ok(()) => Response::text(StatusCode::OK, "ready\n"),
            Err(why) => Response::text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {why}\n"),
            ),
        },
    }
}

async fn merged(shared: &Shared) -> String {
    let mut out = shared.stats.render();
    if let Some(path) = &shared.bpf_metrics_file {
        match tokio::fs::read_to_string(path).await {
            Ok(text) => out.push_str(&text),
            Err(e) => out.push_str(&format!(
                "# BPF metrics unavailable ({}): {e}\n",
                path.display()
            )),
        }
    }
    if let Some(url) = &shared.app_metrics {
        match redirect_http::get(url, APP_METRICS_DEADLINE, APP_METRICS_MAX).await {
            Ok(text) => {
                out.push_str(&text);
                if !text.ends_with('\n') {
                    out.push('\n');
                }
            }
            Err(e) => out.push_str(&format!("# application metrics unavailable: {e}\n")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{methods, Role};

    #[test]
    fn each_port_takes_its_paths_and_methods() {
        assert_eq!(
            methods(Role::Readiness, "/healthz/ready"),
            Some("GET, HEAD")
        );
        assert_eq!(methods(Role::Readiness, "/stats/prometheus"), None);
        assert_eq!(methods(Role::Stats, "/stats/prometheus"), Some("GET, HEAD"));
        assert_eq!(methods(Role::Admin, "/drain_listeners"), Some("POST"));
        assert_eq!(methods(Role::Stats, "/drain_listeners"), None);
        assert_eq!(methods(Role::MergedStats, "/ready"), None);
    }
}
