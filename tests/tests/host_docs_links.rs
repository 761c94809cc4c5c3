// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Every relative link of README.md, CHANGELOG.md, BENCHMARKS.md and the
//! guide under docs/ leads somewhere: the file exists and, for a link to a
//! heading (`file.md#anchor` or `#anchor`), the heading does, by GitHub's
//! anchor rules (lower case, punctuation dropped, spaces to `-`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// GitHub's anchor of a heading's text.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The lines of a Markdown text outside fenced blocks.
fn prose_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// The anchors of a Markdown file's headings (outside fenced blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            out.push(anchor(&line[hashes..]));
        }
    }
    out
}

/// The targets of `[text](target)` links outside fenced blocks and code
/// spans.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(text) {
        // Code spans may hold `](` that is no link.
        let prose: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, s)| s)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_owned());
                rest = &rest[end..];
            }
        }
    }
    out
}

fn markdown_files(repo: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["README.md", "CHANGELOG.md", "BENCHMARKS.md"]
        .iter()
        .map(|f| repo.join(f))
        .collect();
    let mut dirs = vec![repo.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files
}

#[test]
fn every_relative_link_leads_to_a_file_and_heading_that_exist() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let files = markdown_files(repo);
    assert!(files.len() > 5, "the guide is under docs/: {files:?}");
    let texts: HashMap<PathBuf, String> = files
        .iter()
        .map(|f| {
            (
                f.canonicalize().unwrap(),
                std::fs::read_to_string(f).unwrap(),
            )
        })
        .collect();
    let mut broken = Vec::new();
    for (file, text) in &texts {
        for link in links(text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                file.clone()
            } else {
                match file.parent().unwrap().join(path).canonicalize() {
                    Ok(t) => t,
                    Err(_) => {
                        broken.push(format!("{}: `{link}`: no such file", file.display()));
                        continue;
                    }
                }
            };
            if fragment.is_empty() {
                continue;
            }
            let headings = match texts.get(&target) {
                Some(text) => anchors(text),
                None => std::fs::read_to_string(&target)
                    .map(|t| anchors(&t))
                    .unwrap_or_default(),
            };
            if !headings.iter().any(|a| a == fragment) {
                broken.push(format!("{}: `{link}`: no such heading", file.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_follow_github_s_rules() {
    assert_eq!(anchor(" The `kspan` command"), "the-kspan-command");
    assert_eq!(
        anchor("Hot functions: filters, rate limits and sums"),
        "hot-functions-filters-rate-limits-and-sums"
    );
    assert_eq!(links("see [a](b.md#c) and `[x](y)`"), ["b.md#c"]);
}
