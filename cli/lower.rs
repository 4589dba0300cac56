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
    /// Schedule values, overriding the kernel's (BM=64,warps=4,...).
    #[arg(long, value_delimiter = ',', value_name = "KEY=VALUE")]
    pub schedule: Vec<String>,
    /// Values of shape symbols that tile dims use (D=128,...).
    #[arg(long, value_delimiter = ',', value_name = "SYM=VALUE")]
    pub dims: Vec<String>,
    /// Print the IR after every pass of the pipeline (then the target code).
    #[arg(long, conflicts_with = "print_after_change")]
    pub print_after_all: bool,
    /// Print the IR after every pass that changes it.
    #[arg(long)]
    pub print_after_change: bool,
    /// For a graph function: print the Tessera source of its generated kernels.
    #[arg(long)]
    pub generated: bool,
}

/// Parses `KEY=VALUE` pairs (shared with `run` and `autotune`).
pub use crate::options::parse_pairs;

pub fn run(args: LowerArgs) -> Result<i32, String> {
    let loaded = crate::files::read(&args.file)?;
    let db = Database::default();
    let shown = crate::files::display_path(&args.file);
    let file = SourceFile::new(&db, PathBuf::from(&shown), loaded.text, loaded.utf8_error);
    let index = item_index(&db, file);
    let Some(entry) = index.functions.iter().find(|f| f.key.name(&db) == &args.kernel) else {
        let names: Vec<String> = index.functions.iter().map(|f| f.key.name(&db).clone()).collect();
        return Err(format!(
            "{shown} has no function `{}`{}",
            args.kernel,
            if names.is_empty() { String::new() } else { format!(" (it defines {})", names.join(", ")) }
        ));
    };
    // Code with errors is never lowered: the first error of the function or a callee.
    if let Some(message) = crate::run::refusal(&db, file, entry.key, "lower") {
        eprintln!("error: {message}");
        return Ok(1);
    }
    let stages: Vec<Stage> = match args.stage.as_str() {
        "all" => Stage::ALL.to_vec(),
        s => vec![Stage::parse(s).expect("clap checked the value")],
    };
    let text = file.text(&db).clone();
    let line_index = LineIndex::new(&text);
    let dims: std::collections::BTreeMap<String, i64> = crate::options::parse_dims(&args.dims)?.into_iter().collect();
    let (mut config, assumed) = match tessera_passes::default_config(&db, entry.key, &dims) {
        Ok(c) => c,
        Err(e) => {
            let at = line_index.line_col(&text, e.range.start + entry.anchor);
            return Err(format!(
                "{shown}:{}:{}: cannot lower `{}`: {}",
                at.line + 1,
                at.col + 1,
                args.kernel,
                e.message
            ));
        }
    };
    for (k, value) in crate::options::parse_schedule(&args.schedule)? {
        config.schedule.set(&k, value);
    }
    if !assumed.is_empty() && stages.iter().any(|s| *s != Stage::Graph) {
        eprintln!(
            "note: assuming {} (tile dims need values; pass --dims {}=...)",
            assumed.iter().map(|s| format!("{s}={}", tessera_passes::DEFAULT_SHAPE)).collect::<Vec<_>>().join(", "),
            assumed[0]
        );
    }
    if args.generated {
        return match tessera_passes::graph_plan::graph_plan(&db, entry.key).clone() {
            Ok(plan) => {
                print!("{}", plan.source);
                Ok(0)
            }
            Err(e) => Err(format!("{shown}: cannot plan the kernels of `{}`: {}", args.kernel, e.message)),
        };
    }
    let cannot = |stage: &str, e: tessera_passes::LowerError| {
        let at = line_index.line_col(&text, e.range.start + entry.anchor);
        format!("{shown}:{}:{}: cannot lower `{}` to {stage} IR: {}", at.line + 1, at.col + 1, args.kernel, e.message)
    };
    if args.print_after_all || args.print_after_change {
        let snapshots = tessera_passes::pipeline::pipeline(&db, entry.key, config.clone(), args.target)
            .clone()
            .map_err(|e| cannot("tile", e))?;
        for snap in snapshots.iter().filter(|s| args.print_after_all || s.changed) {
            println!("// ----- IR after {} ({} IR) -----", snap.pass, snap.func.level.name());
            print!("{}", tessera_passes::print_ir(&db, file, &snap.func).text);
            println!();
        }
        let code =
            lowering_text(&db, entry.key, Stage::Target, args.target, &config).map_err(|e| cannot("target", e))?;
        let emitter = if args.target.is_gpu() { "emit-ptx" } else { "emit-llvm" };
        println!("// ----- IR after {emitter} (target IR) -----");
        print!("{}", code.text);
        return Ok(0);
    }
    for stage in &stages {
        match lowering_text(&db, entry.key, *stage, args.target, &config) {
            Ok(lowered) => {
                if stages.len() > 1 {
                    println!("// ===== {} IR: {} ({}) =====", stage.name(), args.kernel, args.target);
                }
                print!("{}", lowered.text);
                if stages.len() > 1 {
                    println!();
                }
            }
            Err(e) => return Err(cannot(stage.name(), e)),
        }
    }
    Ok(0)
}
