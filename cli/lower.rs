//! `tessera lower FILE --kernel NAME --stage graph|sched|tile|target|all` (TOOLS.md §2).

use std::path::PathBuf;

use tessera_frontend::text::{LineIndex, TextRange};
use tessera_passes::session::SessionError;
use tessera_passes::{Stage, Target};

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
    #[arg(long, value_parser = crate::parsers::parse_target, default_value = "sm_90")]
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
    let src = crate::options::Source::load(&args.file)?;
    let analysis = src.analysis();
    let function = analysis.function(&args.kernel).map_err(|e| e.message)?;
    let (db, file, shown) = (src.db(), src.file(), &src.shown);
    // Code with errors is never lowered: the first error of the function or a callee.
    if let Some(message) = crate::failure::refusal(db, file, function.key, "lower") {
        eprintln!("error: {message}");
        return Ok(1);
    }
    let stages: Vec<Stage> = match args.stage.as_str() {
        "all" => Stage::ALL.to_vec(),
        s => vec![Stage::parse(s).expect("clap checked the value")],
    };
    let text = file.text(db).clone();
    let line_index = LineIndex::new(&text);
    let at = |range: Option<TextRange>| {
        let lc = line_index.line_col(&text, range.unwrap_or_default().start);
        format!("{shown}:{}:{}", lc.line + 1, lc.col + 1)
    };
    let overrides = crate::options::overrides(
        &crate::options::parse_schedule(&args.schedule)?,
        &crate::options::parse_dims(&args.dims)?,
    );
    let configured = match analysis.configure(function, None, &overrides) {
        Ok(c) => c,
        Err(e) => return Err(format!("{}: cannot lower `{}`: {}", at(e.range), args.kernel, e.message)),
    };
    // The session's override rule decides; the command line says which option.
    if let Some(rejected) = configured.rejected.first() {
        return Err(rejected.as_option_error());
    }
    let (config, assumed) = (configured.config, configured.assumed);
    if !assumed.is_empty() && stages.iter().any(|s| *s != Stage::Graph) {
        eprintln!(
            "note: assuming {} (tile dims need values; pass --dims {}=...)",
            assumed.iter().map(|s| format!("{s}={}", tessera_passes::DEFAULT_SHAPE)).collect::<Vec<_>>().join(", "),
            assumed[0]
        );
    }
    if args.generated {
        return match tessera_passes::graph_plan::graph_plan(db, function.key).clone() {
            Ok(plan) => {
                print!("{}", plan.source);
                Ok(0)
            }
            Err(e) => Err(format!("{shown}: cannot plan the kernels of `{}`: {}", args.kernel, e.message)),
        };
    }
    let cannot = |stage: &str, e: SessionError| {
        format!("{}: cannot lower `{}` to {stage} IR: {}", at(e.range), args.kernel, e.message)
    };
    if args.print_after_all || args.print_after_change {
        let passes = analysis.pipeline(function, &config, args.target).map_err(|e| cannot("tile", e))?;
        for (pass, stage, ir, _) in passes.iter().filter(|p| args.print_after_all || p.3) {
            println!("// ----- IR after {pass} ({} IR) -----", stage.name());
            print!("{}", ir.text);
            println!();
        }
        let code = analysis.lower(function, Stage::Target, &config, args.target).map_err(|e| cannot("target", e))?;
        let emitter = if args.target.is_gpu() { "emit-ptx" } else { "emit-llvm" };
        println!("// ----- IR after {emitter} (target IR) -----");
        print!("{}", code.text);
        return Ok(0);
    }
    for stage in &stages {
        match analysis.lower(function, *stage, &config, args.target) {
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
