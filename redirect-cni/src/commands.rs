//! ADD, DEL, CHECK, STATUS, GC and VERSION: each one request to the daemon at most, after the
//! skips that need no call (excluded namespaces, the daemon's own pods, non-Kubernetes
//! containers).
use std::{path::PathBuf, time::Duration};

use redirect_daemon::{
    client,
    proto::{PodRef, Request, Response},
};
use serde_json::{json, Value};

use crate::{
    conf::{cni_args, NetConf, SUPPORTED_VERSIONS},
    error::{CniError, CAPTURE_FAILED},
};

/// Carries out `command`; `Some(text)` is printed on stdout.
pub fn run(command: &str, stdin: &[u8], version: &str) -> Result<Option<String>, CniError> {
    if command == "VERSION" {
        return Ok(Some(
            json!({"cniVersion": version, "supportedVersions": SUPPORTED_VERSIONS}).to_string(),
        ));
    }
    let conf = NetConf::parse(stdin)?;
    crate::log::init(&conf.daemon_socket, &conf.log_level);
    match command {
        "ADD" => add(&conf).map(Some),
        "DEL" => del(&conf).map(|()| None),
        "CHECK" => check(&conf).map(|()| None),
        "STATUS" => status(&conf).map(|()| None),
        "GC" => gc(&conf).map(|()| None),
        other => Err(CniError::new(
            4,
            format!("unknown CNI_COMMAND {other:?}"),
            "ADD, DEL, CHECK, STATUS, GC, VERSION",
        )),
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn required(name: &str) -> Result<String, CniError> {
    env(name)
        .ok_or_else(|| CniError::new(4, format!("{name} is not set"), "the runtime must set it"))
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
    if conf.exclude_namespaces.contains(&pod.namespace) {
        return Some(format!(
            "namespace {:?} is in exclude_namespaces",
            pod.namespace
        ));
    }
    let own = &conf.daemon_pods;
    if pod.namespace == own.namespace && pod.name.starts_with(&own.name_prefix) {
        return Some(format!(
            "the daemon's own pod (daemon_pods: namespace {:?}, name_prefix {:?})",
            own.namespace, own.name_prefix
        ));
    }
    None
}

/// prevResult as the result, in the config's version.
fn pass_through(conf: &NetConf) -> Result<String, CniError> {
    let mut prev = conf.prev_result.clone().ok_or_else(|| {
        CniError::new(
            7,
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

/// One request; an unreachable daemon is `code`.
fn ask(conf: &NetConf, req: &Request, what: &str, code: u32) -> Result<Response, CniError> {
    client::call_timeout(
        &conf.daemon_socket,
        req,
        Duration::from_secs(conf.timeout_seconds.max(1)),
    )
    .map_err(|e| {
        CniError::new(
            code,
            format!("{what}: the redirect daemon is unreachable (fail closed)"),
            e,
        )
    })
}

fn refused(what: String, r: Response) -> CniError {
    CniError::new(
        CAPTURE_FAILED,
        what,
        r.error.unwrap_or_else(|| "the daemon refused".into()),
    )
}

fn add(conf: &NetConf) -> Result<String, CniError> {
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
    let netns = PathBuf::from(required("CNI_NETNS")?);
    let ips = conf.prev_ips()?;
    let what = format!("{pod} not captured");
    let req = Request::PodAdd {
        pod: pod.clone(),
        netns,
        ips,
    };
    let r = ask(conf, &req, &what, 11).inspect_err(|e| count_unreachable(conf, &pod, e))?;
    if !r.ok {
        return Err(refused(what, r));
    }
    tracing::info!(%pod, message = %r.message, "ADD done");
    pass_through(conf)
}

/// Counts an ADD that found the daemon unreachable (beside its socket, under a lock: the
/// daemon exports the count once it is back) and logs it with the count.
fn count_unreachable(conf: &NetConf, pod: &PodRef, e: &CniError) {
    let dir = conf.daemon_socket.parent().unwrap_or(&conf.daemon_socket);
    match redirect_daemon::cni_failures::increment(dir) {
        Ok(total) => {
            tracing::error!(%pod, unreachable_total = total, error = %e, "ADD: the daemon is unreachable (failed closed, counted)")
        }
        Err(count) => {
            tracing::error!(%pod, error = %e, %count, "ADD: the daemon is unreachable (failed closed; the count could not be kept)")
        }
    }
}

fn del(conf: &NetConf) -> Result<(), CniError> {
    let Some(pod) = pod() else { return Ok(()) };
    if skipped(conf, &pod).is_some() {
        return Ok(());
    }
    let netns = env("CNI_NETNS").map(PathBuf::from);
    let req = Request::PodDel {
        pod: pod.clone(),
        netns,
    };
    let dir = conf.daemon_socket.parent().unwrap_or(&conf.daemon_socket);
    if !conf.daemon_socket.exists() || !redirect_daemon::server::running(dir) {
        // No daemon runs, so none holds this pod: a daemon that starts drops the namespaces
        // that are gone. DEL must not wait for it (the kubelet would retry it forever).
        tracing::warn!(%pod, socket = %conf.daemon_socket.display(), "DEL while no daemon runs: nothing to remove");
        return Ok(());
    }
    let what = format!("{pod} not unenrolled");
    let r = ask(conf, &req, &what, 11)?;
    if !r.ok {
        return Err(refused(what, r));
    }
    tracing::info!(%pod, message = %r.message, "DEL done");
    Ok(())
}

fn check(conf: &NetConf) -> Result<(), CniError> {
    let Some(pod) = pod() else { return Ok(()) };
    if skipped(conf, &pod).is_some() {
        return Ok(());
    }
    let netns = PathBuf::from(required("CNI_NETNS")?);
    let ips = conf.prev_ips()?;
    let what = format!("{pod} CHECK failed");
    let r = ask(conf, &Request::PodCheck { pod, netns, ips }, &what, 11)?;
    if !r.ok {
        return Err(refused(what, r));
    }
    Ok(())
}

fn status(conf: &NetConf) -> Result<(), CniError> {
    let r = ask(conf, &Request::Status, "STATUS", 50)?;
    if !r.ok {
        return Err(CniError::new(
            50,
            "STATUS: the redirect daemon is not ready",
            r.error.unwrap_or_default(),
        ));
    }
    Ok(())
}

fn gc(conf: &NetConf) -> Result<(), CniError> {
    let valid = conf
        .valid_attachments
        .iter()
        .map(|a| a.container_id.clone())
        .collect();
    let r = ask(conf, &Request::PodGc { valid }, "GC", 11)?;
    if !r.ok {
        return Err(refused("GC failed".into(), r));
    }
    tracing::info!(message = %r.message, "GC done");
    Ok(())
}
