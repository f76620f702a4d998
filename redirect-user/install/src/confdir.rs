//! The configuration the runtime uses, found as libcni finds it (the kubelet's CRI runtimes,
//! containerd and CRI-O, load it this way): the files of the directory ending in `.conflist`,
//! `.conf` or `.json`, sorted by name (bytes), and the first that parses as a network
//! configuration wins; an invalid one is skipped. A `.conflist` is a list (`name`, a
//! non-empty `plugins` of objects each with a `type`); the others hold one plugin (`type`).
use std::{
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
};

use serde_json::Value;

use crate::error::{io, Error, Result};

/// What a configuration file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A `.conflist`: `plugins`.
    List,
    /// A `.conf` or `.json`: one plugin.
    Single,
}

/// The highest-priority configuration.
#[derive(Debug, Clone)]
pub struct Found {
    /// Its file.
    pub path: PathBuf,
    /// List or single plugin.
    pub kind: Kind,
    /// The file's text as read.
    pub text: String,
    /// Its JSON.
    pub json: Value,
}

/// The candidate files of `dir`, in libcni's order.
pub(crate) fn candidates(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io("reading the directory", dir))? {
        let entry = entry.map_err(io("reading the directory", dir))?;
        let path = entry.path();
        let wanted = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("conflist" | "conf" | "json")
        );
        if wanted && !path.is_dir() {
            files.push(path);
        }
    }
    files.sort_by(|a, b| a.as_os_str().as_bytes().cmp(b.as_os_str().as_bytes()));
    Ok(files)
}

/// Why `json`, read from a file of `kind`, is not a network configuration, if it is not.
pub(crate) fn invalid(kind: Kind, json: &Value) -> Option<String> {
    let Some(obj) = json.as_object() else {
        return Some("not a JSON object".into());
    };
    let typed = |v: &Value| {
        v.get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty())
    };
    match kind {
        Kind::Single if typed(json) => None,
        Kind::Single => Some("no \"type\"".into()),
        Kind::List => {
            if obj
                .get("name")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                return Some("no \"name\"".into());
            }
            match obj.get("plugins").and_then(Value::as_array) {
                None => Some("no \"plugins\" list".into()),
                Some(p) if p.is_empty() => Some("\"plugins\" is empty".into()),
                Some(p) => p
                    .iter()
                    .position(|p| !typed(p))
                    .map(|i| format!("plugins[{i}] has no \"type\"")),
            }
        }
    }
}

fn kind_of(path: &Path) -> Kind {
    if path.extension().is_some_and(|e| e == "conflist") {
        Kind::List
    } else {
        Kind::Single
    }
}

/// The first valid configuration of `dir`; none is [`Error::NoConfig`] naming the files
/// skipped and why. A missing directory is the same error.
pub fn find(dir: &Path) -> Result<Found> {
    let mut skipped = Vec::new();
    let files = match candidates(dir) {
        Ok(files) => files,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            skipped.push(format!("{} does not exist", dir.display()));
            Vec::new()
        }
        Err(e) => return Err(e),
    };
    for path in files {
        let kind = kind_of(&path);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            // Gone since the listing (a writer's rename): the next one.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                skipped.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        let why = match serde_json::from_str::<Value>(&text) {
            Ok(json) => match invalid(kind, &json) {
                None => {
                    return Ok(Found {
                        path,
                        kind,
                        text,
                        json,
                    })
                }
                Some(why) => why,
            },
            Err(e) => format!("not JSON ({e})"),
        };
        tracing::warn!(file = %path.display(), why, "skipped an invalid CNI configuration, as the runtime does");
        skipped.push(format!("{}: {why}", path.display()));
    }
    Err(Error::NoConfig {
        dir: dir.to_owned(),
        skipped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(redirect_testkit::unique_name("confdir"));
        std::fs::create_dir_all(&dir).expect("dir");
        for (name, text) in files {
            std::fs::write(dir.join(name), text).expect("write");
        }
        dir
    }

    #[test]
    fn the_first_valid_file_by_name_wins() {
        let list = r#"{"name":"k8s","plugins":[{"type":"bridge"}]}"#;
        let dir = dir_with(&[
            ("00-broken.conflist", "{not json"),
            ("01-empty.conflist", r#"{"name":"x","plugins":[]}"#),
            ("02-untyped.conf", r#"{"name":"x"}"#),
            ("05-notes.txt", list),
            ("10-calico.conflist", list),
            ("20-flannel.conf", r#"{"name":"f","type":"flannel"}"#),
        ]);
        let found = find(&dir).expect("found");
        assert_eq!(found.path, dir.join("10-calico.conflist"));
        assert_eq!(found.kind, Kind::List);
        std::fs::remove_file(dir.join("10-calico.conflist")).expect("rm");
        let found = find(&dir).expect("found");
        assert_eq!(found.path, dir.join("20-flannel.conf"));
        assert_eq!(found.kind, Kind::Single);
        std::fs::remove_file(dir.join("20-flannel.conf")).expect("rm");
        let e = find(&dir).expect_err("none left").to_string();
        for named in [
            "00-broken.conflist",
            "01-empty.conflist",
            "02-untyped.conf",
            "--watch",
        ] {
            assert!(e.contains(named), "{named} not named: {e}");
        }
        assert!(!e.contains("05-notes"), "{e}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn a_missing_directory_is_named() {
        let e = find(Path::new("/nonexistent/net.d"))
            .expect_err("missing")
            .to_string();
        assert!(e.contains("/nonexistent/net.d does not exist"), "{e}");
    }
}
