//! The collectives across processes: one thread per rank, each holding only its own
//! buffer and meeting the others over TCP (the rendezvous `tessera run --fabric tcp`
//! uses), must give bitwise what the simulated mesh gives with every buffer in one
//! place, and count the same bytes.

use std::time::Duration;

use tessera_backends::mesh::fabric::tcp::Rendezvous;
use tessera_backends::mesh::{all_gather, all_reduce, all_to_all, reduce_scatter, Mesh, Network};
use tessera_passes::dist::cost::Algorithm;

#[derive(Clone, Copy, Debug)]
enum Op {
    AllReduce(Algorithm),
    AllGather,
    ReduceScatter,
    AllToAll,
}

fn run(op: Op, bufs: &mut [Vec<f64>], mesh: &Mesh, axis: usize, net: &mut Network) {
    match op {
        Op::AllReduce(a) => all_reduce(bufs, mesh, axis, a, net),
        Op::AllGather => all_gather(bufs, mesh, axis, net),
        Op::ReduceScatter => reduce_scatter(bufs, mesh, axis, net),
        Op::AllToAll => all_to_all(bufs, mesh, axis, net),
    }
    .unwrap()
}

/// Values whose sums depend on the order of addition, so that an order that differs
/// from the simulated mesh's shows.
fn input(devices: usize, len: usize) -> Vec<Vec<f64>> {
    (0..devices)
        .map(|d| (0..len).map(|i| 1.0 / (1.0 + (d * 131 + i * 7) as f64) + 1e8 * (i % 3) as f64).collect())
        .collect()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn every_collective_across_processes_matches_the_simulated_mesh_bit_for_bit() {
    let mesh = Mesh::new(&[("dp", 3), ("tp", 2)]).unwrap();
    let ops = [
        Op::AllReduce(Algorithm::Ring),
        Op::AllReduce(Algorithm::Tree),
        Op::AllGather,
        Op::ReduceScatter,
        Op::AllToAll,
    ];
    let port = free_port();
    let n = mesh.devices();
    // One thread per rank, as one process per device would run: each runs every case
    // in the same order over one fabric.
    let per_rank: Vec<Vec<(Vec<f64>, u64, u32)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let mesh = mesh.clone();
                scope.spawn(move || {
                    let rendezvous = Rendezvous {
                        rank,
                        world: n,
                        master_addr: "127.0.0.1".into(),
                        master_port: port,
                        timeout: Duration::from_secs(30),
                    };
                    let fabric = rendezvous.connect(1).unwrap();
                    let mut out = Vec::new();
                    for op in ops {
                        for axis in 0..2 {
                            let mut bufs = input(n, 12);
                            for (r, b) in bufs.iter_mut().enumerate() {
                                if r != rank {
                                    b.clear();
                                }
                            }
                            let mut net = Network::over(n, Some(fabric.clone()));
                            run(op, &mut bufs, &mesh, axis, &mut net);
                            out.push((bufs.swap_remove(rank), net.sent[rank], net.steps));
                        }
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut case = 0;
    for op in ops {
        for axis in 0..2 {
            let mut bufs = input(n, 12);
            let mut net = Network::new(n);
            run(op, &mut bufs, &mesh, axis, &mut net);
            let most_steps = per_rank.iter().map(|cases| cases[case].2).max().unwrap();
            assert_eq!(most_steps, net.steps, "{op:?} axis {axis}");
            for (rank, cases) in per_rank.iter().enumerate() {
                let (got, sent, _) = &cases[case];
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(got), bits(&bufs[rank]), "{op:?} axis {axis} rank {rank}");
                assert_eq!(*sent, net.sent[rank], "{op:?} axis {axis} rank {rank}: bytes sent");
            }
            case += 1;
        }
    }
}
