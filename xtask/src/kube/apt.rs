//! A private apt configuration in the cache (its own sources with `deb` and `deb-src` lines for
//! bookworm, lists, package cache and empty dpkg status): downloads Debian packages and source
//! packages without touching the host's apt state or taking its locks.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context as _;

use crate::util::output;

/// Where the host's apt sources are read from (their archive URI and keyring are reused).
const HOST_SOURCES: &str = "/etc/apt";

/// One entry of the host's sources (deb822 stanza or one-line form).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Source {
    types: Vec<String>,
    uris: Vec<String>,
    suites: Vec<String>,
    components: Vec<String>,
    /// A keyring path, or (deb822 only) an inline key block with its continuation lines.
    signed_by: Option<String>,
}

/// Entries of a deb822 `.sources` file (stanzas with `Enabled: no` left out).
fn parse_deb822(text: &str) -> Vec<Source> {
    let mut out = Vec::new();
    for stanza in text.split("\n\n") {
        let mut source = Source::default();
        let mut enabled = true;
        let mut last_key = String::new();
        for line in stanza.lines().filter(|l| !l.starts_with('#')) {
            if line.starts_with([' ', '\t']) {
                if last_key == "signed-by" {
                    if let Some(s) = &mut source.signed_by {
                        s.push('\n');
                        s.push_str(line);
                    }
                }
                continue;
            }
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            last_key = key.trim().to_ascii_lowercase();
            let words = || value.split_whitespace().map(str::to_owned).collect();
            match last_key.as_str() {
                "types" => source.types = words(),
                "uris" => source.uris = words(),
                "suites" => source.suites = words(),
                "components" => source.components = words(),
                "signed-by" => source.signed_by = Some(value.trim().to_owned()),
                "enabled" => enabled = value.trim() != "no",
                _ => {}
            }
        }
        if enabled && !source.uris.is_empty() {
            out.push(source);
        }
    }
    out
}

/// Entries of a one-line `sources.list`: `deb [signed-by=/k.gpg arch=amd64] URI SUITE COMP...`.
fn parse_one_line(text: &str) -> Vec<Source> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        let Some((kind, rest)) = line.split_once(char::is_whitespace) else {
            continue;
        };
        if kind != "deb" && kind != "deb-src" {
            continue;
        }
        let mut rest = rest.trim_start();
        let mut signed_by = None;
        if let Some(options) = rest.strip_prefix('[') {
            let Some((options, after)) = options.split_once(']') else {
                continue;
            };
            signed_by = options
                .split_whitespace()
                .find_map(|o| o.strip_prefix("signed-by="))
                .map(str::to_owned);
            rest = after;
        }
        let mut words = rest.split_whitespace().map(str::to_owned);
        let (Some(uri), Some(suite)) = (words.next(), words.next()) else {
            continue;
        };
        out.push(Source {
            types: vec![kind.to_owned()],
            uris: vec![uri],
            suites: vec![suite],
            components: words.collect(),
            signed_by,
        });
    }
    out
}

/// The first binary-package entry serving `suite`'s main component.
fn archive_of(sources: &[Source], suite: &str) -> Option<(String, Option<String>)> {
    sources
        .iter()
        .find(|s| {
            s.types.iter().any(|t| t == "deb")
                && s.suites.iter().any(|x| x == suite)
                && s.components.iter().any(|c| c == "main")
        })
        .and_then(|s| Some((s.uris.first()?.clone(), s.signed_by.clone())))
}

/// Every source entry of the host's apt configuration.
fn host_sources() -> Vec<Source> {
    let root = Path::new(HOST_SOURCES);
    let mut files = vec![root.join("sources.list")];
    if let Ok(dir) = std::fs::read_dir(root.join("sources.list.d")) {
        let mut more: Vec<PathBuf> = dir.filter_map(Result::ok).map(|e| e.path()).collect();
        more.sort();
        files.extend(more);
    }
    let mut out = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        match file.extension().and_then(|e| e.to_str()) {
            Some("sources") => out.extend(parse_deb822(&text)),
            Some("list") => out.extend(parse_one_line(&text)),
            _ => {}
        }
    }
    out
}

/// The private configuration: `APT_CONFIG` for every apt command of the build.
#[derive(Debug)]
pub(crate) struct Apt {
    config: PathBuf,
}

/// The host's Debian release and its updates (6.12 kernels come from -security).
const RELEASE_SUITES: [&str; 3] = ["bookworm", "bookworm-updates", "bookworm-security"];

impl Apt {
    /// Writes the configuration under `dir` for `suite`, from the archive the host's sources name.
    pub(super) fn new(dir: &Path, suite: &str) -> anyhow::Result<Self> {
        let (uri, signed_by) = archive_of(&host_sources(), suite).with_context(|| {
            format!(
                "no `deb` source for Debian {suite} main in {HOST_SOURCES}/sources.list(.d): \
                 the Kubernetes build takes its archive address from there"
            )
        })?;
        let arch = output("dpkg", &["--print-architecture"])
            .map(|a| a.trim().to_owned())
            .context("dpkg --print-architecture failed")?;
        let mut sources =
            format!("Types: deb deb-src\nURIs: {uri}\nSuites: {suite}\nComponents: main\n");
        if let Some(key) = signed_by {
            sources.push_str(&format!("Signed-By: {key}\n"));
        }
        Self::write(dir, &sources, &arch)
    }

    /// A configuration under `dir` for another architecture's binary packages (`arm64`) of the
    /// host's release, its updates and security archive, from the archives the host's sources
    /// name; `apt-get update` runs once.
    pub(crate) fn foreign(dir: &Path, arch: &str) -> anyhow::Result<Self> {
        let host = host_sources();
        let mut sources = String::new();
        for suite in RELEASE_SUITES {
            let Some((uri, signed_by)) = archive_of(&host, suite) else {
                continue;
            };
            sources.push_str(&format!(
                "Types: deb\nURIs: {uri}\nSuites: {suite}\nComponents: main\n"
            ));
            if let Some(key) = signed_by {
                sources.push_str(&format!("Signed-By: {key}\n"));
            }
            sources.push('\n');
        }
        anyhow::ensure!(
            !sources.is_empty(),
            "no `deb` source for Debian {} main in {HOST_SOURCES}/sources.list(.d)",
            RELEASE_SUITES.join(", ")
        );
        let apt = Self::write(dir, &sources, arch)?;
        if !dir.join("state/lists/.updated").is_file() {
            crate::util::run(&mut apt.get(dir, &["update"]))
                .with_context(|| format!("apt-get update for {arch} packages"))?;
            std::fs::write(dir.join("state/lists/.updated"), "")?;
        }
        Ok(apt)
    }

    fn write(dir: &Path, sources: &str, arch: &str) -> anyhow::Result<Self> {
        for sub in [
            "state/lists/partial",
            "cache/archives/partial",
            "sources.list.d",
            "preferences.d",
        ] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        std::fs::write(dir.join("state/status"), "")?;
        std::fs::write(dir.join("sources.list.d/debian.sources"), sources)?;
        let d = dir.display();
        let config = format!(
            "Dir::State \"{d}/state\";\n\
             Dir::State::status \"{d}/state/status\";\n\
             Dir::Cache \"{d}/cache\";\n\
             Dir::Etc::SourceList \"{d}/sources.list\";\n\
             Dir::Etc::SourceParts \"{d}/sources.list.d\";\n\
             Dir::Etc::Preferences \"{d}/preferences\";\n\
             Dir::Etc::PreferencesParts \"{d}/preferences.d\";\n\
             APT::Architecture \"{arch}\";\n\
             APT::Architectures {{ \"{arch}\"; }};\n\
             Acquire::Languages \"none\";\n\
             Acquire::IndexTargets::deb::DEP-11::DefaultEnabled \"false\";\n\
             APT::Sandbox::User \"root\";\n"
        );
        let path = dir.join("apt.conf");
        std::fs::write(&path, config).with_context(|| format!("writing {}", path.display()))?;
        Ok(Self { config: path })
    }

    /// `apt-cache ARGS` under the private configuration.
    pub(crate) fn cache(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("apt-cache");
        cmd.args(args).env("APT_CONFIG", &self.config);
        cmd
    }

    /// `apt-get ARGS` under the private configuration, run in `dir`.
    pub(crate) fn get(&self, dir: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new("apt-get");
        cmd.arg("-q")
            .args(args)
            .env("APT_CONFIG", &self.config)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .current_dir(dir);
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::{archive_of, parse_deb822, parse_one_line};

    const DEB822: &str = "Types: deb\n\
        # http://snapshot.debian.org/archive/debian/20250520T000000Z\n\
        URIs: http://deb.debian.org/debian\n\
        Suites: bookworm bookworm-updates\n\
        Components: main\n\
        Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\
        \n\
        Types: deb\n\
        URIs: http://deb.debian.org/debian-security\n\
        Suites: bookworm-security\n\
        Components: main\n";

    #[test]
    fn finds_the_archive_in_deb822() {
        let sources = parse_deb822(DEB822);
        assert_eq!(sources.len(), 2);
        assert_eq!(
            archive_of(&sources, "bookworm"),
            Some((
                "http://deb.debian.org/debian".into(),
                Some("/usr/share/keyrings/debian-archive-keyring.gpg".into())
            ))
        );
        assert_eq!(archive_of(&sources, "trixie"), None);
    }

    #[test]
    fn skips_disabled_stanzas_and_keeps_inline_keys() {
        let text = "Types: deb\nURIs: http://a/debian\nSuites: bookworm\nComponents: main\n\
                    Enabled: no\n\nTypes: deb\nURIs: http://b/debian\nSuites: bookworm\n\
                    Components: main contrib\nSigned-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n";
        let sources = parse_deb822(text);
        assert_eq!(sources.len(), 1);
        let (uri, key) = archive_of(&sources, "bookworm").expect("an archive");
        assert_eq!(uri, "http://b/debian");
        assert_eq!(
            key.as_deref(),
            Some("\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .")
        );
    }

    #[test]
    fn reads_one_line_sources() {
        let text = "# comment\n\
            deb-src http://src/debian bookworm main\n\
            deb [arch=amd64 signed-by=/k.gpg] http://m/debian bookworm main contrib\n\
            deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n";
        let sources = parse_one_line(text);
        assert_eq!(sources.len(), 3);
        assert_eq!(
            archive_of(&sources, "bookworm"),
            Some(("http://m/debian".into(), Some("/k.gpg".into())))
        );
    }
}
