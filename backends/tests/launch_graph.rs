//! `launch::graph`, the API `tessera run` and the explorer share for graph functions:
//! a run on the interpreter is correct and structured; errors are values with their kind.

use std::collections::BTreeMap;

use tessera_backends::launch::graph::{
    run_graph_function, GraphRunError, GraphRunOptions, GraphRunRequest, GraphSession,
};
use tessera_backends::launch::{Device, DeviceRequest, ErrorKind, Verdict};
use tessera_frontend::db::item_index;
use tessera_frontend::{Database, FnKey, SourceFile};

fn example(db: &Database, file: &str) -> SourceFile {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    SourceFile::new(db, path, text, None)
}

fn key<'db>(db: &'db Database, file: SourceFile, name: &str) -> FnKey<'db> {
    item_index(db, file).functions.iter().find(|f| f.key.name(db) == name).expect("the function").key
}

#[test]
fn a_graph_function_runs_on_the_interpreter_and_matches_the_f64_reference() {
    let db = Database::default();
    let file = example(&db, "train_step.tsr");
    let k = key(&db, file, "mse_loss");
    let mut request = GraphRunRequest {
        dims: BTreeMap::from([("B".to_string(), 8), ("D".to_string(), 16)]),
        seed: 3,
        ..GraphRunRequest::default()
    };
    request.options.device = DeviceRequest::Only(Device::Interpreter);
    let (inputs, run) = run_graph_function(&db, k, &request).unwrap_or_else(|e| panic!("{e}"));
    // N was not given: it gets the documented default and is said to be assumed.
    assert!(inputs.assumed.iter().any(|(s, v)| s == "N" && *v == 64), "{:?}", inputs.assumed);
    assert_eq!(run.device, Device::Interpreter);
    assert_eq!(run.verdict, Verdict::Correct, "{:?}", run.checks);
    assert_eq!(run.checks.len(), run.returned.len());
    assert_eq!(run.returned[0].0, "return");
    assert!(!run.kernels.is_empty());
    assert_eq!(run.times.len(), 1);
}

#[test]
fn graph_run_errors_are_values() {
    let db = Database::default();
    let file = example(&db, "train_step.tsr");
    let k = key(&db, file, "mse_loss");
    let session = GraphSession::open(&db, k).expect("a plan");
    let bad = session.seed(&BTreeMap::new(), &[("x".to_string(), "1".to_string())], 0).unwrap_err();
    assert!(matches!(bad, GraphRunError::Input(_)), "{bad:?}");
    assert_eq!(bad.kind(), ErrorKind::Input);
    // A GPU run of a plan without a GPU says why, as a kernel run does.
    assert_eq!(GraphSession::device(DeviceRequest::Only(Device::Gpu)), Ok(Device::Gpu));
    if tessera_backends::gpu_plan_executor().is_err() {
        let options = GraphRunOptions { device: DeviceRequest::Only(Device::Gpu), ..GraphRunOptions::default() };
        let inputs = session.seed(&BTreeMap::new(), &[], 0).unwrap();
        let gpu = session.run(&inputs, &options).unwrap_err();
        assert!(matches!(&gpu, GraphRunError::NoGpu(why) if why.contains("GPU")), "{gpu:?}");
        assert!(gpu.to_string().starts_with("--device gpu: "), "{gpu}");
        assert_eq!(gpu.kind(), ErrorKind::Unavailable);
    }
}
