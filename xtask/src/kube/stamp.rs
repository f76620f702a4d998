//! The stamp written last into the cache's bin/: what was built, from which Debian packages, by
//! which recipe. Without a current stamp nothing in bin/ is trusted.
use std::path::Path;

/// Bumped whenever the build's recipe changes, so caches made by an older recipe are rebuilt.
pub(super) const RECIPE: u32 = 1;

/// The contents of `<cache>/bin/.complete`, one `key=value` a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stamp {
    pub recipe: u32,
    /// Kubernetes' version, as the binaries report it (`v1.20.2`).
    pub kubernetes: String,
    /// Debian version of the `kubernetes` source package.
    pub source: String,
    /// Debian version of `etcd-server`.
    pub etcd: String,
    /// Debian version of `golang-1.19-go`, which compiled Kubernetes.
    pub go: String,
}

impl Stamp {
    pub(super) fn render(&self) -> String {
        format!(
            "recipe={}\nkubernetes={}\nsource={}\netcd={}\ngo={}\n",
            self.recipe, self.kubernetes, self.source, self.etcd, self.go
        )
    }

    /// `None` unless every field is there (a truncated stamp is no stamp).
    pub(super) fn parse(text: &str) -> Option<Self> {
        let field = |key: &str| {
            text.lines()
                .filter_map(|l| l.split_once('='))
                .find(|(k, _)| k.trim() == key)
                .map(|(_, v)| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        Some(Self {
            recipe: field("recipe")?.parse().ok()?,
            kubernetes: field("kubernetes")?,
            source: field("source")?,
            etcd: field("etcd")?,
            go: field("go")?,
        })
    }

    /// Whether this stamp is of the current recipe and Kubernetes version.
    pub(super) fn is_current(&self, kubernetes: &str) -> bool {
        self.recipe == RECIPE && self.kubernetes == kubernetes
    }

    /// The stamp at `path`, if there is a readable and complete one.
    pub(super) fn read(path: &Path) -> Option<Self> {
        Self::parse(&std::fs::read_to_string(path).ok()?)
    }
}

/// The Debian version in a file name apt wrote for `package`: `<package>_<version>_<arch>.deb`
/// or `<package>_<version>.dsc` (apt writes an epoch's ':' as `%3a`).
pub(super) fn file_version(file_name: &str, package: &str) -> Option<String> {
    let rest = file_name.strip_prefix(package)?.strip_prefix('_')?;
    let version = match rest.strip_suffix(".dsc") {
        Some(v) => v,
        None => rest.strip_suffix(".deb")?.rsplit_once('_')?.0,
    };
    (!version.is_empty() && !version.contains('_')).then(|| version.replace("%3a", ":"))
}

#[cfg(test)]
mod tests {
    use super::{file_version, Stamp, RECIPE};

    fn stamp() -> Stamp {
        Stamp {
            recipe: RECIPE,
            kubernetes: "v1.20.2".into(),
            source: "1.20.5+really1.20.2-1.1+deb12u1".into(),
            etcd: "3.4.23-4+b4".into(),
            go: "1.19.8-2".into(),
        }
    }

    #[test]
    fn stamp_round_trips() {
        let s = stamp();
        assert_eq!(Stamp::parse(&s.render()), Some(s.clone()));
        assert!(s.is_current("v1.20.2"));
        assert!(!s.is_current("v1.21.0"));
    }

    #[test]
    fn incomplete_or_old_stamps_are_not_trusted() {
        let text = stamp().render();
        let truncated: String = text.lines().take(3).map(|l| format!("{l}\n")).collect();
        assert_eq!(Stamp::parse(&truncated), None);
        assert_eq!(Stamp::parse(""), None);
        assert_eq!(Stamp::parse(&text.replace("go=1.19.8-2", "go=")), None);
        let old = Stamp::parse(&text.replace(&format!("recipe={RECIPE}"), "recipe=0"));
        assert!(old.is_some_and(|s| !s.is_current("v1.20.2")));
    }

    #[test]
    fn reads_versions_from_file_names() {
        assert_eq!(
            file_version("etcd-server_3.4.23-4+b4_amd64.deb", "etcd-server").as_deref(),
            Some("3.4.23-4+b4")
        );
        assert_eq!(
            file_version("golang-1.19-src_1.19.8-2_all.deb", "golang-1.19-src").as_deref(),
            Some("1.19.8-2")
        );
        assert_eq!(
            file_version(
                "kubernetes_1.20.5+really1.20.2-1.1+deb12u1.dsc",
                "kubernetes"
            )
            .as_deref(),
            Some("1.20.5+really1.20.2-1.1+deb12u1")
        );
        assert_eq!(
            file_version("rsync_1%3a3.2_amd64.deb", "rsync").as_deref(),
            Some("1:3.2")
        );
        // Another package sharing the prefix, or another kind of file, is not a match.
        assert_eq!(
            file_version("etcd-server-x_1_amd64.deb", "etcd-server"),
            None
        );
        assert_eq!(file_version("etcd-client_1_amd64.deb", "etcd"), None);
        assert_eq!(
            file_version("kubernetes_1.20.2.orig.tar.gz", "kubernetes"),
            None
        );
    }
}
