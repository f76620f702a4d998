//! The JSON Schema pieces of the views that a field's Rust type does not say (feature
//! `schema`, for the tests package only): the strings with a fixed form, and the name -> value
//! objects serialised from lists. `docs/schema/*.schema.json` are generated from them.
use redirect_common::Counter;
use schemars::{json_schema, Schema, SchemaGenerator};

/// Where a connection goes: `proxy:PORT`, `dns:PORT`, `untouched` or `refused`.
pub const OUTCOME: &str = r"^(proxy:[0-9]+|dns:[0-9]+|untouched|refused)$";
/// A decision counter's name (as in `status` and the metrics), or `-` for none.
pub const COUNTER: &str = r"^([a-z0-9_]+|-)$";
/// `IP:PORT`, an IPv6 address in brackets.
pub const SOCKET_ADDR: &str = r"^(\[[0-9a-fA-F:.]+\]|[0-9.]+):[0-9]+$";

/// Every decision counter by name, zeros included: an object naming each of
/// [`Counter::ALL`].
pub fn counters(_: &mut SchemaGenerator) -> Schema {
    let names: Vec<&str> = Counter::ALL.iter().map(|c| c.name()).collect();
    json_schema!({
        "description": "Every decision counter by name, zeros included",
        "type": "object",
        "required": names,
        "additionalProperties": { "type": "integer", "minimum": 0 }
    })
}

/// Entries per map, by map name.
pub(crate) fn fill(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": { "type": "integer", "minimum": 0 }
    })
}

/// `outbound` or `inbound`.
pub fn direction(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "enum": ["outbound", "inbound"] })
}

/// `tcp` or `udp`.
pub fn protocol(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "enum": ["tcp", "udp"] })
}

/// Who owns the node datapath.
pub(crate) fn owner(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "enum": ["daemon", "cli"] })
}
