//! `tessera fmt [PATHS] [--check]`: the formatter the language server uses, on files.

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct FmtArgs {
    /// Files or directories (default: the current directory).
    pub paths: Vec<PathBuf>,
    /// Change nothing; list the files that would change and exit 1 if there are any.
    #[arg(long)]
    pub check: bool,
}

pub fn run(args: FmtArgs) -> Result<i32, String> {
    let paths = if args.paths.is_empty() { vec![PathBuf::from(".")] } else { args.paths };
    let files = crate::files::collect(&paths)?;
    let (mut changed, mut failed) = (Vec::new(), 0);
    for path in &files {
        let shown = crate::files::display_path(path);
        let loaded = crate::files::read(path)?;
        if loaded.utf8_error.is_some() {
            eprintln!("error: {shown}: not UTF-8; not formatted");
            failed += 1;
            continue;
        }
        match tessera_frontend::format::format_source(&loaded.text) {
            Ok(formatted) if formatted == loaded.text => {}
            Ok(formatted) => {
                if !args.check {
                    std::fs::write(path, formatted).map_err(|e| format!("{shown}: {e}"))?;
                }
                changed.push(shown);
            }
            Err(e) => {
                eprintln!("error: {shown}: {e}");
                failed += 1;
            }
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
        if failed > 0 { format!(", {failed} not formatted") } else { String::new() }
    );
    Ok(if failed > 0 {
        2
    } else if args.check && !changed.is_empty() {
        1
    } else {
        0
    })
}
