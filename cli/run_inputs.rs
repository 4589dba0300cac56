//! `tessera run --input NAME=FILE.npy`: a tensor argument read from a NumPy file instead
//! of seeded, for kernels and graph functions alike. The files also give the shape
//! symbols `--dims` leaves out (`P: Tensor["N", f32]` and a file of shape (3000,) give
//! N = 3000), and every file must have the shape its parameter has at the run's dims.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tessera_backends::tensor::{Arg, HostTensor};
use tessera_frontend::check::{DType, Dim};
use tessera_passes::ir::{Func, Type};

/// One `--input NAME=FILE` with the file's contents.
pub(crate) struct GivenInput {
    pub name: String,
    pub path: PathBuf,
    pub tensor: HostTensor,
}

/// Reads every `--input NAME=FILE` (a name at most once).
pub(crate) fn read(pairs: &[String]) -> Result<Vec<GivenInput>, String> {
    let mut out: Vec<GivenInput> = Vec::new();
    for pair in pairs {
        let Some((name, path)) = pair.split_once('=') else {
            return Err(format!("--input {pair}: expected NAME=FILE.npy"));
        };
        let name = name.trim();
        if name.is_empty() || path.is_empty() {
            return Err(format!("--input {pair}: expected NAME=FILE.npy"));
        }
        if out.iter().any(|g| g.name == name) {
            return Err(format!("--input {name} is given twice"));
        }
        let path = PathBuf::from(path);
        let tensor = tessera_backends::npy::read(&path)
            .map_err(|e| format!("--input {name}={}: not a NumPy file this tool reads: {e}", path.display()))?;
        out.push(GivenInput { name: name.to_string(), path, tensor });
    }
    Ok(out)
}

/// The tensor parameters of a Graph IR function, by name, with their dims.
fn tensor_params(graph: &Func) -> Vec<(String, Vec<Dim>)> {
    graph
        .params
        .iter()
        .filter_map(|&p| {
            let info = &graph.values[p.0 as usize];
            match (&info.ty, &info.name) {
                (Type::Tensor(t), Some(name)) => Some((name.to_string(), t.dims.clone())),
                _ => None,
            }
        })
        .collect()
}

fn no_such_tensor(function: &str, name: &str, params: &[(String, Vec<Dim>)]) -> String {
    let names: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
    format!(
        "--input {name}: `{function}` has no tensor parameter `{name}` ({})",
        if names.is_empty() { "it takes no tensors".to_string() } else { format!("its tensors: {}", names.join(", ")) }
    )
}

fn shape_text(dims: &[usize]) -> String {
    match dims {
        [one] => format!("({one},)"),
        _ => format!("({})", dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    }
}

/// The value of each shape symbol a file fixes and `given` (the `--dims` pairs) does
/// not: a dim that is a symbol takes the file's extent, and a dim linear in one symbol
/// still unknown (`2*H`) is solved for it. Two files that disagree on a symbol, or a
/// file of the wrong rank or constant extent, are errors naming both sides; what
/// cannot be solved is checked against the resolved shapes in `apply`.
pub(crate) fn implied_dims(
    graph: &Func,
    inputs: &[GivenInput],
    given: &[(String, i64)],
) -> Result<Vec<(String, i64)>, String> {
    let params = tensor_params(graph);
    let mut implied: BTreeMap<String, (i64, String)> = BTreeMap::new();
    let mut linear: Vec<(&Dim, i64, &GivenInput)> = Vec::new();
    for input in inputs {
        let Some((_, dims)) = params.iter().find(|(n, _)| *n == input.name) else {
            return Err(no_such_tensor(&graph.name, &input.name, &params));
        };
        let file = &input.tensor.dims;
        if file.len() != dims.len() {
            let written: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
            return Err(format!(
                "--input {}={}: the file has {} dimension{} {}, but `{}` is [{}]",
                input.name,
                input.path.display(),
                file.len(),
                if file.len() == 1 { "" } else { "s" },
                shape_text(file),
                input.name,
                written.join(", ")
            ));
        }
        for (dim, &extent) in dims.iter().zip(file) {
            let extent = extent as i64;
            match dim {
                Dim::Const(c) if *c != extent => {
                    return Err(format!(
                        "--input {}={}: shape {}, but that dimension of `{}` is {c}",
                        input.name,
                        input.path.display(),
                        shape_text(file),
                        input.name
                    ));
                }
                Dim::Sym(s) if !given.iter().any(|(g, _)| g == s.as_str()) => {
                    imply(&mut implied, s, extent, &input.name, file)?;
                }
                Dim::Poly(_) => linear.push((dim, extent, input)),
                _ => {}
            }
        }
    }
    for (dim, extent, input) in linear {
        let known =
            |s: &str| given.iter().find(|(g, _)| g == s).map(|(_, v)| *v).or_else(|| implied.get(s).map(|(v, _)| *v));
        let unknown: Vec<String> = dim.symbols().into_iter().filter(|s| known(s).is_none()).collect();
        let [symbol] = unknown.as_slice() else { continue };
        let at = |x: i64| dim.eval(&|s: &str| if s == symbol { Some(x) } else { known(s) });
        let (Some(a), Some(b1), Some(b2)) = (at(0), at(1), at(2)) else { continue };
        let slope = b1 - a;
        // Linear in the symbol (2*H, H + 1), and the extent one of its values.
        if slope != 0 && b2 - b1 == slope && (extent - a) % slope == 0 && (extent - a) / slope >= 1 {
            imply(&mut implied, symbol, (extent - a) / slope, &input.name, &input.tensor.dims)?;
        }
    }
    Ok(implied.into_iter().map(|(s, (v, _))| (s, v)).collect())
}

fn imply(
    implied: &mut BTreeMap<String, (i64, String)>,
    symbol: &str,
    value: i64,
    input: &str,
    file: &[usize],
) -> Result<(), String> {
    match implied.get(symbol) {
        Some((v, other)) if *v != value => Err(format!(
            "--input {input}: its shape {} gives {symbol} = {value}, but --input {other} gives {symbol} = {v}",
            shape_text(file)
        )),
        Some(_) => Ok(()),
        None => {
            implied.insert(symbol.to_string(), (value, input.to_string()));
            Ok(())
        }
    }
}

/// Replaces the seeded tensors of `args` (one per parameter named in `names`, `None`
/// for scalars) by the files' values, rounded to each parameter's dtype. A file whose
/// shape is not the parameter's at these dims is an error.
pub(crate) fn apply(names: &[Option<String>], inputs: &[GivenInput], args: &mut [Arg]) -> Result<(), String> {
    for input in inputs {
        let slot = names.iter().position(|n| n.as_deref() == Some(input.name.as_str()));
        let Some(Arg::Tensor(seeded)) = slot.and_then(|i| args.get_mut(i)) else {
            let tensors: Vec<&str> = names
                .iter()
                .zip(args.iter())
                .filter(|(_, a)| matches!(a, Arg::Tensor(_)))
                .filter_map(|(n, _)| n.as_deref())
                .collect();
            return Err(format!(
                "--input {}: no tensor parameter `{}` (tensors: {})",
                input.name,
                input.name,
                tensors.join(", ")
            ));
        };
        if seeded.dims != input.tensor.dims {
            return Err(format!(
                "--input {}={}: shape {}, but `{}` is {} at this run's dims",
                input.name,
                input.path.display(),
                shape_text(&input.tensor.dims),
                input.name,
                shape_text(&seeded.dims)
            ));
        }
        *seeded = if input.tensor.dtype == seeded.dtype {
            // Bit for bit: an i64 beyond 2^53 does not survive a trip through f64.
            input.tensor.clone()
        } else {
            HostTensor::from_f64(seeded.dtype, &seeded.dims, &input.tensor.to_f64())
        };
    }
    Ok(())
}

/// The first 64-bit integer tensor among `args` that holds a value beyond 2^53, as the
/// reason a check against the f64 reference cannot be trusted: the interpreter and the
/// reference hold every value as an f64, so they compute with such values rounded (a
/// device that is right by one would be called wrong, or one that is wrong by one right).
pub(crate) fn inexact_integers(names: &[Option<String>], args: &[Arg]) -> Option<String> {
    const EXACT: f64 = (1u64 << 53) as f64;
    names.iter().zip(args).find_map(|(name, arg)| {
        let (Some(name), Arg::Tensor(t)) = (name, arg) else { return None };
        if t.dtype != DType::I64 {
            return None;
        }
        let i = (0..t.numel()).find(|&i| t.get(i).abs() > EXACT)?;
        Some(format!(
            "`{name}` holds i64 values beyond 2^53 ({name}{:?} is about {:.6e}), which the interpreter and the f64 \
             reference hold only rounded",
            tessera_backends::launch::unravel(i, &t.dims),
            t.get(i)
        ))
    })
}

/// The report's line: which tensors came from files.
pub(crate) fn describe(inputs: &[GivenInput]) -> Option<String> {
    if inputs.is_empty() {
        return None;
    }
    let list: Vec<String> = inputs.iter().map(|g| format!("{} from {}", g.name, g.path.display())).collect();
    Some(list.join(", "))
}

/// The report's JSON: parameter name to file.
pub(crate) fn to_json(inputs: &[GivenInput]) -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> =
        inputs.iter().map(|g| (g.name.clone(), serde_json::json!(g.path.display().to_string()))).collect();
    serde_json::Value::Object(map)
}
