//! `cargo xtask test`: every test suite of the repository, in the order a failure is
//! cheapest to see. A suite whose tool is missing fails (CI must not go green by
//! skipping); only the tree-sitter CLI is optional outside CI.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

struct Suite {
    name: &'static str,
    /// The tool that must be on PATH, with the package that provides it.
    needs: Option<(&'static str, &'static str)>,
    optional: bool,
    dir: &'static str,
    program: &'static str,
    args: &'static [&'static str],
}

const SUITES: &[Suite] = &[
    Suite {
        name: "rustfmt",
        needs: None,
        optional: false,
        dir: ".",
        program: "cargo",
        args: &["fmt", "--all", "--check"],
    },
    Suite {
        name: "clippy",
        needs: None,
        optional: false,
        dir: ".",
        program: "cargo",
        args: &["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"],
    },
    // The binaries first: the pytest, Neovim and tmux suites drive them.
    Suite {
        name: "build binaries",
        needs: None,
        optional: false,
        dir: ".",
        program: "cargo",
        args: &["build", "--workspace", "--bins"],
    },
    Suite {
        name: "cargo test",
        needs: None,
        optional: false,
        dir: ".",
        program: "cargo",
        args: &["test", "--workspace"],
    },
    Suite {
        name: "tree-sitter test",
        needs: Some(("tree-sitter", "cargo install --locked tree-sitter-cli")),
        optional: true,
        dir: "grammars/tree-sitter-tessera",
        program: "tree-sitter",
        args: &["test"],
    },
    Suite {
        name: "VS Code extension (npm test, vsce package)",
        needs: Some(("npm", "apt-get install nodejs npm")),
        optional: false,
        dir: "editors",
        program: "bash",
        args: &["run-tests.sh", "--vscode"],
    },
    Suite {
        name: "Neovim plugin",
        needs: Some(("nvim", "apt-get install neovim")),
        optional: false,
        dir: "editors",
        program: "bash",
        args: &["run-tests.sh", "--nvim"],
    },
];

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join(tool).is_file()))
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

/// An end-to-end suite driven by a script against the built binaries.
struct ScriptSuite {
    name: String,
    argv: Vec<String>,
    /// The tool it needs and the package that provides it.
    tool: (&'static str, &'static str),
}

/// Suites that exist once their directory does.
fn script_suites(root: &Path) -> Vec<ScriptSuite> {
    let mut out = Vec::new();
    if root.join("tests/lsp_pytest").is_dir() {
        out.push(ScriptSuite {
            name: "language server through pytest-lsp".to_string(),
            argv: vec!["python3".into(), "-m".into(), "pytest".into(), "-q".into(), "tests/lsp_pytest".into()],
            tool: ("python3", "pip install pytest-lsp"),
        });
    }
    for (dir, what, tool) in [
        ("tests/nvim", "language server in headless Neovim", ("nvim", "apt-get install neovim")),
        ("tests/tmux", "explorer in tmux", ("tmux", "apt-get install tmux")),
    ] {
        if root.join(dir).join("run.sh").is_file() {
            out.push(ScriptSuite { name: what.to_string(), argv: vec!["bash".into(), format!("{dir}/run.sh")], tool });
        }
    }
    out
}

fn run(name: &str, dir: &Path, program: &str, args: &[String]) -> bool {
    println!("\n==> {name}: {program} {}", args.join(" "));
    let start = Instant::now();
    let status = Command::new(program).args(args).current_dir(dir).status();
    let ok = matches!(status, Ok(s) if s.success());
    println!("<== {name}: {} in {:.1}s", if ok { "ok" } else { "FAILED" }, start.elapsed().as_secs_f64());
    ok
}

fn test() -> ExitCode {
    let root = root();
    let mut failed: Vec<String> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    let mut passed = 0;
    for suite in SUITES {
        if let Some((tool, package)) = suite.needs {
            if !on_path(tool) {
                // In CI every suite runs: `.ci/run` installs every tool.
                if suite.optional && std::env::var_os("CI").is_none() {
                    skipped.push(format!("{} (`{tool}` not installed: {package})", suite.name));
                } else {
                    println!("\n==> {}: `{tool}` is not installed ({package})", suite.name);
                    failed.push(suite.name.to_string());
                }
                continue;
            }
        }
        let args: Vec<String> = suite.args.iter().map(|s| s.to_string()).collect();
        if run(suite.name, &root.join(suite.dir), suite.program, &args) {
            passed += 1;
        } else {
            failed.push(suite.name.to_string());
            // Nothing else is meaningful if the code does not build or format.
            if matches!(suite.name, "rustfmt" | "build binaries") {
                break;
            }
        }
    }
    // The end-to-end suites drive the built binaries: they are meaningful whenever the
    // build succeeded, whatever else failed.
    let built = !failed.iter().any(|f| f == "rustfmt" || f == "build binaries");
    let mut not_run: Vec<String> = Vec::new();
    if !built {
        not_run.extend(script_suites(&root).into_iter().map(|s| s.name));
    } else {
        for suite in script_suites(&root) {
            let (tool, package) = suite.tool;
            if !on_path(tool) {
                println!("\n==> {}: `{tool}` is not installed ({package})", suite.name);
                failed.push(suite.name);
                continue;
            }
            if run(&suite.name, &root, &suite.argv[0], &suite.argv[1..]) {
                passed += 1;
            } else {
                failed.push(suite.name);
            }
        }
    }
    println!();
    for s in &skipped {
        println!("skipped: {s}");
    }
    for s in &not_run {
        println!("not run (the build failed): {s}");
    }
    println!("{passed} passed, {} failed", failed.len());
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        println!("failed suites: {}", failed.join(", "));
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        Some("test") => test(),
        _ => {
            eprintln!("usage: cargo xtask test");
            ExitCode::from(2)
        }
    }
}
