//! Checks done before anything is loaded: privileges and kernel program-type support.
use aya::programs::ProgramType;

use crate::error::{Error, Result};

/// Fails with [`Error::NotRoot`] unless the effective uid is 0.
pub fn require_root() -> Result<()> {
    let euid = nix::unistd::geteuid().as_raw();
    if euid == 0 {
        Ok(())
    } else {
        Err(Error::NotRoot { euid })
    }
}

/// The program types the datapath needs, with the name users know them by.
const NEEDED: [(ProgramType, &str); 3] = [
    (ProgramType::CgroupSockAddr, "cgroup_sock_addr (connect4)"),
    (ProgramType::SockOps, "sock_ops"),
    (ProgramType::CgroupSockopt, "cgroup_sockopt (getsockopt)"),
];

/// Probes the kernel for every program type the datapath needs.
pub fn require_kernel_support() -> Result<()> {
    for (program_type, name) in NEEDED {
        match aya::sys::is_program_supported(program_type) {
            Ok(true) => {}
            Ok(false) => {
                return Err(Error::Unsupported {
                    program_type: name,
                    detail: String::new(),
                })
            }
            Err(e) => {
                return Err(Error::Unsupported {
                    program_type: name,
                    detail: format!(" (probe failed: {e})"),
                })
            }
        }
    }
    Ok(())
}
