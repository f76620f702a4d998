//! The readiness check (`install-cni --check`): the plugin binary in place, and the
//! configuration the runtime uses holding our entry, or chaining istio-cni without it while the
//! watcher stands by.
use crate::{
    confdir::{self, Kind},
    conflist,
    error::{io, Error, Result},
    install::{as_list, mode_of, refuse, Options},
    plugin,
};

/// The readiness check: the binary is the plugin's, executable, and the highest-priority
/// configuration holds our entry exactly, or (standing by) chains istio-cni and not ours.
/// Returns a description of what is in place.
pub fn check(opts: &Options) -> Result<String> {
    // The configuration first: install-cni refuses one the plugin would fail on (and so never
    // copies the binary), and that is what the operator has to fix.
    let found = confdir::find(&opts.conf_dir).map_err(|e| Error::NotInPlace(e.to_string()))?;
    refuse(&found, opts).map_err(|e| Error::NotInPlace(e.to_string()))?;
    let bin = opts.bin_dir.join(plugin::NAME);
    let want = std::fs::read(&opts.plugin).map_err(|e| {
        Error::NotInPlace(format!(
            "the plugin {} cannot be read: {e}",
            opts.plugin.display()
        ))
    })?;
    match std::fs::read(&bin) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::NotInPlace(format!(
                "{} does not exist",
                bin.display()
            )))
        }
        Err(e) => return Err(io("reading", &bin)(e)),
        Ok(there) if there != want => {
            return Err(Error::NotInPlace(format!(
                "{} is not {} (another build)",
                bin.display(),
                opts.plugin.display()
            )))
        }
        Ok(_) if mode_of(&bin) & 0o111 == 0 => {
            return Err(Error::NotInPlace(format!(
                "{} is not executable",
                bin.display()
            )))
        }
        Ok(_) => {}
    }
    let shown = found.path.display();
    if conflist::istio_cni_chained(&as_list(&found)) {
        if conflist::has_any(&found.json) {
            return Err(Error::NotInPlace(format!(
                "the highest-priority configuration {shown} chains istio-cni and our entry: \
                    `install-cni --watch` takes ours out at its next pass"
            )));
        }
        return Ok(format!(
            "{}; istio-cni is chained in {shown} and captures new pods: our entry stands by \
                until istio-cni's leaves",
            bin.display()
        ));
    }
    if found.kind == Kind::Single {
        return Err(Error::NotInPlace(format!(
            "the highest-priority configuration {shown} is a single plugin, without our entry"
        )));
    }
    if !conflist::has(&found.json, &opts.entry) {
        let why = if conflist::has_any(&found.json) {
            "holds another redirect-cni entry than this one"
        } else {
            "holds no redirect-cni entry"
        };
        return Err(Error::NotInPlace(format!(
            "the highest-priority configuration {shown} {why}"
        )));
    }
    Ok(format!("{} and our entry in {shown}", bin.display()))
}
