//! The simulated mesh's collectives against direct computations, and their traffic
//! against the cost model's (`passes::dist::cost`): two implementations that share no
//! code must agree on every byte.

use tessera_backends::mesh::{all_gather, all_reduce, all_to_all, reduce_scatter, Mesh, Network};
use tessera_passes::dist::cost::{self, Algorithm, Collective};

/// Integer-valued data, so every summation order gives the exact sum.
fn data(devices: usize, len: usize, seed: u64) -> Vec<Vec<f64>> {
    (0..devices)
        .map(|d| (0..len).map(|i| ((d as u64 * 7919 + i as u64 * 104_729 + seed) % 1000) as f64 - 500.0).collect())
        .collect()
}

fn meshes() -> Vec<Mesh> {
    vec![
        Mesh::line("x", 1).unwrap(),
        Mesh::line("x", 2).unwrap(),
        Mesh::line("x", 3).unwrap(),
        Mesh::line("x", 8).unwrap(),
        Mesh::new(&[("dp", 4), ("tp", 2)]).unwrap(),
        Mesh::new(&[("a", 3), ("b", 5)]).unwrap(),
    ]
}

#[test]
fn all_reduce_sums_each_group_with_both_algorithms() {
    for mesh in meshes() {
        for axis in 0..mesh.axes().len() {
            for len in [1, 7, 48, 1000] {
                let input = data(mesh.devices(), len, 3);
                let mut expected = input.clone();
                for g in mesh.groups(axis) {
                    let sum: Vec<f64> = (0..len).map(|i| g.iter().map(|&r| input[r][i]).sum()).collect();
                    for &r in &g {
                        expected[r] = sum.clone();
                    }
                }
                for algorithm in [Algorithm::Ring, Algorithm::Tree] {
                    let mut bufs = input.clone();
                    let mut net = Network::new(mesh.devices());
                    all_reduce(&mut bufs, &mesh, axis, algorithm, &mut net).unwrap();
                    assert_eq!(bufs, expected, "{mesh:?} axis {axis} len {len} {algorithm:?}");
                }
            }
        }
    }
}

#[test]
fn f32_all_reduce_results_are_bitwise_equal_on_every_device() {
    let mesh = Mesh::line("x", 8).unwrap();
    let mut bufs: Vec<Vec<f32>> =
        (0..8).map(|d| (0..1001).map(|i| ((d * 31 + i * 17) % 97) as f32 * 0.013 + 1e-3).collect()).collect();
    for algorithm in [Algorithm::Ring, Algorithm::Tree] {
        let mut net = Network::new(8);
        all_reduce(&mut bufs, &mesh, 0, algorithm, &mut net).unwrap();
        let bits = |b: &Vec<f32>| b.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert!(bufs.iter().all(|b| bits(b) == bits(&bufs[0])), "{algorithm:?}");
    }
}

#[test]
fn gather_scatter_and_all_to_all_move_the_right_chunks() {
    let mesh = Mesh::new(&[("dp", 4), ("tp", 2)]).unwrap();
    for axis in 0..2 {
        let p = mesh.axis_size(axis);
        let input = data(8, 6 * p, 11);
        for g in mesh.groups(axis) {
            // all_gather: every device of the group holds the group's buffers in order.
            let mut bufs = input.clone();
            all_gather(&mut bufs, &mesh, axis, &mut Network::new(8)).unwrap();
            let concat: Vec<f64> = g.iter().flat_map(|&r| input[r].clone()).collect();
            assert!(g.iter().all(|&r| bufs[r] == concat));
            // reduce_scatter: position i holds chunk i of the group's sum.
            let mut bufs = input.clone();
            reduce_scatter(&mut bufs, &mesh, axis, &mut Network::new(8)).unwrap();
            for (i, &r) in g.iter().enumerate() {
                let want: Vec<f64> = (i * 6..(i + 1) * 6).map(|e| g.iter().map(|&q| input[q][e]).sum()).collect();
                assert_eq!(bufs[r], want);
            }
            // all_to_all: chunk j of position i lands as chunk i of position j.
            let mut bufs = input.clone();
            all_to_all(&mut bufs, &mesh, axis, &mut Network::new(8)).unwrap();
            for (i, &r) in g.iter().enumerate() {
                for (j, &q) in g.iter().enumerate() {
                    assert_eq!(bufs[q][i * 6..(i + 1) * 6], input[r][j * 6..(j + 1) * 6]);
                }
            }
        }
    }
}

#[test]
fn traffic_matches_the_cost_model() {
    for p in [2usize, 3, 4, 5, 8] {
        let mesh = Mesh::line("x", p).unwrap();
        let len = 24 * p; // splits evenly
        let bytes = (len * 8) as u64;
        for algorithm in [Algorithm::Ring, Algorithm::Tree] {
            let mut bufs = data(p, len, 1);
            let mut net = Network::new(p);
            all_reduce(&mut bufs, &mesh, 0, algorithm, &mut net).unwrap();
            let (steps, sent) = cost::traffic(Collective::AllReduce, algorithm, bytes, p);
            assert_eq!((net.steps, net.busiest()), (steps, sent), "all_reduce {algorithm:?} p={p}");
        }
        let cases: [(Collective, u64); 3] = [
            (Collective::AllGather, bytes * p as u64),
            (Collective::ReduceScatter, bytes),
            (Collective::AllToAll, bytes),
        ];
        for (collective, payload) in cases {
            let mut bufs = data(p, len, 2);
            let mut net = Network::new(p);
            match collective {
                Collective::AllGather => all_gather(&mut bufs, &mesh, 0, &mut net),
                Collective::ReduceScatter => reduce_scatter(&mut bufs, &mesh, 0, &mut net),
                _ => all_to_all(&mut bufs, &mesh, 0, &mut net),
            }
            .unwrap();
            let (steps, sent) = cost::traffic(collective, Algorithm::Ring, payload, p);
            assert_eq!((net.steps, net.busiest()), (steps, sent), "{collective:?} p={p}");
        }
    }
}

#[test]
fn mismatched_buffers_are_errors_not_panics() {
    let mesh = Mesh::line("x", 4).unwrap();
    let mut bufs = vec![vec![1.0f64; 8], vec![1.0; 8], vec![1.0; 7], vec![1.0; 8]];
    let err = all_reduce(&mut bufs, &mesh, 0, Algorithm::Ring, &mut Network::new(4)).unwrap_err();
    assert!(err.contains("device 2 holds 7 elements"), "{err}");
    let mut bufs = vec![vec![1.0f64; 6]; 4];
    assert!(all_to_all(&mut bufs, &mesh, 0, &mut Network::new(4)).unwrap_err().contains("equal chunks"));
    let mut three = vec![vec![1.0f64; 4]; 3];
    assert!(all_gather(&mut three, &mesh, 0, &mut Network::new(3)).is_err());
}
