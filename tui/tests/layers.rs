//! The explorer's files form layers: no file reaches itself through `use crate::…`,
//! `crate::…`/`super::…` paths or a child module's path. A cycle between files is what
//! the split of the old `app.rs` removed (12 files in one circle); this keeps it gone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The module a file defines (`app/mod.rs` → `app`, `ui/run.rs` → `ui::run`).
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Module = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// The text without comments and string contents (they name paths that are not uses).
fn code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                out.push('"');
                while let Some(c) = chars.next() {
                    if c == '\\' {
                        chars.next();
                    } else if c == '"' {
                        break;
                    }
                }
                out.push('"');
            }
            c => out.push(c),
        }
    }
    out
}

/// Every path a file names: each leaf of a `use` tree, and each `a::b` path in the code,
/// with whether it sits inside an inline `mod x { … }` (where `super` is the file itself).
fn paths(code: &str) -> Vec<(Vec<String>, bool)> {
    let bytes = code.as_bytes();
    // Inline modules' spans.
    let mut spans = Vec::new();
    let mut at = 0;
    while let Some(i) = code[at..].find("mod ") {
        let start = at + i;
        at = start + 4;
        let rest = &code[at..];
        let name_end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
        let after = rest[name_end..].trim_start();
        if name_end > 0 && after.starts_with('{') {
            let open = at + name_end + (rest[name_end..].len() - after.len());
            let mut depth = 0;
            let mut end = open;
            for (j, &b) in bytes.iter().enumerate().skip(open) {
                depth += match b {
                    b'{' => 1,
                    b'}' => -1,
                    _ => 0,
                };
                if depth == 0 {
                    end = j;
                    break;
                }
            }
            spans.push((start, end));
        }
    }
    let inline = |pos: usize| spans.iter().any(|&(a, b)| a <= pos && pos <= b);
    let mut out = Vec::new();
    // `use` trees, expanded.
    let mut at = 0;
    while let Some(i) = code[at..].find("use ") {
        let start = at + i;
        at = start + 4;
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            continue;
        }
        let Some(end) = code[at..].find(';') else { break };
        let tree: String = code[at..at + end].chars().filter(|c| !c.is_whitespace()).collect();
        for p in expand(&tree) {
            out.push((p, inline(start)));
        }
    }
    // Paths in the code: words joined by `::`.
    let mut i = 0;
    while i < bytes.len() {
        let word_start =
            i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b':');
        if !word_start && (bytes[i].is_ascii_alphabetic() || bytes[i] == b'_') {
            let mut j = i;
            while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'_' || bytes[j] == b':') {
                j += 1;
            }
            let path: Vec<String> = code[i..j].split("::").filter(|s| !s.is_empty()).map(str::to_string).collect();
            if path.len() > 1 {
                out.push((path, inline(i)));
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<Vec<String>> {
    fn parse(s: &[u8], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut cur = String::new();
        while *i < s.len() {
            let c = s[*i] as char;
            *i += 1;
            match c {
                '{' => {
                    let mut base = prefix.to_vec();
                    base.extend(cur.split("::").filter(|p| !p.is_empty()).map(str::to_string));
                    parse(s, i, &base, out);
                    cur.clear();
                }
                '}' => break,
                ',' => {
                    push(prefix, &cur, out);
                    cur.clear();
                }
                c => cur.push(c),
            }
        }
        push(prefix, &cur, out);
    }
    fn push(prefix: &[String], cur: &str, out: &mut Vec<Vec<String>>) {
        if cur.is_empty() {
            return;
        }
        let mut p = prefix.to_vec();
        p.extend(cur.split("::").filter(|p| !p.is_empty()).map(str::to_string));
        out.push(p);
    }
    let mut out = Vec::new();
    parse(tree.as_bytes(), &mut 0, &[], &mut out);
    out
}

#[test]
fn no_file_reaches_itself_through_its_imports() {
    // TUI_LAYERS_SRC checks another tree (an older checkout, to see the test fail).
    let src = std::env::var_os("TUI_LAYERS_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let mut files = Vec::new();
    collect(&src, &mut files);
    let modules: BTreeMap<Module, PathBuf> = files.iter().map(|f| (module_of(&src, f), f.clone())).collect();
    let resolve =
        |path: &[String]| (0..=path.len()).rev().map(|k| path[..k].to_vec()).find(|m| modules.contains_key(m));
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in &modules {
        let text = code(&std::fs::read_to_string(file).unwrap());
        let is_dir = matches!(file.file_stem().and_then(|s| s.to_str()), Some("mod" | "lib" | "main"));
        let parent: Module = if is_dir { module.clone() } else { module[..module.len().saturating_sub(1)].to_vec() };
        let children: BTreeSet<String> = text
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let l = l.strip_prefix("pub ").or_else(|| l.strip_prefix("pub(crate) ")).unwrap_or(l);
                l.strip_prefix("mod ")?.strip_suffix(';').map(str::to_string)
            })
            .collect();
        let deps = edges.entry(module.clone()).or_default();
        for (path, inline) in paths(&text) {
            let full: Module = match path[0].as_str() {
                "crate" => path[1..].to_vec(),
                "super" if inline => module.iter().cloned().chain(path[1..].iter().cloned()).collect(),
                "super" => parent.iter().cloned().chain(path[1..].iter().cloned()).collect(),
                "self" => module.iter().cloned().chain(path[1..].iter().cloned()).collect(),
                c if children.contains(c) => module.iter().cloned().chain(path.iter().cloned()).collect(),
                _ => continue,
            };
            let full: Module = full.into_iter().filter(|p| p != "*" && p != "self").collect();
            if let Some(target) = resolve(&full) {
                if &target != module {
                    deps.insert(target);
                }
            }
        }
    }
    // A cycle: a module that reaches itself.
    let mut cycles = Vec::new();
    for start in edges.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((m, trail)) = stack.pop() {
            for next in edges.get(&m).into_iter().flatten() {
                if next == start {
                    let name = |m: &Module| if m.is_empty() { "lib".to_string() } else { m.join("::") };
                    cycles.push(trail.iter().map(name).collect::<Vec<_>>().join(" → "));
                } else if seen.insert(next.clone()) {
                    let mut t = trail.clone();
                    t.push(next.clone());
                    stack.push((next.clone(), t));
                }
            }
        }
    }
    assert!(edges.len() > 10, "the test found the explorer's files ({} modules)", edges.len());
    assert!(
        edges.get(&vec!["term".to_string()]).is_some_and(|d| d.contains(&vec!["app".to_string()])),
        "the test sees `use crate::app::App` in term.rs"
    );
    assert!(cycles.is_empty(), "import cycles between the explorer's files:\n{}", cycles.join("\n"));
}
