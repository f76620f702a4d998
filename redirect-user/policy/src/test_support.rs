//! Shared test helpers: a stub [`SystemLookup`] and shorthand parse calls.

use std::collections::HashMap;

use super::*;

/// A [`SystemLookup`] with groups `java` (1001) and `ftp` (14), chosen users and resolv.conf.
#[derive(Debug, Default)]
pub(super) struct Stub {
    resolv: Option<String>,
    pub(super) users: HashMap<String, u32>,
}

impl Stub {
    pub(super) fn with_resolv(text: &str) -> Self {
        Stub {
            resolv: Some(text.to_string()),
            ..Stub::default()
        }
    }
}

impl Stub {
    fn id(found: Option<u32>, file: &str) -> Result<Id, LookupError> {
        Ok(match found {
            Some(id) => Id::Found {
                id,
                from: file.into(),
            },
            None => Id::NotListed {
                searched: file.into(),
            },
        })
    }
}

impl SystemLookup for Stub {
    fn group_gid(&self, name: &str) -> Result<Id, LookupError> {
        let gid = match name {
            "java" => Some(1001),
            "ftp" => Some(14),
            _ => None,
        };
        Stub::id(gid, "/etc/group")
    }

    fn user_uid(&self, name: &str) -> Result<Id, LookupError> {
        Stub::id(self.users.get(name).copied(), "/etc/passwd")
    }

    fn resolv_conf(&self) -> Result<View, LookupError> {
        match &self.resolv {
            Some(text) => Ok(View {
                text: text.clone(),
                from: "/etc/resolv.conf".into(),
            }),
            None => Err(LookupError::NoSource {
                file: "/etc/resolv.conf",
                netns: "the stub".into(),
                tried: "the stub has none".into(),
            }),
        }
    }
}

pub(super) fn env_of(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub(super) fn run(
    args: &[&str],
    env: &[(&str, &str)],
    sys: &Stub,
) -> Result<Invocation, PolicyError> {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    parse_invocation(&args, &env_of(env), sys)
}

pub(super) fn policy(args: &[&str], env: &[(&str, &str)]) -> Policy {
    run(args, env, &Stub::with_resolv("nameserver 10.96.0.10\n"))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
        .policy
}

pub(super) fn error(args: &[&str], env: &[(&str, &str)]) -> String {
    match run(args, env, &Stub::with_resolv("nameserver 10.96.0.10\n")) {
        Ok(inv) => panic!("{args:?} parsed: {inv:?}"),
        Err(e) => e.to_string(),
    }
}

pub(super) fn nets(list: &[&str]) -> Vec<ipnet::IpNet> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}
