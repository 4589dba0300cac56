use tessera_frontend::check::KeyValue;

use super::*;

fn gemm() -> AnalysisHost {
    AnalysisHost::new("gemm.tsr".into(), include_str!("../../../examples/gemm.tsr").to_string(), None)
}

#[test]
fn lookup_lists_the_functions_when_the_name_is_unknown() {
    let host = gemm();
    let a = host.analysis();
    assert!(a.function("gemm").is_ok());
    let e = a.function("gem").unwrap_err();
    assert_eq!(e.kind, ErrorKind::NoFunction);
    assert_eq!(e.message, "gemm.tsr has no function `gem` (it defines gemm)");
}

#[test]
fn the_default_configuration_is_the_first_candidate() {
    let host = gemm();
    let a = host.analysis();
    let f = a.function("gemm").unwrap();
    let c = a.configure(f, None, &Overrides::default()).unwrap();
    assert!(c.rejected.is_empty());
    assert_eq!(c.config.schedule.int("BM"), Some(64));
    assert_eq!(c.config.schedule.int("BK"), Some(32));
    assert_eq!(c.symbols, ["M", "K", "N"]);
    assert_eq!(c.space.len(), 5);
}

#[test]
fn accepted_overrides_apply_and_rejected_ones_are_listed_not_applied() {
    let host = gemm();
    let a = host.analysis();
    let f = a.function("gemm").unwrap();
    let mut o = Overrides::default();
    o.set_schedule("m", KeyValue::Int(128));
    o.set_schedule("BN", KeyValue::Int(100));
    o.set_schedule("BLOCK", KeyValue::Int(256));
    o.dims.insert("M".into(), 512);
    o.dims.insert("Q".into(), 1);
    let c = a.configure(f, None, &o).unwrap();
    assert_eq!(c.config.schedule.int("BM"), Some(128), "the alias m sets BM");
    assert_eq!(c.config.schedule.int("BN"), Some(64), "a refused value leaves the kernel's own");
    let refused: Vec<String> = c.rejected.iter().map(|r| format!("{} {}", r.kind.name(), r.key)).collect();
    assert_eq!(refused, ["schedule BLOCK", "schedule BN", "dims Q"]);
    let strict = c.strict().unwrap_err();
    assert_eq!(strict.kind, ErrorKind::Rejected);
    assert!(strict.message.starts_with("BLOCK=256: `gemm` has no schedule key BLOCK"), "{}", strict.message);
}

#[test]
fn lowering_errors_carry_absolute_spans() {
    let text = "from tessera import *\n\n@kernel\ndef k(x: Tensor[\"N\", f32]):\n    y = undefined_name\n";
    let host = AnalysisHost::new("k.tsr".into(), text.to_string(), None);
    let a = host.analysis();
    let f = a.function("k").unwrap();
    let config = Config::default();
    match a.lower(f, Stage::Graph, &config, Target::Sm90) {
        Err(e) => {
            assert_eq!(e.kind, ErrorKind::Lowering);
            let range = e.range.expect("a span");
            assert!(range.start >= f.anchor, "{range:?} is absolute");
        }
        Ok(_) => panic!("a function with an undefined name lowered"),
    }
}

#[test]
fn an_edit_through_the_host_is_seen_by_the_next_analysis() {
    let mut host = gemm();
    let same = host.file().text(host.db()).clone();
    assert!(!host.set_text(same, None), "same text, no change");
    let renamed = include_str!("../../../examples/gemm.tsr").replace("def gemm(", "def gemm2(");
    assert!(host.set_text(renamed, None));
    assert!(host.analysis().function("gemm2").is_ok());
    assert_eq!(host.analysis().function("gemm").unwrap_err().kind, ErrorKind::NoFunction);
}

/// `B*H` and `N//2` dims: their symbols are shape symbols of the signature (the dims rule
/// accepts them), and the ones the body reads as values (`tile.parallel(0, B*H)`, which
/// no tensor's extent gives on its own) are specialized by the configuration.
const PRODUCT_DIMS: &str = r#"from tessera import *

@kernel
def scale(x: Tensor["B*H", "N", f32], y: Tensor["B*H", "N", f32]):
    ctx = tile.context()
    for r in tile.parallel(0, B*H):
        for c0 in tile.range(0, N, ctx.BN):
            t = tile.load(x[r:r + 1, c0:c0 + ctx.BN])
            tile.store(y[r:r + 1, c0:c0 + ctx.BN], t * 2.0)

@kernel
def halves(h: Tensor["M//2", f32]):
    for i in tile.parallel(0, h.shape[0]):
        u = tile.load(h[i:i + 1])
        tile.store(h[i:i + 1], u + 1.0)
"#;

#[test]
fn product_and_quotient_dims_are_given_by_their_symbols() {
    let host = AnalysisHost::new("k.tsr".into(), PRODUCT_DIMS.to_string(), None);
    let a = host.analysis();
    let f = a.function("scale").unwrap();
    let mut o = Overrides::default();
    for (s, v) in [("B", 2), ("H", 3), ("N", 64), ("M", 8)] {
        o.dims.insert(s.into(), v);
    }
    let c = a.configure(f, None, &o).unwrap();
    assert_eq!(c.symbols, ["B", "H", "N"]);
    let refused: Vec<String> = c.rejected.iter().map(|r| r.to_string()).collect();
    assert_eq!(refused, ["M=8: `scale` has no shape symbol M (its shape symbols are B, H, N)"]);
    assert_eq!(c.config.shapes.get("B"), Some(&2));
    assert_eq!(c.config.shapes.get("H"), Some(&3));
    assert!(!c.config.shapes.contains_key("N"), "N is bound by x's extent: {:?}", c.config.shapes);
    assert!(c.assumed.is_empty(), "{:?}", c.assumed);
    let specialized = |f, config: &Config| {
        let tile = a.tile_ir(f, config, Target::Sm90).unwrap();
        tile.walk().into_iter().all(|id| tile.op(id).kind != crate::ir::OpKind::SchedParam)
    };
    assert!(specialized(f, &c.config), "every symbol read as a value is specialized");
    // `h.shape[0]` is M//2, computed from M.
    let f = a.function("halves").unwrap();
    let c = a.configure(f, None, &o).unwrap();
    assert_eq!(c.symbols, ["M"]);
    assert_eq!(c.config.shapes.get("M"), Some(&8));
    assert!(specialized(f, &c.config));
}
