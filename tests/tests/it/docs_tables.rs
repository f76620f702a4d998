//! The docs' tables and what they describe: no markdown table is cut in two by a blank line
//! (the second half renders as text), and deploy/README.md's row for rbac.yaml names, for each
//! resource of every ClusterRole and Role there, every verb rbac.yaml grants on it.
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::deploy::manifests;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every markdown file of the repository's docs.
fn markdown() -> Vec<PathBuf> {
    let r = root();
    let mut files = vec![
        r.join("README.md"),
        r.join("ARCHITECTURE.md"),
        r.join("BENCHMARKS.md"),
        r.join("deploy/README.md"),
    ];
    for entry in std::fs::read_dir(r.join("docs")).expect("docs/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files
}

/// `| ... |` rows with one blank line between them, the second not a new table's header.
fn split_tables(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let is_row = |l: &str| l.starts_with('|');
    let is_rule = |l: &str| l.starts_with('|') && l.chars().all(|c| "|-: ".contains(c));
    (1..lines.len().saturating_sub(1))
        .filter(|&i| {
            lines[i].trim().is_empty()
                && is_row(lines[i - 1])
                && is_row(lines[i + 1])
                && !lines.get(i + 2).is_some_and(|l| is_rule(l))
        })
        .map(|i| i + 1)
        .collect()
}

#[test]
fn no_table_is_cut_by_a_blank_line() {
    assert_eq!(split_tables("| a |\n\n| b |\n"), [2]);
    assert!(split_tables("| a |\n|---|\n\n| b |\n|---|\n").is_empty());
    for file in markdown() {
        let text = std::fs::read_to_string(&file).expect("read");
        let cut = split_tables(&text);
        assert!(
            cut.is_empty(),
            "{}: a blank line splits a table at line(s) {cut:?}",
            file.display()
        );
    }
}

#[test]
fn the_rbac_row_names_every_verb_rbac_yaml_grants() {
    let readme = std::fs::read_to_string(root().join("deploy/README.md")).expect("read");
    let row = readme
        .lines()
        .find(|l| l.starts_with("| `kubernetes/rbac.yaml`"))
        .expect("deploy/README.md has a row for kubernetes/rbac.yaml");
    let m = manifests();
    let roles = ["ClusterRole", "Role"]
        .iter()
        .flat_map(|k| m.get(*k).into_iter().flatten())
        .filter(|r| {
            // rbac.yaml's own (the untaint controller's are in its own row).
            r["metadata"]["name"]
                .as_str()
                .is_some_and(|n| !n.starts_with("redirect-untaint"))
        });
    let mut checked = 0;
    for role in roles {
        for rule in role["rules"].as_array().into_iter().flatten() {
            let verbs: Vec<&str> = rule["verbs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            for resource in rule["resources"].as_array().into_iter().flatten() {
                let resource = resource.as_str().expect("resource");
                // The row's words about this rule: from the resource's name (the ClusterRole's
                // rules) or the Role's own name (one rule each) to the next `;`.
                let name = role["metadata"]["name"].as_str().unwrap_or_default();
                let at = if role["kind"] == "Role" {
                    row.find(&format!("`{name}`"))
                } else {
                    row.find(&format!("{resource} "))
                }
                .unwrap_or_else(|| panic!("the rbac.yaml row never names {name}'s {resource}"));
                let said = row[at..].split(';').next().unwrap_or_default();
                for verb in &verbs {
                    assert!(
                        said.contains(verb),
                        "rbac.yaml grants {verb} on {resource}, the README's row says only {said:?}"
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 4, "{checked} rules checked");
}
