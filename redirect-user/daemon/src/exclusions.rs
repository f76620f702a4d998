//! The plugin's exclusions as the daemon's reconcile reads them: our entry in the runtime's
//! conflist (`--cni-conf-dir`), so a pod the plugin skipped at ADD (`exclude_namespaces`,
//! `daemon_pods`) is not enrolled in place seconds later. Read again at each reconcile that has
//! a pod to enroll; while no entry can be read (not installed yet, a fight), the last one read
//! holds, and before any, install-cni's defaults.
use std::path::PathBuf;

use redirect_daemon_api::Exclusions;

/// The exclusions of the node's conflist, the last ones read.
#[derive(Debug)]
pub(crate) struct ConfExclusions {
    dir: PathBuf,
    last: Exclusions,
}

impl ConfExclusions {
    /// For the conflists in `dir`, starting from install-cni's defaults.
    #[must_use]
    pub(crate) fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            last: Exclusions::install_default(),
        }
    }

    /// Reads our entry again (keeping the last exclusions when none can be read).
    pub(crate) fn read(&mut self) -> &Exclusions {
        let entry = redirect_install::find_config(&self.dir)
            .ok()
            .and_then(|found| redirect_install::our_entry(&found.json).cloned());
        match entry.map(serde_json::from_value::<Exclusions>) {
            Some(Ok(e)) => self.last = e,
            Some(Err(error)) => {
                tracing::warn!(dir = %self.dir.display(), %error, "our conflist entry's exclusions \
                    do not parse: the last ones read hold");
            }
            None => {}
        }
        &self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_in_the_conflist_decides_and_the_last_one_holds_while_none_is_there() {
        let dir = std::env::temp_dir().join(format!("redirect-excl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let mut e = ConfExclusions::new(dir.clone());
        assert_eq!(e.read(), &Exclusions::install_default(), "no conflist yet");
        let list = serde_json::json!({"cniVersion": "1.0.0", "name": "k8s", "plugins": [
            {"type": "bridge"},
            {"type": "redirect-cni", "exclude_namespaces": ["batch"]}
        ]});
        let file = dir.join("10-k8s.conflist");
        std::fs::write(&file, list.to_string()).expect("write");
        assert_eq!(e.read().namespaces, ["batch"]);
        let without = serde_json::json!({"cniVersion": "1.0.0", "name": "k8s", "plugins": [{"type": "bridge"}]});
        std::fs::write(&file, without.to_string()).expect("write");
        assert_eq!(e.read().namespaces, ["batch"], "the last one read holds");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
