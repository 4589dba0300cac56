//! The cost of one collective on a device mesh: bytes each device sends, and a time
//! estimate in the α-β (latency-bandwidth) model, with the algorithm (ring or tree)
//! chosen by payload.
//!
//! Algorithms and step counts are the classic ones (Thakur, Rabenseifner and Gropp,
//! "Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1), 2005),
//! which NCCL also uses for its ring and tree all-reduce:
//!
//! | collective | ring: steps, bytes sent per device | tree: steps, bytes sent per device |
//! |---|---|---|
//! | all-reduce | 2(p−1), 2(p−1)/p · S | 2⌈log₂ p⌉, ⌈log₂ p⌉ · S (binomial reduce + broadcast) |
//! | all-gather | p−1, (p−1)/p · S | — (ring only) |
//! | reduce-scatter | p−1, (p−1)/p · S | — (ring only) |
//! | all-to-all | p−1 (pairwise exchange), (p−1)/p · S | — |
//! | send (pipeline) | 1, S | — |
//!
//! S is the whole payload: the full tensor of an all-reduce, the gathered result of an
//! all-gather, the input of a reduce-scatter, each device's whole buffer of an
//! all-to-all. The (p−1)/p and 2(p−1)/p factors are the "bus bandwidth" factors of
//! NVIDIA's nccl-tests (`doc/PERFORMANCE.md`). Time = steps · α + bytes / β, with the
//! link figures of [`LINKS`]. For an all-reduce the tree wins when the payload is small
//! (latency-bound: log p steps instead of 2(p−1)); the ring wins when it is large.
//! The tree is not pipelined (NCCL pipelines its double binary tree, which makes its
//! tree competitive at larger payloads than this model's); ring byte counts are exact
//! when the payload's elements divide evenly by p, and an upper bound otherwise.

/// One interconnect: bandwidth each device has in each direction, and the latency of
/// one step (one message hop, software included).
#[derive(Copy, Clone, PartialEq, Debug)]
pub struct Link {
    pub name: &'static str,
    /// GB/s (10⁹ bytes per second) per device per direction.
    pub bandwidth_gb_s: f64,
    /// Microseconds per step.
    pub latency_us: f64,
    pub source: &'static str,
}

/// The links the cost model knows. Bandwidths are the vendors' per-direction figures;
/// latencies are order-of-magnitude step costs (small-message all-reduce times in
/// nccl-tests are 5–10 µs on NVLink and PCIe within a node, tens of µs across nodes),
/// so small-payload times are good to about 2×.
pub const LINKS: [Link; 4] = [
    Link {
        name: "nvlink4",
        bandwidth_gb_s: 450.0,
        latency_us: 3.0,
        source: "NVIDIA H100 SXM datasheet: NVLink 900 GB/s (both directions)",
    },
    Link {
        name: "nvlink3",
        bandwidth_gb_s: 300.0,
        latency_us: 3.0,
        source: "NVIDIA A100 SXM datasheet: NVLink 600 GB/s (both directions)",
    },
    Link {
        name: "ib-ndr",
        bandwidth_gb_s: 50.0,
        latency_us: 8.0,
        source: "NVIDIA ConnectX-7 / InfiniBand NDR: 400 Gb/s per port, one port per GPU (DGX H100)",
    },
    Link {
        name: "pcie4",
        bandwidth_gb_s: 31.5,
        latency_us: 5.0,
        source: "PCI Express 4.0 x16: 16 GT/s × 16 lanes, 128b/130b encoding",
    },
];

/// The link named `name` (`nvlink4`, `nvlink3`, `ib-ndr`, `pcie4`).
pub fn link(name: &str) -> Option<Link> {
    LINKS.iter().copied().find(|l| l.name == name)
}

/// Devices in one node share NVLink; a mesh axis whose group spans nodes goes over
/// InfiniBand.
pub const DEVICES_PER_NODE: usize = 8;

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    /// One device to one other (a pipeline stage's activation to the next stage).
    SendRecv,
}

impl Collective {
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::AllToAll => "all_to_all",
            Collective::SendRecv => "send",
        }
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Algorithm {
    Ring,
    Tree,
    /// All-to-all's pairwise exchange: at step s device i sends to device i+s.
    Pairwise,
    /// A send from one device to one other.
    PointToPoint,
    /// A group of one device: nothing moves.
    Local,
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Tree => "tree",
            Algorithm::Pairwise => "pairwise",
            Algorithm::PointToPoint => "p2p",
            Algorithm::Local => "local",
        }
    }
}

#[derive(Copy, Clone, PartialEq, Debug)]
pub struct Cost {
    pub algorithm: Algorithm,
    /// Sequential communication steps.
    pub steps: u32,
    /// Bytes the busiest device sends.
    pub bytes_sent: u64,
    pub time_us: f64,
}

/// Steps and bytes sent per device by `algorithm` for `collective` over `group`
/// devices with a payload of `bytes` (see the module table). The simulated mesh counts
/// the bytes it really moves, and its tests hold it to these figures.
pub fn traffic(collective: Collective, algorithm: Algorithm, bytes: u64, group: usize) -> (u32, u64) {
    let p = group as u64;
    if group <= 1 || algorithm == Algorithm::Local {
        return (0, 0);
    }
    // Ring chunks: the payload split in p pieces, the first `bytes % p` one byte longer
    // (whole elements in practice: the simulated mesh splits by elements).
    let chunk = bytes.div_ceil(p);
    match (collective, algorithm) {
        (Collective::AllReduce, Algorithm::Ring) => (2 * (group as u32 - 1), 2 * (p - 1) * chunk),
        (Collective::AllReduce, _) => {
            // A binomial reduce to device 0, then a binomial broadcast from it: each
            // device but the root sends its partial sum up once, and each sends the
            // result once to each of its children. The root and device 2^(depth-1)
            // are the busiest, with `depth` whole payloads each.
            let depth = ceil_log2(group);
            (2 * depth, bytes * u64::from(depth))
        }
        (Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll, _) => {
            (group as u32 - 1, (p - 1) * chunk)
        }
        // The whole payload, in one step, whatever the group's size.
        (Collective::SendRecv, _) => (1, bytes),
    }
}

fn ceil_log2(n: usize) -> u32 {
    usize::BITS - (n.max(1) - 1).leading_zeros()
}

/// The cost of `collective` on a group of `group` devices joined by `link`, with the
/// faster algorithm (only all-reduce has a choice).
pub fn estimate(collective: Collective, bytes: u64, group: usize, link: Link) -> Cost {
    if group <= 1 {
        return Cost { algorithm: Algorithm::Local, steps: 0, bytes_sent: 0, time_us: 0.0 };
    }
    let cost_of = |algorithm| {
        let (steps, bytes_sent) = traffic(collective, algorithm, bytes, group);
        let time_us = f64::from(steps) * link.latency_us + bytes_sent as f64 / (link.bandwidth_gb_s * 1e3);
        Cost { algorithm, steps, bytes_sent, time_us }
    };
    if collective == Collective::AllToAll {
        return cost_of(Algorithm::Pairwise);
    }
    if collective == Collective::SendRecv {
        return cost_of(Algorithm::PointToPoint);
    }
    let ring = cost_of(Algorithm::Ring);
    if collective != Collective::AllReduce {
        return ring;
    }
    let tree = cost_of(Algorithm::Tree);
    if tree.time_us < ring.time_us {
        tree
    } else {
        ring
    }
}

/// The payload below which an all-reduce over `group` devices on `link` takes the
/// tree: where the two times cross.
pub fn tree_threshold_bytes(group: usize, link: Link) -> u64 {
    let (mut lo, mut hi) = (0u64, 1u64 << 40);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if estimate(Collective::AllReduce, mid, group, link).algorithm == Algorithm::Tree {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_all_reduces_take_the_tree_and_large_ones_the_ring() {
        let nvlink = link("nvlink4").unwrap();
        assert_eq!(estimate(Collective::AllReduce, 4 << 10, 8, nvlink).algorithm, Algorithm::Tree);
        assert_eq!(estimate(Collective::AllReduce, 64 << 20, 8, nvlink).algorithm, Algorithm::Ring);
        let threshold = tree_threshold_bytes(8, nvlink);
        assert!((4 << 10..64 << 20).contains(&threshold), "{threshold}");
        assert_eq!(estimate(Collective::AllReduce, threshold, 8, nvlink).algorithm, Algorithm::Ring);
        assert_eq!(estimate(Collective::AllReduce, threshold - 1, 8, nvlink).algorithm, Algorithm::Tree);
    }

    #[test]
    fn a_ring_all_reduce_moves_the_bus_bandwidth_factor() {
        // 2(p-1)/p of the payload per device: 8 devices, 64 MiB → 112 MiB.
        let (steps, bytes) = traffic(Collective::AllReduce, Algorithm::Ring, 64 << 20, 8);
        assert_eq!((steps, bytes), (14, 112 << 20));
        // Large payloads approach S / β · 2(p-1)/p: 112 MiB at 450 GB/s ≈ 261 µs (+ 14 α).
        let cost = estimate(Collective::AllReduce, 64 << 20, 8, link("nvlink4").unwrap());
        assert!((cost.time_us - (14.0 * 3.0 + (112u64 << 20) as f64 / 450e3)).abs() < 1e-6);
    }

    #[test]
    fn one_device_moves_nothing() {
        let cost = estimate(Collective::AllGather, 1 << 20, 1, LINKS[0]);
        assert_eq!((cost.algorithm, cost.bytes_sent, cost.steps), (Algorithm::Local, 0, 0));
    }
}
