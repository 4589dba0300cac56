//! SARIF 2.1.0 output (`tessera check --format sarif`), documented in `docs/json.md`.
//!
//! What consumers (GitHub code scanning, the VS Code SARIF viewer, `sarif-multitool
//! validate`) rely on, and how this file provides it:
//!
//! - **URIs.** `artifactLocation.uri` is an RFC 3986 URI reference: a path relative to the
//!   directory `tessera check` ran in stays relative (with `uriBaseId: "%SRCROOT%"`), an
//!   absolute path becomes a `file://` URI. Every byte of a path segment other than an
//!   unreserved character (`A-Z a-z 0-9 - . _ ~`) is percent-encoded, so spaces, `%`, `#`,
//!   `?`, non-ASCII letters and a `:` in the first segment (which would read as a scheme)
//!   cannot change what the URI means. `%SRCROOT%` has a description but no URI in
//!   `originalUriBaseIds`: the log stays the same wherever it is produced (SARIF §3.14.14
//!   allows this), and GitHub takes relative URIs as relative to the repository root.
//! - **Columns.** The run declares `columnKind: "utf16CodeUnits"`, and every column is
//!   counted in UTF-16 code units (a character outside the BMP counts two), as CodeQL's
//!   logs do and as the VS Code SARIF viewer reads columns whatever the log declares. The
//!   other formats count Unicode scalar values; only this one converts.
//! - **Rules.** Each code the log reports is a rule, in [`Code::ALL`]'s order (results
//!   name theirs by `ruleId` and `ruleIndex`), with descriptions taken from the
//!   diagnostics table of `docs/language.md` (compiled in, so the reference and the log
//!   cannot drift apart) and a `helpUri` to the code's own section of the docs where it
//!   has one, else to that table.

use std::collections::{BTreeSet, HashSet};

use serde_json::{json, Value};
use tessera_frontend::diagnostics::{Code, Severity};
use tessera_frontend::text::TextRange;

use crate::report::{FileReport, Run};

/// The SARIF schema `$schema` names: the OASIS standard's (2.1.0 with errata 01).
const SCHEMA_URI: &str = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";
const INFORMATION_URI: &str = "https://github.com/tessera-lang/tessera";
/// Where the docs are read on the web: `helpUri`s are this plus `FILE#ANCHOR`.
const DOCS_URI: &str = "https://github.com/tessera-lang/tessera/blob/main/docs/";
/// The base of relative artifact URIs.
const SRCROOT: &str = "%SRCROOT%";

/// The docs the rules' metadata comes from, by file name under `docs/`.
const DOCS: &[(&str, &str)] =
    &[("language.md", include_str!("../docs/language.md")), ("targets.md", include_str!("../docs/targets.md"))];

pub fn sarif(run: &Run) -> Value {
    // The rules of the codes reported, in `Code::ALL`'s order: a log stays small (every
    // rule with its help is ~70 KB or more) and says what each of its results means.
    let used: Vec<Code> =
        run.reports.iter().flat_map(|r| &r.diagnostics).map(|d| d.code).collect::<BTreeSet<_>>().into_iter().collect();
    let docs = Docs::parse();
    let rules: Vec<Value> = used.iter().map(|&c| rule(c, &docs)).collect();
    let mut results = Vec::new();
    for r in run.reports {
        for d in &r.diagnostics {
            let location =
                |range: TextRange| json!({"artifactLocation": artifact_location(&r.path), "region": region(r, range)});
            let mut result = json!({
                "ruleId": d.code.as_str(),
                "ruleIndex": used.binary_search(&d.code).unwrap_or(0),
                "level": level(d.severity),
                "message": {"text": d.message},
                "locations": [{"physicalLocation": location(d.range)}],
            });
            if !d.labels.is_empty() {
                result["relatedLocations"] = Value::Array(
                    d.labels
                        .iter()
                        .enumerate()
                        .map(|(i, l)| json!({"id": i, "message": {"text": l.message}, "physicalLocation": location(l.range)}))
                        .collect(),
                );
            }
            if let Some(fix) = &d.fix {
                result["fixes"] = json!([{
                    "description": {"text": fix.message},
                    "artifactChanges": [{
                        "artifactLocation": artifact_location(&r.path),
                        "replacements": fix.edits.iter().map(|e| json!({
                            "deletedRegion": region(r, e.range),
                            "insertedContent": {"text": e.text},
                        })).collect::<Vec<_>>(),
                    }],
                }]);
            }
            results.push(result);
        }
    }
    let notifications: Vec<Value> = run
        .unreadable
        .iter()
        .map(|e| {
            json!({
                "level": "error",
                "message": {"text": format!("{}: {}", e.path, e.message)},
                "locations": [{"physicalLocation": {"artifactLocation": artifact_location(&e.path)}}],
            })
        })
        .collect();
    json!({
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "tessera",
                "informationUri": INFORMATION_URI,
                "version": env!("CARGO_PKG_VERSION"),
                "semanticVersion": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "originalUriBaseIds": {SRCROOT: {"description": {
                "text": "The directory `tessera check` ran in; relative paths are relative to it \
                         (for GitHub code scanning, run it from the repository root)."
            }}},
            "columnKind": "utf16CodeUnits",
            "results": results,
            "invocations": [{
                "executionSuccessful": run.unreadable.is_empty(),
                "toolExecutionNotifications": notifications,
            }],
        }],
    })
}

fn level(severity: Severity) -> &'static str {
    match severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
    }
}

/// A region in 1-based lines and 1-based UTF-16 columns (the run's `columnKind`); the end
/// column is that of the first character after the range, as SARIF's `endColumn` is.
fn region(report: &FileReport, range: TextRange) -> Value {
    let start = report.index.line_col_utf16(&report.text, range.start);
    let end = report.index.line_col_utf16(&report.text, range.end);
    json!({"startLine": start.line + 1, "startColumn": start.col + 1, "endLine": end.line + 1, "endColumn": end.col + 1})
}

/// The `artifactLocation` of a path as the other formats show it.
pub fn artifact_location(path: &str) -> Value {
    match file_uri(path) {
        Some(uri) => json!({"uri": uri}),
        None => json!({"uri": encode_path(path), "uriBaseId": SRCROOT}),
    }
}

/// A `file://` URI for an absolute path; `None` for a relative one.
fn file_uri(path: &str) -> Option<String> {
    if !std::path::Path::new(path).is_absolute() {
        return None;
    }
    if cfg!(windows) {
        let path = path.replace('\\', "/");
        // `\\server\share\x` → `file://server/share/x`; `C:\x` → `file:///C:/x` (RFC 8089).
        if let Some(unc) = path.strip_prefix("//") {
            let (host, rest) = unc.split_once('/').unwrap_or((unc, ""));
            return Some(format!("file://{}/{}", encode_path(host), encode_path(rest)));
        }
        let (drive, rest) = path.split_at(2.min(path.len()));
        return Some(format!("file:///{drive}{}", encode_path(rest)));
    }
    Some(format!("file://{}", encode_path(path)))
}

/// Percent-encodes every byte of `path` except unreserved characters and the `/` between
/// segments (`\` too on Windows, as `/`), so the result is a path that no character of a
/// file name can give another meaning: not `:` (a scheme), `%`, `#`, `?`, nor a space.
pub fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for &b in path.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => out.push(b as char),
            b'\\' if cfg!(windows) => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn rule(code: Code, docs: &Docs) -> Value {
    let id = code.as_str();
    let meaning = docs.meaning(code);
    let full_md = match meaning {
        Some(m) => sentence(m),
        None => sentence(code.title()),
    };
    let full_text = plain(&full_md);
    let help_uri = docs.help_uri(code);
    let table_uri = docs.table_uri();
    let mut help_md = format!("**{id}** ({}): {full_md}", level(code.default_severity()));
    for detail in docs.details(code) {
        help_md.push_str(&format!("\n\n{}", sentence(detail)));
    }
    let mut help_text = format!("{id} ({}): {full_text}", level(code.default_severity()));
    for detail in docs.details(code) {
        help_text.push_str(&format!("\n\n{}", plain(&sentence(detail))));
    }
    if let Some(section) = docs.own_section(code) {
        help_md.push_str(&format!("\n\nHow it is checked: [{}]({}).", section.text, section.uri));
        help_text.push_str(&format!("\n\nHow it is checked: {} ({}).", section.text, section.uri));
    }
    help_md.push_str(&format!("\n\nAll codes: [Diagnostics]({table_uri}) in the language reference."));
    help_text.push_str(&format!("\n\nAll codes: {table_uri}"));
    let silence = format!("`tessera check --ignore {id}`, or `ignore = [\"{id}\"]` in `tessera.toml`");
    help_md.push_str(&format!("\n\nTo stop reporting it: {silence}."));
    help_text.push_str(&format!("\n\nTo stop reporting it: {}.", plain(&silence)));
    json!({
        "id": id,
        "name": code.title().replace(' ', "-"),
        "shortDescription": {"text": code.title()},
        "fullDescription": {"text": full_text, "markdown": full_md},
        "help": {"text": help_text, "markdown": help_md},
        "helpUri": help_uri,
        "defaultConfiguration": {"level": level(code.default_severity())},
    })
}

/// A table cell as a sentence: capitalized, ending in a period.
fn sentence(s: &str) -> String {
    let s = s.trim();
    let mut chars = s.chars();
    let mut out: String = match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    };
    if !out.ends_with(['.', '!', '?']) {
        out.push('.');
    }
    out
}

/// Markdown as plain text: code spans lose their backticks, escapes their backslash.
fn plain(md: &str) -> String {
    md.replace('`', "").replace("\\|", "|")
}

/// A heading of the docs with its GitHub anchor.
struct Section {
    text: String,
    uri: String,
}

/// What the docs say about each code.
struct Docs {
    /// (code, severity, meaning) rows of the diagnostics table of `language.md`.
    table: Vec<(String, String)>,
    /// (code, text) rows of the docs' other tables that start with a code.
    details: Vec<(String, String)>,
    /// Every heading of every doc.
    sections: Vec<Section>,
}

impl Docs {
    fn parse() -> Docs {
        let mut docs = Docs { table: Vec::new(), details: Vec::new(), sections: Vec::new() };
        for (file, text) in DOCS {
            let mut slugs = Slugs::default();
            let mut fenced = false;
            let mut in_diagnostics = false;
            for line in text.lines() {
                if line.trim_start().starts_with("```") {
                    fenced = !fenced;
                    continue;
                }
                if fenced {
                    continue;
                }
                if let Some(heading) = heading(line) {
                    in_diagnostics = *file == "language.md" && line.starts_with("## ") && heading == "Diagnostics";
                    let uri = format!("{DOCS_URI}{file}#{}", slugs.slug(&heading));
                    docs.sections.push(Section { text: heading, uri });
                    continue;
                }
                let cells = table_cells(line);
                let Some(first) = cells.first() else { continue };
                if Code::parse(first).is_none() || first.len() != 5 {
                    continue;
                }
                match cells.as_slice() {
                    [code, severity, meaning] if in_diagnostics && matches!(severity.as_str(), "error" | "warning") => {
                        docs.table.push((code.clone(), meaning.clone()))
                    }
                    [code, text] => docs.details.push((code.clone(), text.clone())),
                    _ => {}
                }
            }
        }
        docs
    }

    fn meaning(&self, code: Code) -> Option<&str> {
        self.table.iter().find(|(c, _)| c == code.as_str()).map(|(_, m)| m.as_str())
    }

    fn details(&self, code: Code) -> impl Iterator<Item = &str> {
        self.details.iter().filter(move |(c, _)| c == code.as_str()).map(|(_, t)| t.as_str())
    }

    /// A heading that names the code (`## Shared memory (E0500)`).
    fn own_section(&self, code: Code) -> Option<&Section> {
        self.sections
            .iter()
            .find(|s| s.text.split(|c: char| !c.is_ascii_alphanumeric()).any(|word| word == code.as_str()))
    }

    /// The diagnostics table of the language reference.
    fn table_uri(&self) -> String {
        let prefix = format!("{DOCS_URI}language.md#");
        self.sections
            .iter()
            .find(|s| s.text == "Diagnostics" && s.uri.starts_with(&prefix))
            .map_or_else(|| format!("{DOCS_URI}language.md"), |s| s.uri.clone())
    }

    fn help_uri(&self, code: Code) -> String {
        self.own_section(code).map_or_else(|| self.table_uri(), |s| s.uri.clone())
    }
}

/// The text of an ATX heading (`## Text ##`), without its markers and code spans' backticks.
fn heading(line: &str) -> Option<String> {
    let hashes = line.bytes().take_while(|&b| b == b'#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &line[hashes..];
    if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    let text = rest.trim().trim_end_matches('#').trim_end();
    Some(text.replace('`', ""))
}

/// The cells of a Markdown table row (`| a | b |`), trimmed; `\|` does not split.
fn table_cells(line: &str) -> Vec<String> {
    let line = line.trim();
    if !line.starts_with('|') {
        return Vec::new();
    }
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = line[1..].chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cell.push_str("\\|");
                chars.next();
            }
            '|' => cells.push(std::mem::take(&mut cell).trim().to_string()),
            _ => cell.push(c),
        }
    }
    if !cell.trim().is_empty() {
        cells.push(cell.trim().to_string());
    }
    cells
}

/// GitHub's heading anchors: lower case, punctuation dropped, spaces as `-`, and `-1`,
/// `-2`, ... after a repeated one (github-slugger, which github.com uses).
#[derive(Default)]
struct Slugs {
    seen: HashSet<String>,
}

impl Slugs {
    fn slug(&mut self, heading: &str) -> String {
        let base: String = heading
            .chars()
            .flat_map(char::to_lowercase)
            .filter_map(|c| match c {
                ' ' => Some('-'),
                '-' | '_' => Some(c),
                c if c.is_alphanumeric() => Some(c),
                _ => None,
            })
            .collect();
        let mut slug = base.clone();
        let mut n = 0;
        while self.seen.contains(&slug) {
            n += 1;
            slug = format!("{base}-{n}");
        }
        self.seen.insert(slug.clone());
        slug
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_become_uri_references_that_keep_their_meaning() {
        assert_eq!(encode_path("a/b.tsr"), "a/b.tsr");
        assert_eq!(encode_path("my kernel é.tsr"), "my%20kernel%20%C3%A9.tsr");
        assert_eq!(encode_path("we,ird:name.tsr"), "we%2Cird%3Aname.tsr");
        assert_eq!(encode_path("50%#?.tsr"), "50%25%23%3F.tsr");
        assert_eq!(artifact_location("x y.tsr"), json!({"uri": "x%20y.tsr", "uriBaseId": "%SRCROOT%"}));
        if cfg!(unix) {
            assert_eq!(artifact_location("/tmp/a b.tsr"), json!({"uri": "file:///tmp/a%20b.tsr"}));
        }
    }

    #[test]
    fn every_code_has_a_row_in_the_diagnostics_table_with_its_severity() {
        let docs = Docs::parse();
        for &code in Code::ALL {
            assert!(docs.meaning(code).is_some(), "{code} has no row in docs/language.md's diagnostics table");
        }
        // The severity column agrees with the code registry.
        let text = DOCS[0].1;
        let section = &text[text.find("\n## Diagnostics").unwrap()..];
        for &code in Code::ALL {
            let row = section.lines().find(|l| table_cells(l).first().is_some_and(|c| c == code.as_str())).unwrap();
            assert_eq!(table_cells(row)[1], level(code.default_severity()), "{row}");
        }
        assert!(docs.table_uri().ends_with("language.md#diagnostics"), "{}", docs.table_uri());
        // Every code's rule is complete (tests/sarif.rs checks the links of the reported
        // ones against the docs' headings independently).
        for &code in Code::ALL {
            let rule = rule(code, &docs);
            assert!(rule["helpUri"].as_str().unwrap().contains(".md#"), "{rule}");
        }
    }

    #[test]
    fn slugs_follow_github() {
        let mut s = Slugs::default();
        assert_eq!(s.slug("Shared memory (E0500)"), "shared-memory-e0500");
        assert_eq!(s.slug("--json"), "--json");
        assert_eq!(s.slug("Slices, loads and stores"), "slices-loads-and-stores");
        assert_eq!(s.slug("Shared memory (E0500)"), "shared-memory-e0500-1");
        assert_eq!(heading("### `tessera run`"), Some("tessera run".to_string()));
        assert_eq!(heading("#not"), None);
    }
}
