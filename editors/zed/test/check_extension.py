#!/usr/bin/env python3
"""Static checks of the Zed extension in editors/zed (run by test/run.sh).

- extension.toml and languages/tessera/config.toml parse and have the keys Zed needs, and
  agree with each other (language name, grammar name, language server languages);
- the grammar `rev` is a commit of this repository whose grammar (grammar.js, src/) is the
  one in the working tree, so the queries tested here are the ones Zed will run;
- every capture of every query is one Zed documents for that query file
  (test/zed-captures.txt), and every `not_in` scope of config.toml is an overrides.scm capture;
- with the tree-sitter CLI: every query compiles against the grammar, and every capture it
  names matches something in test/sample.tsr.

Usage: check_extension.py [--tree-sitter PATH] [--require-tree-sitter]
Exit status 0 when all checks pass, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXT = HERE.parent
REPO = EXT.parent.parent
LANG_DIR = EXT / "languages" / "tessera"
GRAMMAR_DIR = REPO / "grammars" / "tree-sitter-tessera"
GRAMMAR_FILES = ["grammar.js", "src/parser.c", "src/scanner.c", "src/grammar.json", "src/node-types.json"]

failures: list[str] = []


def fail(message: str) -> None:
    failures.append(message)
    print(f"FAIL: {message}")


def ok(message: str) -> None:
    print(f"ok: {message}")


def load_toml(path: Path) -> dict:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        fail(f"{path.relative_to(REPO)}: {e}")
        return {}


def require(table: dict, key: str, kind: type | tuple[type, ...], where: str):
    if key not in table:
        fail(f"{where}: missing `{key}`")
        return None
    value = table[key]
    if not isinstance(value, kind):
        fail(f"{where}: `{key}` should be {kind}, is {type(value).__name__}")
        return None
    if isinstance(value, (str, list, dict)) and not value:
        fail(f"{where}: `{key}` is empty")
        return None
    return value


def check_manifest() -> tuple[dict, dict]:
    manifest = load_toml(EXT / "extension.toml")
    where = "extension.toml"
    for key in ("id", "name", "version", "description", "repository"):
        require(manifest, key, str, where)
    if manifest.get("schema_version") != 1:
        fail(f"{where}: schema_version must be 1")
    authors = require(manifest, "authors", list, where)
    if authors and not all(isinstance(a, str) and a for a in authors):
        fail(f"{where}: authors must be non-empty strings")
    version = manifest.get("version", "")
    if not re.fullmatch(r"\d+\.\d+\.\d+", str(version)):
        fail(f"{where}: version `{version}` is not MAJOR.MINOR.PATCH")
    ext_id = manifest.get("id", "")
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", str(ext_id)):
        fail(f"{where}: id `{ext_id}` should be lowercase words joined by `-`")

    grammars = require(manifest, "grammars", dict, where) or {}
    for name, grammar in grammars.items():
        gw = f"{where} [grammars.{name}]"
        require(grammar, "repository", str, gw)
        rev = require(grammar, "rev", str, gw)
        if rev and not re.fullmatch(r"[0-9a-f]{40}", rev):
            fail(f"{gw}: rev must be a full commit SHA")
        if grammar.get("path") != "grammars/tree-sitter-tessera":
            fail(f"{gw}: path must be grammars/tree-sitter-tessera")

    servers = require(manifest, "language_servers", dict, where) or {}
    for name, server in servers.items():
        sw = f"{where} [language_servers.{name}]"
        require(server, "name", str, sw)
        langs = require(server, "languages", list, sw)
        if "language" in server:
            fail(f"{sw}: `language` is deprecated, use `languages`")
        if langs is not None and not all(isinstance(x, str) for x in langs):
            fail(f"{sw}: languages must be strings")
    if "tessera-lsp" not in servers:
        fail(f"{where}: no [language_servers.tessera-lsp]")
    if not failures:
        ok("extension.toml has the keys Zed needs")

    config = load_toml(LANG_DIR / "config.toml")
    where = "languages/tessera/config.toml"
    name = require(config, "name", str, where)
    grammar = require(config, "grammar", str, where)
    if grammar and grammar not in grammars:
        fail(f"{where}: grammar `{grammar}` is not declared in extension.toml [grammars]")
    suffixes = require(config, "path_suffixes", list, where) or []
    if "tsr" not in suffixes:
        fail(f"{where}: path_suffixes must contain \"tsr\"")
    comments = require(config, "line_comments", list, where) or []
    if not any(c.startswith("#") for c in comments):
        fail(f"{where}: line_comments must contain a `#` comment")
    for i, pair in enumerate(require(config, "brackets", list, where) or []):
        for key, kind in (("start", str), ("end", str), ("close", bool), ("newline", bool)):
            require(pair, key, kind, f"{where} brackets[{i}]")
    for key in ("increase_indent_pattern", "decrease_indent_pattern"):
        if key in config:
            try:
                re.compile(config[key])
            except re.error as e:
                fail(f"{where}: {key} does not compile: {e}")
    if "tab_size" in config and not (isinstance(config["tab_size"], int) and config["tab_size"] > 0):
        fail(f"{where}: tab_size must be a positive integer")
    for server_name, server in servers.items():
        if name and name not in server.get("languages", []):
            fail(f"extension.toml [language_servers.{server_name}]: languages does not name `{name}`")
        for lang in server.get("language_ids", {}):
            if lang != name:
                fail(f"extension.toml [language_servers.{server_name}.language_ids]: unknown language `{lang}`")
    ok("languages/tessera/config.toml has the keys Zed needs and matches extension.toml")
    return manifest, config


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)


def check_grammar_rev(manifest: dict, ci: bool) -> None:
    rev = manifest.get("grammars", {}).get("tessera", {}).get("rev")
    if not rev:
        return
    if shutil.which("git") is None or git("rev-parse", "--git-dir").returncode != 0:
        message = "not a git checkout: cannot check the grammar rev"
        fail(message) if ci else print(f"skip: {message}")
        return
    if git("cat-file", "-e", f"{rev}^{{commit}}").returncode != 0:
        shallow = git("rev-parse", "--is-shallow-repository").stdout.strip() == "true"
        message = f"grammar rev {rev} is not a commit of this repository"
        if shallow and not ci:
            print(f"skip: {message} (shallow clone)")
        else:
            fail(message + (" (a shallow clone: fetch more history)" if shallow else ""))
        return
    paths = [f"grammars/tree-sitter-tessera/{p}" for p in GRAMMAR_FILES]
    diff = git("diff", "--name-only", rev, "--", *paths)
    if diff.returncode != 0:
        fail(f"git diff {rev}: {diff.stderr.strip()}")
    elif diff.stdout.strip():
        latest = git("log", "-1", "--format=%H", "--", *paths).stdout.strip()
        fail(
            f"the grammar changed since rev {rev[:12]} ({', '.join(diff.stdout.split())}): "
            f"commit it and set [grammars.tessera] rev to the commit (last grammar commit: {latest or '?'})"
        )
    else:
        ok(f"grammar rev {rev[:12]} holds the working tree's grammar")


def strip_comments_and_strings(query: str) -> str:
    """The query without `;` comments and string literals (they may contain `@`)."""
    out = []
    i = 0
    while i < len(query):
        c = query[i]
        if c == '"':
            i += 1
            while i < len(query) and query[i] != '"':
                i += 2 if query[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == ";":
            while i < len(query) and query[i] != "\n":
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def captures(query_file: Path) -> list[str]:
    text = strip_comments_and_strings(query_file.read_text())
    return re.findall(r"@([A-Za-z_][A-Za-z0-9_.\-]*)", text)


def read_documented() -> dict[str, set[str]]:
    documented: dict[str, set[str]] = {}
    section = None
    for line in (HERE / "zed-captures.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"\[(.+)\]", line)
        if m:
            section = m.group(1)
            documented[section] = set()
        elif section:
            documented[section].add(line)
    return documented


def check_captures(config: dict) -> dict[str, set[str]]:
    documented = read_documented()
    used: dict[str, set[str]] = {}
    for query_file in sorted(LANG_DIR.glob("*.scm")):
        names = {c for c in captures(query_file) if not c.startswith("_")}
        used[query_file.name] = names
        if query_file.name == "overrides.scm":
            continue
        allowed = documented.get(query_file.name)
        if allowed is None:
            fail(f"{query_file.name}: not a query file test/zed-captures.txt knows")
            continue
        unknown = sorted(names - allowed)
        if unknown:
            fail(f"{query_file.name}: captures Zed does not document: {', '.join('@' + u for u in unknown)}")
        else:
            ok(f"{query_file.name}: {len(names)} capture names, all documented by Zed")
    for required in ("highlights.scm", "brackets.scm", "outline.scm", "indents.scm"):
        if required not in used:
            fail(f"languages/tessera/{required} is missing")
    scopes = {n.removesuffix(".inclusive") for n in used.get("overrides.scm", set())}
    wanted = {s for pair in config.get("brackets", []) for s in pair.get("not_in", [])}
    wanted |= set(config.get("overrides", {}))
    if wanted - scopes:
        fail(f"config.toml names scopes overrides.scm does not capture: {sorted(wanted - scopes)}")
    elif wanted:
        ok(f"the not_in scopes {sorted(wanted)} are overrides.scm captures")
    return used


def check_queries_with_cli(cli: str, used: dict[str, set[str]]) -> None:
    sample = HERE / "sample.tsr"
    env = dict(os.environ)
    for query_file in sorted(LANG_DIR.glob("*.scm")):
        # Run from the grammar's folder: the CLI builds and loads the grammar found there.
        result = subprocess.run(
            [cli, "query", str(query_file), str(sample)],
            cwd=GRAMMAR_DIR,
            capture_output=True,
            text=True,
            env=env,
        )
        if result.returncode != 0:
            error = "\n".join(line.strip() for line in result.stderr.splitlines() if "Query error" in line)
            fail(f"{query_file.name} does not compile against the grammar:\n{error or result.stderr}")
            continue
        matched = set(re.findall(r"capture: (?:\d+ - )?([A-Za-z_][A-Za-z0-9_.\-]*)", result.stdout))
        missing = sorted(used[query_file.name] - matched)
        if missing:
            fail(f"{query_file.name}: captures that match nothing in test/sample.tsr: {missing}")
        else:
            ok(f"{query_file.name} compiles against the grammar; every capture matches test/sample.tsr")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree-sitter", default=os.environ.get("TREE_SITTER") or shutil.which("tree-sitter"))
    parser.add_argument("--require-tree-sitter", action="store_true", help="fail when the CLI is missing")
    parser.add_argument("--ci", action="store_true", help="a missing git history is a failure")
    args = parser.parse_args()

    manifest, config = check_manifest()
    check_grammar_rev(manifest, args.ci)
    used = check_captures(config)
    cli = args.tree_sitter
    if cli and (Path(cli).is_file() or shutil.which(cli)):
        check_queries_with_cli(cli, used)
    elif args.require_tree_sitter:
        fail("the tree-sitter CLI was not found (cargo install tree-sitter-cli --version 0.27.1)")
    else:
        print("skip: the tree-sitter CLI was not found; the queries were not compiled")

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
