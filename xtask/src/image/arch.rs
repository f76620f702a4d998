//! The image's architectures: amd64 and arm64, each a static musl target of its own. arm64's
//! C parts (ring) are compiled and linked with Debian's `gcc-aarch64-linux-gnu`
//! (`.cargo/config.toml` names it), against the musl the Rust target ships (self-contained).
use anyhow::bail;

/// One architecture of the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arch {
    Amd64,
    Arm64,
}

impl Arch {
    /// Both, amd64 first (the host's, whose image the tests run).
    pub(crate) const ALL: [Self; 2] = [Self::Amd64, Self::Arm64];

    /// The static Rust target (`rustup target add`, which `cargo xtask setup` does).
    pub(crate) fn target(self) -> &'static str {
        match self {
            Self::Amd64 => "x86_64-unknown-linux-musl",
            Self::Arm64 => "aarch64-unknown-linux-musl",
        }
    }

    /// The OCI (and Debian) name of the architecture.
    pub(crate) fn oci(self) -> &'static str {
        match self {
            Self::Amd64 => "amd64",
            Self::Arm64 => "arm64",
        }
    }

    /// The ELF `e_machine` its binaries carry.
    pub(crate) fn elf_machine(self) -> u16 {
        match self {
            Self::Amd64 => object::elf::EM_X86_64,
            Self::Arm64 => object::elf::EM_AARCH64,
        }
    }
}

/// `--arch amd64|arm64|all`.
pub(crate) fn parse(arg: &str) -> anyhow::Result<Vec<Arch>> {
    match arg {
        "all" => Ok(Arch::ALL.to_vec()),
        "amd64" | "x86_64" => Ok(vec![Arch::Amd64]),
        "arm64" | "aarch64" => Ok(vec![Arch::Arm64]),
        other => bail!("--arch {other:?}: expected amd64, arm64 or all"),
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, Arch};

    #[test]
    fn arch_names_parse_and_bad_ones_are_named() {
        assert_eq!(parse("all").unwrap(), Arch::ALL);
        assert_eq!(parse("arm64").unwrap(), [Arch::Arm64]);
        assert_eq!(parse("x86_64").unwrap(), [Arch::Amd64]);
        let err = parse("riscv64").unwrap_err().to_string();
        assert!(err.contains("\"riscv64\""), "{err}");
    }
}
