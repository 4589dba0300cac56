//! The IR stack (Graph → Schedule → Tile → Target), its passes and the target-aware
//! analyses, all as salsa queries over the frontend's database.
//!
//! Every pass is a query keyed by what it depends on: Graph IR by the function, Schedule
//! and Tile IR by (function, schedule configuration, target). Changing one autotune
//! candidate re-runs only the Schedule/Tile/Target queries of that kernel.
//!
//! This file only declares the modules and re-exports what other crates use most; the
//! modules import each other by their own paths, so no import goes through here.

pub mod abi;
pub mod analysis;
pub mod auto_space;
pub mod autodiff;
pub mod bounds;
pub mod cluster;
pub mod codegen;
pub mod config;
pub mod diagnostics;
pub mod dist;
pub mod error;
pub mod errors;
pub mod graph_plan;
pub mod ir;
pub mod llvm;
pub mod locs;
pub mod lower;
pub mod pipeline;
pub mod ptx;
pub mod queries;
pub mod sched;
pub mod session;
pub mod stages;
pub mod target;
pub mod tile;
pub mod tma;
pub mod units;
pub mod warp_spec;
pub mod wgmma;

pub use config::{Config, DEFAULT_SHAPE};
pub use diagnostics::{file_diagnostics, prefetch_lints};
pub use error::LowerError;
pub use queries::{decorator_error, default_config, graph_ir, module_function, planned_kernel, sched_ir, tile_ir};
pub use stages::{lowering_text, plan_module, print_ir, print_target, FileLocs, LoweredText, Stage};
pub use target::Target;
