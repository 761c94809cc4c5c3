// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Every relative link of README.md, CHANGELOG.md, BENCHMARKS.md and the
//! guide under docs/ leads somewhere: the file exists and, for a link to a
//! heading (`file.md#anchor` or `#anchor`), the heading does, by GitHub's
//! anchor rules (lower case, punctuation dropped, spaces to `-`).
//!
//! And every prose pointer to a section names one that exists: `README's
//! "Least privilege"`, `(the guide's "Preemptible kernels")`,
//! `BENCHMARKS.md ("Declines under a file workload")`, `see "Alternatives"
//! below`, in README.md, BENCHMARKS.md, the guide and the comments of the
//! Rust sources (kspan, the CLI, the examples), which point at README's
//! sections too. CHANGELOG.md is history: it names sections as they were.

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

/// The text of a heading, as prose quotes it: backticks dropped, spaces
/// collapsed, lower case.
fn heading_text(heading: &str) -> String {
    heading
        .replace('`', "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// The headings of a Markdown text (outside fenced blocks), as
/// [`heading_text`] gives them.
fn headings(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(text) {
        let line = line.trim_start();
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            out.push(heading_text(&line[hashes..]));
        }
    }
    out
}

/// Whether a pointer's quoted `name` names one of `headings`: the heading
/// itself, or its start before a qualifier (`"Alternatives"` for
/// "Alternatives, and what to change", `"Declines under a file workload"`
/// for "Declines under a file workload (issue 39)").
fn names_a_heading(name: &str, headings: &[String]) -> bool {
    let name = heading_text(name);
    headings.iter().any(|h| {
        h == &name
            || h.strip_prefix(name.as_str()).is_some_and(|rest| {
                [",", ":", " (", " -", ";"]
                    .iter()
                    .any(|q| rest.starts_with(q))
            })
    })
}

/// The comments of a Rust source (`//`, `///`, `//!`) as Markdown: their
/// rustdoc headings are the sections a comment of the same file points at.
fn rust_comments(source: &str) -> String {
    let mut out = String::new();
    for line in source.lines() {
        let line = line.trim_start();
        let Some(rest) = line.strip_prefix("//") else {
            out.push('\n');
            continue;
        };
        let rest = rest.trim_start_matches(['/', '!']);
        out.push_str(rest.strip_prefix(' ').unwrap_or(rest));
        out.push('\n');
    }
    out
}

/// Where a pointer points.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// The repository's README.md.
    Readme,
    /// A file, by its path relative to the pointing file (or to the guide,
    /// for a guide page named bare: `kernels.md's "Preemptible kernels"`).
    File(String),
    /// Any page of the guide (`the guide's "..."`).
    Guide,
    /// The pointing file itself (`see "..." below`).
    Same,
}

/// The prose pointers of a Markdown text: each quoted name (`"..."`, outside
/// code spans, starting with a capital) with the file the words before or
/// after it name. Paragraphs are read whole, so a pointer may span lines.
fn pointers(text: &str) -> Vec<(Target, String)> {
    let mut out = Vec::new();
    let mut paragraph = String::new();
    let mut lines = prose_lines(text).peekable();
    while let Some(line) = lines.next() {
        if !line.trim().is_empty() {
            paragraph.push_str(line.trim());
            paragraph.push(' ');
            if lines.peek().is_some() {
                continue;
            }
        }
        out.extend(paragraph_pointers(&paragraph));
        paragraph.clear();
    }
    out
}

fn paragraph_pointers(paragraph: &str) -> Vec<(Target, String)> {
    // The quotes outside code spans, paired in order.
    let mut quotes = Vec::new();
    let mut in_code = false;
    for (i, c) in paragraph.char_indices() {
        match c {
            '`' => in_code = !in_code,
            '"' if !in_code => quotes.push(i),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for pair in quotes.chunks_exact(2) {
        let (open, close) = (pair[0], pair[1]);
        let name = &paragraph[open + 1..close];
        if !name.starts_with(|c: char| c.is_uppercase()) || name.len() > 100 {
            continue;
        }
        let before = paragraph[..open].trim_end_matches('(').trim_end();
        let after = paragraph[close + 1..].trim_start_matches(')').trim_start();
        if let Some(target) = pointer_target(before, after) {
            out.push((target, name.to_owned()));
        }
    }
    out
}

/// The file that the words before a quote (up to its opening quote and
/// parenthesis) and after it name, if they make it a pointer.
fn pointer_target(before: &str, after: &str) -> Option<Target> {
    let before = before.trim_end_matches([',', ':']).trim_end();
    let last_word = before.rsplit(' ').next().unwrap_or("");
    let word = last_word.trim_start_matches(['(', '[']);
    // `[BENCHMARKS.md](../../BENCHMARKS.md) ("...")`: the link's file.
    if let Some(link) = word.strip_suffix(')').and_then(|w| w.split_once("](")) {
        let path = link.1.split('#').next().unwrap_or("");
        if path.ends_with(".md") {
            return Some(file_target(path));
        }
    }
    let named = word.strip_suffix("'s").unwrap_or(word);
    if named == "README" || named == "README.md" {
        return Some(Target::Readme);
    }
    if named.ends_with(".md") {
        return Some(file_target(named));
    }
    // `the guide's "..."`, `guide page "..."`.
    let lower = before.to_lowercase();
    let the_guide = lower.trim_end_matches("'s").ends_with("the guide");
    if (named == "guide" && the_guide) || lower.ends_with("guide page") {
        return Some(Target::Guide);
    }
    let same = matches!(word, "see" | "See" | "also" | "under" | "section")
        || after.starts_with("above")
        || after.starts_with("below");
    same.then_some(Target::Same)
}

fn file_target(path: &str) -> Target {
    if path == "README.md" {
        Target::Readme
    } else {
        Target::File(path.to_owned())
    }
}

/// The files whose prose pointers are checked, with their text as Markdown.
fn pointing_files(repo: &Path) -> Vec<(PathBuf, String)> {
    let mut out: Vec<(PathBuf, String)> = markdown_files(repo)
        .into_iter()
        .filter(|f| !f.ends_with("CHANGELOG.md"))
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            (f, text)
        })
        .collect();
    let mut dirs: Vec<PathBuf> = ["kspan/src", "kspan-cli/src", "examples"]
        .iter()
        .map(|d| repo.join(d))
        .collect();
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = rust_comments(&std::fs::read_to_string(&path).unwrap());
                out.push((path, text));
            }
        }
    }
    out
}

#[test]
fn every_prose_pointer_names_a_section_that_exists() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let files = pointing_files(repo);
    assert!(
        files.iter().any(|(f, _)| f.ends_with("kspan/src/lib.rs")),
        "the sources are read too"
    );
    let read_headings = |path: &Path| {
        std::fs::read_to_string(path)
            .map(|t| headings(&t))
            .unwrap_or_default()
    };
    let readme = read_headings(&repo.join("README.md"));
    let guide: Vec<(PathBuf, Vec<String>)> = std::fs::read_dir(repo.join("docs/guide"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| {
            let h = read_headings(&p);
            (p, h)
        })
        .collect();
    let mut count = 0;
    let mut broken = Vec::new();
    for (file, text) in &files {
        let own = headings(text);
        let shown = file.strip_prefix(repo).unwrap_or(file).display();
        for (target, name) in pointers(text) {
            count += 1;
            let (found, place) = match &target {
                Target::Readme => (names_a_heading(&name, &readme), "README.md".to_owned()),
                Target::Same => (names_a_heading(&name, &own), "this file".to_owned()),
                Target::Guide => (
                    guide.iter().any(|(_, h)| names_a_heading(&name, h)),
                    "the guide (docs/guide)".to_owned(),
                ),
                Target::File(path) => {
                    let beside = file.parent().unwrap().join(path);
                    let in_guide = repo.join("docs/guide").join(path);
                    let at_root = repo.join(path);
                    let target = [beside, in_guide, at_root]
                        .into_iter()
                        .find(|p| p.is_file());
                    match target {
                        Some(t) => (names_a_heading(&name, &read_headings(&t)), path.clone()),
                        None => (false, format!("{path} (no such file)")),
                    }
                }
            };
            if !found {
                broken.push(format!("{shown}: \"{name}\": no such section in {place}"));
            }
        }
    }
    assert!(count >= 3, "prose pointers found: {count}");
    assert!(
        broken.is_empty(),
        "prose pointers to sections that do not exist (point at one that does, or link it: \
         [text](file.md#anchor)):\n{}",
        broken.join("\n")
    );
}

#[test]
fn pointers_are_read_from_prose() {
    let text = "As README's \"Preemptible\nkernels\" says; see \"Alternatives\" below,\n\
                (the guide's \"Least privilege\"), [B](../../BENCHMARKS.md) (\"Declines `x`\"),\n\
kernels.md's \"Modes\", guide page \"Times\". Not `README's \"Code\"`, nor \"Quoted words\" alone,\n\
                nor README's \"lower case\".\n\n```\nREADME's \"Fenced\"\n```\n";
    assert_eq!(
        pointers(text),
        [
            (Target::Readme, "Preemptible kernels".to_owned()),
            (Target::Same, "Alternatives".to_owned()),
            (Target::Guide, "Least privilege".to_owned()),
            (
                Target::File("../../BENCHMARKS.md".to_owned()),
                "Declines `x`".to_owned()
            ),
            (Target::File("kernels.md".to_owned()), "Modes".to_owned()),
            (Target::Guide, "Times".to_owned()),
        ]
    );
    let heads = headings("# A\n## Alternatives, and what to change\n### Declines `x` (issue 39)\n");
    assert!(names_a_heading("Alternatives", &heads));
    assert!(names_a_heading("Declines `x`", &heads));
    assert!(!names_a_heading("Alter", &heads));
    assert_eq!(
        rust_comments("//! # Where\n/// see \"Where\" above\nfn f() {} // x\n"),
        "# Where\nsee \"Where\" above\n\n"
    );
}
