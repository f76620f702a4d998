//! [`compare`]: where the policy istio-cni's path gives a pod differs from its istio-init's, field
//! by field (lists compared as sets).

use redirect_policy::Policy;
use serde::Serialize;
use serde_json::Value;

/// One field that differs.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Difference {
    /// The [`Policy`] field, e.g. `inbound_exclude_ports`.
    pub field: String,
    /// Ours (istio-cni's path), normalised.
    pub ours: Value,
    /// istio-init's, normalised.
    pub istio_init: Value,
}

/// The outcome of [`compare`].
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Fields that differ.
    pub differences: Vec<Difference>,
    /// Fields that differ only by what istio-cni itself always does differently from
    /// istio-init: it also excludes port 15020 (its default status port) from inbound
    /// capture, and from outbound capture when no `excludeOutboundPorts` annotation says
    /// otherwise. Istio's behaviour, not a disagreement.
    pub istio_cni_only: Vec<Difference>,
}

impl Comparison {
    /// No difference beyond istio-cni's own.
    pub fn agree(&self) -> bool {
        self.differences.is_empty()
    }
}

/// The port istio-cni adds where istio-init does not.
const ISTIO_CNI_PORT: u64 = 15020;
const ISTIO_CNI_FIELDS: [&str; 2] = ["exclude_ports", "inbound_exclude_ports"];

/// Compare field by field; list order and repeats do not matter.
pub fn compare(ours: &Policy, istio_init: &Policy) -> Comparison {
    let (a, b) = (fields(ours), fields(istio_init));
    let mut out = Comparison {
        differences: Vec::new(),
        istio_cni_only: Vec::new(),
    };
    for (field, x) in &a {
        let y = b.get(field).cloned().unwrap_or(Value::Null);
        if *x == y {
            continue;
        }
        let d = Difference {
            field: field.clone(),
            ours: x.clone(),
            istio_init: y.clone(),
        };
        if ISTIO_CNI_FIELDS.contains(&field.as_str()) && without_cni_port(x, &y) == y {
            out.istio_cni_only.push(d);
        } else {
            out.differences.push(d);
        }
    }
    out
}

/// `ours` without 15020 when `theirs` lacks it.
fn without_cni_port(ours: &Value, theirs: &Value) -> Value {
    let port = Value::from(ISTIO_CNI_PORT);
    match (ours, theirs) {
        (Value::Array(a), Value::Array(b)) if !b.contains(&port) => {
            Value::Array(a.iter().filter(|v| **v != port).cloned().collect())
        }
        _ => ours.clone(),
    }
}

fn fields(p: &Policy) -> serde_json::Map<String, Value> {
    match normalise(serde_json::to_value(p).unwrap_or(Value::Null)) {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

/// Every list sorted and deduplicated, at any depth.
fn normalise(v: Value) -> Value {
    match v {
        Value::Array(items) => {
            let mut items: Vec<Value> = items.into_iter().map(normalise).collect();
            items.sort_by_key(|i| i.to_string());
            items.dedup();
            Value::Array(items)
        }
        Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (k, normalise(v))).collect()),
        other => other,
    }
}
