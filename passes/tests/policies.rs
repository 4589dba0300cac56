//! Every numerics policy changes the generated code where it applies (docs/ir.md,
//! "Numerics policies"): the PTX (sm_80 and sm_90) and the LLVM IR of a kernel differ
//! with and without the policy, the PTX assembles with `ptxas` and the LLVM IR passes
//! `opt-14 -verify` (each when installed), and Graph/Tile IR show the policy as an
//! attribute where it acts.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use tessera_frontend::db::item_index;
use tessera_frontend::{Database, FnKey, SourceFile};
use tessera_passes::abi::KernelAbi;
use tessera_passes::codegen::target_code;
use tessera_passes::ir::print::{print_func, NoLocs};
use tessera_passes::ptx::ptxas;
use tessera_passes::{default_config, graph_ir, plan_module, tile_ir, Target};

fn key<'db>(db: &'db Database, file: SourceFile, name: &str) -> FnKey<'db> {
    item_index(db, file).functions.iter().find(|f| f.key.name(db) == name).expect("the function").key
}

/// One 1-D elementwise kernel `k(X: f32, Y: <y>)` storing `<expr>`.
fn elementwise(y: &str, expr: &str) -> String {
    format!(
        "from tessera import *\n\n@kernel.autotune(space=dict(BLOCK=[256]))\n\
         def k(X: Tensor[\"N\", f32], Y: Tensor[\"N\", {y}]):\n    ctx = tile.context()\n    \
         for i0 in tile.parallel(0, N, ctx.BLOCK):\n        x = tile.load(X[i0:i0 + ctx.BLOCK])\n        \
         Y[i0:i0 + ctx.BLOCK] = {expr}\n"
    )
}

fn gemm(elem: &str, acc: &str) -> String {
    format!(
        "from tessera import *\n\n@kernel.autotune(space=dict(BM=[64], BN=[64], BK=[32], warps=[4]))\n\
         def k(A: Tensor[\"M\", \"K\", {elem}], B: Tensor[\"K\", \"N\", {elem}], C: Tensor[\"M\", \"N\", f32]):\n    \
         ctx = tile.context()\n    for m0 in tile.parallel(0, M, ctx.BM):\n        \
         for n0 in tile.parallel(0, N, ctx.BN):\n            c = tile.zeros((ctx.BM, ctx.BN), {acc})\n            \
         for k0 in tile.range(0, K, ctx.BK):\n                a = tile.load(A[m0:m0 + ctx.BM, k0:k0 + ctx.BK])\n                \
         b = tile.load(B[k0:k0 + ctx.BK, n0:n0 + ctx.BN])\n                c = tile.mma(a, b, accumulator=c)\n            \
         C[m0:m0 + ctx.BM, n0:n0 + ctx.BN] = tile.cast(c, f32)\n"
    )
}

fn row_sum(elem: &str) -> String {
    format!(
        "from tessera import *\n\n@kernel.autotune(space=dict(BM=[4], BN=[256], warps=[4]))\n\
         def k(X: Tensor[\"R\", \"C\", {elem}], Y: Tensor[\"R\", f32]):\n    ctx = tile.context()\n    \
         for r0 in tile.parallel(0, R, ctx.BM):\n        s = tile.zeros((ctx.BM,), f32)\n        \
         for c0 in tile.range(0, C, ctx.BN):\n            x = tile.load(X[r0:r0 + ctx.BM, c0:c0 + ctx.BN])\n            \
         s = s + tile.cast(tile.row_sum(x), f32)\n        Y[r0:r0 + ctx.BM] = s\n"
    )
}

/// (policy, source with it, source without it, what Graph IR shows where it acts).
fn cases() -> Vec<(&'static str, String, String, &'static str)> {
    vec![
        (
            "saturate e4m3",
            elementwise("fp8_e4m3 @saturate", "tile.cast(x, fp8_e4m3)"),
            elementwise("fp8_e4m3", "tile.cast(x, fp8_e4m3)"),
            "arith.cast %x {saturate = true}",
        ),
        (
            "saturate e5m2 arithmetic",
            elementwise(
                "fp8_e5m2 @saturate",
                "tile.cast(x, \"fp8_e5m2 @saturate\") * tile.cast(x, \"fp8_e5m2 @saturate\")",
            ),
            elementwise("fp8_e5m2", "tile.cast(x, fp8_e5m2) * tile.cast(x, fp8_e5m2)"),
            "arith.mul",
        ),
        (
            "saturate int8",
            elementwise("int8 @saturate", "tile.cast(x, int8)"),
            elementwise("int8", "tile.cast(x, int8)"),
            "{saturate = true}",
        ),
        (
            "stochastic bf16",
            elementwise("bf16 @stochastic_round", "tile.cast(x, bf16)"),
            elementwise("bf16", "tile.cast(x, bf16)"),
            "{rounding = \"stochastic\"}",
        ),
        (
            "stochastic e4m3",
            elementwise("fp8_e4m3 @stochastic_round", "tile.cast(x, fp8_e4m3)"),
            elementwise("fp8_e4m3", "tile.cast(x, fp8_e4m3)"),
            "tile.rand %__seed",
        ),
        ("accum f16 (tensor cores)", gemm("f16 @accum(f16)", "f16"), gemm("f16 @accum(f32)", "f32"), "{acc = f16}"),
        ("accum bf16 (FMA)", gemm("bf16 @accum(bf16)", "bf16"), gemm("bf16 @accum(f32)", "f32"), "{acc = bf16}"),
        ("accum fp8 into f16", gemm("fp8_e4m3 @accum(f16)", "f16"), gemm("fp8_e4m3 @accum(f32)", "f32"), "{acc = f16}"),
        ("accum row sum", row_sum("f16 @accum(f16)"), row_sum("f16"), "acc = f16"),
    ]
}

/// The code of `k` in `src` for `target`, in its default configuration.
fn code(src: &str, target: Target) -> (String, String) {
    let db = Database::default();
    let file = SourceFile::new(&db, "p.tsr".into(), src.to_string(), None);
    let k = key(&db, file, "k");
    let (config, _) = default_config(&db, k, &BTreeMap::new()).unwrap_or_else(|e| panic!("{}", e.message));
    let graph = graph_ir(&db, k).clone().unwrap_or_else(|e| panic!("{src}\n{}", e.message));
    let text = target_code(&db, k, config, target).clone().unwrap_or_else(|e| panic!("{src}\n{target}: {}", e.message));
    (print_func(&graph, &NoLocs).text, text.text.clone())
}

fn opt() -> Option<String> {
    let candidate = std::env::var("TESSERA_OPT").unwrap_or_else(|_| "opt-14".to_string());
    let ok = Command::new(&candidate).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "`{candidate}` is not available");
        eprintln!("SKIPPING LLVM verification: `{candidate}` is not available");
    }
    ok.then_some(candidate)
}

fn verify_llvm(opt: &str, text: &str) -> Result<(), String> {
    let mut child = Command::new(opt)
        .args(["-verify", "-disable-output", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    child.stdin.take().unwrap().write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn each_policy_changes_ptx_and_llvm_ir() {
    let ptxas = ptxas::locate();
    if ptxas.is_none() {
        assert!(std::env::var_os("CI").is_none(), "ptxas is not available");
        eprintln!("SKIPPING ptxas: not found (pip install nvidia-cuda-nvcc-cu12)");
    }
    let opt = opt();
    for (policy, with, without, shown) in cases() {
        for target in [Target::Sm80, Target::Sm90, Target::Cpu] {
            let (graph, a) = code(&with, target);
            let (_, b) = code(&without, target);
            assert!(graph.contains(shown), "{policy}: Graph IR does not show `{shown}`:\n{graph}");
            assert_ne!(a, b, "{policy}: the {target} code is the same with and without the policy");
            match (target, &ptxas, &opt) {
                (Target::Cpu, _, Some(opt)) => {
                    verify_llvm(opt, &a).unwrap_or_else(|e| panic!("{policy}: opt -verify: {e}\n{a}"));
                }
                (Target::Sm80 | Target::Sm90, Some(ptxas), _) => {
                    ptxas::assemble_with(ptxas, &a, target.name())
                        .unwrap_or_else(|e| panic!("{policy} {target}: ptxas: {e}"));
                }
                _ => {}
            }
        }
    }
}

/// sm_90's only fp8 conversion is `satfinite`: without `@saturate` the overflow is a
/// compare with the rounding threshold and a `selp`; `@accum(f16)` uses the f16 `mma`.
#[test]
fn ptx_shapes_of_the_policies() {
    let (_, sat) = code(&elementwise("fp8_e4m3 @saturate", "tile.cast(x, fp8_e4m3)"), Target::Sm90);
    let (_, plain) = code(&elementwise("fp8_e4m3", "tile.cast(x, fp8_e4m3)"), Target::Sm90);
    assert!(sat.contains("cvt.rn.satfinite.e4m3x2.f32") && plain.contains("cvt.rn.satfinite.e4m3x2.f32"));
    assert!(plain.contains("setp.gt.f32") && plain.contains("0f43E80000"), "e4m3 overflow above 464:\n{plain}");
    assert!(!sat.contains("0f43E80000"));
    for target in [Target::Sm80, Target::Sm90] {
        let (_, h) = code(&gemm("f16 @accum(f16)", "f16"), target);
        assert!(h.contains("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16"), "{target}");
        let (_, h) = code(&gemm("fp8_e4m3 @accum(f16)", "f16"), target);
        assert!(h.contains("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16"), "{target} fp8");
        let (_, f) = code(&gemm("f16 @accum(f32)", "f32"), target);
        assert!(!f.contains(".f16.f16.f16.f16") && f.contains("row.col.f32.f16.f16.f32"), "{target}");
    }
    let (_, sr) = code(&elementwise("bf16 @stochastic_round", "tile.cast(x, bf16)"), Target::Sm90);
    assert!(sr.contains("cvt.rmi.f64.f64") && sr.contains("copysign.f64"));
}

/// The run's seed is a hidden last index parameter of exactly the kernels that round
/// stochastically, with its position in the ABI.
#[test]
fn the_seed_is_a_hidden_abi_parameter() {
    for (src, seeded) in [
        (elementwise("bf16 @stochastic_round", "tile.cast(x, bf16)"), true),
        (elementwise("bf16", "tile.cast(x, bf16)"), false),
        (elementwise("fp8_e4m3 @saturate", "tile.cast(x, fp8_e4m3)"), false),
    ] {
        let db = Database::default();
        let file = SourceFile::new(&db, "p.tsr".into(), src.clone(), None);
        let k = key(&db, file, "k");
        let (config, _) = default_config(&db, k, &BTreeMap::new()).unwrap();
        for target in [Target::Cpu, Target::Sm90] {
            let tile = tile_ir(&db, k, config.clone(), target).clone().unwrap();
            let abi = KernelAbi::of(&tile).unwrap();
            assert_eq!(abi.seed_slot(), seeded.then_some(2), "{src}");
            if seeded {
                assert_eq!(abi.params[2].name(), "__seed");
                let code = target_code(&db, k, config.clone(), target).clone().unwrap();
                assert_eq!(code.abi.seed_slot(), Some(2));
            }
        }
    }
}

/// `@loss_scale(k)` changes the backward graph, so the generated kernels of a `grad`.
#[test]
fn loss_scale_changes_the_generated_kernels() {
    let src = |policy: &str| {
        format!(
            "from tessera import *\n\n@jit\n@autodiff\n\
             def loss(x: Tensor[\"B\", \"D\", bf16{policy}], w: Tensor[\"B\", \"D\", bf16{policy}]) -> Tensor[f32]:\n    \
             return sum(cast(x * w, f32))\n\n\n@jit\n\
             def step(x: Tensor[\"B\", \"D\", bf16{policy}], w: Tensor[\"B\", \"D\", bf16{policy}]) -> Tensor[\"B\", \"D\", bf16{policy}]:\n    \
             (dw,) = grad(loss, wrt=(\"w\",))(x, w)\n    return dw\n"
        )
    };
    let mut texts = Vec::new();
    for policy in [" @loss_scale(1024)", ""] {
        let db = Database::default();
        let file = SourceFile::new(&db, "p.tsr".into(), src(policy), None);
        let k = key(&db, file, "step");
        let graph = print_func(&graph_ir(&db, k).clone().unwrap(), &NoLocs).text;
        assert_eq!(graph.contains("loss_scale = 1024.0"), !policy.is_empty(), "{graph}");
        let (_, module) = plan_module(&db, k).unwrap_or_else(|e| panic!("{}", e.message));
        let mut code = String::new();
        for entry in &item_index(&db, module).functions {
            let (config, _) = default_config(&db, entry.key, &BTreeMap::new()).unwrap();
            for target in [Target::Sm90, Target::Cpu] {
                code.push_str(&target_code(&db, entry.key, config.clone(), target).clone().unwrap().text);
            }
        }
        texts.push(code);
    }
    assert_ne!(texts[0], texts[1]);
}
