//! ADD, DEL, CHECK, STATUS, GC and VERSION: each one request to the daemon at most, after the
//! skips that need no call (excluded namespaces, the daemon's own pods, non-Kubernetes
//! containers).
use std::{path::PathBuf, time::Duration};

use redirect_daemon_api::{Client, ClientError, DaemonDir, NetnsFd, PodRef, RefusalKind};
use serde_json::{json, Value};

use crate::{
    conf::{cni_args, NetConf, SUPPORTED_VERSIONS},
    error::{CniError, Code},
    phases::{cpu_us, Phases},
};

/// Carries out `command`; `Some(text)` is printed on stdout. `phases` times an ADD.
pub(crate) fn run(
    command: &str,
    stdin: &[u8],
    version: &str,
    phases: &mut Phases,
) -> Result<Option<String>, CniError> {
    if command == "VERSION" {
        return Ok(Some(
            json!({"cniVersion": version, "supportedVersions": SUPPORTED_VERSIONS}).to_string(),
        ));
    }
    let conf = NetConf::parse_for(stdin, command)?;
    phases.mark("conf");
    crate::log::init(&conf.daemon_socket, &conf.log_level);
    phases.mark("log");
    match command {
        "ADD" => add(&conf, phases).map(Some),
        "DEL" => del(&conf).map(|()| None),
        "CHECK" => check(&conf).map(|()| None),
        "STATUS" => status(&conf).map(|()| None),
        "GC" => gc(&conf).map(|()| None),
        other => Err(CniError::new(
            Code::InvalidEnvironment,
            format!("unknown CNI_COMMAND {other:?}"),
            "ADD, DEL, CHECK, STATUS, GC, VERSION",
        )),
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn required(name: &str) -> Result<String, CniError> {
    env(name).ok_or_else(|| {
        CniError::new(
            Code::InvalidEnvironment,
            format!("{name} is not set"),
            "the runtime must set it",
        )
    })
}

/// `CNI_NETNS`, opened here, in the runtime's own mount namespace: its descriptor goes to the
/// daemon, which never looks the runtime's path up in its own.
fn open_netns() -> Result<NetnsFd, CniError> {
    let path = PathBuf::from(required("CNI_NETNS")?);
    NetnsFd::open(&path).map_err(|e| {
        CniError::new(
            Code::InvalidEnvironment,
            format!("opening CNI_NETNS {}", path.display()),
            e,
        )
    })
}

/// The pod `CNI_ARGS` names, or `None` for a container that is not a Kubernetes pod.
fn pod() -> Option<PodRef> {
    let args = cni_args(&env("CNI_ARGS").unwrap_or_default());
    let namespace = args.get("K8S_POD_NAMESPACE")?.clone();
    let name = args.get("K8S_POD_NAME")?.clone();
    let container_id = env("CNI_CONTAINERID")
        .or_else(|| args.get("K8S_POD_INFRA_CONTAINER_ID").cloned())
        .unwrap_or_default();
    Some(PodRef {
        namespace,
        name,
        uid: args.get("K8S_POD_UID").cloned().unwrap_or_default(),
        container_id,
    })
}

/// Why a pod needs no call at all, if it does not.
fn skipped(conf: &NetConf, pod: &PodRef) -> Option<String> {
    conf.exclusions.skips(&pod.namespace, &pod.name)
}

/// prevResult as the result, in the config's version.
fn pass_through(conf: &NetConf) -> Result<String, CniError> {
    let mut prev = conf.prev_result.clone().ok_or_else(|| {
        CniError::new(
            Code::InvalidConfig,
            "no prevResult: redirect-cni is a chained plugin",
            "put it after the plugin that gives the pod its addresses",
        )
    })?;
    if let Some(obj) = prev.as_object_mut() {
        obj.entry("cniVersion")
            .or_insert_with(|| Value::from(conf.cni_version.clone()));
    }
    Ok(prev.to_string())
}

/// The daemon's client, waiting at most the configuration's timeout.
fn client(conf: &NetConf) -> Client {
    Client::new(&conf.daemon_socket).timeout(Duration::from_secs(conf.timeout_seconds.max(1)))
}

/// The plugin's error for a call that failed: the daemon's refusal by its kind, in this one
/// `match` ([`Code::TryAgainLater`] when a later try may succeed, [`Code::CaptureFailed`]
/// otherwise); no answer at all is `unreachable` (fail closed: the runtime tries again).
fn failed(what: String, e: ClientError, unreachable: Code) -> CniError {
    match e {
        ClientError::Refused { refusal, .. } => {
            let code = match refusal.kind {
                RefusalKind::Retry | RefusalKind::Busy => Code::TryAgainLater,
                RefusalKind::NotCapturable
                | RefusalKind::Forbidden
                | RefusalKind::BadRequest
                | RefusalKind::Failed => Code::CaptureFailed,
            };
            CniError::new(code, what, refusal)
        }
        // Mid-rollout: the plugin and the daemon are of different releases. Nothing was done;
        // fail closed and let the runtime try again once both are the same.
        e @ ClientError::Version { .. } => CniError::new(
            unreachable,
            format!("{what}: the redirect daemon speaks another protocol version (fail closed)"),
            e,
        ),
        e => CniError::new(
            unreachable,
            format!("{what}: the redirect daemon is unreachable (fail closed)"),
            e,
        ),
    }
}

/// The daemon directory the configured socket is in.
fn daemon_dir(conf: &NetConf) -> DaemonDir {
    DaemonDir::new(conf.daemon_socket.parent().unwrap_or(&conf.daemon_socket))
}

fn add(conf: &NetConf, phases: &mut Phases) -> Result<String, CniError> {
    let Some(pod) = pod() else {
        tracing::info!(
            "no K8S_POD_NAMESPACE/K8S_POD_NAME in CNI_ARGS: not a Kubernetes pod, passed through"
        );
        return pass_through(conf);
    };
    if let Some(why) = skipped(conf, &pod) {
        tracing::info!(%pod, why, "skipped");
        return pass_through(conf);
    }
    let netns = open_netns()?;
    let ips = conf.prev_ips()?;
    phases.mark("netns");
    let what = format!("{pod} not captured");
    let r = match client(conf).pod_add(pod.clone(), &netns, ips) {
        Ok(r) => r,
        Err(e) => {
            // Counted only when no daemon answered (a refusal or another version is an answer).
            let unanswered = !e.answered();
            let err = failed(what, e, Code::TryAgainLater);
            if unanswered {
                count_unreachable(conf, &pod, &err);
            }
            return Err(err);
        }
    };
    phases.mark("call");
    // The phases last: a reader takes them up to the line's end.
    tracing::info!(
        %pod,
        answer = %r.message,
        main_us = phases.main_us() as u64,
        cpu_us = cpu_us().unwrap_or(0),
        phases = %phases.field(),
        "ADD done"
    );
    pass_through(conf)
}

/// Counts an ADD that found the daemon unreachable (beside its socket, under a lock: the
/// daemon exports the count once it is back) and logs it with the count.
fn count_unreachable(conf: &NetConf, pod: &PodRef, e: &CniError) {
    match redirect_daemon_api::count_cni_unreachable(daemon_dir(conf).path()) {
        Ok(total) => {
            tracing::error!(%pod, unreachable_total = total, error = %e,
                "ADD: the daemon is unreachable (failed closed, counted)")
        }
        Err(count) => {
            tracing::error!(%pod, error = %e, %count, "ADD: the daemon is unreachable (failed \
                closed; the count could not be kept)")
        }
    }
}

fn del(conf: &NetConf) -> Result<(), CniError> {
    let Some(pod) = pod() else { return Ok(()) };
    if skipped(conf, &pod).is_some() {
        return Ok(());
    }
    let netns = env("CNI_NETNS").map(PathBuf::from);
    if !conf.daemon_socket.exists() || !daemon_dir(conf).running() {
        // No daemon runs, so none holds this pod: a daemon that starts drops the namespaces
        // that are gone. DEL must not wait for it (the kubelet would retry it forever).
        tracing::warn!(%pod, socket = %conf.daemon_socket.display(), "DEL while no daemon runs: nothing to remove");
        return Ok(());
    }
    let what = format!("{pod} not unenrolled");
    let r = client(conf)
        .pod_del(pod.clone(), netns)
        .map_err(|e| failed(what, e, Code::TryAgainLater))?;
    tracing::info!(%pod, message = %r.message, "DEL done");
    Ok(())
}

fn check(conf: &NetConf) -> Result<(), CniError> {
    let Some(pod) = pod() else { return Ok(()) };
    if skipped(conf, &pod).is_some() {
        return Ok(());
    }
    let netns = open_netns()?;
    let ips = conf.prev_ips()?;
    let what = format!("{pod} CHECK failed");
    client(conf)
        .pod_check(pod, &netns, ips)
        .map_err(|e| failed(what, e, Code::TryAgainLater))?;
    Ok(())
}

fn status(conf: &NetConf) -> Result<(), CniError> {
    match client(conf).status() {
        Ok(_) => Ok(()),
        Err(ClientError::Refused { refusal, .. }) => Err(CniError::new(
            Code::NotAvailable,
            "STATUS: the redirect daemon is not ready",
            refusal,
        )),
        Err(e) => Err(failed("STATUS".into(), e, Code::NotAvailable)),
    }
}

fn gc(conf: &NetConf) -> Result<(), CniError> {
    // Without the list a GC would take every pod for stale: refused, nothing removed.
    let Some(listed) = conf
        .valid_attachments
        .as_ref()
        .or(conf.attachments.as_ref())
    else {
        return Err(CniError::new(
            Code::InvalidConfig,
            "GC without cni.dev/valid-attachments: refused",
            "the configuration lists no valid attachments (neither cni.dev/valid-attachments nor \
                cni.dev/attachments), so every pod's enrollment would be taken for stale: nothing \
                was garbage-collected; a runtime sends the list (CNI 1.1), and `cnitool gc` needs \
                it given",
        ));
    };
    let valid = listed.iter().map(|a| a.container_id.clone()).collect();
    let r = client(conf)
        .pod_gc(valid)
        .map_err(|e| failed("GC failed".into(), e, Code::TryAgainLater))?;
    tracing::info!(message = %r.message, "GC done");
    Ok(())
}
