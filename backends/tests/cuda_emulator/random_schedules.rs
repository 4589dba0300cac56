//! Random schedules through the emulator (`hopper_cases::random`): each drawn case runs
//! at its random ragged shape against the f64 reference of the kernel's Graph IR. The
//! fixed cases pin each kernel's own schedule; these reach the combinations nobody wrote
//! down. Besides the Hopper cases' GEMMs and attention, the kernels without a dot of the
//! emulator's sources (its op kernels, the corpus, the examples) are drawn, at shapes of
//! its table.
//!
//! `TESSERA_RANDOM_SCHEDULES=N` runs N cases instead of the default, and
//! `TESSERA_RANDOM_SEED=S` draws from another seed (a failure names both).

use tessera_backends::interp::inputs::seeded;

use super::execute::emulate;
use crate::hopper_cases::random::random_cases;
use crate::kernel_sources::parse_dims;

#[test]
fn random_hopper_schedules_compute_what_the_reference_computes() {
    let count: usize = std::env::var("TESSERA_RANDOM_SCHEDULES").ok().and_then(|v| v.parse().ok()).unwrap_or(16);
    let seed: u64 = std::env::var("TESSERA_RANDOM_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(2026);
    let sources: Vec<(String, String)> = super::sources().into_iter().map(|s| (s.label, s.text)).collect();
    let drawn = random_cases(seed, count, &sources, &|kernel| super::shapes(kernel).first().copied());
    let mut failures = drawn.failures;
    for d in &drawn.cases {
        let inputs = match seeded(&d.case.func, &parse_dims(&d.shape), super::SEED) {
            Ok(i) => i,
            Err(e) => {
                failures.push(format!("{}: inputs: {e}", d.what));
                continue;
            }
        };
        let result = d.case.check(&d.what, &inputs, |actual| emulate(&d.case.code, actual).map(|_| ()));
        eprintln!("{} {}", if result.is_empty() { "ok  " } else { "FAIL" }, d.what);
        failures.extend(result);
    }
    eprintln!("{} random schedules in {} draws; refused: {:?}", drawn.cases.len(), drawn.draws, drawn.refused);
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    assert_eq!(drawn.cases.len(), count, "only {} of {count} draws were admitted", drawn.cases.len());
}
