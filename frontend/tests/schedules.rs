//! Schedule values and search spaces through the checker: what `with_*` methods and a
//! Halide-style `space=` report, at which text, and the space a chain denotes.

use tessera_frontend::check::schedule::KeyValue;
use tessera_frontend::check::{file_diagnostics, fn_decorators};
use tessera_frontend::db::item_index;
use tessera_frontend::diagnostics::Code;
use tessera_frontend::{Database, SourceFile};

const BODY: &str = "(x: Tensor[\"N\", f32], y: Tensor[\"N\", f32]):
    ctx = tile.context()
    for i0 in tile.parallel(0, N, ctx.BM):
        y[i0:i0 + ctx.BM] = tile.load(x[i0:i0 + ctx.BM])
";

/// (code, message, the text the primary range covers) of every diagnostic of `src`.
fn diagnostics(src: &str) -> Vec<Found> {
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), src.to_string(), None);
    file_diagnostics(&db, file)
        .iter()
        .map(|d| (d.code, d.message.clone(), src[d.range.start as usize..d.range.end as usize].to_string()))
        .collect()
}

fn constant(value: &str) -> Vec<Found> {
    diagnostics(&format!("from tessera import *\n\nbase = Schedule(block=(128, 128), warps=8)\ns = {value}\n"))
}

#[test]
fn with_methods_bind_by_position_or_name() {
    assert!(constant("base.with_block(64, 32).with_k(16).with_warps(4).with_stages(2)").is_empty());
    assert!(constant("base.with_block(m=64, n=32).with_k(k=16).with_vector(vector=8)").is_empty());
    assert!(constant("base.with_swizzle(\"xor\").with_block(64, n=32)").is_empty());
    let got = constant("base.with_block(64)");
    assert_eq!(
        got,
        vec![(Code::E0801, "`with_block` takes 2 arguments (m, n), got 1".into(), "base.with_block(64)".into())]
    );
    let got = constant("base.with_block(m=64, q=64)");
    assert_eq!(got, vec![(Code::E0804, "`with_block` has no parameter `q`; it takes (m, n)".into(), "q".into())]);
    let got = constant("base.with_block(64, m=64)");
    assert_eq!(got[0].0, Code::E0801, "{got:?}");
    assert_eq!(got[0].1, "`with_block` got `m` twice");
    let got = constant("base.with_warps(3).with_stages(9)");
    assert_eq!(got.len(), 1, "a refused value ends the chain: {got:?}");
    assert_eq!((got[0].0, got[0].2.as_str()), (Code::E0701, "3"));
    let got = constant("base.with_k(1.5)");
    assert_eq!((got[0].0, got[0].2.as_str()), (Code::E0802, "1.5"));
}

#[test]
fn a_kernel_takes_the_schedule_of_a_chain() {
    let src = format!(
        "from tessera import *\n\nbase = Schedule(block=(128, 128), warps=8, stages=3)\n\n\
         @kernel.schedule(base.with_block(64, 64).with_warps(4))\ndef k{BODY}"
    );
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), src, None);
    assert!(file_diagnostics(&db, file).is_empty());
    let key = item_index(&db, file).functions[0].key;
    let fixed = fn_decorators(&db, key).schedule.clone().unwrap().fixed;
    assert_eq!(fixed.int("BM"), Some(64));
    assert_eq!(fixed.int("BN"), Some(64));
    assert_eq!(fixed.int("warps"), Some(4));
    assert_eq!(fixed.int("stages"), Some(3));
}

/// A diagnostic: code, message, the text under its primary range.
type Found = (Code, String, String);

fn space(space: &str) -> (Vec<Found>, Vec<(String, Vec<KeyValue>)>) {
    let src = format!("from tessera import *\n\n@kernel.autotune(space={space})\ndef k{BODY}");
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), src.clone(), None);
    let diags = file_diagnostics(&db, file)
        .iter()
        .map(|d| (d.code, d.message.clone(), src[d.range.start as usize..d.range.end as usize].to_string()))
        .collect();
    let key = item_index(&db, file).functions[0].key;
    let schedule = fn_decorators(&db, key).schedule.clone().unwrap();
    let keys =
        schedule.space.iter().map(|k| (k.key.clone(), k.candidates.iter().map(|(v, _)| v.clone()).collect())).collect();
    (diags, keys)
}

#[test]
fn a_halide_chain_is_the_dict_space() {
    let chain = space("block(m=[64, 128], n=[64], k=[32]).warps([4, 8]).stages([2, 3]).vector([4, 8])");
    let dict = space("dict(BM=[64, 128], BN=[64], BK=[32], warps=[4, 8], stages=[2, 3], vector=[4, 8])");
    // W0705 for BN and BK (never read) at the key's name in each form.
    assert_eq!(
        chain.0.iter().map(|d| (d.0, d.2.clone())).collect::<Vec<_>>(),
        vec![(Code::W0705, "n".to_string()), (Code::W0705, "k".to_string())]
    );
    assert_eq!(dict.0.iter().map(|d| d.0).collect::<Vec<_>>(), vec![Code::W0705, Code::W0705]);
    assert_eq!(chain.1, dict.1);
    // Positional m and n, and `ts.block`.
    let positional = space("block([64, 128], [64]).k([32])");
    assert_eq!(positional.1, space("dict(BM=[64, 128], BN=[64], BK=[32])").1);
    let src = format!(
        "import tessera as ts\nfrom tessera import *\n\n@kernel.autotune(space=ts.block(m=[64]).warps([4]))\ndef k{BODY}"
    );
    assert!(diagnostics(&src).is_empty(), "{:?}", diagnostics(&src));
}

#[test]
fn a_bad_chain_names_the_bad_part() {
    let (d, _) = space("block(m=[64], z=[1]).warp([4])");
    assert_eq!(
        d.iter().map(|d| (d.0, d.2.as_str())).collect::<Vec<_>>(),
        vec![(Code::E0804, "z"), (Code::E0201, "warp")]
    );
    assert!(d[1].1.starts_with("a search space has no method `warp`"), "{d:?}");
    let (d, _) = space("block(m=[64]).warps(4, 8)");
    assert_eq!(d[0].0, Code::E0801, "{d:?}");
    assert_eq!(d[0].1, "`warps` takes one list of candidates, e.g. `warps([4, 8])`");
    let (d, _) = space("block(m=[64]).k([32]).k([64])");
    assert_eq!((d[0].0, d[0].1.as_str()), (Code::E0802, "the search space gives `BK` twice"));
    let (d, _) = space("block(m=[64, 100]).warps([4, 6])");
    assert_eq!(
        d.iter().map(|d| (d.0, d.2.as_str())).collect::<Vec<_>>(),
        vec![(Code::E0701, "100"), (Code::E0701, "6")]
    );
    let (d, _) = space("block(m=[64]).stages(2)");
    assert_eq!((d[0].0, d[0].2.as_str()), (Code::E0802, "2"), "candidates must be a list: {d:?}");
}
