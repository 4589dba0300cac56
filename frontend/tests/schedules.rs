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

/// A file with a kernel `k` (reading BM) and the given top-level lines after it.
fn derived_file(lines: &str) -> String {
    format!(
        "from tessera import *\n\nbase = Schedule(block=(128, 128), warps=8, stages=3)\n\n\
         @kernel.autotune(space=dict(BM=[64, 128], warps=[4, 8]))\ndef k{BODY}\n{lines}"
    )
}

#[test]
fn with_schedule_defines_a_kernel_of_its_own() {
    let src = derived_file(
        "small = k.with_schedule(base.with_block(32, 32))\n\
         inline = k.with_schedule(schedule=Schedule(block=(16, 16), warps=2))\n\
         again = small.with_schedule(Schedule(warps=1))\n",
    );
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), src.clone(), None);
    assert!(file_diagnostics(&db, file).is_empty(), "{:?}", file_diagnostics(&db, file));
    let index = item_index(&db, file);
    let original = index.function(&db, "k").unwrap();
    for (name, bm, warps) in [("small", 32, 8), ("inline", 16, 2), ("again", 128, 1)] {
        let entry = index.function(&db, name).unwrap_or_else(|| panic!("`{name}` is a function"));
        // The body's ranges count from the original's `def`; the entry is the assignment.
        assert_eq!(entry.anchor, original.anchor);
        assert!(src[entry.range.start as usize..].starts_with(&format!("{name} = ")));
        assert_eq!(&src[entry.name_range.start as usize..entry.name_range.end as usize], name);
        let derived = tessera_frontend::db::derived_kernel(&db, entry.key).unwrap();
        assert_eq!(derived.original, original.key);
        let info = fn_decorators(&db, entry.key);
        assert_eq!(info.kind, tessera_frontend::check::FunctionKind::Kernel);
        let schedule = info.schedule.clone().unwrap();
        // The fixed schedule replaces the autotune space.
        assert!(!schedule.is_autotuned(), "{name}");
        // Keys `S` does not give are the plain kernel's defaults, not the original's.
        let config = &schedule.configurations()[0];
        assert_eq!(config.int("BM"), Some(bm), "{name}");
        assert_eq!(config.int("warps"), Some(warps), "{name}");
        assert_eq!(info.decorators, vec!["kernel.schedule".to_string()]);
    }
    // The original keeps its space.
    assert!(fn_decorators(&db, original.key).schedule.clone().unwrap().is_autotuned());
}

#[test]
fn a_bad_with_schedule_names_the_bad_part() {
    let found = |line: &str| diagnostics(&derived_file(&format!("def helper(x):\n    return x\n\n{line}\n")));
    let d = found("a = k.with_schedule(3)");
    assert_eq!(d, vec![(Code::E0802, "`with_schedule` expects a Schedule, but `3` is an int".into(), "3".into())]);
    let d = found("a = k.with_schedule(base, base)");
    assert_eq!(
        d,
        vec![(
            Code::E0801,
            "`with_schedule` takes 1 argument (schedule), got 2".into(),
            "k.with_schedule(base, base)".into()
        )]
    );
    let d = found("a = k.with_schedule(sched=base)");
    assert_eq!((d[0].0, d[0].2.as_str()), (Code::E0804, "sched"), "{d:?}");
    let d = found("a = helper.with_schedule(base)");
    assert_eq!(
        d,
        vec![(Code::E0201, "`helper` is a helper and has no attribute `with_schedule`".into(), "with_schedule".into())]
    );
    let d = found("a = (k.with_schedule(base), 1)");
    assert_eq!((d[0].0, d[0].2.as_str()), (Code::E0503, "k.with_schedule(base)"), "{d:?}");
    let d = found("a = k.with_schedule(base.with_warps(3))");
    assert_eq!((d[0].0, d[0].2.as_str()), (Code::E0701, "3"), "{d:?}");
    // A standard-library kernel derives like a kernel of the file; its arguments are
    // checked the same way.
    let d = found("from tessera.stdlib import flash_attention_2\na = flash_attention_2.with_schedule(base)");
    assert_eq!(d, vec![], "{d:?}");
    let d = found("from tessera.stdlib import matmul as mm\na = mm.with_schedule(base.with_warps(3))");
    assert_eq!((d[0].0, d[0].2.as_str()), (Code::E0701, "3"), "{d:?}");
    // Inside a body it defines nothing.
    let d = diagnostics(&derived_file("@kernel\ndef j(x: Tensor[\"N\", f32]):\n    s = k.with_schedule(base)\n"));
    assert!(d.iter().any(|d| d.0 == Code::E0503 && d.2 == "k.with_schedule(base)"), "{d:?}");
}

/// In the editor a derived kernel is its assignment: a kernel symbol, a kernel hover
/// (the server adds its resources by name), and no feature fails anywhere in the file.
#[test]
fn the_editor_shows_a_derived_kernel_at_its_assignment() {
    use tessera_frontend::ide;
    let src = derived_file("small = k.with_schedule(base.with_block(32, 32))\nx = k.with_schedule(3)\n");
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), src.clone(), None);
    let symbols = ide::file_structure(&db, file);
    let small = symbols.iter().find(|s| s.name == "small").unwrap();
    assert_eq!((small.kind, small.detail.as_str()), (ide::SymbolKind::Kernel, "k.with_schedule"));
    // One with a bad argument is still the kernel it defines (its error is reported).
    assert_eq!(symbols.iter().find(|s| s.name == "x").unwrap().kind, ide::SymbolKind::Kernel);
    assert_eq!(symbols.iter().find(|s| s.name == "base").unwrap().kind, ide::SymbolKind::Constant);
    let at = src.find("small =").unwrap() as u32 + 1;
    let hover = ide::hover(&db, file, at).unwrap();
    assert_eq!(hover.subject, ide::HoverSubject::Kernel { name: "small".into() });
    assert!(hover.markdown.contains("`k`'s body under the fixed schedule"), "{}", hover.markdown);
    assert!(hover.markdown.contains("BM=32"), "{}", hover.markdown);
    let bad = ide::hover(&db, file, src.find("x = ").unwrap() as u32).unwrap();
    assert_eq!(bad.subject, ide::HoverSubject::Other, "with an error it hovers as a constant");
    for offset in 0..=src.len() as u32 {
        let _ = ide::hover(&db, file, offset);
        let _ = ide::completions(&db, file, offset);
        let _ = ide::goto_definition(&db, file, offset);
        let _ = ide::find_references(&db, file, offset, true);
    }
    let _ = ide::inlay_hints(&db, file, None);
    let _ = ide::highlight(&db, file);
}

/// A derived standard-library kernel: its original is the kernel's f32 instance (a file
/// of its own), its entry is anchored at the assignment, and no editor feature fails or
/// points into the stdlib text.
#[test]
fn a_stdlib_kernel_derives_with_its_entry_at_the_assignment() {
    use tessera_frontend::ide;
    let src = "from tessera import *\nfrom tessera.stdlib import matmul, stable_softmax as ssm\n\n\
               small = matmul.with_schedule(Schedule(block=(64, 64), k=32))\n\
               soft = ssm.with_schedule(Schedule(block=(4, 256)))\n\
               again = small.with_schedule(Schedule(block=(32, 32)))\n"
        .to_string();
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), src.clone(), None);
    assert_eq!(diagnostics(&src), vec![]);
    let index = tessera_frontend::db::item_index(&db, file);
    for (name, original, bm) in [("small", "matmul", 64), ("soft", "stable_softmax", 4), ("again", "matmul", 32)] {
        let entry = index.function(&db, name).unwrap_or_else(|| panic!("`{name}` is a function"));
        assert!(src[entry.anchor as usize..].starts_with(&format!("{name} = ")), "{name}");
        let derived = tessera_frontend::db::stdlib_derived(&db, entry.key).unwrap();
        assert_eq!(derived.original.name(&db), original);
        assert!(derived.original.file(&db).path(&db).to_string_lossy().ends_with(".f32.tsr"));
        let info = fn_decorators(&db, entry.key);
        assert_eq!(info.kind, tessera_frontend::check::FunctionKind::Kernel);
        assert_eq!(info.schedule.clone().unwrap().configurations()[0].int("BM"), Some(bm), "{name}");
        let sig = tessera_frontend::check::fn_signature(&db, entry.key);
        assert!(sig.diagnostics.is_empty(), "{name}: {:?}", sig.diagnostics);
        assert!(tessera_frontend::check::infer_function(&db, entry.key).diagnostics.is_empty(), "{name}");
    }
    let len = src.len() as u32;
    for offset in 0..=len {
        let _ = ide::hover(&db, file, offset);
        let _ = ide::completions(&db, file, offset);
        for t in ide::goto_definition(&db, file, offset) {
            assert!(t.range.end <= len, "{t:?}");
        }
        let _ = ide::find_references(&db, file, offset, true);
    }
    let _ = ide::inlay_hints(&db, file, None);
    let _ = ide::highlight(&db, file);
}
