//! Policies as JSON (`redirect enroll --policy FILE`, the daemon's requests, its enrollment
//! files): deserialized with the failing field's path named, then [`Policy::validate`]d.
use ipnet::IpNet;
use serde::Deserialize;

use super::{Cidrs, Group, InboundPorts, OwnerGroups, Policy, PolicyError};

/// One of two JSON forms of a value: this version's (tagged, snake_case), else the form of
/// before (serde's external tagging: `"All"`, `{"List": [...]}`), so enrollment files and
/// requests written by an older version still read.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(untagged)]
pub(crate) enum Either<A, B> {
    /// This version's form.
    Now(A),
    /// The form of before.
    Before(B),
}

/// [`Cidrs`] in this version's form.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", content = "items", rename_all = "snake_case")]
pub(crate) enum CidrsTagged {
    /// `*`.
    All,
    /// These.
    List(#[cfg_attr(feature = "schema", schemars(with = "Vec<String>"))] Vec<IpNet>),
}

/// [`Cidrs`] in the form of before.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub(crate) enum CidrsBefore {
    /// `*`.
    All,
    /// These.
    List(#[cfg_attr(feature = "schema", schemars(with = "Vec<String>"))] Vec<IpNet>),
}

impl From<Either<CidrsTagged, CidrsBefore>> for Cidrs {
    fn from(e: Either<CidrsTagged, CidrsBefore>) -> Self {
        match e {
            Either::Now(CidrsTagged::All) | Either::Before(CidrsBefore::All) => Cidrs::All,
            Either::Now(CidrsTagged::List(l)) | Either::Before(CidrsBefore::List(l)) => {
                Cidrs::List(l)
            }
        }
    }
}

/// [`InboundPorts`] in this version's form.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", content = "items", rename_all = "snake_case")]
pub(crate) enum PortsTagged {
    /// `*`.
    All,
    /// These.
    List(Vec<u16>),
}

/// [`InboundPorts`] in the form of before.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub(crate) enum PortsBefore {
    /// `*`.
    All,
    /// These.
    List(Vec<u16>),
}

impl From<Either<PortsTagged, PortsBefore>> for InboundPorts {
    fn from(e: Either<PortsTagged, PortsBefore>) -> Self {
        match e {
            Either::Now(PortsTagged::All) | Either::Before(PortsBefore::All) => InboundPorts::All,
            Either::Now(PortsTagged::List(l)) | Either::Before(PortsBefore::List(l)) => {
                InboundPorts::List(l)
            }
        }
    }
}

/// [`OwnerGroups`] in this version's form.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", content = "items", rename_all = "snake_case")]
pub(crate) enum GroupsTagged {
    /// No filter.
    All,
    /// Only these.
    Include(Vec<Group>),
    /// All but these.
    Exclude(Vec<Group>),
}

/// [`OwnerGroups`] in the form of before.
#[derive(Debug, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub(crate) enum GroupsBefore {
    /// No filter.
    All,
    /// Only these.
    Include(Vec<Group>),
    /// All but these.
    Exclude(Vec<Group>),
}

impl From<Either<GroupsTagged, GroupsBefore>> for OwnerGroups {
    fn from(e: Either<GroupsTagged, GroupsBefore>) -> Self {
        match e {
            Either::Now(GroupsTagged::All) | Either::Before(GroupsBefore::All) => OwnerGroups::All,
            Either::Now(GroupsTagged::Include(g)) | Either::Before(GroupsBefore::Include(g)) => {
                OwnerGroups::Include(g)
            }
            Either::Now(GroupsTagged::Exclude(g)) | Either::Before(GroupsBefore::Exclude(g)) => {
                OwnerGroups::Exclude(g)
            }
        }
    }
}

fn field_of(path: &serde_path_to_error::Path) -> String {
    match path.to_string().as_str() {
        "." => "policy".to_owned(),
        p => format!("policy.{p}"),
    }
}

fn checked(
    parsed: Result<Policy, serde_path_to_error::Error<serde_json::Error>>,
) -> Result<Policy, PolicyError> {
    let policy = parsed.map_err(|e| PolicyError::Json {
        field: field_of(e.path()),
        reason: e.inner().to_string(),
    })?;
    policy.validate()?;
    Ok(policy)
}

/// A policy from JSON text, e.g. a `--policy` file.
pub fn policy_from_json(bytes: &[u8]) -> Result<Policy, PolicyError> {
    checked(serde_path_to_error::deserialize(
        &mut serde_json::Deserializer::from_slice(bytes),
    ))
}

/// A policy from an already parsed JSON value, e.g. the `policy` of a daemon request.
pub fn policy_from_value(value: &serde_json::Value) -> Result<Policy, PolicyError> {
    checked(serde_path_to_error::deserialize(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_tagged_and_snake_case_and_the_form_of_before_still_reads() {
        let p = Policy {
            include_cidrs: Cidrs::All,
            ..Policy::default()
        };
        let v = serde_json::to_value(&p).expect("serializes");
        assert_eq!(v["include_cidrs"], serde_json::json!({"kind": "all"}));
        assert_eq!(
            v["inbound_ports"],
            serde_json::json!({"kind": "list", "items": []})
        );
        assert_eq!(v["owner_groups"], serde_json::json!({"kind": "all"}));
        assert_eq!(v["mode"], "redirect");
        assert_eq!(v["no_proxy"], "refuse");
        assert_eq!(policy_from_value(&v).expect("reads back"), p);
        let mut before = v.clone();
        before["include_cidrs"] = serde_json::json!("All");
        before["inbound_ports"] = serde_json::json!({"List": []});
        before["owner_groups"] = serde_json::json!("All");
        before["mode"] = serde_json::json!("Redirect");
        before["no_proxy"] = serde_json::json!("Refuse");
        assert_eq!(policy_from_value(&before).expect("the form of before"), p);
    }
}
