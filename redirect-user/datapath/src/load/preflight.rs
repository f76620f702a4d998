//! Checks done before anything is loaded: privileges and kernel program-type support.
use crate::error::{Error, Result};

/// Fails with [`Error::NotRoot`] unless the effective uid is 0.
pub fn require_root() -> Result<()> {
    let euid = rustix::process::geteuid().as_raw();
    if euid == 0 {
        Ok(())
    } else {
        Err(Error::NotRoot { euid })
    }
}

/// Probes the kernel for every feature the datapath uses ([`crate::load::probe::FEATURES`]); the first
/// missing required one is an error naming it, what needs it and the kernel that added it.
/// Returns every answer (the loader picks its sk_lookup program from them).
pub(crate) fn require_kernel_support() -> Result<Vec<crate::load::probe::Probed>> {
    crate::load::probe::require_all()
}
