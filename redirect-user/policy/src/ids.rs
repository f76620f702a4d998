//! Ids of `-u`/`-g`, ENVOY_USER and the owner groups: numbers as given, names from the pod's passwd and group.

use super::args::Raw;
use super::convert::{bad, items, too_many};
use super::{EnvSource, Group, Id, LookupError, OwnerGroups, PolicyError, SystemLookup};

type Result<T> = std::result::Result<T, PolicyError>;

/// Which id a `-u`/`-g` item or an owner group names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IdKind {
    Uid,
    Gid,
}

impl IdKind {
    fn what(self) -> &'static str {
        match self {
            IdKind::Uid => "uid",
            IdKind::Gid => "gid",
        }
    }

    fn lookup(self, sys: &dyn SystemLookup, name: &str) -> std::result::Result<Id, LookupError> {
        match self {
            IdKind::Uid => sys.user_uid(name),
            IdKind::Gid => sys.group_gid(name),
        }
    }

    fn file(self) -> &'static str {
        match self {
            IdKind::Uid => "/etc/passwd",
            IdKind::Gid => "/etc/group",
        }
    }
}

/// ENVOY_USER's uid (default `istio-proxy`) in the pod's passwd, else istio's 1337: as
/// istio-iptables, whose `user.Lookup` failing (not listed, no passwd) gives
/// `DefaultProxyUID`. A passwd that exists but cannot be read, or two of the pod's containers
/// naming the user with different uids, is refused (the proxy's uid cannot be told).
pub(super) fn default_uid(
    env: &dyn EnvSource,
    sys: &dyn SystemLookup,
) -> Result<(u32, Option<String>)> {
    let user = env
        .get("ENVOY_USER")
        .unwrap_or_else(|| "istio-proxy".into());
    match sys.user_uid(&user) {
        Ok(Id::Unused) => Ok((1337, None)),
        Ok(Id::Found { id, from }) => {
            tracing::info!(user = %user, uid = id, from = %from, "proxy uid of the pod's user");
            Ok((
                id,
                Some(format!(
                    "proxy uid {id} (no -u): ENVOY_USER {user:?} in {from}"
                )),
            ))
        }
        Ok(Id::NotListed { searched }) => {
            tracing::info!(user = %user, searched = %searched,
                "proxy user not listed: istio-iptables' default uid 1337");
            Ok((
                1337,
                Some(format!(
                    "proxy uid 1337 (no -u): istio-iptables' default, ENVOY_USER {user:?} \
                    is not listed in {searched}"
                )),
            ))
        }
        Err(lookup @ LookupError::NoSource { .. }) => {
            tracing::info!(user = %user, reason = %lookup, "ENVOY_USER cannot be resolved from the \
                namespace's own files: istio-iptables' default proxy uid 1337 (and gid, unless -g)");
            Ok((
                1337,
                Some(format!(
                    "proxy uid 1337 (no -u): istio-iptables' default, ENVOY_USER {user:?} \
                    cannot be resolved ({lookup})"
                )),
            ))
        }
        Err(lookup) => Err(PolicyError::PodFile {
            needed: format!(
                "-u/--proxy-uid is not given, so the proxy uid is that of ENVOY_USER \
                ({user:?}) in the pod's /etc/passwd"
            ),
            lookup: Box::new(lookup),
            fix: "pass -u UID (istio's default is 1337)".into(),
        }),
    }
}

/// A numeric id as is; a name looked up in the pod's passwd or group. `Ok(None)`: not listed
/// (the caller's error), with the files searched.
fn id_of(
    flag: &str,
    item: &str,
    kind: IdKind,
    sys: &dyn SystemLookup,
) -> Result<std::result::Result<u32, String>> {
    if item.bytes().all(|b| b.is_ascii_digit()) {
        return item.parse::<u32>().map(Ok).map_err(|_| {
            PolicyError::invalid(flag, item, format!("is not a {} (too large)", kind.what()))
        });
    }
    match kind.lookup(sys, item) {
        Ok(Id::Unused) => Ok(Ok(0)),
        Ok(Id::Found { id, from }) => {
            tracing::info!(flag, name = item, id, from = %from, "name of the pod resolved");
            Ok(Ok(id))
        }
        Ok(Id::NotListed { searched }) => Ok(Err(searched)),
        Err(lookup) => Err(PolicyError::PodFile {
            needed: format!(
                "{flag} names {item:?}, whose {} comes from the pod's {}",
                kind.what(),
                kind.file()
            ),
            lookup: Box::new(lookup),
            fix: format!("give the numeric {}", kind.what()),
        }),
    }
}

/// `-u`/`-g`: 1 to [`MAX_OWNER_IDS`] ids, numbers or the pod's user/group names.
pub(super) fn ids(raw: &Raw, kind: IdKind, sys: &dyn SystemLookup) -> Result<Vec<u32>> {
    let what = kind.what();
    let list = items(&raw.value)
        .map(|i| {
            id_of(&raw.origin, i, kind, sys)?.map_err(|searched| {
                bad(
                    raw,
                    i,
                    &format!("is not a {what} (a decimal number) nor a name listed in {searched}"),
                )
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if list.is_empty() {
        return Err(bad(raw, &raw.value, &format!("names no {what}")));
    }
    too_many(&raw.origin, &raw.value, list.len(), &format!("{what}s"))?;
    Ok(list)
}

const GROUPS: &str = "ISTIO_OUTBOUND_OWNER_GROUPS";
const GROUPS_EXCLUDE: &str = "ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE";

/// Include `*` (default) uses the exclude list; any other include value wins and the exclude
/// list is ignored (an empty include captures nothing), as istio-iptables does.
pub(super) fn owner_groups(env: &dyn EnvSource, sys: &dyn SystemLookup) -> Result<OwnerGroups> {
    let include = env.get(GROUPS).unwrap_or_else(|| "*".into());
    if include != "*" {
        return Ok(OwnerGroups::Include(groups(GROUPS, &include, sys)?));
    }
    let exclude = env.get(GROUPS_EXCLUDE).unwrap_or_default();
    let list = groups(GROUPS_EXCLUDE, &exclude, sys)?;
    Ok(if list.is_empty() {
        OwnerGroups::All
    } else {
        OwnerGroups::Exclude(list)
    })
}

fn groups(var: &str, value: &str, sys: &dyn SystemLookup) -> Result<Vec<Group>> {
    let flag = format!("${var}");
    let list = items(value)
        .map(|name| {
            let gid = id_of(&flag, name, IdKind::Gid, sys)?.map_err(|searched| {
                PolicyError::invalid(
                    &flag,
                    name,
                    format!("is not a known group (not in {searched})"),
                )
            })?;
            Ok(Group {
                name: name.to_string(),
                gid,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    too_many(&flag, value, list.len(), "groups")?;
    Ok(list)
}
