//! `pod-policy --migrate` as an edit of the manifest's own text: the istio-init container's
//! lines replaced by istio-validation's, the `sidecar.istio.io/status` line rewritten, the new annotations' lines
//! added; every other line (comments, quoting, key order, document separators) as written.
//! Each edited document is parsed again and must equal the migration done on values; one that
//! does not (flow style, a block scalar where a line was expected) is printed from its value.

use crate::{
    error::Error,
    manifest::{documents, migrate, to_yaml, Document},
    pod::INIT,
    SIDECAR_STATUS,
};

/// The migrated manifest, and the numbers of the documents printed from their value (their
/// text could not be edited in place).
pub fn migrate_text(text: &str) -> Result<(String, Vec<usize>), Error> {
    let mut out = String::new();
    let mut fell_back = Vec::new();
    let mut number = 0;
    for (sep, body) in segments(text) {
        out.push_str(sep);
        number += 1;
        let mut docs = documents(body).map_err(|e| renumber(e, number))?;
        let Some(mut doc) = docs.pop() else {
            out.push_str(body);
            continue;
        };
        doc.number = number;
        let original = doc.clone();
        let m = migrate(&mut doc)?;
        if !m.removed_istio_init {
            out.push_str(body);
            continue;
        }
        match edit(body, &original, &doc, &m.annotations) {
            Some(edited) => out.push_str(&edited),
            None => {
                fell_back.push(number);
                out.push_str(&to_yaml(&doc)?);
            }
        }
    }
    Ok((out, fell_back))
}

fn renumber(e: Error, number: usize) -> Error {
    match e {
        Error::Manifest { reason, .. } => Error::Manifest {
            document: number,
            reason,
        },
        other => other,
    }
}

/// The text split at document separators: (the separator line, or nothing, and the body).
fn segments(text: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let (mut sep_start, mut body_start) = (0, 0);
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        let t = line.trim_end();
        if t == "---" || t.starts_with("--- ") {
            out.push((&text[sep_start..body_start], &text[body_start..pos]));
            sep_start = pos;
            body_start = pos + line.len();
        }
        pos += line.len();
    }
    out.push((&text[sep_start..body_start], &text[body_start..]));
    // A text starting with `---` has an empty first body: nothing to print before it.
    out.retain(|(sep, body)| !(sep.is_empty() && body.trim().is_empty()));
    out
}

/// The edited body, if the edit parses back to `migrated`.
fn edit(
    body: &str,
    original: &Document,
    migrated: &Document,
    added: &[(String, String)],
) -> Option<String> {
    let mut lines: Vec<String> = body.split_inclusive('\n').map(str::to_owned).collect();
    let path = original.template_path()?;
    let template = find(&lines, path)?;
    // istio-init leaves `containers` (the last list first, so indices stay right) and becomes
    // istio-validation in `initContainers`: its item written again from the migrated value.
    for list in ["containers", "initContainers"] {
        let Some(spec) = find_in(&lines, template, "spec") else {
            continue;
        };
        let Some(key) = find_in(&lines, spec, list) else {
            continue;
        };
        let items = items(&lines, key);
        let Some(at) = items.iter().position(|(s, e)| names_init(&lines[*s..*e])) else {
            continue;
        };
        let (start, end) = items[at];
        if list == "initContainers" {
            let item = rendered_item(migrated, path, at, indent_of(&lines[start]))?;
            lines.splice(start..end, item);
            continue;
        }
        lines.drain(start..end);
        if items.len() == 1 {
            let (from, to) = (key.line, block_end(&lines, key));
            lines.drain(from..to);
        }
    }
    let metadata = find_in(&lines, find(&lines, path)?, "metadata")?;
    let annotations = find_in(&lines, metadata, "annotations")?;
    let new_status = migrated_status(migrated, path);
    if let (Some(status), Some(value)) = (find_in(&lines, annotations, SIDECAR_STATUS), new_status)
    {
        let indent = " ".repeat(status.indent);
        lines[status.line] = format!(
            "{indent}{SIDECAR_STATUS}: '{}'\n",
            value.replace('\'', "''")
        );
    }
    let at = block_end(&lines, annotations);
    let indent = child_indent(&lines, annotations);
    for (k, v) in added.iter().rev() {
        let quoted = serde_json::to_string(v).ok()?;
        lines.insert(at, format!("{}{k}: {quoted}\n", " ".repeat(indent)));
    }
    let edited: String = lines.concat();
    let back = documents(&edited).ok()?.pop()?;
    (back.value == migrated.value).then_some(edited)
}

/// Init container `at` of the migrated template as the lines of a `- ` item at `indent`.
fn rendered_item(doc: &Document, path: &[&str], at: usize, indent: usize) -> Option<Vec<String>> {
    let t = path.iter().try_fold(&doc.value, |v, k| v.get(*k))?;
    let c = t.get("spec")?.get("initContainers")?.get(at)?;
    let text = serde_norway::to_string(c).ok()?;
    let pad = " ".repeat(indent);
    Some(
        text.lines()
            .enumerate()
            .map(|(i, l)| match i {
                0 => format!("{pad}- {l}\n"),
                _ => format!("{pad}  {l}\n"),
            })
            .collect(),
    )
}

fn migrated_status(doc: &Document, path: &[&str]) -> Option<String> {
    let t = path.iter().try_fold(&doc.value, |v, k| v.get(*k))?;
    t.get("metadata")?
        .get("annotations")?
        .get(SIDECAR_STATUS)?
        .as_str()
        .map(str::to_owned)
}

/// A key's line and its indentation.
#[derive(Debug, Clone, Copy)]
struct Key {
    line: usize,
    indent: usize,
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn blank(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

/// The key at `path` from the document's top level (the root itself for an empty path).
fn find(lines: &[String], path: &[&str]) -> Option<Key> {
    let root = Key {
        line: usize::MAX,
        indent: 0,
    };
    path.iter()
        .try_fold(root, |k, name| find_in(lines, k, name))
}

/// The child key `name` of `parent` (the root when `parent.line` is `usize::MAX`).
fn find_in(lines: &[String], parent: Key, name: &str) -> Option<Key> {
    let (start, end) = if parent.line == usize::MAX {
        (0, lines.len())
    } else {
        (parent.line + 1, block_end(lines, parent))
    };
    let want = child_indent_in(lines, start, end)?;
    (start..end).find_map(|i| {
        let l = &lines[i];
        (indent_of(l) == want && key_name(l.trim_start()) == Some(name)).then_some(Key {
            line: i,
            indent: want,
        })
    })
}

fn key_name(t: &str) -> Option<&str> {
    let (k, _) = t.split_once(':')?;
    Some(k.trim().trim_matches(|c| c == '"' || c == '\''))
}

/// The first line after `key`'s block: a line at its indentation or less (a sequence under it
/// may sit at its own indentation: `key:` then `- item`).
fn block_end(lines: &[String], key: Key) -> usize {
    (key.line + 1..lines.len())
        .find(|&i| {
            let l = &lines[i];
            !blank(l)
                && (indent_of(l) < key.indent
                    || (indent_of(l) == key.indent && !l.trim_start().starts_with("- ")))
        })
        .unwrap_or(lines.len())
}

fn child_indent_in(lines: &[String], start: usize, end: usize) -> Option<usize> {
    (start..end)
        .find(|&i| !blank(&lines[i]))
        .map(|i| indent_of(&lines[i]))
}

fn child_indent(lines: &[String], key: Key) -> usize {
    child_indent_in(lines, key.line + 1, block_end(lines, key)).unwrap_or(key.indent + 2)
}

/// The items of the sequence under `key`: (first line, end) of each `- ` item.
fn items(lines: &[String], key: Key) -> Vec<(usize, usize)> {
    let end = block_end(lines, key);
    let Some(dash) = child_indent_in(lines, key.line + 1, end) else {
        return Vec::new();
    };
    let starts: Vec<usize> = (key.line + 1..end)
        .filter(|&i| indent_of(&lines[i]) == dash && lines[i].trim_start().starts_with("- "))
        .collect();
    starts
        .iter()
        .enumerate()
        .map(|(n, &s)| (s, starts.get(n + 1).copied().unwrap_or(end)))
        .collect()
}

/// Whether an item's lines name it istio-init (`name:` at the item's own key indentation).
fn names_init(item: &[String]) -> bool {
    let Some(first) = item.first() else {
        return false;
    };
    let keys = indent_of(first) + 2;
    item.iter().enumerate().any(|(i, l)| {
        let t = if i == 0 {
            l.trim_start().trim_start_matches("- ")
        } else {
            l.trim_start()
        };
        (i == 0 || indent_of(l) == keys)
            && key_name(t) == Some("name")
            && t.split_once(':')
                .is_some_and(|(_, v)| v.trim().trim_matches(|c| c == '"' || c == '\'') == INIT)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = "\
# a comment kept
apiVersion: v1
kind: Pod
metadata:
  name: 'p'
  annotations:
    sidecar.istio.io/status: '{\"initContainers\":[\"istio-init\"],\"containers\":[\"istio-proxy\"]}'
    note: \"kept as written\"
spec:
  initContainers:
  - name: istio-init
    image: proxyv2
    args: [\"istio-iptables\", \"-p\", \"15001\", \"-z\", \"15006\", \"-u\", \"1337\", \"-m\", \"REDIRECT\", \"-i\", \"10.0.0.0/8\", \"-x\", \"\", \"-b\", \"*\", \"-d\", \"15090,15021,15020\"]
  containers:
  - name: app
    image: 'app:1'
  - name: istio-proxy
    image: proxyv2
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: \"untouched\"
";

    #[test]
    fn only_the_edited_lines_change_and_separators_stay() {
        let (out, fell_back) = migrate_text(POD).expect("migrates");
        assert!(fell_back.is_empty(), "{out}");
        assert!(out.starts_with("# a comment kept\n"), "{out}");
        assert!(
            out.contains("  name: 'p'\n") && out.contains("    image: 'app:1'\n"),
            "{out}"
        );
        assert!(out.contains("    note: \"kept as written\"\n"), "{out}");
        // istio-init became istio-validation in its place, as the injector writes it.
        assert!(!out.contains("istio-init\n"), "{out}");
        for line in [
            "  initContainers:\n  - name: istio-validation\n    image: proxyv2\n",
            "    - --run-validation\n    - --skip-rule-apply\n",
            "    runAsUser: 1337\n",
            "[\"istio-validation\"]",
        ] {
            assert!(out.contains(line), "{line:?} in {out}");
        }
        assert!(
            out.contains("traffic.sidecar.istio.io/includeOutboundIPRanges: \"10.0.0.0/8\""),
            "{out}"
        );
        assert!(
            out.contains(
                "\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: \"untouched\"\n"
            ),
            "{out}"
        );
    }
}
