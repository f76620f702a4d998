//! Where a policy's user names, group names and DNS servers come from: the pod's own files, read
//! through ordered sources.
//!
//! An explicit flag never gets here (`--dns-servers`, numeric `-u`/`-g`, numeric owner groups).
//! What is left is asked of a [`SystemLookup`]; [`Sources`] is the one built from
//! [`PodSource`]s in order (a Kubernetes pod spec first once one exists, then the processes
//! of the namespace, ...): the first source that can answer does, and when none can the
//! lookup fails with a sentence saying what was tried. The host's own files are a source only
//! for the namespace the caller itself runs in ([`OwnFiles`]).

use std::net::IpAddr;

use super::env::{id_in_db, nameservers};

/// One of the pod's files a lookup reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodFile {
    /// `/etc/resolv.conf`: the DNS servers.
    ResolvConf,
    /// `/etc/passwd`: user names.
    Passwd,
    /// `/etc/group`: group names.
    Group,
}

impl PodFile {
    /// Its path inside the pod.
    pub fn path(self) -> &'static str {
        match self {
            PodFile::ResolvConf => "/etc/resolv.conf",
            PodFile::Passwd => "/etc/passwd",
            PodFile::Group => "/etc/group",
        }
    }
}

/// The text of a pod file and where it was read (`/proc/42/root/etc/passwd (pid 42, sleep)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// The file's text.
    pub text: String,
    /// Where it was read, for logs and messages.
    pub from: String,
}

/// A source of the pod's files.
pub trait PodSource {
    /// What the source is, said when it has nothing (`no process runs in /run/netns/x`).
    fn describe(&self) -> String;
    /// Every view of `file` it has: none when it cannot see the file, several when the pod's
    /// processes have different roots (their containers).
    fn views(&self, file: PodFile) -> Result<Vec<View>, LookupError>;
}

/// Why a lookup could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// No source sees the file.
    #[error("no source has the {file} of {netns}: {tried} (the host's own files are never used for another namespace)")]
    NoSource {
        /// The file, e.g. `/etc/resolv.conf`.
        file: &'static str,
        /// The namespace asked about.
        netns: String,
        /// What each source said.
        tried: String,
    },
    /// Two views of one source disagree (two containers of the pod).
    #[error("{what} differs between the processes of {netns}: {answers}")]
    Conflict {
        /// What was looked up: `the nameservers of /etc/resolv.conf`, `"x" of /etc/passwd`.
        what: String,
        /// The namespace asked about.
        netns: String,
        /// The two answers and where each was read: `1001 in A, 2002 in B`.
        answers: String,
    },
    /// A file a source sees could not be read.
    #[error("reading {path}: {error}")]
    Read {
        /// The file, as the source reads it.
        path: String,
        /// The failure.
        error: std::io::Error,
    },
}

/// The answer for one user or group name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Id {
    /// Not looked up: nothing applies it (`--cleanup-only`); any id will do and none is logged.
    Unused,
    /// Listed: the id and where.
    Found {
        /// uid or gid.
        id: u32,
        /// The file that lists it.
        from: String,
    },
    /// Not listed in any of these files.
    NotListed {
        /// The files read, comma-separated.
        searched: String,
    },
}

/// Where group names, user names and resolv.conf come from (tests stub it).
pub trait SystemLookup {
    /// gid of group `name` (from the pod's /etc/group).
    fn group_gid(&self, name: &str) -> Result<Id, LookupError>;
    /// uid of user `name` (from the pod's /etc/passwd).
    fn user_uid(&self, name: &str) -> Result<Id, LookupError>;
    /// The pod's resolv.conf.
    fn resolv_conf(&self) -> Result<View, LookupError>;
}

/// [`PodSource`]s of one namespace, asked in order.
///
/// The order: a Kubernetes pod spec (`dnsPolicy`/`dnsConfig` and the cluster DNS address; no
/// such source exists yet), then the namespace's processes, then `/etc/netns/NAME`. The first
/// source with a view of a file answers; for a name, the first source listing it.
pub struct Sources {
    netns: String,
    list: Vec<Box<dyn PodSource>>,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources")
            .field("netns", &self.netns)
            .field(
                "list",
                &self.list.iter().map(|s| s.describe()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Sources {
    /// The sources of namespace `netns` (named in messages), in order.
    pub fn new(netns: impl Into<String>, list: Vec<Box<dyn PodSource>>) -> Self {
        Sources {
            netns: netns.into(),
            list,
        }
    }

    /// This process's own files: for the namespace it runs in (istio-init's container).
    pub fn own() -> Self {
        Sources::new("this process's namespace", vec![Box::new(OwnFiles)])
    }

    fn no_source(&self, file: PodFile) -> LookupError {
        let tried: Vec<String> = self.list.iter().map(|s| s.describe()).collect();
        LookupError::NoSource {
            file: file.path(),
            netns: self.netns.clone(),
            tried: if tried.is_empty() {
                "no source is configured".into()
            } else {
                tried.join("; ")
            },
        }
    }

    fn id(&self, file: PodFile, name: &str) -> Result<Id, LookupError> {
        let mut searched = Vec::new();
        for source in &self.list {
            let mut hits: Vec<(u32, String)> = Vec::new();
            for view in source.views(file)? {
                if let Some(id) = id_in_db(&view.text, name) {
                    hits.push((id, view.from.clone()));
                }
                searched.push(view.from);
            }
            let Some((id, from)) = hits.first().cloned() else {
                continue;
            };
            if let Some((other, other_from)) = hits.iter().find(|(i, _)| *i != id) {
                return Err(LookupError::Conflict {
                    what: format!("{name:?} of {}", file.path()),
                    netns: self.netns.clone(),
                    answers: format!("{id} in {from}, {other} in {other_from}"),
                });
            }
            return Ok(Id::Found { id, from });
        }
        if searched.is_empty() {
            return Err(self.no_source(file));
        }
        Ok(Id::NotListed {
            searched: searched.join(", "),
        })
    }
}

impl SystemLookup for Sources {
    fn group_gid(&self, name: &str) -> Result<Id, LookupError> {
        self.id(PodFile::Group, name)
    }

    fn user_uid(&self, name: &str) -> Result<Id, LookupError> {
        self.id(PodFile::Passwd, name)
    }

    fn resolv_conf(&self) -> Result<View, LookupError> {
        for source in &self.list {
            let views = source.views(PodFile::ResolvConf)?;
            let Some(first) = views.first() else {
                continue;
            };
            let servers = nameservers(&first.text);
            if let Some(other) = views.iter().find(|v| nameservers(&v.text) != servers) {
                let show = |s: &[IpAddr]| {
                    let list: Vec<String> = s.iter().map(ToString::to_string).collect();
                    format!("[{}]", list.join(", "))
                };
                return Err(LookupError::Conflict {
                    what: "the nameservers of /etc/resolv.conf".into(),
                    netns: self.netns.clone(),
                    answers: format!(
                        "{} in {}, {} in {}",
                        show(&servers),
                        first.from,
                        show(&nameservers(&other.text)),
                        other.from
                    ),
                });
            }
            return Ok(first.clone());
        }
        Err(self.no_source(PodFile::ResolvConf))
    }
}

/// For `--cleanup-only`, which applies no policy: no name is looked up ([`Id::Unused`]) and
/// nothing is read.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NotLookedUp;

impl SystemLookup for NotLookedUp {
    fn group_gid(&self, _name: &str) -> Result<Id, LookupError> {
        Ok(Id::Unused)
    }

    fn user_uid(&self, name: &str) -> Result<Id, LookupError> {
        self.group_gid(name)
    }

    fn resolv_conf(&self) -> Result<View, LookupError> {
        Ok(View {
            text: String::new(),
            from: "nothing (--cleanup-only)".into(),
        })
    }
}

/// This process's own `/etc` files. A missing passwd or group file reads as empty (a name is
/// then not listed, as istio-iptables' lookups see it); a missing resolv.conf is an error.
#[derive(Debug, Clone, Copy, Default)]
pub struct OwnFiles;

impl PodSource for OwnFiles {
    fn describe(&self) -> String {
        "this process's own /etc".into()
    }

    fn views(&self, file: PodFile) -> Result<Vec<View>, LookupError> {
        let path = file.path();
        match std::fs::read_to_string(path) {
            Ok(text) => Ok(vec![View {
                text,
                from: path.into(),
            }]),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && file != PodFile::ResolvConf => {
                Ok(vec![View {
                    text: String::new(),
                    from: format!("{path} (absent)"),
                }])
            }
            Err(error) => Err(LookupError::Read {
                path: path.into(),
                error,
            }),
        }
    }
}
