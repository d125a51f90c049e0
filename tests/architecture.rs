//! The claims of docs/architecture.md a reviewer would otherwise check by grep, checked on every
//! run (they need nothing from the machine): which folder knows which backend, hypervisor and
//! engine, short functions, and no import cycle between the top-level modules of src/.
//!
//! The sources are read through a small lexer that blanks comments and the contents of string
//! and char literals, so help texts and doc comments may name fio or Xen; code may not.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest function allowed in src/, signature to closing brace.
const MAX_FN_LINES: usize = 80;

/// Identifiers naming an engine outside src/workload/ and src/image/ that are known and kept,
/// each with why. The test fails on a new one, and on a listed one that is gone (so the list
/// shrinks as the seams close).
const ENGINE_NAMES_KEPT: &[(&str, &str, &str)] = &[
    (
        "src/matrix/config.rs",
        "bonnie_files",
        "an engine option of the matrix config (saved configs spell it), passed on in its \
         EngineParams",
    ),
    (
        "src/cli.rs",
        "bonnie_files",
        "an engine option's flag (--bonnie-files)",
    ),
    (
        "src/matrix/config.rs",
        "bonnie_size_ratio",
        "an engine option of the matrix config (saved configs spell it), passed on in its \
         EngineParams",
    ),
    (
        "src/cli.rs",
        "bonnie_size_ratio",
        "an engine option's flag (--bonnie-size-ratio)",
    ),
    (
        "src/matrix/presets.rs",
        "bonnie_size_ratio",
        "a write-up's preset sets the engine option the write-up used (-s 4x RAM)",
    ),
];

/// Where a backend variant may be named outside src/storage/ (tests aside): the enum itself
/// and the presets, which are configurations.
const BACKEND_NAMED_IN: &[&str] = &["src/cell.rs", "src/matrix/presets.rs"];

/// Where `Hypervisor::Xen` may be named outside src/hypervisor/ (tests aside).
const XEN_NAMED_IN: &[&str] = &["src/cell.rs", "src/matrix/presets.rs"];

struct Source {
    /// Path relative to the crate, with `/`.
    rel: String,
    /// The text with comments and literal contents blanked (same lines and columns).
    code: String,
    /// The line ranges (1-based, inclusive) of `#[cfg(test)] mod NAME { ... }` blocks.
    tests: Vec<(usize, usize)>,
}

impl Source {
    /// Lines outside test modules, numbered from 1.
    fn non_test_lines(&self) -> impl Iterator<Item = (usize, &str)> {
        self.code
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l))
            .filter(|(n, _)| !self.tests.iter().any(|(a, b)| a <= n && n <= b))
    }
}

fn crate_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn sources() -> Vec<Source> {
    let root = crate_root();
    let mut files = Vec::new();
    rs_files(&root.join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let code = blank(&text);
            let tests = test_blocks(&code);
            let rel = p
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            Source { rel, code, tests }
        })
        .collect()
}

/// Blanks comments and the insides of string and char literals with spaces (newlines kept),
/// so what is left is code, at the same line and column.
fn blank(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = c.clone();
    let mut i = 0;
    let wipe = |out: &mut Vec<char>, a: usize, b: usize| {
        for ch in &mut out[a..b.min(c.len())] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
    };
    while i < c.len() {
        let at = |k: usize| c.get(i + k).copied().unwrap_or('\0');
        if at(0) == '/' && at(1) == '/' {
            let end = (i..c.len()).find(|&k| c[k] == '\n').unwrap_or(c.len());
            wipe(&mut out, i, end);
            i = end;
        } else if at(0) == '/' && at(1) == '*' {
            let end = (i + 2..c.len())
                .find(|&k| c[k] == '*' && c.get(k + 1) == Some(&'/'))
                .map_or(c.len(), |k| k + 2);
            wipe(&mut out, i, end);
            i = end;
        } else if at(0) == 'r'
            && matches!(at(1), '"' | '#')
            && !(i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_'))
        {
            let hashes = (1..).take_while(|&k| at(k) == '#').count();
            let open = i + 1 + hashes;
            if c.get(open) != Some(&'"') {
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"')
                .chain("#".repeat(hashes).chars())
                .collect();
            let close: Vec<char> = close.chars().collect();
            let end = (open + 1..c.len())
                .find(|&k| c[k..].starts_with(&close))
                .unwrap_or(c.len());
            wipe(&mut out, open + 1, end);
            i = end + close.len();
        } else if at(0) == '"' {
            let mut k = i + 1;
            while k < c.len() && c[k] != '"' {
                k += if c[k] == '\\' { 2 } else { 1 };
            }
            wipe(&mut out, i + 1, k);
            i = k + 1;
        } else if at(0) == '\'' && (at(2) == '\'' || (at(1) == '\\' && at(3) == '\'')) {
            let len = if at(1) == '\\' { 4 } else { 3 };
            wipe(&mut out, i + 1, i + len - 1);
            i += len;
        } else if at(0) == '\'' && at(1) == '\\' {
            // '\u{..}' and '\x..'
            let end = (i + 2..c.len()).find(|&k| c[k] == '\'').unwrap_or(c.len());
            wipe(&mut out, i + 1, end);
            i = end + 1;
        } else {
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// The index of the `}` matching the `{` at `open` in blanked code.
fn matching_brace(code: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, &b) in code.iter().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    code.len()
}

fn line_of(code: &[u8], pos: usize) -> usize {
    code[..pos.min(code.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// `#[cfg(test)]` modules with a body, as line ranges.
fn test_blocks(code: &str) -> Vec<(usize, usize)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(off) = code[from..].find("#[cfg(test)]") {
        let at = from + off;
        from = at + 1;
        let rest = code[at + 12..].trim_start();
        let Some(after_mod) = rest.strip_prefix("mod ") else {
            continue;
        };
        let name_end = after_mod
            .find(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
            .unwrap_or(after_mod.len());
        if !after_mod[name_end..].trim_start().starts_with('{') {
            continue;
        }
        let open = at + code[at..].find('{').unwrap();
        let close = matching_brace(b, open);
        out.push((line_of(b, at), line_of(b, close)));
    }
    out
}

/// Words (identifier characters) in a line.
fn words(line: &str) -> impl Iterator<Item = &str> {
    line.split(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
        .filter(|w| !w.is_empty())
}

fn under(rel: &str, dirs: &[&str]) -> bool {
    dirs.iter().any(|d| rel.starts_with(d))
}

#[test]
fn backends_are_named_only_in_src_storage() {
    let mut found = Vec::new();
    for s in sources() {
        if under(&s.rel, &["src/storage/"]) || BACKEND_NAMED_IN.contains(&s.rel.as_str()) {
            continue;
        }
        for (n, line) in s.non_test_lines() {
            let mut rest = line;
            while let Some(k) = rest.find("Backend::") {
                let after = &rest[k + 9..];
                let boundary = k == 0 || !rest[..k].ends_with(|c: char| c.is_alphanumeric());
                if boundary && after.starts_with(|c: char| c.is_ascii_uppercase()) {
                    found.push(format!("{}:{n}: {}", s.rel, line.trim()));
                }
                rest = after;
            }
        }
    }
    assert!(
        found.is_empty(),
        "a backend variant named outside src/storage/ (ask storage::descriptor instead):\n{}",
        found.join("\n")
    );
}

#[test]
fn xen_is_named_only_in_src_hypervisor() {
    let mut found = Vec::new();
    for s in sources() {
        if under(&s.rel, &["src/hypervisor/"]) || XEN_NAMED_IN.contains(&s.rel.as_str()) {
            continue;
        }
        for (n, line) in s.non_test_lines() {
            if line.contains("Hypervisor::Xen") {
                found.push(format!("{}:{n}: {}", s.rel, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "Hypervisor::Xen outside src/hypervisor/ (ask Hypervisor::desc() instead):\n{}",
        found.join("\n")
    );
}

#[test]
fn engines_are_named_only_in_src_workload_and_src_image() {
    let mut seen: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for s in sources() {
        if under(&s.rel, &["src/workload/", "src/image/"]) {
            continue;
        }
        for (n, line) in s.non_test_lines() {
            for w in words(line) {
                let lower = w.to_ascii_lowercase();
                if lower.contains("fio") || lower.contains("bonnie") {
                    seen.entry((s.rel.clone(), w.to_string()))
                        .or_default()
                        .push(n);
                }
            }
        }
    }
    let kept: BTreeSet<(String, String)> = ENGINE_NAMES_KEPT
        .iter()
        .map(|(f, w, _)| (f.to_string(), w.to_string()))
        .collect();
    let new: Vec<String> = seen
        .iter()
        .filter(|(k, _)| !kept.contains(*k))
        .map(|((f, w), lines)| format!("{f}:{lines:?}: `{w}`"))
        .collect();
    assert!(
        new.is_empty(),
        "engine knowledge outside src/workload/ and src/image/ (put it in the engine's \
         descriptor, or list it in ENGINE_NAMES_KEPT with its reason):\n{}",
        new.join("\n")
    );
    let gone: Vec<String> = kept
        .iter()
        .filter(|k| !seen.contains_key(*k))
        .map(|(f, w)| format!("{f}: `{w}`"))
        .collect();
    assert!(
        gone.is_empty(),
        "listed in ENGINE_NAMES_KEPT but no longer there (remove the entry):\n{}",
        gone.join("\n")
    );
}

/// Every `fn` with a body and its length in lines.
fn functions(s: &Source) -> Vec<(String, usize, usize)> {
    let b = s.code.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(off) = s.code[from..].find("fn ") {
        let at = from + off;
        from = at + 3;
        let keyword = at == 0 || !s.code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        if !keyword {
            continue;
        }
        let name: String = s.code[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        // The body is the first `{` before any `;` (a declaration without a body has none).
        let tail = &s.code[at..];
        let (Some(brace), semi) = (tail.find('{'), tail.find(';')) else {
            continue;
        };
        if semi.is_some_and(|k| k < brace) {
            continue;
        }
        let close = matching_brace(b, at + brace);
        let lines = line_of(b, close) - line_of(b, at) + 1;
        out.push((name, line_of(b, at), lines));
    }
    out
}

#[test]
fn no_function_in_src_is_longer_than_80_lines() {
    let mut long = Vec::new();
    let mut count = 0;
    for s in sources() {
        for (name, line, n) in functions(&s) {
            count += 1;
            if n > MAX_FN_LINES {
                long.push(format!("{}:{line}: {name} is {n} lines", s.rel));
            }
        }
    }
    // The scanner found the functions (a broken lexer would find none and pass).
    assert!(count > 500, "only {count} functions found in src/");
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines (split them into named steps):\n{}",
        long.join("\n")
    );
}

/// Top-level module of a source file: `src/storage/nfs.rs` -> storage, `src/cell.rs` -> cell.
fn top_module(rel: &str) -> Option<String> {
    let inner = rel.strip_prefix("src/")?;
    let first = inner.split('/').next()?;
    let m = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(m, "lib" | "main")).then(|| m.to_string())
}

#[test]
fn top_level_modules_import_each_other_without_a_cycle() {
    let srcs = sources();
    let modules: BTreeSet<String> = srcs.iter().filter_map(|s| top_module(&s.rel)).collect();
    let mut edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for s in &srcs {
        let Some(from) = top_module(&s.rel) else {
            continue;
        };
        for (_, line) in s.non_test_lines() {
            let mut rest = line;
            while let Some(k) = rest.find("crate::") {
                let to: String = rest[k + 7..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if to != from && modules.contains(&to) {
                    edges
                        .entry(from.clone())
                        .or_default()
                        .entry(to)
                        .or_default()
                        .insert(s.rel.clone());
                }
                rest = &rest[k + 7..];
            }
        }
    }
    assert!(
        edges
            .get("matrix")
            .is_some_and(|e| e.contains_key("storage")),
        "the scanner sees no import of storage by matrix: it is broken"
    );
    // A cycle is a path back to where it started: depth-first from every module.
    fn path_back(
        edges: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        start: &str,
        at: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in edges.get(at).into_iter().flat_map(|e| e.keys()) {
            path.push(next.clone());
            if next == start {
                return true;
            }
            if seen.insert(next.clone()) && path_back(edges, start, next, path, seen) {
                return true;
            }
            path.pop();
        }
        false
    }
    for m in &modules {
        let mut path = vec![m.clone()];
        if path_back(&edges, m, m, &mut path, &mut BTreeSet::new()) {
            let why: Vec<String> = path
                .windows(2)
                .map(|w| format!("{} -> {}: {:?}", w[0], w[1], edges[&w[0]][&w[1]]))
                .collect();
            panic!("import cycle {}:\n{}", path.join(" -> "), why.join("\n"));
        }
    }
}

#[test]
fn the_lexer_blanks_comments_and_literals_but_not_code() {
    let code = blank(
        "let a = \"fio\"; // bonnie\nlet b = r#\"Backend::Nfs\"#; /* x */ let c = '{';\nfn f() {}",
    );
    assert!(!code.contains("fio") && !code.contains("bonnie") && !code.contains("Nfs"));
    assert!(!code.contains('x') && !code.contains("'{'"), "{code}");
    assert!(code.contains("let a") && code.contains("let c") && code.contains("fn f() {}"));
    assert_eq!(code.lines().count(), 3);
}
