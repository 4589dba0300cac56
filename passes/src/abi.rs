//! How a kernel is called: the one contract the PTX and LLVM code generators, the CUDA
//! and CPU runtimes and the reference interpreter share.
//!
//! Parameters in signature order; each tensor parameter is a pointer to its row-major,
//! contiguous data followed by one `i64` per dim (every dim, constant or not); float
//! scalars are passed as `f32` (`f64` for `f64`), integer and index scalars as `i64`,
//! `bool` as `i32` (0 or 1). The grid is the `grid` attribute of Tile IR evaluated with
//! the symbols bound by the tensors' runtime dims.
//!
//! A kernel that rounds stochastically (`@stochastic_round`) takes one more parameter,
//! last: the run's seed, an index named `__seed` ([`KernelAbi::seed_slot`] gives its
//! position). Whoever launches the kernel passes the run's seed there (as
//! `Arg::Index(seed)`); the interpreter's seeded inputs already do.

use std::collections::BTreeMap;

use smol_str::SmolStr;
use tessera_frontend::check::{DType, Dim};

use crate::ir::{policy, Attr, Func, Type};

#[derive(Clone, PartialEq, Eq, Debug)]
pub enum AbiParam {
    Tensor { name: SmolStr, dtype: DType, dims: Vec<Dim> },
    Scalar { name: SmolStr, dtype: DType },
    Index { name: SmolStr },
}

impl AbiParam {
    pub fn name(&self) -> &str {
        match self {
            AbiParam::Tensor { name, .. } | AbiParam::Scalar { name, .. } | AbiParam::Index { name } => name,
        }
    }
}

/// The machine-level slots a parameter becomes, in order.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Slot {
    Pointer,
    I64,
    I32,
    F32,
    F64,
}

/// A Tile IR kernel's calling contract.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct KernelAbi {
    pub name: SmolStr,
    pub params: Vec<AbiParam>,
    /// Grid extents (x, y, z) as polynomials in the tensors' dim symbols.
    pub grid: [Dim; 3],
    /// Threads per tile program on GPUs (1 on the CPU).
    pub threads: u32,
    /// The position in `params` of the hidden run-seed parameter (an `Index`), for
    /// kernels with stochastic rounding.
    pub seed: Option<usize>,
    /// The tensor maps of its TMA copies (`copy = "tma"`): 128-byte parameters after
    /// the slots of `params`, encoded by the launcher from the tensor arguments.
    pub tensor_maps: Vec<crate::tma::TensorMapSpec>,
    /// The thread-block cluster (`cluster=(x, y)`, `[1, 1, 1]` without one): the launch
    /// grid is rounded up to whole clusters ([`KernelAbi::launch_grid`]).
    pub cluster: [u32; 3],
}

/// Values for a kernel's dim symbols and the grid they give.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Binding {
    pub symbols: BTreeMap<String, i64>,
    pub grid: [u64; 3],
}

impl KernelAbi {
    pub fn of(func: &Func) -> Result<KernelAbi, String> {
        let mut params = Vec::new();
        for &p in &func.params {
            let name = func.values[p.0 as usize].name.clone().unwrap_or_else(|| SmolStr::new(format!("arg{}", p.0)));
            params.push(match func.ty(p) {
                Type::Tensor(t) => AbiParam::Tensor { name, dtype: t.dtype, dims: t.dims.clone() },
                Type::Scalar(d) => AbiParam::Scalar { name, dtype: *d },
                Type::Index => AbiParam::Index { name },
                other => return Err(format!("parameter `{name}` has type {other}, which a kernel cannot take")),
            });
        }
        let grid = match func.attr("grid") {
            Some(Attr::Dims(d)) if d.len() == 3 => [d[0].clone(), d[1].clone(), d[2].clone()],
            _ => return Err(format!("`{}` has no grid: it is not Tile IR", func.name)),
        };
        // A producer warpgroup's threads are launched after the consumers (`threads`).
        let threads = func.attr("threads").and_then(Attr::as_int).unwrap_or(1).max(1) as u32
            + crate::warp_spec::producer_threads(func) as u32;
        let seed = func.attr(policy::SEED_ATTR).and_then(Attr::as_int).map(|i| i as usize);
        if let Some(i) = seed {
            if !matches!(params.get(i), Some(AbiParam::Index { .. })) {
                return Err(format!("`{}`: the seed parameter {i} is not an index parameter", func.name));
            }
        }
        let tensor_maps = crate::tma::tensor_maps(func).map_err(|e| format!("`{}`: {e}", func.name))?;
        let cluster = crate::cluster::cluster_shape(func).map(|d| d as u32);
        Ok(KernelAbi { name: func.name.clone(), params, grid, threads, seed, tensor_maps, cluster })
    }

    /// The position among `params` (and among the launch's arguments) of the hidden
    /// run-seed parameter, `None` when the kernel draws no random numbers for rounding.
    /// The launcher passes the run's seed there as `Arg::Index(seed)`.
    pub fn seed_slot(&self) -> Option<usize> {
        self.seed
    }

    /// The grid a GPU launch uses for `grid` (the tile programs, as `bind` gives them):
    /// rounded up to whole clusters. The programs past the end load zeros and store
    /// nothing (`crate::cluster`).
    pub fn launch_grid(&self, grid: [u64; 3]) -> [u64; 3] {
        let mut out = grid;
        for (g, &c) in out.iter_mut().zip(&self.cluster) {
            *g = g.next_multiple_of(c.max(1) as u64);
        }
        out
    }

    /// The slots of every parameter, flattened in call order.
    pub fn slots(&self) -> Vec<Slot> {
        let mut out = Vec::new();
        for p in &self.params {
            match p {
                AbiParam::Tensor { dims, .. } => {
                    out.push(Slot::Pointer);
                    out.extend(dims.iter().map(|_| Slot::I64));
                }
                AbiParam::Scalar { dtype, .. } => out.push(scalar_slot(*dtype)),
                AbiParam::Index { .. } => out.push(Slot::I64),
            }
        }
        out
    }

    /// Binds dim symbols from the tensors' runtime shapes (one entry per tensor
    /// parameter, in order) and evaluates the grid. Inconsistent shapes are an error
    /// naming the parameter and dim.
    pub fn bind(&self, shapes: &[Vec<i64>]) -> Result<Binding, String> {
        let tensors: Vec<(&SmolStr, &Vec<Dim>)> = self
            .params
            .iter()
            .filter_map(|p| match p {
                AbiParam::Tensor { name, dims, .. } => Some((name, dims)),
                _ => None,
            })
            .collect();
        if tensors.len() != shapes.len() {
            return Err(format!("`{}` takes {} tensors, got {} shapes", self.name, tensors.len(), shapes.len()));
        }
        let mut symbols = BTreeMap::new();
        // Plain symbols first so that compound dims (`2*D`) can be checked after.
        for pass in 0..2 {
            for ((name, dims), shape) in tensors.iter().zip(shapes) {
                if dims.len() != shape.len() {
                    return Err(format!("`{name}` has rank {}, got a shape of rank {}", dims.len(), shape.len()));
                }
                for (axis, (dim, &size)) in dims.iter().zip(shape).enumerate() {
                    if size < 0 {
                        return Err(format!("`{name}` dim {axis} is negative ({size})"));
                    }
                    match (pass, dim.as_sym()) {
                        (0, Some(sym)) => match symbols.get(sym) {
                            Some(&bound) if bound != size => {
                                return Err(format!(
                                    "`{name}` dim {axis} is {sym} = {size}, but {sym} = {bound} from an earlier tensor"
                                ))
                            }
                            _ => {
                                symbols.insert(sym.to_string(), size);
                            }
                        },
                        (1, None) => {
                            let expected = dim.eval(&|s| symbols.get(s).copied());
                            if expected.is_some_and(|e| e != size) {
                                return Err(format!(
                                    "`{name}` dim {axis} must be {dim} = {}, got {size}",
                                    expected.unwrap_or_default()
                                ));
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        let mut grid = [1u64; 3];
        for (axis, extent) in self.grid.iter().enumerate() {
            let value = extent
                .eval(&|s| symbols.get(s).copied())
                .ok_or_else(|| format!("grid extent {extent} uses a symbol no tensor binds"))?;
            grid[axis] = value.max(0) as u64;
        }
        Ok(Binding { symbols, grid })
    }
}

pub fn scalar_slot(dtype: DType) -> Slot {
    if dtype == DType::F64 {
        Slot::F64
    } else if dtype == DType::Bool {
        Slot::I32
    } else if dtype.is_float() {
        Slot::F32
    } else {
        Slot::I64
    }
}
