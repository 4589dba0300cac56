//! `tessera check --format sarif` against the SARIF 2.1.0 schema and what consumers (GitHub
//! code scanning, SARIF viewers and validators) need of it: URIs that name odd file names
//! exactly, columns in the unit the run declares, rules with their descriptions and a
//! help link to a heading that exists in `docs/`, and a valid log when paths cannot be read.

#![cfg(unix)]

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tessera(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .current_dir(dir)
        .env_remove("TESSERA_TEST_PANIC_ON")
        .stdin(Stdio::null())
        .output()
        .expect("tessera runs")
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", text(&o.stdout), text(&o.stderr)))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The official SARIF 2.1.0 schema (tests/fixtures/sarif/README.md says where it is
/// from), with `format` checked (`uri`, `uri-reference`, `date-time`). Its `$ref`s are
/// all inside the file, and the crate is built without a retriever: this runs offline.
fn schema() -> &'static jsonschema::Validator {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        let path = root().join("tests/fixtures/sarif/sarif-schema-2.1.0.json");
        let mut schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
        // The one regex of this schema that is not a regex (a stray `]`), as SARIF 2.1.0
        // errata 01 corrected it; the file itself stays as published.
        for owner in ["run", "toolComponent"] {
            let pattern = &mut schema["definitions"][owner]["properties"]["language"]["pattern"];
            assert_eq!(*pattern, "^[a-zA-Z]{2}|^[a-zA-Z]{2}-[a-zA-Z]{2}]?$");
            *pattern = "^[a-zA-Z]{2}(-[a-zA-Z]{2})?$".into();
        }
        jsonschema::draft7::options().should_validate_formats(true).build(&schema).expect("the schema compiles")
    })
}

fn assert_schema_valid(log: &Value) {
    let errors: Vec<String> = schema().iter_errors(log).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "not valid SARIF 2.1.0:\n{}\n{log:#}", errors.join("\n"));
}

/// A file name's URI decoded back: `%XX` to its byte. Panics on anything that is not a
/// well-formed path of an RFC 3986 relative reference or `file:` URI (pchar and `/`).
fn decode(uri: &str) -> String {
    let mut bytes = Vec::new();
    let b = uri.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
                bytes.push(u8::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("bad escape in {uri}")));
                i += 3;
            }
            c if c.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&c) => {
                bytes.push(c);
                i += 1;
            }
            c => panic!("{uri}: `{}` must be percent-encoded", c as char),
        }
    }
    String::from_utf8(bytes).unwrap()
}

/// The file an `artifactLocation` names, relative references resolved against `base`
/// (what `%SRCROOT%` stands for: the directory `tessera check` ran in).
fn resolve(location: &Value, base: &Path) -> PathBuf {
    let uri = location["uri"].as_str().unwrap();
    if let Some(path) = uri.strip_prefix("file://") {
        assert!(location.get("uriBaseId").is_none(), "{location}");
        assert!(path.starts_with('/'), "a file URI with an empty authority: {uri}");
        return PathBuf::from(decode(path));
    }
    assert_eq!(location["uriBaseId"], "%SRCROOT%", "{location}");
    // RFC 3986 §4.2: a relative reference's first segment has no `:` (it would be a scheme).
    let first = uri.split('/').next().unwrap();
    assert!(!first.contains(':'), "{uri} reads as a URI with a scheme");
    base.join(decode(uri))
}

/// GitHub's heading anchors in a Markdown file (github-slugger: lower case, punctuation
/// dropped, spaces to `-`, `-N` after repeats), headings inside code fences skipped.
fn anchors(markdown: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if fenced || hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base: String = line[hashes..]
            .trim()
            .trim_end_matches('#')
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let mut slug = base.clone();
        let mut n = 0;
        while seen.contains(&slug) {
            n += 1;
            slug = format!("{base}-{n}");
        }
        seen.insert(slug);
    }
    seen
}

/// The `meaning` column of docs/language.md's diagnostics table, by code.
fn documented_meaning(code: &str) -> String {
    let doc = std::fs::read_to_string(root().join("docs/language.md")).unwrap();
    let table = &doc[doc.find("\n## Diagnostics").expect("a Diagnostics section")..];
    let row = table
        .lines()
        .find(|l| l.starts_with(&format!("| {code} |")))
        .unwrap_or_else(|| panic!("{code} is not in the diagnostics table"));
    row.split(" | ").nth(2).unwrap().trim_end_matches(" |").replace('`', "")
}

const EMOJI_LINE: &str = "    s = \"😀\"; return x + yy";

/// A directory of files with names that need encoding, clean and broken.
fn odd_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let broken_emoji = format!("from tessera import *\n\n@jit\ndef f(x: Tensor[\"N\", f32]):\n{EMOJI_LINE}\n");
    std::fs::write(p.join("my kernel é.tsr"), broken_emoji).unwrap();
    std::fs::write(p.join("we,ird:name.tsr"), "X = (\n").unwrap();
    std::fs::write(p.join("100% #1?.tsr"), "X = (\n").unwrap();
    std::fs::create_dir(p.join("a:b")).unwrap();
    std::fs::write(p.join("a:b/ünï [x].tsr"), "X = [\n").unwrap();
    std::fs::write(p.join("clean ok 𝔘.tsr"), "X = 1\n").unwrap();
    dir
}

fn results(log: &Value) -> &Vec<Value> {
    log["runs"][0]["results"].as_array().unwrap()
}

#[test]
fn odd_file_names_give_valid_sarif_whose_uris_name_the_files() {
    let dir = odd_tree();
    let o = tessera(&["check", "--format", "sarif", "."], dir.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let log = json(&o);
    assert_schema_valid(&log);
    let named: BTreeSet<PathBuf> = results(&log)
        .iter()
        .flat_map(|r| {
            let mut locations = vec![&r["locations"][0]["physicalLocation"]["artifactLocation"]];
            for related in r["relatedLocations"].as_array().into_iter().flatten() {
                locations.push(&related["physicalLocation"]["artifactLocation"]);
            }
            locations
        })
        .map(|l| resolve(l, dir.path()))
        .collect();
    let broken: BTreeSet<PathBuf> = ["my kernel é.tsr", "we,ird:name.tsr", "100% #1?.tsr", "a:b/ünï [x].tsr"]
        .iter()
        .map(|n| dir.path().join(n))
        .collect();
    assert_eq!(named, broken);
    let uris: Vec<&str> = results(&log)
        .iter()
        .map(|r| r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].as_str().unwrap())
        .collect();
    assert!(uris.contains(&"we%2Cird%3Aname.tsr"), "{uris:?}");
    assert!(uris.contains(&"100%25%20%231%3F.tsr"), "{uris:?}");
    assert!(uris.contains(&"a%3Ab/%C3%BCn%C3%AF%20%5Bx%5D.tsr"), "{uris:?}");
    assert!(uris.contains(&"my%20kernel%20%C3%A9.tsr"), "{uris:?}");
    // %SRCROOT% is declared (with no machine-specific URI: the log is portable).
    assert!(log["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["description"]["text"].is_string(), "{log:#}");
}

#[test]
fn absolute_paths_become_file_uris() {
    let dir = odd_tree();
    let elsewhere = tempfile::tempdir().unwrap();
    let file = dir.path().join("my kernel é.tsr");
    let o = tessera(&["check", "--format", "sarif", file.to_str().unwrap()], elsewhere.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let log = json(&o);
    assert_schema_valid(&log);
    let location = &results(&log)[0]["locations"][0]["physicalLocation"]["artifactLocation"];
    assert!(location["uri"].as_str().unwrap().starts_with("file:///"), "{location}");
    assert_eq!(resolve(location, elsewhere.path()), file);
}

#[test]
fn a_stdin_name_is_encoded_like_a_path() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["check", "--format", "sarif", "--stdin-filename", "in:put #2.tsr"])
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"X = (\n").unwrap();
    let o = child.wait_with_output().unwrap();
    let log = json(&o);
    assert_schema_valid(&log);
    let location = &results(&log)[0]["locations"][0]["physicalLocation"]["artifactLocation"];
    assert_eq!(location["uri"], "in%3Aput%20%232.tsr");
    assert_eq!(resolve(location, dir.path()), dir.path().join("in:put #2.tsr"));
}

#[test]
fn columns_after_a_character_outside_the_bmp_are_in_the_declared_unit() {
    let dir = odd_tree();
    let o = tessera(&["check", "--format", "sarif", "my kernel é.tsr"], dir.path());
    let log = json(&o);
    assert_schema_valid(&log);
    let run = &log["runs"][0];
    let result = results(&log).iter().find(|r| r["ruleId"] == "E0200").expect("`yy` is undefined");
    let region = &result["locations"][0]["physicalLocation"]["region"];
    assert_eq!(region["startLine"], 5);
    let before = &EMOJI_LINE[..EMOJI_LINE.find("yy").unwrap()];
    let (start, end) = match run["columnKind"].as_str() {
        Some("utf16CodeUnits") => (before.encode_utf16().count() + 1, before.encode_utf16().count() + 3),
        Some("unicodeCodePoints") => (before.chars().count() + 1, before.chars().count() + 3),
        other => panic!("columnKind {other:?}: a text tool must declare it (SARIF §3.14.17)"),
    };
    assert_eq!((region["startColumn"].as_u64(), region["endColumn"].as_u64()), (Some(start as u64), Some(end as u64)));
    // The JSON format's columns are Unicode scalar values, as docs/json.md says.
    let j = json(&tessera(&["check", "--format", "json", "my kernel é.tsr"], dir.path()));
    let d = j["diagnostics"].as_array().unwrap().iter().find(|d| d["code"] == "E0200").unwrap();
    assert_eq!(d["range"]["start"]["column"].as_u64(), Some(before.chars().count() as u64 + 1));
    assert_ne!(before.chars().count(), before.encode_utf16().count(), "the line must tell the units apart");
}

#[test]
fn every_reported_code_has_a_rule_with_full_metadata_and_a_help_link_to_a_heading_in_docs() {
    // The corpus's invalid programs (named one by one: tessera.toml excludes their
    // directory from walks), the fixtures and the examples report most codes.
    let mut corpus: Vec<String> = std::fs::read_dir(root().join("tests/corpus/invalid"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tsr"))
        .map(|p| p.strip_prefix(root()).unwrap().to_str().unwrap().to_string())
        .collect();
    corpus.sort();
    let mut args = vec!["check", "--format", "sarif", "examples", "tests/fixtures/invalid/mixed.tsr"];
    args.extend(corpus.iter().map(String::as_str));
    let o = tessera(&args, &root());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let log = json(&o);
    assert_schema_valid(&log);
    let driver = &log["runs"][0]["tool"]["driver"];
    assert_eq!(driver["name"], "tessera");
    assert_eq!(driver["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(driver["semanticVersion"], env!("CARGO_PKG_VERSION"));
    assert!(driver["informationUri"].as_str().unwrap().starts_with("https://"));
    let rules = driver["rules"].as_array().unwrap();
    assert!(rules.len() >= 25, "the corpus reports most codes, the log has {} rules", rules.len());
    let docs_prefix = "https://github.com/tessera-lang/tessera/blob/main/docs/";
    let mut ids = BTreeSet::new();
    for rule in rules {
        let id = rule["id"].as_str().unwrap();
        assert!(ids.insert(id), "{id} twice");
        for field in ["shortDescription", "fullDescription"] {
            assert!(!rule[field]["text"].as_str().unwrap_or("").is_empty(), "{id}: no {field}");
        }
        assert!(!rule["fullDescription"]["markdown"].as_str().unwrap_or("").is_empty(), "{id}");
        assert!(!rule["name"].as_str().unwrap_or("").is_empty(), "{id}: no name");
        assert!(!rule["name"].as_str().unwrap().contains(' '), "{id}: a name is an identifier");
        assert!(rule["help"]["text"].as_str().is_some_and(|t| t.contains(id)), "{id}: {}", rule["help"]);
        assert!(rule["help"]["markdown"].as_str().is_some_and(|t| t.contains(id)), "{id}: {}", rule["help"]);
        assert!(matches!(rule["defaultConfiguration"]["level"].as_str(), Some("error" | "warning")), "{id}");
        // The full description is the docs' meaning of the code, as a sentence.
        let full = rule["fullDescription"]["text"].as_str().unwrap().trim_end_matches('.').to_lowercase();
        assert_eq!(full, documented_meaning(id).to_lowercase().trim_end_matches('.'), "{id}");
        // The help link names a heading that exists in the repository's docs.
        let uri = rule["helpUri"].as_str().unwrap();
        let (file, anchor) = uri
            .strip_prefix(docs_prefix)
            .and_then(|r| r.split_once('#'))
            .unwrap_or_else(|| panic!("{id}: helpUri {uri} is not a section of the repository's docs/"));
        let doc = std::fs::read_to_string(root().join("docs").join(file))
            .unwrap_or_else(|e| panic!("{id}: helpUri names docs/{file}: {e}"));
        assert!(anchors(&doc).contains(anchor), "{id}: docs/{file} has no heading with the anchor #{anchor}");
    }
    // Results point at their rule by id and index, and every rule is one a result uses.
    let mut used = BTreeSet::new();
    for r in results(&log) {
        let index = r["ruleIndex"].as_u64().unwrap() as usize;
        assert_eq!(rules[index]["id"], r["ruleId"], "{r}");
        assert_eq!(rules[index]["defaultConfiguration"]["level"], r["level"], "{r}");
        used.insert(r["ruleId"].as_str().unwrap());
    }
    assert_eq!(used, ids);
    // Codes with a section of their own link there, the rest to the table of all codes.
    let link = |id: &str| rules.iter().find(|r| r["id"] == id).unwrap()["helpUri"].as_str().unwrap().to_string();
    assert_eq!(link("W0601"), format!("{docs_prefix}targets.md#bank-conflicts-w0601"));
    assert_eq!(link("E0301"), format!("{docs_prefix}language.md#diagnostics"));
}

#[test]
fn unreadable_paths_still_give_valid_sarif_with_notifications() {
    let dir = odd_tree();
    let p = dir.path();
    std::os::unix::fs::symlink("nowhere", p.join("dangling link é.tsr")).unwrap();
    assert!(Command::new("mkfifo").arg(p.join("pipe:1.tsr")).status().unwrap().success());
    let o = tessera(&["check", "--format", "sarif", ".", "gone #1.tsr", "pipe:1.tsr", "dangling link é.tsr"], p);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let log = json(&o);
    assert_schema_valid(&log);
    let invocation = &log["runs"][0]["invocations"][0];
    assert_eq!(invocation["executionSuccessful"], false);
    let notes = invocation["toolExecutionNotifications"].as_array().unwrap();
    let named: BTreeSet<PathBuf> = notes
        .iter()
        .map(|n| {
            assert_eq!(n["level"], "error");
            resolve(&n["locations"][0]["physicalLocation"]["artifactLocation"], p)
        })
        .collect();
    let expected: BTreeSet<PathBuf> =
        ["dangling link é.tsr", "gone #1.tsr", "pipe:1.tsr"].iter().map(|n| p.join(n)).collect();
    assert_eq!(named, expected, "{notes:#?}");
    assert!(!results(&log).is_empty(), "the readable files are still reported");

    // Nothing readable at all: exit 2, and still a valid log.
    let o = tessera(&["check", "--format", "sarif", "gone #1.tsr"], p);
    assert_eq!(o.status.code(), Some(2));
    let log = json(&o);
    assert_schema_valid(&log);
    assert!(results(&log).is_empty());
    assert_eq!(log["runs"][0]["invocations"][0]["toolExecutionNotifications"].as_array().unwrap().len(), 1);
}

#[test]
fn a_clean_run_is_valid_too() {
    let dir = odd_tree();
    let o = tessera(&["check", "--format", "sarif", "clean ok 𝔘.tsr"], dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let log = json(&o);
    assert_schema_valid(&log);
    assert!(results(&log).is_empty());
    assert_eq!(log["runs"][0]["invocations"][0]["executionSuccessful"], true);
}

#[test]
fn the_schema_check_has_teeth() {
    // A log with an unencoded space in a URI, an unknown level or a missing rule id is
    // rejected: the validator checks formats and enums, not just JSON.
    let dir = odd_tree();
    let log = json(&tessera(&["check", "--format", "sarif", "my kernel é.tsr"], dir.path()));
    assert_schema_valid(&log);
    let mut bad = log.clone();
    bad["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] =
        "my kernel é.tsr".into();
    assert!(!schema().is_valid(&bad), "an unencoded file name passed as a uri-reference");
    let mut bad = log.clone();
    bad["runs"][0]["results"][0]["level"] = "fatal".into();
    assert!(!schema().is_valid(&bad));
    let mut bad = log;
    bad["runs"][0]["tool"]["driver"]["rules"][0].as_object_mut().unwrap().remove("id");
    assert!(!schema().is_valid(&bad));
}
