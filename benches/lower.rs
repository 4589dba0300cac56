//! `cargo bench --bench lower`: lowering flash attention through every stage (Graph →
//! Schedule → Tile → Target) for one configuration, cold in a fresh database, and again
//! after one autotune candidate changes. Target (issue 3): ≤ 50 ms for all stages.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use salsa::Setter;
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, SourceFile};
use tessera_passes::{default_config, lowering_text, Stage, Target};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn median(mut runs: Vec<Duration>) -> f64 {
    runs.sort();
    runs[runs.len() / 2].as_secs_f64() * 1e3
}

/// Lowers `kernel` through all stages; returns the bytes printed.
fn lower_all(db: &Database, file: SourceFile, kernel: &str, target: Target) -> usize {
    let key = item_index(db, file).functions.iter().find(|f| f.key.name(db) == kernel).expect("the kernel").key;
    let (config, _) = default_config(db, key, &BTreeMap::new()).expect("a configuration");
    Stage::ALL
        .iter()
        .map(|&stage| match lowering_text(db, key, stage, target, &config) {
            Ok(t) => t.text.len(),
            Err(e) => panic!("{kernel} {stage:?} on {target}: {}", e.message),
        })
        .sum()
}

fn main() {
    tessera_cli::use_mimalloc_for_tree_sitter();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("examples/flash_attention.tsr")).unwrap();
    println!("{:<34} {:>10} {:>10} {:>8}", "flash attention, all stages", "median ms", "min ms", "KiB out");
    for target in [Target::Sm90, Target::Sm80, Target::Cpu] {
        let mut cold = Vec::new();
        let mut bytes = 0;
        for _ in 0..15 {
            let t = Instant::now();
            let db = Database::default();
            let file = SourceFile::new(&db, "examples/flash_attention.tsr".into(), text.clone(), None);
            bytes = lower_all(&db, file, "flash_attention", target);
            cold.push(t.elapsed());
        }
        let min = cold.iter().min().unwrap().as_secs_f64() * 1e3;
        println!("{:<34} {:>10.2} {:>10.2} {:>8}", format!("cold, {target}"), median(cold), min, bytes / 1024);

        // Warm: each run makes a new first BN candidate, so the default configuration is
        // new (nothing memoized) and Schedule/Tile/Target re-run while Graph IR is reused.
        let mut db = Database::default();
        let file = SourceFile::new(&db, "examples/flash_attention.tsr".into(), text.clone(), None);
        lower_all(&db, file, "flash_attention", target);
        let mut warm = Vec::new();
        for i in 0..15 {
            let edited = text.replace("BN=[64, 128]", &format!("BN=[{}, 128]", 16 * (i + 1)));
            file.set_text(&mut db).to(edited);
            let t = Instant::now();
            lower_all(&db, file, "flash_attention", target);
            warm.push(t.elapsed());
        }
        let min = warm.iter().min().unwrap().as_secs_f64() * 1e3;
        println!("{:<34} {:>10.2} {:>10.2}", format!("after a candidate edit, {target}"), median(warm), min);
    }
}
