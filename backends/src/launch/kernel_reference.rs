//! The reference of a kernel that a graph function calls: the kernel's Graph IR walked in
//! f64 by [`crate::semantics`], exactly as `tessera run` checks that kernel on its own
//! (the configuration is the kernel's default one for the call's shapes, and every tile
//! program runs). Nothing of the plan's path (Schedule and Tile IR passes, the Tile IR
//! interpreter, the generators) is shared; the launch grid comes from the kernel's ABI,
//! as for `tessera run`.

use tessera_frontend::check::{stdlib_instance, DType};
use tessera_frontend::db::item_index;
use tessera_frontend::{Db, SourceFile};
use tessera_passes::abi::KernelAbi;
use tessera_passes::{default_config, graph_ir, tile_ir, Target};

use crate::interp::graph::{kernel_symbols, KernelReference};
use crate::semantics;
use crate::tensor::Arg;

/// The kernels of one source file (and the stdlib's instances it calls), run by their f64
/// reference.
pub(super) struct FileKernels<'db> {
    pub db: &'db dyn Db,
    pub file: SourceFile,
}

impl KernelReference for FileKernels<'_> {
    fn run(&self, callee: &str, stdlib: Option<&str>, args: &mut [Arg]) -> Result<(), String> {
        let db = self.db;
        let file = match stdlib {
            Some(dtype) => {
                DType::from_name(dtype).and_then(|d| stdlib_instance(db, callee, d)).ok_or("no such stdlib kernel")?
            }
            None => self.file,
        };
        let key = item_index(db, file).function(db, callee).map(|f| f.key).ok_or("no such kernel in the file")?;
        let symbols = kernel_symbols(db, key, args)?;
        let graph = graph_ir(db, key).clone().map_err(|e| e.message)?;
        // A symbol only a compound dim names (`B` of `"B*H"`) gets no value from the
        // arguments: the configuration would assume one, and the grid not fit them.
        for &p in &graph.params {
            for d in graph.ty(p).dims() {
                if let Some(s) = d.symbols().into_iter().find(|s| !symbols.contains_key(s)) {
                    return Err(format!(
                        "no argument binds `{s}` (it occurs only in the compound dim {d}); \
                         a kernel called from a graph function needs a plain `\"{s}\"` dim"
                    ));
                }
            }
        }
        let (config, _) = default_config(db, key, &symbols).map_err(|e| e.message)?;
        let tile = tile_ir(db, key, config.clone(), Target::Cpu).clone().map_err(|e| e.message)?;
        let abi = KernelAbi::of(&tile)?;
        let shapes: Vec<Vec<i64>> = args
            .iter()
            .filter_map(|a| match a {
                Arg::Tensor(t) => Some(t.dims.iter().map(|&d| d as i64).collect()),
                _ => None,
            })
            .collect();
        let grid = abi.bind(&shapes)?.grid;
        semantics::run(&graph, &config, grid, args, &semantics::Programs::All).map(|_| ()).map_err(|e| e.to_string())
    }
}
