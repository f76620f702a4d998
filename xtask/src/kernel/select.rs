//! `--kernel-tests`: which tests of the one integration binary run in the guests, by module
//! (`outbound`) and name filters (`conformance=dns+ipv6`), resolved to exact test paths.
use std::{path::Path, process::Command};

use anyhow::{bail, Context as _};

use super::DEFAULT_TESTS;

/// The one integration test binary (tests/tests/it); `--kernel-tests` names its modules.
pub(super) const TEST_BINARY: &str = "it";

/// Every test of the binary `exe`, by its path (`outbound::redirects_...`), as it lists them
/// when `cmd` runs it (directly, or under qemu-user for another architecture).
pub(super) fn listed_tests(cmd: &mut Command, exe: &Path) -> anyhow::Result<Vec<String>> {
    let out = cmd
        .args(["--list", "--format", "terse"])
        .output()
        .with_context(|| format!("listing the tests of {}", exe.display()))?;
    anyhow::ensure!(out.status.success(), "{} --list failed", exe.display());
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(str::to_owned)
        .collect())
}

/// The tests of module `area` (its own, not another module's whose name ends the same) whose
/// name within it matches any of `filters` (all of them when none is given).
pub(super) fn area_tests(listed: &[String], area: &str, filters: &[String]) -> Vec<String> {
    listed
        .iter()
        .filter(|t| {
            t.strip_prefix(area)
                .and_then(|r| r.strip_prefix("::"))
                .is_some_and(|rest| {
                    filters.is_empty() || filters.iter().any(|f| rest.contains(f.as_str()))
                })
        })
        .cloned()
        .collect()
}

/// `outbound,conformance=dns+ipv6` -> `[("outbound", []), ("conformance", ["dns", "ipv6"])]`
/// (each filter a libtest name filter; a test runs when it matches any of them).
pub(super) fn selection(spec: &str) -> anyhow::Result<Vec<(String, Vec<String>)>> {
    let out: Vec<(String, Vec<String>)> = spec
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|item| match item.split_once('=') {
            Some((name, filters)) => (
                name.to_owned(),
                filters
                    .split('+')
                    .filter(|f| !f.is_empty())
                    .map(str::to_owned)
                    .collect(),
            ),
            None => (item.to_owned(), Vec::new()),
        })
        .collect();
    if out.is_empty() {
        bail!("--kernel-tests is empty: name modules of tests/tests/it, e.g. {DEFAULT_TESTS}");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_area_is_its_own_module_only() {
        let listed: Vec<String> = [
            "inbound::steers",
            "explain_inbound::explains",
            "conformance::dns_uid_gid",
            "conformance::basic",
        ]
        .map(str::to_owned)
        .to_vec();
        assert_eq!(area_tests(&listed, "inbound", &[]), ["inbound::steers"]);
        assert_eq!(
            area_tests(&listed, "conformance", &["dns".to_owned()]),
            ["conformance::dns_uid_gid"]
        );
        assert!(area_tests(&listed, "outbound", &[]).is_empty());
    }
}
