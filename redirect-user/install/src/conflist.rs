//! Our entry in a conflist: appended after the plugins already there (the primary plugin
//! first, as a chained plugin needs), replaced in place when present, removed; a `.conf`
//! turned into a conflist the way libcni reads one (its object, untouched, the only plugin;
//! `name` and `cniVersion` lifted to the list). Every other field and plugin keeps its value
//! and its place (serde_json with `preserve_order`).
use serde_json::{json, Map, Value};

/// Our plugin's `type`.
pub(crate) const TYPE: &str = "redirect-cni";

/// Our entry: `{"type": "redirect-cni", "daemon_socket", "exclude_namespaces", "log_level"}`.
pub fn entry(daemon_socket: &str, exclude_namespaces: &[String], log_level: &str) -> Value {
    json!({
        "type": TYPE,
        "daemon_socket": daemon_socket,
        "exclude_namespaces": exclude_namespaces,
        "log_level": log_level,
    })
}

fn ours(plugin: &Value) -> bool {
    plugin.get("type").and_then(Value::as_str) == Some(TYPE)
}

fn plugins(list: &Value) -> &[Value] {
    list.get("plugins")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Whether `list` holds exactly `entry` once (and nothing else of ours).
pub(crate) fn has(list: &Value, entry: &Value) -> bool {
    let mine: Vec<_> = plugins(list).iter().filter(|p| ours(p)).collect();
    mine.len() == 1 && mine[0] == entry
}

/// The first entry of ours in `list`.
pub fn our_entry(list: &Value) -> Option<&Value> {
    plugins(list).iter().find(|p| ours(p))
}

/// Whether `list` holds an entry of ours at all.
pub fn has_any(list: &Value) -> bool {
    plugins(list).iter().any(ours)
}

/// `list` with `entry`: in place of the first entry of ours (later ones dropped), else last.
pub(crate) fn with_entry(list: &Value, entry: &Value) -> Value {
    let mut out = list.clone();
    let Some(plugins) = out.get_mut("plugins").and_then(Value::as_array_mut) else {
        return out;
    };
    match plugins.iter().position(ours) {
        Some(at) => {
            plugins[at] = entry.clone();
            let mut seen = 0;
            plugins.retain(|p| {
                seen += usize::from(ours(p));
                !ours(p) || seen == 1
            });
        }
        None => plugins.push(entry.clone()),
    }
    out
}

/// `list` without any entry of ours.
pub(crate) fn without_entry(list: &Value) -> Value {
    let mut out = list.clone();
    if let Some(plugins) = out.get_mut("plugins").and_then(Value::as_array_mut) {
        plugins.retain(|p| !ours(p));
    }
    out
}

/// Whether `list` chains Istio's own `istio-cni` plugin: istio-cni captures the pods this
/// configuration starts, so ours must not be in it too (two capture layers for one pod).
pub fn istio_cni_chained(list: &Value) -> bool {
    plugins(list)
        .iter()
        .any(|p| p.get("type").and_then(Value::as_str) == Some("istio-cni"))
}

/// Why a one-shot install refuses `list`: istio-cni chains it (`install-cni --watch` stands by
/// instead, see [`crate::install`]).
pub(crate) const ISTIO_CNI_CHAINED: &str =
    "it chains istio-cni already: istio-cni and redirect-cni must not both capture a pod's \
        traffic; remove istio-cni first (its DaemonSet re-inserts it: uninstall the istio-cni \
        chart), or run `install-cni --watch`, which stands by and puts our entry in once \
        istio-cni's leaves";

/// Why our plugin would fail on `list` (whose plugins speak `versions`), with the fix: the
/// version the runtime will hand the chain is not one of `versions`. `None` when the list is
/// fine for us.
pub(crate) fn refusal(list: &Value, versions: &[String]) -> Option<String> {
    let version = runtime_version(list)?;
    if versions.contains(&version) {
        return None;
    }
    let newest = versions.iter().max_by_key(|v| semver(v));
    let fix = match newest {
        Some(newest) if semver(&version) > semver(newest) => format!(
            "this redirect-cni is older than the conflist: install a redirect release that speaks {version}"
        ),
        _ => "set the conflist's cniVersion to one of those the primary plugin speaks too (`0.3.1` or newer)".into(),
    };
    Some(format!(
        "its cniVersion {version:?} is not one redirect-cni speaks ({}): {fix}",
        versions.join(", ")
    ))
}

/// The version a runtime hands the chain of `list`: the newest of CNI 1.1's `cniVersions` when
/// given, else `cniVersion` ("" when neither is: libcni refuses such a list).
fn runtime_version(list: &Value) -> Option<String> {
    let listed: Vec<&str> = list
        .get("cniVersions")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    match listed.iter().max_by_key(|v| semver(v)) {
        Some(newest) => Some((*newest).to_owned()),
        None => Some(
            list.get("cniVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        ),
    }
}

/// `a.b.c` as numbers (anything unreadable as 0).
fn semver(v: &str) -> (u64, u64, u64) {
    let mut parts = v.split('.').map(|p| p.parse().unwrap_or(0));
    let mut next = || parts.next().unwrap_or(0);
    (next(), next(), next())
}

/// A single-plugin configuration as a conflist of that one plugin.
pub(crate) fn from_single(conf: &Value) -> Value {
    let mut list = Map::new();
    for key in ["cniVersion", "name"] {
        if let Some(v) = conf.get(key) {
            list.insert(key.into(), v.clone());
        }
    }
    list.insert("plugins".into(), Value::Array(vec![conf.clone()]));
    Value::Object(list)
}

/// The text we write: two-space indentation and a final newline.
pub(crate) fn render(list: &Value) -> String {
    let mut text = serde_json::to_string_pretty(list).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours_() -> Value {
        entry(
            "/run/redirect/daemon/daemon.sock",
            &["kube-system".into()],
            "info",
        )
    }

    #[test]
    fn appended_after_the_primary_replaced_in_place_removed() {
        let list: Value = serde_json::from_str(
            r#"{"cniVersion":"1.0.0","name":"k8s","zeta":1,"plugins":[{"type":"bridge","b":2,"a":1},{"type":"portmap"}],"alpha":true}"#,
        )
        .expect("json");
        let with = with_entry(&list, &ours_());
        assert!(has(&with, &ours_()));
        let text = serde_json::to_string(&with).expect("text");
        assert_eq!(
            text,
            r#"{"cniVersion":"1.0.0","name":"k8s","zeta":1,"plugins":[{"type":"bridge","b":2,"a":1},{"type":"portmap"},{"type":"redirect-cni","daemon_socket":"/run/redirect/daemon/daemon.sock","exclude_namespaces":["kube-system"],"log_level":"info"}],"alpha":true}"#
        );
        assert_eq!(with_entry(&with, &ours_()), with, "idempotent");
        // An old entry of ours in the middle is replaced where it stands; duplicates go.
        let mut old = list.clone();
        old["plugins"]
            .as_array_mut()
            .expect("plugins")
            .insert(1, json!({"type": TYPE, "log_level": "debug"}));
        old["plugins"]
            .as_array_mut()
            .expect("plugins")
            .push(json!({"type": TYPE}));
        let replaced = with_entry(&old, &ours_());
        assert_eq!(replaced["plugins"][1], ours_());
        assert_eq!(replaced["plugins"].as_array().map(Vec::len), Some(3));
        assert_eq!(without_entry(&with), list);
        assert!(!has_any(&without_entry(&old)));
    }

    #[test]
    fn a_single_plugin_becomes_a_list_of_it() {
        let conf: Value = serde_json::from_str(
            r#"{"cniVersion":"0.4.0","name":"mynet","type":"bridge","ipam":{}}"#,
        )
        .expect("json");
        let list = from_single(&conf);
        assert_eq!(
            serde_json::to_string(&list).expect("text"),
            r#"{"cniVersion":"0.4.0","name":"mynet","plugins":[{"cniVersion":"0.4.0","name":"mynet","type":"bridge","ipam":{}}]}"#
        );
        assert!(crate::confdir::invalid(crate::confdir::Kind::List, &list).is_none());
    }
}
