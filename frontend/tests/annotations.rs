//! Type annotations through the checker: what a wrong or incomplete annotation reports.

use tessera_frontend::check::file_diagnostics;
use tessera_frontend::diagnostics::Code;
use tessera_frontend::{Database, SourceFile};

fn e0401(params: &str) -> Vec<(String, Vec<String>)> {
    let src = format!(
        "from tessera import *\n\n@jit\ndef f({params}, x: Tensor[\"N\", f32]) -> Tensor[\"N\", f32]:\n    return x\n"
    );
    let db = Database::default();
    let file = SourceFile::new(&db, "t.tsr".into(), src, None);
    let diags = file_diagnostics(&db, file);
    diags.iter().filter(|d| d.code == Code::E0401).map(|d| (d.message.clone(), d.notes.clone())).collect()
}

#[test]
fn a_bare_state_type_says_what_it_needs() {
    let got = e0401("cache: KVCache");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, "`KVCache` needs its dims and element type (batch, heads, maximum sequence length, head dim)");
    assert!(got[0].1.iter().any(|n| n.contains("KVCache[\"B\", \"H\", \"S_max\", \"D_h\", bf16]")), "{got:?}");
    let got = e0401("cache: KVCache @paged");
    assert_eq!(got.len(), 1, "policies on a bare KVCache: {got:?}");
    assert!(got[0].0.starts_with("`KVCache` needs"), "{got:?}");
    let got = e0401("s: OptimizerState");
    assert_eq!(got[0].0, "`OptimizerState` needs the parameter it holds state for");
    let got = e0401("t: KVCach");
    assert!(got[0].0.starts_with("unknown type `KVCach`"), "a misspelling is still unknown: {got:?}");
}
