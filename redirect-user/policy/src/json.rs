//! Policies as JSON (`redirect enroll --policy FILE`, the daemon's requests, its enrollment
//! files): deserialized with the failing field's path named, then [`Policy::validate`]d.
use super::{Policy, PolicyError};

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
