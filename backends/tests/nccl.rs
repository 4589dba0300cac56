//! The NCCL probe never panics: it names what is missing, or finds NCCL and (on a
//! machine with a GPU) runs a one-rank all-reduce.

#[test]
fn the_probe_reports_absence_cleanly_or_runs_a_one_rank_all_reduce() {
    match tessera_backends::nccl::probe() {
        Err(why) => {
            assert!(why.starts_with("no NCCL: "), "{why}");
            if cfg!(feature = "nccl") {
                assert!(why.contains("libnccl.so"), "{why}");
            } else {
                assert!(why.contains("--features nccl"), "{why}");
            }
            eprintln!("skipped the all-reduce: {why}");
        }
        Ok(info) => {
            assert!(info.version.split('.').count() == 3, "{info:?}");
            #[cfg(feature = "nccl")]
            match tessera_backends::nccl::one_rank_all_reduce() {
                Ok(out) => {
                    assert_eq!(out, vec![1.0, 2.0, 3.0, 4.0]);
                    one_rank_fabric();
                }
                Err(why) if why.starts_with("no NVIDIA GPU") => eprintln!("skipped the all-reduce: {why}"),
                Err(why) => panic!("{why}"),
            }
        }
    }
}

/// The NCCL fabric of one rank: the TCP rendezvous, the communicator from its unique id,
/// and a step of frames (none cross, as there is no other rank).
#[cfg(feature = "nccl")]
fn one_rank_fabric() {
    use tessera_backends::mesh::fabric::tcp::Rendezvous;
    let rendezvous = Rendezvous {
        rank: 0,
        world: 1,
        master_addr: "127.0.0.1".into(),
        master_port: 0,
        timeout: std::time::Duration::from_secs(30),
    };
    let fabric = tessera_backends::nccl::fabric(&rendezvous, 1).unwrap();
    assert_eq!(fabric.name(), "NCCL");
    assert_eq!(fabric.all_gather(vec![1.0, 2.0]).unwrap(), vec![vec![1.0, 2.0]]);
}
