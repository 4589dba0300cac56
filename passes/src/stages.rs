//! The stages `tessera lower` prints and their text: IR printed with a source map back
//! to the file (`FileLocs` resolves IR locations), target code, and a graph function's
//! stages (its launch plan, then each generated kernel's Tile IR or target code).

use std::collections::BTreeMap;
use std::sync::Arc;

use tessera_frontend::check::{fn_signature, FunctionKind};
use tessera_frontend::text::{LineIndex, TextRange};
use tessera_frontend::{Db, FnKey, SourceFile};

use crate::config::Config;
use crate::diagnostics::file_diagnostics;
use crate::error::LowerError;
use crate::ir::print::Printed;
use crate::ir::{self, Func};
pub use crate::locs::FileLocs;
use crate::queries::{default_config, planned_kernel, sched_ir, tile_ir};
use crate::target::{Target, TargetCode};
use crate::{codegen, graph_plan};

/// The stages `tessera lower` prints.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Stage {
    Graph,
    Sched,
    Tile,
    Target,
}

impl Stage {
    pub const ALL: [Stage; 4] = [Stage::Graph, Stage::Sched, Stage::Tile, Stage::Target];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Graph => "graph",
            Stage::Sched => "sched",
            Stage::Tile => "tile",
            Stage::Target => "target",
        }
    }

    pub fn parse(s: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|st| st.name() == s)
    }
}

/// Printed IR with, per line, the absolute source range it came from.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct LoweredText {
    pub text: String,
    pub source_map: Vec<(u32, TextRange)>,
}

/// Prints IR and maps each line back to the source.
pub fn print_ir(db: &dyn Db, file: SourceFile, func: &Func) -> LoweredText {
    print_ir_with(&FileLocs::new(db, file), func)
}

/// [`print_ir`] with the file's locations already indexed (many functions of one file).
fn print_ir_with(locs: &FileLocs<'_>, func: &Func) -> LoweredText {
    let Printed { text, lines } = ir::print::print_func(func, locs);
    let source_map = lines
        .iter()
        .enumerate()
        .filter_map(|(i, loc)| loc.as_ref().and_then(|l| locs.absolute(l)).map(|r| (i as u32, r)))
        .collect();
    LoweredText { text, source_map }
}

/// Target code with its per-line source map.
pub fn print_target(db: &dyn Db, file: SourceFile, code: &TargetCode) -> LoweredText {
    let locs = FileLocs::new(db, file);
    let source_map = code
        .line_locs
        .iter()
        .enumerate()
        .filter_map(|(i, loc)| loc.as_ref().and_then(|l| locs.absolute(l)).map(|r| (i as u32, r)))
        .collect();
    LoweredText { text: code.text.clone(), source_map }
}

/// The IR text of one stage of a function, for `tessera lower`, the LSP and the explorer.
pub fn lowering_text(
    db: &dyn Db,
    key: FnKey<'_>,
    stage: Stage,
    target: Target,
    config: &Config,
) -> Result<LoweredText, LowerError> {
    let file = key.file(db);
    if stage != Stage::Graph && fn_signature(db, key).kind == FunctionKind::Graph {
        return graph_lowering_text(db, key, stage, target, &config.shapes);
    }
    let func = match stage {
        // A sharded graph function shows the collectives its layout needs, and a
        // pipeline its schedule.
        Stage::Graph => {
            let func = crate::dist::function::graph_with_collectives(db, key, &config.shapes)?.0;
            let mut out = print_ir(db, file, &func);
            for p in crate::dist::schedule::pipeline_schedules(&func) {
                out.text.push_str(&format!("// {}\n", p.summary()));
                out.text.push_str(&p.table("//   "));
            }
            return Ok(out);
        }
        Stage::Sched => sched_ir(db, key, config.clone(), target).clone()?,
        Stage::Tile => tile_ir(db, key, config.clone(), target).clone()?,
        Stage::Target => {
            let code = codegen::target_code(db, key, config.clone(), target).clone()?;
            return Ok(print_target(db, file, &code));
        }
    };
    Ok(print_ir(db, file, &func))
}

/// A graph function's generated kernel module, checked: a diagnostic in it is an
/// internal error of the planner.
pub fn plan_module(db: &dyn Db, key: FnKey<'_>) -> Result<(Arc<graph_plan::GraphPlan>, SourceFile), LowerError> {
    let plan = graph_plan::graph_plan(db, key).clone()?;
    let path = graph_plan::module_path(key.file(db).path(db), key.name(db));
    let module = db.generated_file(&path, &plan.source);
    let diagnostics = file_diagnostics(db, module, Target::Cpu);
    if let Some(d) = diagnostics.iter().find(|d| d.is_error()) {
        let index = LineIndex::new(&plan.source);
        let at = index.line_col(&plan.source, d.range.start);
        return Err(LowerError {
            message: format!(
                "internal error: the generated kernels of `{}` do not check: {}:{}:{}: {} [{:?}]",
                key.name(db),
                path.display(),
                at.line + 1,
                at.col + 1,
                d.message,
                d.code
            ),
            range: TextRange::default(),
        });
    }
    Ok((plan, module))
}

/// Schedule IR of a graph function is its launch plan; Tile and Target IR are those of
/// each generated kernel, in launch order.
fn graph_lowering_text(
    db: &dyn Db,
    key: FnKey<'_>,
    stage: Stage,
    target: Target,
    shapes: &BTreeMap<String, i64>,
) -> Result<LoweredText, LowerError> {
    let (plan, module) = plan_module(db, key)?;
    if stage == Stage::Sched {
        let mut out = print_ir(db, key.file(db), &plan.schedule);
        let path = module.path(db).display().to_string();
        out.text.push_str(&format!("// kernels (generated in {path}):\n"));
        for k in &plan.kernels {
            out.text.push_str(&format!("//   {}: {}\n", k.name, k.summary));
        }
        // A sharded function: its program on the mesh too, collectives overlapped.
        if let Some(on_mesh) = crate::dist::function::mesh_plan(db, key, shapes)? {
            out.text
                .push_str("\n// on the mesh: each device's program (global shapes, as Graph IR), every collective\n");
            out.text.push_str("// started after the launch that writes its buffers and waited for before the first\n");
            out.text.push_str("// launch that touches them; `overlaps` names the launches that run meanwhile\n");
            out.text.push_str(&print_ir(db, key.file(db), &on_mesh.schedule).text);
        }
        return Ok(out);
    }
    let mut out = LoweredText::default();
    // The generated module's line index, built once for all its kernels.
    let mut indexed: Vec<(SourceFile, FileLocs<'_>)> = Vec::new();
    for k in &plan.kernels {
        let kkey = planned_kernel(db, key, module, &k.name, k.source.as_deref()).ok_or_else(|| LowerError {
            message: format!("internal error: no generated kernel `{}`", k.name),
            range: TextRange::default(),
        })?;
        let (config, _) = default_config(db, kkey, shapes)?;
        let file = kkey.file(db);
        let text = match stage {
            Stage::Tile => {
                let func = tile_ir(db, kkey, config, target).clone()?;
                let at = match indexed.iter().position(|(f, _)| *f == file) {
                    Some(at) => at,
                    None => {
                        indexed.push((file, FileLocs::new(db, file)));
                        indexed.len() - 1
                    }
                };
                print_ir_with(&indexed[at].1, &func).text
            }
            _ => codegen::target_code(db, kkey, config, target).clone()?.text.clone(),
        };
        out.text.push_str(&format!("// ===== {}: {} =====\n", k.name, k.summary));
        out.text.push_str(&text);
        out.text.push('\n');
    }
    Ok(out)
}
