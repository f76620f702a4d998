//! Pod and workload manifests (YAML or JSON, several documents): their pods, istio-init's
//! arguments, and [`migrate`] to what Istio's injector emits with istio-cni enabled.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use redirect_policy::{Cidrs, InboundPorts, Policy};
use serde::Deserialize;
use serde_norway::{Mapping, Value};

use crate::annotations::{
    EXCLUDE_INBOUND_PORTS, EXCLUDE_INTERFACES, EXCLUDE_OUTBOUND_IP_RANGES, EXCLUDE_OUTBOUND_PORTS,
    INCLUDE_INBOUND_PORTS, INCLUDE_OUTBOUND_IP_RANGES, INCLUDE_OUTBOUND_PORTS, INTERCEPTION_MODE,
    KUBEVIRT_INTERFACES, REROUTE_VIRTUAL_INTERFACES,
};
use crate::pod::{self, INIT, PROXY};
use crate::policy::PodSpecOnly;
use crate::validation::ISTIO_VALIDATION;
use crate::{Error, SIDECAR_STATUS};

/// One document of a manifest file.
#[derive(Debug, Clone)]
pub struct Document {
    /// 1-based position in the file (empty documents counted).
    pub number: usize,
    /// The document, keys in their written order.
    pub value: Value,
}

impl Document {
    /// `kind`, or `""`.
    pub fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or_default()
    }

    /// `metadata.name`, or `""`.
    pub fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or_default()
    }

    fn error(&self, reason: impl Into<String>) -> Error {
        Error::Manifest {
            document: self.number,
            reason: reason.into(),
        }
    }

    /// Where the pod is in a document of this kind: the document itself for a Pod, the pod
    /// template for a workload; `None` for other kinds.
    pub(crate) fn template_path(&self) -> Option<&'static [&'static str]> {
        Some(match self.kind() {
            "Pod" => &[],
            "Deployment"
            | "StatefulSet"
            | "DaemonSet"
            | "ReplicaSet"
            | "Job"
            | "ReplicationController" => &["spec", "template"],
            "CronJob" => &["spec", "jobTemplate", "spec", "template"],
            _ => return None,
        })
    }

    fn template_mut(&mut self) -> Option<&mut Value> {
        let path = self.template_path()?;
        path.iter().try_fold(&mut self.value, |v, k| v.get_mut(*k))
    }

    /// The pod (a workload's pod template as a Pod without status); `None` for a kind that
    /// has no pod.
    pub fn pod(&self) -> Result<Option<Pod>, Error> {
        let Some(path) = self.template_path() else {
            return Ok(None);
        };
        let Some(v) = path.iter().try_fold(&self.value, |v, k| v.get(*k)) else {
            return Err(self.error(format!("{} has no {}", self.kind(), path.join("."))));
        };
        let what = if path.is_empty() {
            "the pod"
        } else {
            "the pod template"
        };
        if path.is_empty() {
            return serde_norway::from_value::<Pod>(v.clone())
                .map(Some)
                .map_err(|e| self.error(format!("{what} does not decode: {e}")));
        }
        let t = serde_norway::from_value::<PodTemplateSpec>(v.clone())
            .map_err(|e| self.error(format!("{what} does not decode: {e}")))?;
        Ok(Some(Pod {
            metadata: t.metadata.unwrap_or_default(),
            spec: t.spec,
            status: None,
        }))
    }
}

/// Every non-empty document of a YAML (or JSON) file.
pub fn documents(text: &str) -> Result<Vec<Document>, Error> {
    let mut out = Vec::new();
    for (i, de) in serde_norway::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(de).map_err(|e| Error::Manifest {
            document: i + 1,
            reason: format!("is not YAML or JSON: {e}"),
        })?;
        if !value.is_null() {
            out.push(Document {
                number: i + 1,
                value,
            });
        }
    }
    Ok(out)
}

/// The istio-init container's istio-iptables arguments (its command and args, without the
/// leading `istio-iptables`); `None` without an istio-init container.
pub fn istio_init_args(pod: &Pod) -> Option<Vec<String>> {
    let c = pod::istio_init(pod)?;
    let mut all: Vec<String> = c
        .command
        .iter()
        .chain(c.args.iter())
        .flatten()
        .cloned()
        .collect();
    if all
        .first()
        .is_some_and(|a| a.rsplit('/').next() == Some("istio-iptables"))
    {
        all.remove(0);
    }
    Some(all)
}

/// istio-init's arguments parsed as `redirect istio-iptables` parses them.
pub fn istio_init_policy(args: &[String]) -> Result<Policy, redirect_policy::PolicyError> {
    let env: HashMap<String, String> = HashMap::new();
    redirect_policy::parse_invocation(args, &env, &PodSpecOnly).map(|i| i.policy)
}

/// What [`migrate`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Migration {
    /// istio-init was there and is gone.
    pub removed_istio_init: bool,
    /// The annotations added (name, value), from istio-init's arguments.
    pub annotations: Vec<(String, String)>,
}

/// Rewrite a document's pod as Istio's injector emits it with istio-cni enabled: istio-init
/// replaced by `istio-validation` (its arguments plus `--run-validation --skip-rule-apply`, as
/// the proxy's uid, without the NET_ADMIN/NET_RAW capabilities istio-init needed), and the
/// capture settings it carried as the annotations istio-cni reads (an annotation the pod
/// already has is kept, as the injector keeps it). A document without istio-init is left as
/// it is.
pub fn migrate(doc: &mut Document) -> Result<Migration, Error> {
    let Some(pod) = doc.pod()? else {
        return Ok(Migration::default());
    };
    let Some(args) = istio_init_args(&pod) else {
        return Ok(Migration::default());
    };
    let init = istio_init_policy(&args)
        .map_err(|e| doc.error(format!("istio-init's arguments do not parse: {e}")))?;
    let has = |k: &str| pod::annotation(&pod, k).is_some();
    let mut add: Vec<(String, String)> = cni_annotations(&init)
        .into_iter()
        .filter(|(k, _)| !has(k))
        .filter(|(k, _)| *k != REROUTE_VIRTUAL_INTERFACES || !has(KUBEVIRT_INTERFACES))
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    let number = doc.number;
    let Some(t) = doc.template_mut() else {
        return Err(Error::Manifest {
            document: number,
            reason: "has no pod template".into(),
        });
    };
    let ids = proxy_ids(t);
    if let Some(spec) = t.get_mut("spec").and_then(Value::as_mapping_mut) {
        // In initContainers istio-init becomes istio-validation in its place; anywhere else
        // (a pod written by hand) it goes.
        if let Some(Value::Sequence(cs)) = spec.get_mut("initContainers") {
            for c in cs.iter_mut().filter(|c| c["name"].as_str() == Some(INIT)) {
                validation_from_init(c, ids);
            }
        }
        if let Some(Value::Sequence(cs)) = spec.get_mut("containers") {
            cs.retain(|c| c["name"].as_str() != Some(INIT));
        }
    }
    let Some(annotations) = object(t, "metadata").and_then(|m| object(m, "annotations")) else {
        return Err(Error::Manifest {
            document: number,
            reason: "the pod's metadata or its annotations is not a map".into(),
        });
    };
    if let Some(status) = annotations.get_mut(SIDECAR_STATUS) {
        if let Some(fixed) = status.as_str().and_then(status_without_init) {
            *status = Value::String(fixed);
        }
    }
    let Some(annotations) = annotations.as_mapping_mut() else {
        return Err(Error::Manifest {
            document: number,
            reason: "the pod's annotations is not a map".into(),
        });
    };
    for (k, v) in &add {
        annotations.insert(k.as_str().into(), Value::String(v.clone()));
    }
    add.sort();
    Ok(Migration {
        removed_istio_init: true,
        annotations: add,
    })
}

/// The proxy's uid and gid as the injector's template reads them (`.ProxyUID`, `.ProxyGID`):
/// istio-proxy's `runAsUser`/`runAsGroup`, 1337 when unset or 0.
fn proxy_ids(template: &Value) -> (u64, u64) {
    let proxy = template["spec"]["containers"]
        .as_sequence()
        .and_then(|cs| cs.iter().find(|c| c["name"].as_str() == Some(PROXY)));
    let id = |key: &str| {
        proxy
            .and_then(|p| p["securityContext"][key].as_u64())
            .filter(|&v| v != 0)
            .unwrap_or(crate::annotations::DEFAULT_PROXY_ID.unsigned_abs())
    };
    (id("runAsUser"), id("runAsGroup"))
}

/// istio-init rewritten as the injector writes `istio-validation` with istio-cni enabled: the
/// same image and arguments plus `--run-validation --skip-rule-apply`, run as the proxy's
/// uid and gid, no capability added, a read-only root (`validation.rs`).
fn validation_from_init(c: &mut Value, (uid, gid): (u64, u64)) {
    let Some(m) = c.as_mapping_mut() else {
        return;
    };
    m.insert("name".into(), ISTIO_VALIDATION.into());
    if let Some(Value::Sequence(args)) = m.get_mut("args") {
        for flag in ["--run-validation", "--skip-rule-apply"] {
            if !args.iter().any(|a| a.as_str() == Some(flag)) {
                args.push(flag.into());
            }
        }
    }
    let Some(sc) = object(c, "securityContext").and_then(Value::as_mapping_mut) else {
        return;
    };
    if let Some(caps) = sc.get_mut("capabilities").and_then(Value::as_mapping_mut) {
        caps.remove("add");
    }
    sc.insert("readOnlyRootFilesystem".into(), true.into());
    sc.insert("runAsGroup".into(), gid.into());
    sc.insert("runAsNonRoot".into(), true.into());
    sc.insert("runAsUser".into(), uid.into());
}

/// The map `v[key]`, made an empty map when absent or not one; `None` when `v` is no map.
fn object<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    let m = v.as_mapping_mut()?;
    if !m.get(key).is_some_and(Value::is_mapping) {
        m.insert(key.into(), Value::Mapping(Mapping::new()));
    }
    m.get_mut(key)
}

/// The injector's status annotation (JSON) with istio-validation in istio-init's place among
/// its init containers, its keys kept in order.
fn status_without_init(status: &str) -> Option<String> {
    let mut v: Value = serde_norway::from_str(status).ok()?;
    let list = v.get_mut("initContainers")?.as_sequence_mut()?;
    for c in list.iter_mut().filter(|c| c.as_str() == Some(INIT)) {
        *c = ISTIO_VALIDATION.into();
    }
    serde_json::to_string(&v).ok()
}

fn join<T: ToString>(v: &[T]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The annotations the injector writes for istio-cni, with the values istio-init was given:
/// mode, outbound ranges, inbound ports and inbound exclusions always; the rest when set.
fn cni_annotations(p: &Policy) -> Vec<(&'static str, String)> {
    let mode = match p.mode {
        redirect_policy::Mode::Redirect => "REDIRECT",
        redirect_policy::Mode::Tproxy => "TPROXY",
    };
    let include = match &p.include_cidrs {
        Cidrs::All => "*".to_owned(),
        Cidrs::List(l) => join(l),
    };
    let inbound = match &p.inbound_ports {
        InboundPorts::All => "*".to_owned(),
        InboundPorts::List(l) => join(l),
    };
    // The injector's -d is "15090,15021," + this annotation's value; istio-cni adds those two.
    let excluded: Vec<u16> = p
        .inbound_exclude_ports
        .iter()
        .copied()
        .filter(|port| *port != 15090 && *port != 15021)
        .collect();
    let mut out = vec![
        (INTERCEPTION_MODE, mode.to_owned()),
        (INCLUDE_OUTBOUND_IP_RANGES, include),
        (INCLUDE_INBOUND_PORTS, inbound),
        (EXCLUDE_INBOUND_PORTS, join(&excluded)),
    ];
    let optional = [
        (EXCLUDE_OUTBOUND_IP_RANGES, join(&p.exclude_cidrs)),
        (EXCLUDE_OUTBOUND_PORTS, join(&p.exclude_ports)),
        (INCLUDE_OUTBOUND_PORTS, join(&p.include_ports)),
        (EXCLUDE_INTERFACES, join(&p.exclude_interfaces)),
        (REROUTE_VIRTUAL_INTERFACES, join(&p.kube_virt_interfaces)),
    ];
    out.extend(optional.into_iter().filter(|(_, v)| !v.is_empty()));
    out
}

/// A document as YAML.
pub(crate) fn to_yaml(doc: &Document) -> Result<String, Error> {
    serde_norway::to_string(&doc.value)
        .map_err(|e| doc.error(format!("does not print as YAML: {e}")))
}
