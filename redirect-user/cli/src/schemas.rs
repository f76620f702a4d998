//! The JSON Schemas of `docs/schema`, generated from the types the outputs are serialised from
//! (schemars, the product crates' `schema` feature), one entry per file, and the snapshot
//! test that holds the committed files to them byte for byte. `REDIRECT_UPDATE_SCHEMAS=1 cargo
//! test -p redirect-cli --bins schemas` rewrites the files.
use std::path::{Path, PathBuf};

use schemars::{generate::SchemaSettings, json_schema, JsonSchema, Schema, SchemaGenerator};
use serde_json::{Map, Value};

use crate::{captured::Followed, json_views, pod_policy_cmd};

/// The command that rewrites the committed files from the types.
pub(crate) const REGENERATE: &str =
    "REDIRECT_UPDATE_SCHEMAS=1 cargo test -p redirect-cli --bins schemas";

/// One schema file: its name in `docs/schema` (without `.schema.json`), its title and what
/// generates it.
pub(crate) struct File {
    pub(crate) name: &'static str,
    title: &'static str,
    schema: fn() -> Schema,
}

/// Every schema file.
pub(crate) const ALL: [File; 11] = [
    File {
        name: "common",
        title: "Pieces every view shares: one key, one meaning",
        schema: common,
    },
    File {
        name: "daemon-answer",
        title: "The daemon socket's answer frame: one JSON line per request, the protocol version in it, the typed answer or the error naming the value",
        schema: daemon_answer,
    },
    File {
        name: "explain",
        title: "redirect explain --json: what would happen to one connection, with trace's keys for the same meanings",
        schema: root::<json_views::Explanation<'static>>,
    },
    File {
        name: "list",
        title: "redirect list --json: everything captured on the node, one object per namespace with a policy (whoever wrote it) and per running redirect attach",
        schema: root::<Vec<json_views::Listed<'static>>>,
    },
    File {
        name: "pod-policy",
        title: "redirect pod-policy --json: one object per pod (or pod template) of the manifest",
        schema: root::<Vec<pod_policy_cmd::Report>>,
    },
    File {
        name: "policy",
        title: "A capture policy: what istio-iptables' flags and environment decide (enroll --policy FILE takes this shape)",
        schema: root::<redirect_policy::Policy>,
    },
    File {
        name: "probe",
        title: "redirect probe --json: the kernel, whether every required feature is there, and each feature",
        schema: root::<json_views::ProbeReport<'static>>,
    },
    File {
        name: "stats",
        title: "redirect stats --json: every namespace with a policy or a count, every counter present (zeros included)",
        schema: root::<Vec<json_views::NsStats>>,
    },
    File {
        name: "status",
        title: "redirect status --json: the node datapath (null when none is pinned), the running redirect attach instances",
        schema: root::<redirect_datapath::Status>,
    },
    File {
        name: "trace-event",
        title: "redirect trace --json: one object per line, one decision each (outbound: its caller; inbound: its peer)",
        schema: root::<json_views::TraceLine<'static>>,
    },
    File {
        name: "validate",
        title: "redirect validate --json: each check and the overall result",
        schema: root::<redirect_datapath::ValidationReport>,
    },
];

/// Where the committed files are.
pub(crate) fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/schema")
}

/// The generator every file is made with: draft 2020-12, what the code writes (a field serde
/// skips when empty is optional, one it always writes is required).
fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator()
}

fn root<T: JsonSchema + ?Sized>() -> Schema {
    generator().into_root_schema_for::<T>()
}

/// `common.schema.json`: the pieces every view shares, one key, one meaning.
fn common() -> Schema {
    use redirect_datapath::schema::{COUNTER, OUTCOME, SOCKET_ADDR};
    let mut g = generator();
    let mut defs = Map::new();
    let mut put = |name: &str, s: Schema| defs.insert(name.to_owned(), s.to_value());
    put(
        "netns",
        json_schema!({
            "description": "The namespace's path; null when nothing names it (the cookie beside it still does)",
            "type": ["string", "null"]
        }),
    );
    put(
        "cookie",
        json_schema!({ "description": "The netns cookie: always a number", "type": "integer", "minimum": 0 }),
    );
    put("writer", g.subschema_for::<redirect_daemon_api::Writer>());
    put("followed", g.subschema_for::<Followed>());
    put("direction", redirect_datapath::schema::direction(&mut g));
    put("protocol", redirect_datapath::schema::protocol(&mut g));
    put(
        "outcome",
        json_schema!({ "description": "Where a connection goes", "type": "string", "pattern": OUTCOME }),
    );
    put(
        "socket_addr",
        json_schema!({ "type": "string", "pattern": SOCKET_ADDR }),
    );
    put(
        "counter",
        json_schema!({ "type": "string", "pattern": COUNTER }),
    );
    put("counters", redirect_datapath::schema::counters(&mut g));
    put("pod", g.subschema_for::<redirect_daemon_api::PodRef>());
    put(
        "enrollment",
        g.subschema_for::<redirect_daemon_api::Enrollment>(),
    );
    defs.extend(g.take_definitions(true));
    let mut schema = g.into_root_schema_for::<()>();
    if let Some(o) = schema.as_object_mut() {
        o.retain(|k, _| k == "$schema");
        o.insert("$defs".into(), Value::Object(defs));
    }
    schema
}

fn daemon_answer() -> Schema {
    redirect_daemon_api::answer_frame_schema(generator())
}

/// The file's text: its `$id` and title, objects closed, keys in one order, pretty-printed
/// with a trailing newline.
pub(crate) fn render(file: &File) -> String {
    let mut schema = (file.schema)().to_value();
    close(&mut schema, false);
    if let Some(o) = schema.as_object_mut() {
        o.insert(
            "$id".into(),
            format!("https://redirect.dev/schema/{}.schema.json", file.name).into(),
        );
        o.insert("title".into(), file.title.into());
    }
    let mut text = serde_json::to_string_pretty(&ordered(schema)).unwrap_or_default();
    text.push('\n');
    text
}

/// Objects the code writes have exactly their properties: an object schema with properties is
/// closed (`additionalProperties: false`); one whose properties continue in `oneOf`/`anyOf`/
/// `allOf` branches (a flattened enum) is closed with `unevaluatedProperties` instead, and its
/// branches are left open (`flattened`).
fn close(v: &mut Value, flattened: bool) {
    const BRANCHES: [&str; 3] = ["oneOf", "anyOf", "allOf"];
    let Some(o) = v.as_object_mut() else {
        if let Some(a) = v.as_array_mut() {
            a.iter_mut().for_each(|x| close(x, false));
        }
        return;
    };
    let has_props = o.contains_key("properties");
    let composed = BRANCHES.iter().any(|b| o.contains_key(*b));
    if has_props && !o.contains_key("additionalProperties") {
        if composed {
            o.insert("unevaluatedProperties".into(), false.into());
        } else if !flattened {
            o.insert("additionalProperties".into(), false.into());
        }
    }
    for (k, x) in o.iter_mut() {
        // Conditions (the answer frame's `if`/`then`/`else`) say what must be there, not all.
        if ["if", "then", "else", "not"].contains(&k.as_str()) {
            continue;
        }
        let branch = BRANCHES.contains(&k.as_str()) && has_props;
        match x {
            Value::Array(items) if branch => items.iter_mut().for_each(|b| close(b, true)),
            // Property names and $defs' names are not schemas; their values are.
            Value::Object(m) if k == "properties" || k == "$defs" => {
                m.values_mut().for_each(|s| close(s, false))
            }
            _ => close(x, false),
        }
    }
}

/// One key order whatever serde_json's map keeps: the keywords that say what a schema is
/// first, the rest by name, the definitions last.
fn ordered(v: Value) -> Value {
    const FIRST: [&str; 8] = [
        "$schema",
        "$id",
        "title",
        "description",
        "type",
        "const",
        "enum",
        "required",
    ];
    let rank = |k: &str| match FIRST.iter().position(|f| *f == k) {
        Some(i) => i,
        None if k == "$defs" => FIRST.len() + 1,
        None => FIRST.len(),
    };
    match v {
        Value::Object(o) => {
            let mut entries: Vec<(String, Value)> = o.into_iter().collect();
            entries.sort_by(|(a, _), (b, _)| rank(a).cmp(&rank(b)).then_with(|| a.cmp(b)));
            Value::Object(entries.into_iter().map(|(k, x)| (k, ordered(x))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(ordered).collect()),
        other => other,
    }
}

#[test]
fn committed_schemas_are_the_generated_ones() {
    let update = std::env::var_os("REDIRECT_UPDATE_SCHEMAS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for file in &ALL {
        let name = file.name;
        let path = dir().join(format!("{name}.schema.json"));
        let want = render(file);
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if have == want {
            continue;
        }
        if update {
            std::fs::write(&path, &want).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        } else {
            stale.push(format!("docs/schema/{name}.schema.json"));
        }
    }
    assert!(
        stale.is_empty(),
        "not what the types generate: {}\nregenerate with `{REGENERATE}`",
        stale.join(", ")
    );
}
