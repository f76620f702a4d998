//! install-cni, uninstall-cni and the readiness check: the binary, then our entry in the
//! configuration the runtime uses, recorded in the state file; undone from that record.
use std::{
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
};

use serde_json::Value;

use crate::{
    atomic, confdir,
    confdir::Kind,
    conflist,
    error::{io, Error, Result},
    plugin, state,
};

/// Where and what to install.
#[derive(Debug, Clone)]
pub struct Options {
    /// The CNI bin directory (`/opt/cni/bin`).
    pub bin_dir: PathBuf,
    /// The CNI configuration directory (`/etc/cni/net.d`).
    pub conf_dir: PathBuf,
    /// The plugin binary to copy.
    pub plugin: PathBuf,
    /// Our conflist entry ([`conflist::entry`]).
    pub entry: Value,
    /// The state file.
    pub state_file: PathBuf,
    /// The CNI versions the plugin speaks (`redirect_daemon_api::SUPPORTED_CNI_VERSIONS`): a
    /// configuration of another version is refused.
    pub plugin_versions: Vec<String>,
}

/// What [`install`] changed in the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Our entry was there already: nothing written.
    Unchanged,
    /// Inserted into a file not edited before (or our entry updated in a file we wrote).
    Inserted,
    /// Put back into a file another writer rewrote without it since we wrote it.
    Reinserted,
    /// A re-insertion was needed and the gate (the watcher's fight rule) said no: nothing
    /// written.
    Held,
    /// istio-cni is chained in the configuration (`install --watch` only): it captures new
    /// pods, so our entry stays out (and leaves, when it was in) until istio-cni's leaves.
    StandingBy,
}

/// What [`install`] did.
#[derive(Debug, Clone)]
pub struct Installed {
    /// The binary.
    pub plugin: plugin::Copied,
    /// The conflist holding our entry.
    pub config: PathBuf,
    /// The single-plugin file it was converted from now, if it was.
    pub converted_from: Option<PathBuf>,
    /// The change.
    pub change: Change,
}

pub(crate) fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).map_or(0o644, |m| m.permissions().mode() & 0o7777)
}

/// Copies the binary and puts our entry into the highest-priority configuration; writes
/// nothing that is already as it should be.
/// A configuration that chains istio-cni is refused, naming it (see [`IstioCni`]).
pub fn install(opts: &Options) -> Result<Installed> {
    install_gated(opts, &mut || true, IstioCni::Refuse)
}

/// What [`install_gated`] does with a configuration that chains istio-cni.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IstioCni {
    /// Refuse it, writing nothing (a one-shot install: the operator is told).
    Refuse,
    /// Stand by (the watcher): the binary is copied, our entry stays out of the file (taken
    /// out when it was in: istio-cni came back, a rollback) until istio-cni's entry leaves,
    /// then goes in at the next pass. A pod never starts with both, and the hand-over in
    /// either direction leaves no file without one of the two for longer than a pass.
    StandBy,
}

/// [`install`], asking `gate` before a re-insertion (decided on the very text it would
/// replace); a no is [`Change::Held`].
pub(crate) fn install_gated(
    opts: &Options,
    gate: &mut dyn FnMut() -> bool,
    istio: IstioCni,
) -> Result<Installed> {
    let before = state::load_in(&opts.state_file, &opts.conf_dir)?;
    let mut st = before.clone().unwrap_or_default();
    // The configuration first (none: nothing is copied), then the binary, then the entry:
    // an entry never names a binary that is not there.
    let found = confdir::find(&opts.conf_dir)?;
    let chained = conflist::istio_cni_chained(&as_list(&found));
    if chained && istio == IstioCni::Refuse {
        return Err(Error::Refused {
            path: found.path.clone(),
            why: conflist::ISTIO_CNI_CHAINED.into(),
        });
    }
    refuse(&found, opts)?;
    let copied = plugin::install(&opts.plugin, &opts.bin_dir, st.plugin.as_ref())?;
    st.plugin = Some(state::Plugin {
        path: copied.path.clone(),
        sha256: copied.sha256.clone(),
        stamp: Some(copied.stamp.clone()),
    });
    if chained {
        if let Some(old) = st.config.take() {
            for done in undo_config(&old)? {
                tracing::info!(file = %old.path.display(), done,
                    "istio-cni is chained: our entry leaves while it captures new pods");
            }
        }
        state::save(&opts.state_file, &st, before.as_ref())?;
        return Ok(Installed {
            plugin: copied,
            config: found.path,
            converted_from: None,
            change: Change::StandingBy,
        });
    }
    let target = match found.kind {
        Kind::List => found.path.clone(),
        Kind::Single => found.path.with_extension("conflist"),
    };
    // The highest-priority file changed (a new primary): our entry leaves the old one first.
    if let Some(old) = st.config.take_if(|c| c.path != target) {
        for done in undo_config(&old)? {
            tracing::info!(file = %old.path.display(), done,
                "our entry moved to the new highest-priority configuration");
        }
    }
    let mine = st.config.take();
    let reinsert = match (&mine, found.kind) {
        (Some(_), Kind::Single) => true,
        (Some(c), Kind::List) => c.written != found.text && !conflist::has_any(&found.json),
        (None, _) => false,
    };
    if reinsert && !gate() {
        return Ok(Installed {
            plugin: plugin::Copied {
                path: opts.bin_dir.join(plugin::NAME),
                sha256: String::new(),
                written: false,
                stamp: String::new(),
            },
            config: target,
            converted_from: None,
            change: Change::Held,
        });
    }
    let (change, converted_from) = match found.kind {
        Kind::List if conflist::has(&found.json, &opts.entry) => {
            st.config = mine;
            (Change::Unchanged, None)
        }
        Kind::List => {
            let text = conflist::render(&conflist::with_entry(&found.json, &opts.entry));
            atomic::replace(
                &found.path,
                &found.text,
                text.as_bytes(),
                mode_of(&found.path),
            )?;
            let (change, original, from) = match mine {
                // Ours, our entry changed (other options): the original stays what it was.
                Some(c) if c.written == found.text => {
                    (Change::Inserted, c.original, c.converted_from)
                }
                Some(_) if !conflist::has_any(&found.json) => {
                    (Change::Reinserted, found.text, None)
                }
                None if !conflist::has_any(&found.json) => (Change::Inserted, found.text, None),
                // An entry of ours we did not write (an older install whose record is gone):
                // the original is the file without it.
                _ => (
                    Change::Inserted,
                    conflist::render(&conflist::without_entry(&found.json)),
                    None,
                ),
            };
            st.config = Some(state::Config {
                path: found.path.clone(),
                converted_from: from,
                original,
                written: text,
            });
            (change, None)
        }
        Kind::Single => {
            if target.exists() && mine.is_none() {
                return Err(Error::WouldOverwrite {
                    from: found.path,
                    to: target,
                });
            }
            let list = conflist::from_single(&found.json);
            let text = conflist::render(&conflist::with_entry(&list, &opts.entry));
            // The conflist first, then the .conf goes: the directory is never without one.
            atomic::write(&target, text.as_bytes(), mode_of(&found.path))?;
            atomic::remove(&found.path)?;
            st.config = Some(state::Config {
                path: target.clone(),
                converted_from: Some(found.path.clone()),
                original: found.text,
                written: text,
            });
            let change = if mine.is_some() {
                Change::Reinserted
            } else {
                Change::Inserted
            };
            (change, Some(found.path))
        }
    };
    if change == Change::Reinserted {
        st.reinserts += 1;
    }
    state::save(&opts.state_file, &st, before.as_ref())?;
    Ok(Installed {
        plugin: copied,
        config: target,
        converted_from,
        change,
    })
}

/// [`Error::Refused`] when the plugin would fail on the configuration `found` (a single
/// plugin's version is the one its conflist would have).
pub(crate) fn refuse(found: &confdir::Found, opts: &Options) -> Result<()> {
    match conflist::refusal(&as_list(found), &opts.plugin_versions) {
        Some(why) => Err(Error::Refused {
            path: found.path.clone(),
            why,
        }),
        None => Ok(()),
    }
}

/// `found` as the conflist the runtime reads (a single plugin as a list of one).
pub(crate) fn as_list(found: &confdir::Found) -> Value {
    match found.kind {
        Kind::List => found.json.clone(),
        Kind::Single => conflist::from_single(&found.json),
    }
}

/// Undoes one configuration edit; returns what was done, one sentence each.
fn undo_config(c: &state::Config) -> Result<Vec<String>> {
    let shown = c.path.display();
    let current = match std::fs::read_to_string(&c.path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(vec![format!("{shown} is gone: nothing to remove")])
        }
        Err(e) => return Err(io("reading", &c.path)(e)),
    };
    if current == c.written {
        return Ok(match &c.converted_from {
            Some(from) if from.exists() => {
                atomic::remove(&c.path)?;
                vec![format!(
                    "{shown} removed ({} was written again since: kept as it is)",
                    from.display()
                )]
            }
            Some(from) => {
                atomic::write(from, c.original.as_bytes(), mode_of(&c.path))?;
                atomic::remove(&c.path)?;
                vec![format!("{} restored, {shown} removed", from.display())]
            }
            None => {
                atomic::write(&c.path, c.original.as_bytes(), mode_of(&c.path))?;
                vec![format!("{shown} restored as it was before install-cni")]
            }
        });
    }
    let json: Value = match serde_json::from_str(&current) {
        Ok(json) => json,
        Err(e) => {
            return Ok(vec![format!(
                "{shown} changed since install-cni wrote it and is not JSON ({e}): left alone"
            )])
        }
    };
    if !conflist::has_any(&json) {
        return Ok(vec![format!(
            "{shown} holds no entry of ours (rewritten since): left alone"
        )]);
    }
    let text = conflist::render(&conflist::without_entry(&json));
    atomic::write(&c.path, text.as_bytes(), mode_of(&c.path))?;
    let also = c.converted_from.as_ref().map_or(String::new(), |f| {
        format!(
            "; {} is not restored, the conflist holding the rest",
            f.display()
        )
    });
    Ok(vec![format!(
        "{shown} changed since install-cni wrote it: only our entry removed{also}"
    )])
}

/// Undoes what the state file records (only files in `conf_dir` and the plugin binary, see
/// [`state::load_in`]); without one, does nothing. Returns what was done.
pub fn uninstall(state_file: &Path, conf_dir: &Path) -> Result<Vec<String>> {
    let Some(st) = state::load_in(state_file, conf_dir)? else {
        return Ok(vec![format!(
            "nothing to undo: no install state at {}",
            state_file.display()
        )]);
    };
    let mut done = Vec::new();
    if let Some(c) = &st.config {
        done.extend(undo_config(c)?);
    }
    if let Some(p) = &st.plugin {
        let shown = p.path.display();
        done.push(match plugin::file_digest(&p.path)? {
            Some(d) if d == p.sha256 => {
                atomic::remove(&p.path)?;
                format!("{shown} removed")
            }
            Some(_) => format!("{shown} was replaced since install-cni wrote it: left alone"),
            None => format!("{shown} is gone already"),
        });
    }
    atomic::remove(state_file)?;
    Ok(done)
}
