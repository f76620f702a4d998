//! Picks the kernel modules the tests need (veth, iptables legacy and nft) from an unpacked kernel,
//! with their dependencies read from each module's `.modinfo` (`depends=`), in load order.
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context as _;

/// Modules the tests use; their dependencies are added. Built-in ones are skipped.
pub(super) const WANTED: &[&str] = &[
    "veth",
    "bridge",
    "nf_conntrack",
    "nf_nat",
    "x_tables",
    "ip_tables",
    "ip6_tables",
    "iptable_nat",
    "iptable_filter",
    "iptable_mangle",
    "iptable_raw",
    "ip6table_nat",
    "ip6table_filter",
    "ip6table_mangle",
    "ip6table_raw",
    "xt_REDIRECT",
    "xt_owner",
    "xt_tcpudp",
    "xt_conntrack",
    "xt_multiport",
    "xt_mark",
    "xt_connmark",
    "xt_CT",
    "xt_TPROXY",
    "xt_socket",
    "xt_comment",
    "nf_tables",
    "nft_compat",
    "nft_chain_nat",
    "nft_nat",
    "nft_redir",
    "nft_ct",
];

/// A module ready for the initramfs.
#[derive(Debug)]
pub(super) struct Module {
    pub name: String,
    /// Uncompressed object.
    pub bytes: Vec<u8>,
}

fn normalize(name: &str) -> String {
    name.replace('-', "_")
}

/// Module name of `kernel/.../x-y.ko[.xz|.zst]`.
fn module_name(path: &Path) -> Option<String> {
    let file = path.file_name()?.to_str()?;
    let stem = file
        .strip_suffix(".ko")
        .or_else(|| file.strip_suffix(".ko.xz"))
        .or_else(|| file.strip_suffix(".ko.zst"))
        .or_else(|| file.strip_suffix(".ko.gz"))?;
    Some(normalize(stem))
}

fn walk(dir: &Path, out: &mut BTreeMap<String, PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            walk(&path, out)?;
        } else if let Some(name) = module_name(&path) {
            out.insert(name, path);
        }
    }
    Ok(())
}

fn read_module(path: &Path) -> anyhow::Result<Vec<u8>> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let tool = match ext {
        "ko" => return std::fs::read(path).with_context(|| format!("reading {}", path.display())),
        "xz" => "xz",
        "zst" => "zstd",
        _ => "gzip",
    };
    let out = Command::new(tool)
        .arg("-dc")
        .arg(path)
        .output()
        .with_context(|| format!("starting {tool} -dc {}", path.display()))?;
    anyhow::ensure!(out.status.success(), "{tool} -dc {} failed", path.display());
    Ok(out.stdout)
}

/// `depends=a,b` from the module's .modinfo strings.
fn depends(bytes: &[u8]) -> Vec<String> {
    let key = b"\0depends=";
    let Some(at) = bytes.windows(key.len()).position(|w| w == key) else {
        return Vec::new();
    };
    let rest = &bytes[at + key.len()..];
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    String::from_utf8_lossy(&rest[..end])
        .split(',')
        .filter(|s| !s.is_empty())
        .map(normalize)
        .collect()
}

/// The wanted modules and their dependencies, dependencies first, plus the names neither
/// built in nor shipped by this kernel.
pub(super) fn collect(modules_dir: &Path) -> anyhow::Result<(Vec<Module>, Vec<String>)> {
    let mut index = BTreeMap::new();
    walk(&modules_dir.join("kernel"), &mut index)
        .with_context(|| format!("listing {}", modules_dir.display()))?;
    let builtin: BTreeSet<String> = std::fs::read_to_string(modules_dir.join("modules.builtin"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| module_name(Path::new(l)))
        .collect();
    let mut state = Collect {
        index: &index,
        builtin: &builtin,
        seen: BTreeSet::new(),
        order: Vec::new(),
        absent: Vec::new(),
    };
    for name in WANTED {
        state.visit(&normalize(name))?;
    }
    Ok((state.order, state.absent))
}

struct Collect<'a> {
    index: &'a BTreeMap<String, PathBuf>,
    builtin: &'a BTreeSet<String>,
    seen: BTreeSet<String>,
    order: Vec<Module>,
    absent: Vec<String>,
}

impl Collect<'_> {
    fn visit(&mut self, name: &str) -> anyhow::Result<()> {
        if !self.seen.insert(name.to_owned()) || self.builtin.contains(name) {
            return Ok(());
        }
        let Some(path) = self.index.get(name) else {
            self.absent.push(name.to_owned());
            return Ok(());
        };
        let bytes = read_module(path)?;
        for dep in depends(&bytes) {
            self.visit(&dep)?;
        }
        self.order.push(Module {
            name: name.to_owned(),
            bytes,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{depends, module_name};
    use std::path::Path;

    #[test]
    fn reads_names_and_depends() {
        assert_eq!(
            module_name(Path::new("kernel/net/netfilter/xt_REDIRECT.ko.xz")).as_deref(),
            Some("xt_REDIRECT")
        );
        assert_eq!(
            module_name(Path::new("kernel/a/crc32c-intel.ko")).as_deref(),
            Some("crc32c_intel")
        );
        let info = b"\x7fELF..\0license=GPL\0depends=nf_nat,x_tables\0retpoline=Y\0";
        assert_eq!(depends(info), ["nf_nat", "x_tables"]);
        assert!(depends(b"\0depends=\0").is_empty());
    }
}
