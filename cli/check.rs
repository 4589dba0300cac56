//! `tessera check`: diagnostics for files and directories (TOOLS.md §1).

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;

use rayon::prelude::*;
use tessera_frontend::diagnostics::{Code, Diagnostic};
use tessera_frontend::text::LineIndex;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::Target;

use crate::check_cache::CheckCache;
use crate::config::ProjectConfig;
use crate::emit::{self, Format};
use crate::report::{FileReport, Run};

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Files or directories to check (directories are searched for *.tsr, honouring .gitignore).
    pub paths: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// Target whose limits the target-aware lints use: sm_80, sm_90 (default) or cpu.
    #[arg(long, value_parser = crate::parsers::parse_target)]
    pub target: Option<Target>,
    /// Treat warnings as errors (`--deny warnings`).
    #[arg(long, value_name = "warnings")]
    pub deny: Option<DenyWhat>,
    /// Only report these codes or code prefixes (comma-separated: E03,W0601).
    #[arg(long, value_delimiter = ',')]
    pub select: Vec<String>,
    /// Do not report these codes or code prefixes.
    #[arg(long, value_delimiter = ',')]
    pub ignore: Vec<String>,
    /// Read the source from standard input and report it under this name.
    #[arg(long)]
    pub stdin_filename: Option<PathBuf>,
    /// Check every file again instead of reusing the answers cached for unchanged files.
    #[arg(long)]
    pub no_cache: bool,
    /// Where the cache lives (default: `$TESSERA_CACHE_DIR`, else `.tessera_cache` beside
    /// the nearest tessera.toml, else in the working directory).
    #[arg(long, value_name = "DIR", conflicts_with = "no_cache")]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum DenyWhat {
    Warnings,
}

/// Which codes are reported.
#[derive(Clone, Debug, Default)]
pub struct CodeFilter {
    select: Vec<String>,
    ignore: Vec<String>,
}

impl CodeFilter {
    pub fn new(select: &[String], ignore: &[String]) -> Result<CodeFilter, String> {
        let norm = |list: &[String]| -> Result<Vec<String>, String> {
            list.iter()
                .map(|c| c.trim().to_ascii_uppercase())
                .filter(|c| !c.is_empty())
                .map(|c| {
                    let known = c == "ALL" || Code::ALL.iter().any(|k| k.as_str().starts_with(&c));
                    if known {
                        Ok(c)
                    } else {
                        Err(format!("unknown code or prefix `{c}` (codes look like E0301 or W0601)"))
                    }
                })
                .collect()
        };
        Ok(CodeFilter { select: norm(select)?, ignore: norm(ignore)? })
    }

    pub fn allows(&self, code: Code) -> bool {
        let matches = |p: &String| p == "ALL" || code.as_str().starts_with(p.as_str());
        (self.select.is_empty() || self.select.iter().any(matches)) && !self.ignore.iter().any(matches)
    }
}

/// The target a file is checked for: `--target`, else its `tessera.toml`, else sm_90.
fn file_target(args: &CheckArgs, config: &ProjectConfig) -> Result<Target, String> {
    match (args.target, &config.target) {
        (Some(t), _) => Ok(t),
        (None, Some(t)) => t.parse::<Target>().map_err(|e| format!("tessera.toml: {e}")),
        (None, None) => Ok(Target::Sm90),
    }
}

/// The cache `args` ask for, if any.
fn cache(args: &CheckArgs) -> Option<CheckCache> {
    if args.no_cache {
        return None;
    }
    let dir = match (&args.cache_dir, std::env::var_os("TESSERA_CACHE_DIR")) {
        (Some(dir), _) => dir.clone(),
        (None, Some(dir)) if !dir.is_empty() => PathBuf::from(dir),
        _ => CheckCache::default_dir(&std::env::current_dir().ok()?),
    };
    Some(CheckCache::new(dir))
}

/// Exit status: 2 when the tool failed (an internal error, or not one file could be
/// checked because every path was unreadable); else 1 when there are errors, including
/// paths that could not be read, or warnings under `--deny warnings`; else 0. Unreadable
/// paths never hide the others' results: everything readable is checked and reported.
pub fn run(args: CheckArgs) -> Result<i32, String> {
    let db = Database::default();
    // (display path, path for config lookup, text, utf8 error)
    let mut inputs: Vec<(String, PathBuf, String, Option<u32>)> = Vec::new();
    let mut unreadable = Vec::new();
    if let Some(name) = &args.stdin_filename {
        let mut bytes = Vec::new();
        std::io::stdin().read_to_end(&mut bytes).map_err(|e| format!("cannot read standard input: {e}"))?;
        let loaded = crate::files::decode(bytes);
        inputs.push((name.to_string_lossy().into_owned(), name.clone(), loaded.text, loaded.utf8_error));
    } else {
        let paths = if args.paths.is_empty() { vec![PathBuf::from(".")] } else { args.paths.clone() };
        let collected = crate::files::collect(&paths)?;
        unreadable = collected.errors;
        for path in collected.files {
            match crate::files::load(&path) {
                Ok(loaded) => inputs.push((crate::files::display_path(&path), path, loaded.text, loaded.utf8_error)),
                Err(e) => unreadable.push(e),
            }
        }
        unreadable.sort_by(|a, b| a.path.cmp(&b.path));
    }
    let files: Vec<(String, PathBuf, SourceFile)> = inputs
        .into_iter()
        .map(|(shown, path, text, err)| {
            let file = SourceFile::new(&db, PathBuf::from(&shown), text, err);
            (shown, path, file)
        })
        .collect();
    let cli_filter = CodeFilter::new(&args.select, &args.ignore)?;
    let cache = cache(&args);
    let mut internal_errors = 0usize;
    // With fewer files than cores, one worker per file would leave cores idle: each
    // file's target lints are then first computed per function on every core.
    let cores = rayon::current_num_threads();
    let lint_threads = if files.len() < cores { cores } else { 1 };
    // The database is Send but not Sync: each worker thread gets its own handle.
    let handles = std::sync::Mutex::new(db.clone());
    let results: Vec<Result<FileReport, String>> = files
        .par_iter()
        .map_init(
            || handles.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            |db, (shown, path, file)| -> Result<FileReport, String> {
                let config = ProjectConfig::find(path)?.map(|(_, c)| c).unwrap_or_default();
                let target = file_target(&args, &config)?;
                let filter = if args.select.is_empty() && args.ignore.is_empty() {
                    CodeFilter::new(config.select.as_deref().unwrap_or(&[]), config.ignore.as_deref().unwrap_or(&[]))?
                } else {
                    cli_filter.clone()
                };
                let what = format!("checking {shown}");
                let diagnostics = tessera_passes::session::catch(&what, || {
                    // Tests exercise the internal-error path through this debug-only hook.
                    if cfg!(debug_assertions)
                        && std::env::var_os("TESSERA_TEST_PANIC_ON")
                            .is_some_and(|needle| shown.contains(needle.to_string_lossy().as_ref()))
                    {
                        panic!("injected failure for {shown}");
                    }
                    let text = file.text(db);
                    let key = cache.as_ref().map(|c| c.key(target, text, file.utf8_error(db)));
                    if let Some(hit) = cache.as_ref().zip(key.as_ref()).and_then(|(c, k)| c.get(k, text.len())) {
                        return hit;
                    }
                    tessera_passes::prefetch_lints(db, *file, target, lint_threads);
                    let diagnostics = tessera_passes::file_diagnostics(db, *file, target);
                    if let Some((c, k)) = cache.as_ref().zip(key) {
                        c.put(&k, &diagnostics);
                    }
                    diagnostics
                })
                .map_err(|e| e.message)?;
                let text = file.text(db).clone();
                Ok(FileReport {
                    path: shown.clone(),
                    index: LineIndex::new(&text),
                    text,
                    diagnostics: diagnostics.into_iter().filter(|d: &Diagnostic| filter.allows(d.code)).collect(),
                })
            },
        )
        .collect();
    let mut reports = Vec::new();
    let stderr = std::io::stderr();
    for r in results {
        match r {
            Ok(report) => reports.push(report),
            Err(message) => {
                internal_errors += 1;
                let _ = writeln!(stderr.lock(), "error: {message}");
            }
        }
    }
    let color =
        args.format == Format::Human && std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let report = Run { reports: &reports, unreadable: &unreadable };
    emit::emit(args.format, &report, color, &mut out).map_err(|e| format!("cannot write output: {e}"))?;
    out.flush().ok();
    let summary = emit::summarize(&reports);
    // The process exits next: tearing down every memoized query of every file would
    // cost more than some checks (~1.5% of a cold 20 000-line check), and the OS frees it all.
    std::mem::forget(handles);
    std::mem::forget(db);
    let deny_warnings = args.deny == Some(DenyWhat::Warnings);
    Ok(if internal_errors > 0 || (reports.is_empty() && !unreadable.is_empty()) {
        2
    } else if summary.errors > 0 || !unreadable.is_empty() || (deny_warnings && summary.warnings > 0) {
        1
    } else {
        0
    })
}
