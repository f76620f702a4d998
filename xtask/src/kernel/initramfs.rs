//! An initramfs as a map of guest paths (host files at their own absolute paths, with every shared
//! library `ldd` lists), written as one uncompressed newc cpio archive.
use std::{
    collections::BTreeMap,
    io::{BufWriter, Read as _, Write},
    path::{Component, Path, PathBuf},
    process::Command,
};

use anyhow::Context as _;

#[derive(Debug)]
enum Entry {
    Dir,
    /// Contents read from a host file when the archive is written.
    File {
        src: PathBuf,
        mode: u32,
    },
    Bytes {
        data: Vec<u8>,
        mode: u32,
    },
    Symlink(PathBuf),
    CharDev(u32, u32),
}

/// Guest paths (absolute) to what they hold.
#[derive(Debug, Default)]
pub(super) struct Tree {
    entries: BTreeMap<PathBuf, Entry>,
}

fn is_elf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// Paths `ldd` prints for `path` (libraries and the interpreter); empty for static binaries.
fn ldd(path: &Path) -> Vec<PathBuf> {
    let Ok(out) = Command::new("ldd").arg(path).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let p = l.split("=> ").nth(1).unwrap_or(l);
            let p = p.split(" (").next().unwrap_or(p).trim();
            p.starts_with('/').then(|| PathBuf::from(p))
        })
        .collect()
}

impl Tree {
    pub(super) fn contains(&self, path: &Path) -> bool {
        self.entries.contains_key(path)
    }

    fn parents(&mut self, path: &Path) {
        let mut p = PathBuf::from("/");
        let comps: Vec<Component> = path.components().collect();
        for c in comps.iter().take(comps.len().saturating_sub(1)) {
            p.push(c);
            if p != Path::new("/") {
                self.entries.entry(p.clone()).or_insert(Entry::Dir);
            }
        }
    }

    /// Inserts at `path` as the guest resolves it (the kernel unpacks the archive in path order, so
    /// nothing may be written through a symlink such as /lib -> usr/lib).
    fn insert(&mut self, path: &Path, entry: Entry) {
        let path = self.resolve(path);
        self.parents(&path);
        self.entries.insert(path, entry);
    }

    pub(super) fn dir(&mut self, path: &str) {
        self.insert(Path::new(path), Entry::Dir);
    }

    pub(super) fn symlink(&mut self, path: &str, target: &str) {
        self.insert(Path::new(path), Entry::Symlink(PathBuf::from(target)));
    }

    pub(super) fn char_dev(&mut self, path: &str, major: u32, minor: u32) {
        self.insert(Path::new(path), Entry::CharDev(major, minor));
    }

    pub(super) fn bytes(&mut self, path: &Path, data: Vec<u8>, mode: u32) {
        self.insert(path, Entry::Bytes { data, mode });
    }

    /// Copies host files whose top-level path is a symlink (/bin -> usr/bin on a merged-/usr host).
    pub(super) fn host_root_symlinks(&mut self) {
        for top in ["bin", "sbin", "lib", "lib64", "lib32", "libx32"] {
            if let Ok(target) = std::fs::read_link(Path::new("/").join(top)) {
                self.insert(&Path::new("/").join(top), Entry::Symlink(target));
            }
        }
    }

    /// Adds the host file `path` at the same guest path (its real file at its canonical path, `path`
    /// a symlink to it when they differ), and every library it needs. With `stripped`, `src` replaces
    /// the contents (a debug-stripped copy of `path`).
    pub(super) fn host_file(&mut self, path: &Path, stripped: Option<&Path>) -> anyhow::Result<()> {
        let real = path
            .canonicalize()
            .with_context(|| format!("{} is missing", path.display()))?;
        let guest = self.resolve(path);
        if guest != real && !self.entries.contains_key(&guest) {
            self.insert(&guest, Entry::Symlink(real.clone()));
        }
        if self.entries.contains_key(&real) {
            return Ok(());
        }
        let mode =
            std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&real)?.permissions());
        let src = stripped.map_or_else(|| real.clone(), Path::to_path_buf);
        self.insert(
            &real,
            Entry::File {
                src,
                mode: mode & 0o7777,
            },
        );
        if is_elf(&real) {
            for lib in ldd(&real) {
                self.host_file(&lib, None)?;
            }
        }
        Ok(())
    }

    /// `path` with a top-level relative symlink of the guest replaced (/bin/sh -> /usr/bin/sh).
    pub(super) fn resolve(&self, path: &Path) -> PathBuf {
        let mut comps = path.components();
        let (Some(Component::RootDir), Some(Component::Normal(top))) = (comps.next(), comps.next())
        else {
            return path.to_path_buf();
        };
        if comps.as_path().as_os_str().is_empty() {
            return path.to_path_buf();
        }
        match self.entries.get(&Path::new("/").join(top)) {
            Some(Entry::Symlink(t)) if t.is_relative() => {
                Path::new("/").join(t).join(comps.as_path())
            }
            _ => path.to_path_buf(),
        }
    }

    /// Adds every file under the host directory `dir` (not following symlinked directories).
    pub(super) fn host_dir(&mut self, dir: &Path) -> anyhow::Result<()> {
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            let meta = std::fs::symlink_metadata(&path)?;
            if meta.is_dir() {
                self.host_dir(&path)?;
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path)?;
                self.insert(&path, Entry::Symlink(target));
            } else {
                self.host_file(&path, None)?;
            }
        }
        Ok(())
    }

    /// Adds every file, symlink and directory under `dir` of another system's tree unpacked at
    /// `root` (an arm64 userland), at its path below `root`; a directory the guest already has as
    /// a top-level symlink (/lib -> usr/lib) stays one.
    pub(super) fn foreign_dir(&mut self, root: &Path, dir: &Path) -> anyhow::Result<()> {
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            let guest = Path::new("/").join(path.strip_prefix(root)?);
            let meta = std::fs::symlink_metadata(&path)?;
            if meta.is_dir() {
                if !self.entries.contains_key(&guest) {
                    self.insert(&guest, Entry::Dir);
                }
                self.foreign_dir(root, &path)?;
            } else if meta.file_type().is_symlink() {
                self.insert(&guest, Entry::Symlink(std::fs::read_link(&path)?));
            } else if meta.is_file() {
                let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions());
                self.insert(
                    &guest,
                    Entry::File {
                        src: path,
                        mode: mode & 0o7777,
                    },
                );
            }
        }
        Ok(())
    }

    /// Writes the tree as a newc cpio archive; returns its size in bytes.
    pub(super) fn write_cpio(&self, out: &Path) -> anyhow::Result<u64> {
        let file =
            std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
        let mut w = Cpio {
            out: BufWriter::new(file),
            ino: 1,
            written: 0,
        };
        for (path, entry) in &self.entries {
            let name = path.strip_prefix("/").unwrap_or(path);
            let name = name.to_string_lossy();
            match entry {
                Entry::Dir => w.entry(&name, 0o040_755, 0, &[])?,
                Entry::File { src, mode } => {
                    let data =
                        std::fs::read(src).with_context(|| format!("reading {}", src.display()))?;
                    w.entry(&name, 0o100_000 | mode, 0, &data)?;
                }
                Entry::Bytes { data, mode } => w.entry(&name, 0o100_000 | mode, 0, data)?,
                Entry::Symlink(t) => {
                    w.entry(&name, 0o120_777, 0, t.to_string_lossy().as_bytes())?;
                }
                Entry::CharDev(major, minor) => {
                    w.entry(&name, 0o020_600, (major << 8) | minor, &[])?;
                }
            }
        }
        w.entry("TRAILER!!!", 0, 0, &[])?;
        w.out.flush()?;
        Ok(w.written)
    }
}

struct Cpio<W: Write> {
    out: W,
    ino: u32,
    written: u64,
}

impl<W: Write> Cpio<W> {
    fn pad(&mut self) -> std::io::Result<()> {
        let pad = (4 - (self.written % 4) as usize) % 4;
        self.written += pad as u64;
        self.out.write_all(&[0u8; 3][..pad])
    }

    /// One newc record; `rdev` packs major << 8 | minor.
    fn entry(&mut self, name: &str, mode: u32, rdev: u32, data: &[u8]) -> std::io::Result<()> {
        let fields = [
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            u32::try_from(data.len()).unwrap_or(u32::MAX),
            0,
            0,
            rdev >> 8,
            rdev & 0xff,
            u32::try_from(name.len() + 1).unwrap_or(u32::MAX),
            0,
        ];
        self.ino += 1;
        let mut header = String::from("070701");
        for f in fields {
            header.push_str(&format!("{f:08x}"));
        }
        self.out.write_all(header.as_bytes())?;
        self.out.write_all(name.as_bytes())?;
        self.out.write_all(&[0])?;
        self.written += header.len() as u64 + name.len() as u64 + 1;
        self.pad()?;
        self.out.write_all(data)?;
        self.written += data.len() as u64;
        self.pad()
    }
}

#[cfg(test)]
mod tests {
    use super::Cpio;

    #[test]
    fn newc_records_are_aligned() {
        let mut w = Cpio {
            out: Vec::new(),
            ino: 1,
            written: 0,
        };
        w.entry("init", 0o100_755, 0, b"#!/bin/sh\n")
            .expect("entry");
        w.entry("TRAILER!!!", 0, 0, &[]).expect("trailer");
        assert_eq!(w.out.len() % 4, 0);
        assert_eq!(w.out.len() as u64, w.written);
        assert!(w.out.starts_with(b"070701"));
        let text = String::from_utf8_lossy(&w.out);
        assert!(text.contains("init\0"), "{text}");
    }
}
