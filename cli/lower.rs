//! `tessera lower FILE --kernel NAME --stage graph|sched|tile|target|all` (TOOLS.md §2).

use std::path::PathBuf;

use tessera_frontend::db::item_index;
use tessera_frontend::text::LineIndex;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::{lowering_text, Stage, Target};

#[derive(clap::Args, Debug)]
pub struct LowerArgs {
    /// The source file.
    pub file: PathBuf,
    /// The kernel or graph function to lower.
    #[arg(long, value_name = "NAME")]
    pub kernel: String,
    /// Which IR to print: graph, sched, tile, target, or all of them.
    #[arg(long, default_value = "all", value_parser = ["graph", "sched", "tile", "target", "all"])]
    pub stage: String,
    /// Target: sm_80, sm_90 (default) or cpu.
    #[arg(long, value_parser = crate::parse_target, default_value = "sm_90")]
    pub target: Target,
}

pub fn run(args: LowerArgs) -> Result<i32, String> {
    let loaded = crate::files::read(&args.file)?;
    let db = Database::default();
    let shown = crate::files::display_path(&args.file);
    let file = SourceFile::new(&db, PathBuf::from(&shown), loaded.text, loaded.utf8_error);
    let index = item_index(&db, file);
    let Some(entry) = index
        .functions
        .iter()
        .find(|f| f.key.name(&db) == &args.kernel)
    else {
        let names: Vec<String> = index
            .functions
            .iter()
            .map(|f| f.key.name(&db).clone())
            .collect();
        return Err(format!(
            "{shown} has no function `{}`{}",
            args.kernel,
            if names.is_empty() {
                String::new()
            } else {
                format!(" (it defines {})", names.join(", "))
            }
        ));
    };
    let stages: Vec<Stage> = match args.stage.as_str() {
        "all" => Stage::ALL.to_vec(),
        s => vec![Stage::parse(s).expect("clap checked the value")],
    };
    let text = file.text(&db).clone();
    let line_index = LineIndex::new(&text);
    for stage in &stages {
        match lowering_text(&db, entry.key, *stage, args.target) {
            Ok(lowered) => {
                if stages.len() > 1 {
                    println!(
                        "// ===== {} IR: {} ({}) =====",
                        stage.name(),
                        args.kernel,
                        args.target
                    );
                }
                print!("{}", lowered.text);
                if stages.len() > 1 {
                    println!();
                }
            }
            Err(e) => {
                let at = line_index.line_col(&text, e.range.start + entry.anchor);
                return Err(format!(
                    "{shown}:{}:{}: cannot lower `{}` to {} IR: {}",
                    at.line + 1,
                    at.col + 1,
                    args.kernel,
                    stage.name(),
                    e.message
                ));
            }
        }
    }
    Ok(0)
}
