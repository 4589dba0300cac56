//! `cargo xtask test`: every test suite of the repository, in the order a failure is
//! cheapest to see, after installing what the suites need where it is missing.
//! `cargo xtask install`: only the installation.
//!
//! Each tool or library a suite needs is looked for the way the suite itself finds it and,
//! when missing, installed by package name: `apt-get` (as root), `pip`, `cargo install`.
//! One line per need says what was found, installed, or what to run by hand. A suite
//! whose need is still missing fails (CI must not go green by skipping); only the
//! tree-sitter CLI is optional outside CI.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output, Stdio};
use std::time::Instant;

/// The compiler's own finder of NVIDIA's tools, compiled into xtask from its source: xtask
/// builds before (and installs what) the workspace needs, so it depends on no crate of it.
/// xtask uses `locate` only; the scratch-file namer beside it serves the compiler.
#[path = "../../passes/src/ptx/tools.rs"]
#[allow(dead_code)]
mod nvidia_tools;

/// How a missing need is installed.
#[derive(Clone, Copy)]
enum Source {
    /// A Debian package, with `apt-get install` as root.
    Apt(&'static str),
    /// A Python package, with `python3 -m pip install`.
    Pip(&'static str),
    /// A crate's binaries, with `cargo install --locked CRATE --version V`.
    Cargo(&'static str, &'static str),
}

impl Source {
    fn package(self) -> &'static str {
        match self {
            Source::Apt(p) | Source::Pip(p) | Source::Cargo(p, _) => p,
        }
    }

    /// The command that installs it, as a user would type it.
    fn command(self) -> String {
        match self {
            Source::Apt(p) => format!("apt-get install {p}"),
            Source::Pip(p) => format!("python3 -m pip install {p}"),
            Source::Cargo(c, v) => format!("cargo install --locked {c} --version {v}"),
        }
    }
}

/// How to tell that a need is there.
#[derive(Clone, Copy)]
enum Probe {
    /// The Debian package of its `Source` is installed.
    Dpkg,
    /// A command on PATH, or the one the variable names (as the suites read it).
    Tool(&'static str, Option<&'static str>),
    /// A module `python3` imports.
    Module(&'static str),
    /// `python3 -m pip` runs.
    Pip,
    /// `ptxas`, as the PTX tests look for it.
    Ptxas,
    /// `nvdisasm`, as the PTX tests look for it.
    Nvdisasm,
}

/// Something a suite needs: how to tell it is there, and the package that provides it.
struct Need {
    id: &'static str,
    probe: Probe,
    source: Source,
}

impl Need {
    /// Where it was found, or `None` when it is missing.
    fn find(&self) -> Option<String> {
        match self.probe {
            Probe::Dpkg => dpkg(self.source.package()),
            Probe::Tool(name, var) => {
                tool(&var.and_then(|v| std::env::var(v).ok()).filter(|v| !v.is_empty()).unwrap_or(name.to_string()))
            }
            Probe::Module(name) => module(name),
            Probe::Pip => pip(),
            Probe::Ptxas => ptxas(),
            Probe::Nvdisasm => nvdisasm(),
        }
    }
}

const fn apt(package: &'static str) -> Need {
    Need { id: package, probe: Probe::Dpkg, source: Source::Apt(package) }
}

const NEEDS: &[Need] = &[
    // LLVM 14 for the CPU backend (inkwell links it).
    apt("llvm-14-dev"),
    apt("libclang-common-14-dev"),
    apt("zlib1g-dev"),
    apt("libzstd-dev"),
    // passes/tests/llvm.rs verifies with `TESSERA_OPT`, else `opt-14` (package llvm-14, a
    // dependency of llvm-14-dev).
    Need { id: "opt-14", probe: Probe::Tool("opt-14", Some("TESSERA_OPT")), source: Source::Apt("llvm-14") },
    // The editor and explorer end-to-end suites.
    Need { id: "neovim", probe: Probe::Tool("nvim", Some("NVIM")), source: Source::Apt("neovim") },
    Need { id: "tmux", probe: Probe::Tool("tmux", None), source: Source::Apt("tmux") },
    // The VS Code real-client test runs VS Code's web build in headless Chromium.
    apt("chromium"),
    // The Emacs package's batch test attaches eglot and lsp-mode to the real server.
    apt("emacs-nox"),
    apt("elpa-eglot"),
    apt("elpa-lsp-mode"),
    // NodeSource's nodejs bundles npm and conflicts with Debian's npm package: each is
    // installed only where its command is missing.
    Need { id: "node", probe: Probe::Tool("node", None), source: Source::Apt("nodejs") },
    Need { id: "npm", probe: Probe::Tool("npm", None), source: Source::Apt("npm") },
    Need { id: "pip", probe: Probe::Pip, source: Source::Apt("python3-pip") },
    // Python modules, imported by python3 as the tests run it.
    Need { id: "numpy", probe: Probe::Module("numpy"), source: Source::Pip("numpy") },
    Need { id: "pytest", probe: Probe::Module("pytest"), source: Source::Pip("pytest") },
    Need { id: "pytest-lsp", probe: Probe::Module("pytest_lsp"), source: Source::Pip("pytest-lsp") },
    Need { id: "pre-commit", probe: Probe::Module("pre_commit"), source: Source::Pip("pre-commit") },
    Need { id: "ptxas", probe: Probe::Ptxas, source: Source::Pip("nvidia-cuda-nvcc-cu12") },
    // passes/tests/ptx.rs disassembles the wgmma kernels' cubins to find HGMMA.
    Need { id: "nvdisasm", probe: Probe::Nvdisasm, source: Source::Pip("nvidia-cuda-nvdisasm") },
    // Its npm package downloads the binary from GitHub; crates.io builds it (~3 minutes).
    Need {
        id: "tree-sitter",
        probe: Probe::Tool("tree-sitter", None),
        source: Source::Cargo("tree-sitter-cli", "0.27.1"),
    },
];

const LLVM: &[&str] = &["llvm-14-dev", "libclang-common-14-dev", "zlib1g-dev", "libzstd-dev"];

struct Suite {
    name: &'static str,
    /// The ids of the `NEEDS` it cannot run without.
    needs: &'static [&'static str],
    optional: bool,
    dir: &'static str,
    program: &'static str,
    args: &'static [&'static str],
}

const SUITES: &[Suite] = &[
    Suite {
        name: "rustfmt",
        needs: &[],
        optional: false,
        dir: ".",
        program: "cargo",
        args: &["fmt", "--all", "--check"],
    },
    Suite {
        name: "clippy",
        needs: LLVM,
        optional: false,
        dir: ".",
        program: "cargo",
        args: &["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"],
    },
    // The binaries first: the pytest, Neovim and tmux suites drive them.
    Suite {
        name: "build binaries",
        needs: LLVM,
        optional: false,
        dir: ".",
        program: "cargo",
        args: &["build", "--workspace", "--bins"],
    },
    Suite {
        name: "cargo test",
        needs: &[
            "llvm-14-dev",
            "libclang-common-14-dev",
            "zlib1g-dev",
            "libzstd-dev",
            "opt-14",
            "numpy",
            "ptxas",
            "nvdisasm",
        ],
        optional: false,
        dir: ".",
        program: "cargo",
        args: &["test", "--workspace"],
    },
    // The `nccl` feature builds here (cudarc's NCCL bindings load at run time) and its
    // probe says "no NCCL" cleanly on a machine without the library.
    Suite {
        name: "NCCL feature (build and probe)",
        needs: LLVM,
        optional: false,
        dir: ".",
        program: "cargo",
        args: &["test", "-p", "tessera-backends", "--features", "nccl", "--test", "nccl"],
    },
    Suite {
        name: "tree-sitter test",
        needs: &["tree-sitter"],
        optional: true,
        dir: "grammars/tree-sitter-tessera",
        program: "tree-sitter",
        args: &["test"],
    },
    Suite {
        name: "VS Code extension (npm test, real-client test, vsce package)",
        needs: &["node", "npm", "chromium"],
        optional: false,
        dir: "editors",
        program: "bash",
        args: &["run-tests.sh", "--vscode"],
    },
    Suite {
        name: "Neovim plugin",
        needs: &["neovim", "node"],
        optional: false,
        dir: "editors",
        program: "bash",
        args: &["run-tests.sh", "--nvim"],
    },
];

/// End-to-end suites driven by a script against the built binaries; each exists once its
/// directory does.
struct ScriptSuite {
    name: &'static str,
    needs: &'static [&'static str],
    marker: &'static str,
    argv: &'static [&'static str],
}

const SCRIPT_SUITES: &[ScriptSuite] = &[
    ScriptSuite {
        name: "language server through pytest-lsp",
        needs: &["pytest", "pytest-lsp"],
        marker: "tests/lsp_pytest",
        argv: &["python3", "-m", "pytest", "-q", "tests/lsp_pytest"],
    },
    ScriptSuite {
        name: "language server in headless Neovim",
        needs: &["neovim"],
        marker: "tests/nvim/run.sh",
        argv: &["bash", "tests/nvim/run.sh"],
    },
    ScriptSuite {
        name: "Emacs package (batch ERT, eglot and lsp-mode on the real server)",
        needs: &["emacs-nox", "elpa-eglot", "elpa-lsp-mode"],
        marker: "editors/emacs/test/run.sh",
        argv: &["bash", "editors/emacs/test/run.sh"],
    },
    ScriptSuite {
        name: "Zed extension (wasm build, manifests, queries)",
        needs: &["tree-sitter"],
        marker: "editors/zed/test/run.sh",
        argv: &["bash", "editors/zed/test/run.sh"],
    },
    ScriptSuite {
        name: "pre-commit hooks (language: system and language: rust)",
        needs: &["pre-commit"],
        marker: "tests/precommit/run.sh",
        argv: &["bash", "tests/precommit/run.sh"],
    },
    ScriptSuite {
        name: "the tessera package without LLVM and CUDA",
        needs: &[],
        marker: "tests/no_backends/run.sh",
        argv: &["bash", "tests/no_backends/run.sh"],
    },
    ScriptSuite {
        name: "explorer in tmux",
        needs: &["tmux"],
        marker: "tests/tmux/run.sh",
        argv: &["bash", "tests/tmux/run.sh"],
    },
];

// ----- finding what is installed -----------------------------------------------------------

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A command as a shell finds it: a path, or a name looked up on PATH.
fn tool(name: &str) -> Option<String> {
    if name.contains('/') {
        return is_executable(Path::new(name)).then(|| name.to_string());
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths).map(|dir| dir.join(name)).find(|p| is_executable(p)).map(|p| p.display().to_string())
}

fn output(program: &str, args: &[&str]) -> Option<Output> {
    Command::new(program).args(args).stdin(Stdio::null()).output().ok()
}

/// An installed Debian package. Where there is no dpkg (not Debian), it cannot be
/// checked or installed by name: the build says what is missing.
fn dpkg(package: &str) -> Option<String> {
    if tool("dpkg-query").is_none() {
        return Some("not checked: no dpkg on this system".to_string());
    }
    let out = output("dpkg-query", &["-W", "-f=${Status} ${Version}", package])?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let version = text.strip_prefix("install ok installed ")?;
    Some(format!("package {package} {version}"))
}

fn pip() -> Option<String> {
    let out = output("python3", &["-m", "pip", "--version"]).filter(|o| o.status.success())?;
    Some(String::from_utf8_lossy(&out.stdout).split(" from ").next().unwrap_or_default().trim().to_string())
}

/// A Python module that `python3` imports, with the file it was imported from.
fn module(name: &str) -> Option<String> {
    let script = format!("import {name} as m; print(m.__file__)");
    let out = output("python3", &["-c", &script]).filter(|o| o.status.success())?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `ptxas` as `tessera_passes::ptx::ptxas::locate` finds it (and the tests with it): the
/// `nvidia-cuda-nvcc-cu12` wheel puts it in `nvidia/cuda_nvcc/bin`.
fn ptxas() -> Option<String> {
    nvidia_tool("ptxas", "TESSERA_PTXAS", Some(&["cuda_nvcc"]))
}

/// `nvdisasm` as `tessera_passes::ptx::nvdisasm::locate` finds it: the
/// `nvidia-cuda-nvdisasm` wheel puts it in `nvidia/cu13/bin`.
fn nvdisasm() -> Option<String> {
    nvidia_tool("nvdisasm", "TESSERA_NVDISASM", None)
}

/// An NVIDIA tool where `tessera_passes::ptx::tools::locate` finds it (that very code,
/// [`nvidia_tools`]): `env_var`, `PATH`, `CUDA_HOME`/`CUDA_PATH`/`/usr/local/cuda`, then
/// the `bin/` folders of the `nvidia` Python packages (`wheel_packages` of them, or all in
/// name order).
fn nvidia_tool(name: &str, env_var: &str, wheel_packages: Option<&[&str]>) -> Option<String> {
    nvidia_tools::locate(name, env_var, wheel_packages).map(|p| p.display().to_string())
}

// ----- installing what is missing -------------------------------------------------------------

fn is_root() -> bool {
    output("id", &["-u"]).is_some_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Runs an installer quietly; on failure, what it printed.
fn install_run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout))
}

/// Says that an installer failed, with the end of what it printed.
fn say_failed(program: &str, args: &[&str], output: &str) {
    println!("failed: {program} {}", args.join(" "));
    let tail: Vec<&str> = output.lines().rev().take(15).collect();
    for line in tail.into_iter().rev() {
        println!("    {line}");
    }
}

/// `install_run`, saying so when it fails.
fn install_or_say(program: &str, args: &[&str]) -> bool {
    let result = install_run(program, args);
    if let Err(output) = &result {
        say_failed(program, args, output);
    }
    result.is_ok()
}

/// Installs every missing need; prints one line per need (found, installed, or the
/// command to run by hand). Returns the ids still missing.
fn install() -> Vec<&'static str> {
    let missing: Vec<&Need> = NEEDS
        .iter()
        .filter(|n| match n.find() {
            Some(at) => {
                println!("found: {} ({at})", n.id);
                false
            }
            None => true,
        })
        .collect();
    let apt: Vec<&str> =
        missing.iter().filter(|n| matches!(n.source, Source::Apt(_))).map(|n| n.source.package()).collect();
    let mut apt_done = false;
    if !apt.is_empty() && tool("apt-get").is_some() && is_root() {
        println!("installing with apt-get: {}", apt.join(" "));
        let mut args = vec!["install", "-y", "-qq", "--no-install-recommends"];
        args.extend(&apt);
        apt_done = install_or_say("apt-get", &["update", "-qq"]) && install_or_say("apt-get", &args);
    }
    // pip after apt: python3-pip may just have been installed.
    let pip_pkgs: Vec<&str> =
        missing.iter().filter(|n| matches!(n.source, Source::Pip(_))).map(|n| n.source.package()).collect();
    let mut pip_flags = String::new();
    if !pip_pkgs.is_empty() && pip().is_some() {
        println!("installing with pip: {}", pip_pkgs.join(" "));
        let mut args = vec!["-m", "pip", "install", "--quiet", "--disable-pip-version-check"];
        args.extend(&pip_pkgs);
        match install_run("python3", &args) {
            Ok(()) => {}
            // Debian's own Python refuses installs outside a virtual environment (PEP 668).
            Err(output) if output.contains("externally-managed-environment") => {
                args.push("--break-system-packages");
                if install_or_say("python3", &args) {
                    pip_flags = " --break-system-packages".to_string();
                }
            }
            Err(output) => say_failed("python3", &args, &output),
        }
    }
    for need in missing.iter().filter(|n| matches!(n.source, Source::Cargo(..))) {
        if let Source::Cargo(krate, version) = need.source {
            println!("installing with cargo: {krate} {version} (a few minutes)");
            install_or_say("cargo", &["install", "--locked", "--quiet", krate, "--version", version]);
        }
    }
    let mut still = Vec::new();
    for need in missing {
        let how = need.source.command();
        if need.find().is_some() {
            let how = if matches!(need.source, Source::Pip(_)) { how + &pip_flags } else { how };
            println!("installed: {} ({how})", need.id);
            continue;
        }
        still.push(need.id);
        let advice = match need.source {
            Source::Apt(p) if tool("apt-get").is_none() => {
                format!("install the Debian package `{p}` or its equivalent")
            }
            Source::Apt(p) if !is_root() => format!("run `sudo apt-get update && sudo apt-get install -y {p}`"),
            Source::Apt(p) if apt_done => format!("`apt-get install {p}` ran but {} is still not found", need.id),
            Source::Pip(p) if pip().is_none() => format!("install pip, then run `python3 -m pip install {p}`"),
            _ => format!("run `{how}`"),
        };
        println!("missing: {}: {advice}", need.id);
    }
    still
}

// ----- running the suites -------------------------------------------------------------------

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

fn run(name: &str, dir: &Path, program: &str, args: &[&str]) -> bool {
    println!("\n==> {name}: {program} {}", args.join(" "));
    let start = Instant::now();
    let status = Command::new(program).args(args).current_dir(dir).status();
    let ok = matches!(status, Ok(s) if s.success());
    println!("<== {name}: {} in {:.1}s", if ok { "ok" } else { "FAILED" }, start.elapsed().as_secs_f64());
    ok
}

fn test() -> ExitCode {
    let root = root();
    let ci = std::env::var_os("CI").is_some();
    println!("==> set-up: what the suites need");
    let missing = install();
    let lacks = |needs: &[&'static str]| needs.iter().copied().filter(|n| missing.contains(n)).collect::<Vec<_>>();
    let mut failed: Vec<String> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    let mut passed = 0;
    for suite in SUITES {
        let lacking = lacks(suite.needs);
        if !lacking.is_empty() {
            let why = format!("{} missing (see the set-up lines above)", lacking.join(", "));
            if suite.optional && !ci {
                skipped.push(format!("{} ({why})", suite.name));
            } else {
                println!("\n==> {}: not run: {why}", suite.name);
                failed.push(suite.name.to_string());
            }
            continue;
        }
        if run(suite.name, &root.join(suite.dir), suite.program, suite.args) {
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
    let mut not_run: Vec<&str> = Vec::new();
    for suite in SCRIPT_SUITES.iter().filter(|s| root.join(s.marker).exists()) {
        let lacking = lacks(suite.needs);
        if !built {
            not_run.push(suite.name);
        } else if !lacking.is_empty() {
            println!("\n==> {}: not run: {} missing (see the set-up lines above)", suite.name, lacking.join(", "));
            failed.push(suite.name.to_string());
        } else if run(suite.name, &root, suite.argv[0], &suite.argv[1..]) {
            passed += 1;
        } else {
            failed.push(suite.name.to_string());
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
    // `cargo install` puts the tree-sitter CLI in cargo's bin directory, which a fresh
    // shell may not have on PATH yet: the suites find it there too.
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .map(|h| h.join("bin"));
    if let Some(bin) = cargo_bin {
        let mut paths: Vec<PathBuf> =
            std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
        if !paths.contains(&bin) {
            paths.push(bin);
            std::env::set_var("PATH", std::env::join_paths(paths).expect("PATH entries without separators"));
        }
    }
    match std::env::args().nth(1).as_deref() {
        Some("test") => test(),
        Some("install") => {
            if install().is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        _ => {
            eprintln!("usage: cargo xtask test | cargo xtask install");
            ExitCode::from(2)
        }
    }
}
