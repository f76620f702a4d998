//! The lint step's line width: no line of the product code (`redirect-user`, `redirect-ebpf`)
//! or of xtask over [`MAX`] characters, except where a string literal kept whole (a fixture,
//! a raw JSON text, an expected output) makes up most of it. rustfmt leaves long strings,
//! comments and macro arguments alone; this catches them. A long message is split with a
//! `\` line continuation, which keeps the string itself unchanged.
use std::path::{Path, PathBuf};

use anyhow::Context;

/// The widest line allowed.
pub(crate) const MAX: usize = 120;

/// Fails naming every line over [`MAX`] characters that is not mostly a string literal.
pub(crate) fn check(root: &Path) -> anyhow::Result<()> {
    let mut files = Vec::new();
    for dir in ["redirect-user", "redirect-ebpf", "xtask"] {
        rust_files(&root.join(dir), &mut files)?;
    }
    files.sort();
    let mut long = Vec::new();
    for file in &files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        for (n, line) in too_long(&text) {
            let shown = file.strip_prefix(root).unwrap_or(file);
            long.push(format!(
                "{}:{n}: {} characters: {line}",
                shown.display(),
                line.chars().count()
            ));
        }
    }
    anyhow::ensure!(
        long.is_empty(),
        "{} line(s) over {MAX} characters (split a long message with a `\\` line continuation, \
         wrap a comment, or break a call at its arguments):\n{}",
        long.len(),
        long.join("\n")
    );
    Ok(())
}

/// The `.rs` files under `dir`, skipping build output.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
    for entry in entries {
        let path = entry
            .with_context(|| format!("listing {}", dir.display()))?
            .path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The (1-based number, text) of each line over [`MAX`] characters of which string literals
/// make up less than half.
fn too_long(text: &str) -> Vec<(usize, &str)> {
    let mut lexer = Lexer::default();
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let inside = lexer.literal_chars(line);
        let len = line.chars().count();
        if len > MAX && inside * 2 < len {
            out.push((i + 1, line));
        }
    }
    out
}

/// Where string literals are, line by line (they may span lines).
#[derive(Default)]
struct Lexer {
    /// In code, in a normal string or in a raw string (with its number of `#`).
    state: State,
}

#[derive(Default, Clone, Copy, PartialEq)]
enum State {
    #[default]
    Code,
    Normal,
    Raw(usize),
}

impl Lexer {
    /// How many characters of `line` lie inside string literals; the state carries on.
    fn literal_chars(&mut self, line: &str) -> usize {
        let chars: Vec<char> = line.chars().collect();
        let (mut i, mut inside) = (0, 0);
        while i < chars.len() {
            match self.state {
                State::Normal => {
                    inside += 1;
                    match chars[i] {
                        '\\' => {
                            inside += usize::from(i + 1 < chars.len());
                            i += 1;
                        }
                        '"' => self.state = State::Code,
                        _ => {}
                    }
                }
                State::Raw(hashes) => {
                    inside += 1;
                    if chars[i] == '"'
                        && chars[i + 1..]
                            .iter()
                            .take(hashes)
                            .filter(|c| **c == '#')
                            .count()
                            == hashes
                    {
                        self.state = State::Code;
                        i += hashes;
                    }
                }
                State::Code => match chars[i] {
                    '/' if chars.get(i + 1) == Some(&'/') => break,
                    '\'' => i += char_literal_len(&chars[i..]).saturating_sub(1),
                    '"' => self.state = State::Normal,
                    'r' if !chars[..i]
                        .last()
                        .is_some_and(|c| c.is_alphanumeric() || *c == '_') =>
                    {
                        let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
                        if chars.get(i + 1 + hashes) == Some(&'"') {
                            self.state = State::Raw(hashes);
                            i += 1 + hashes;
                        }
                    }
                    _ => {}
                },
            }
            i += 1;
        }
        inside
    }
}

/// Length of the char literal at the start of `rest` (`'a'`, `'\n'`, `'"'`), or 1 for a
/// lifetime's quote.
fn char_literal_len(rest: &[char]) -> usize {
    match rest {
        ['\'', '\\', _, '\'', ..] => 4,
        ['\'', c, '\'', ..] if *c != '\\' => 3,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_code_fails_and_a_literal_kept_whole_passes() {
        let code = format!("    let x = call({});\n", "argument, ".repeat(13));
        assert_eq!(too_long(&code).len(), 1);
        let literal = format!("    let x = \"{}\";\n", "word ".repeat(30));
        assert!(too_long(&literal).is_empty());
        let raw = format!("    let x = r#\"\n{}\n\"#;\n", "{\"a\": 1} ".repeat(20));
        assert!(too_long(&raw).is_empty());
        let comment = format!("    // {}\n", "word ".repeat(30));
        assert_eq!(too_long(&comment).len(), 1);
        let quote = format!(
            "    let c = '\"'; let x = call({});\n",
            "argument, ".repeat(13)
        );
        assert_eq!(too_long(&quote).len(), 1);
    }
}
