//! What `run` and `autotune` both do before they launch anything (`setup`): the kernel,
//! the device, the target and the dims; the notes about what was assumed; and the
//! autotune cache key of a setup.

use tessera_backends::autotune::CacheKey;
use tessera_backends::launch::{self, DeviceRequest, KernelInfo, Opened, PlanRequest, ResolvedDims};
use tessera_frontend::FnKey;
use tessera_passes::Target;

use crate::failure::Failure;
use crate::options::{self, Source};

/// What `run` and `autotune` both establish before they launch anything.
pub(crate) struct Setup<'s> {
    pub key: FnKey<'s>,
    pub info: KernelInfo,
    pub opened: Opened,
    pub target: Target,
    pub dims: ResolvedDims,
    pub args: Vec<(String, String)>,
}

pub(crate) fn setup<'s>(
    src: &'s Source,
    kernel: &str,
    device: DeviceRequest,
    target: Option<Target>,
    dims: &[String],
    args: &[String],
) -> Result<Setup<'s>, Failure> {
    let key = src.function(kernel).map_err(Failure::usage)?;
    let info = launch::kernel_info(src.db(), key).map_err(|e| Failure::launch(src, e))?;
    let mut given = options::parse_dims(dims).map_err(Failure::usage)?;
    let args = options::parse_args(args).map_err(Failure::usage)?;
    // `--arg reps=5` for an int parameter the body uses as a size (a shape symbol): its
    // value is that symbol's, unless `--dims` gives it too (the plan refuses a mismatch).
    for (name, text) in &args {
        if info.symbols.contains(name) && !given.iter().any(|(s, _)| s == name) {
            if let Ok(v) = text.trim().parse::<i64>() {
                given.push((name.clone(), v));
            }
        }
    }
    let opened = launch::open(device).map_err(|e| Failure::launch(src, e))?;
    let target = target.unwrap_or_else(|| opened.backend.default_target());
    opened.backend.check_target(target).map_err(|why| Failure::usage(format!("--target {target}: {why}")))?;
    let dims = launch::resolve_dims(src.db(), key, &info, &given).map_err(|e| Failure::launch(src, e))?;
    Ok(Setup { key, info, opened, target, dims, args })
}

/// Notes about what was assumed, on stderr.
pub(crate) fn print_notes(setup: &Setup<'_>) {
    for note in &setup.opened.notes {
        eprintln!("note: {note}");
    }
    if !setup.dims.assumed.is_empty() {
        let list: Vec<String> = setup.dims.assumed.iter().map(|(s, v)| format!("{s}={v}")).collect();
        eprintln!("note: assuming {} (no --dims value; pass --dims {}=...)", list.join(", "), setup.dims.assumed[0].0);
    }
}

/// The cache key of a setup: lowered with the base schedule only for the tensor dtypes.
pub(crate) fn cache_key(
    src: &Source,
    setup: &Setup<'_>,
    dims: &std::collections::BTreeMap<String, i64>,
) -> Option<CacheKey> {
    let config = launch::config_for(src.db(), setup.key, setup.info.base_schedule.clone(), dims).ok()?;
    let request = PlanRequest {
        target: setup.target,
        config,
        dims: dims.clone(),
        args: Vec::new(),
        seed: 0,
        code: false,
        max_memory: None,
    };
    let plan = launch::plan(src.db(), setup.key, &setup.info, &request).ok()?;
    Some(CacheKey::of(src.db(), setup.key, &plan, &setup.dims.values, setup.target, setup.opened.backend.device()))
}
