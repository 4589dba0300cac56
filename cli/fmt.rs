//! `tessera fmt [PATHS] [--check]`: the formatter the language server uses, on files.
//!
//! Every file is rewritten atomically ([`crate::files::replace_atomic`]): a full disk or
//! a kill leaves the old text or the new one, never a cut-off file. A file that cannot
//! be read, formatted or written does not stop the others; they are listed at the end
//! and the exit status is 2.

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct FmtArgs {
    /// Files or directories (default: the current directory).
    pub paths: Vec<PathBuf>,
    /// Change nothing; list the files that would change and exit 1 if there are any.
    #[arg(long)]
    pub check: bool,
}

/// Exit status: 0 done (or nothing to change), 1 `--check` found files to change, 2 some
/// path could not be read, formatted or written (everything else was still done).
pub fn run(args: FmtArgs) -> Result<i32, String> {
    let paths = if args.paths.is_empty() { vec![PathBuf::from(".")] } else { args.paths };
    let collected = crate::files::collect(&paths)?;
    let files = collected.files;
    let mut changed = Vec::new();
    // (path, why) of every path not formatted; unreadable ones first.
    let mut failed: Vec<(String, String)> = collected.errors.into_iter().map(|e| (e.path, e.message)).collect();
    for path in &files {
        let shown = crate::files::display_path(path);
        let loaded = match crate::files::load(path) {
            Ok(loaded) => loaded,
            Err(e) => {
                failed.push((shown, e.message));
                continue;
            }
        };
        if loaded.utf8_error.is_some() {
            failed.push((shown, "not UTF-8; not formatted".to_string()));
            continue;
        }
        match tessera_frontend::format::format_source(&loaded.text) {
            Ok(formatted) if formatted == loaded.text => {}
            Ok(formatted) => {
                if !args.check {
                    if let Err(e) = crate::files::replace_atomic(path, formatted.as_bytes()) {
                        let why = crate::files::describe_error(path, &e);
                        failed.push((shown, format!("cannot write: {why}; the file is unchanged")));
                        continue;
                    }
                }
                changed.push(shown);
            }
            Err(e) => failed.push((shown, e.to_string())),
        }
    }
    for f in &changed {
        println!("{} {f}", if args.check { "would reformat" } else { "reformatted" });
    }
    let verb = if args.check { "would be reformatted" } else { "reformatted" };
    println!(
        "{} of {} files {verb}{}",
        changed.len(),
        files.len(),
        if failed.is_empty() { String::new() } else { format!(", {} not formatted", failed.len()) }
    );
    if !failed.is_empty() {
        eprintln!("error: {} path{} not formatted:", failed.len(), if failed.len() == 1 { "" } else { "s" });
        for (path, why) in &failed {
            eprintln!("  {path}: {why}");
        }
    }
    Ok(if !failed.is_empty() {
        2
    } else if args.check && !changed.is_empty() {
        1
    } else {
        0
    })
}
