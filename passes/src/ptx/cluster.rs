//! Thread-block clusters and TMA multicast (`cluster=(x, y)`; the rule and the Tile IR
//! marks are `crate::cluster`'s).
//!
//! ```text
//! .reqnctapercluster X, Y, 1
//!     init the rings (each empty barrier counts the consumer warps of the whole cluster)
//!     barrier.cluster.arrive.release + wait.acquire   // every peer's barriers exist before
//!                                                     // anyone multicasts into them
//!     producer: per multicast copy, its slice of the box's rows, into every program in
//!               the copy's mask (same slot, same full barrier); waits for empty slots
//!               that the peers' consumers release too
//!     consumers: a release is lane r < X·Y of each warp arriving at program r's empty
//!                barrier (mapa + mbarrier.arrive.shared::cluster)
//!     before exiting, every thread arrives at the cluster barrier, and the consumers
//!     wait there: no program leaves while a peer may still arrive on its barriers
//! ```
//!
//! Ranks in the cluster are x-major (`%cluster_ctarank = x + y·X`, as CUTLASS's cluster
//! layout), and a copy shared along `x` goes to the `X` programs of the issuer's row.

use std::collections::HashMap;

use super::builder::{Builder, Class, Reg};
use super::emit::Emitter;

/// The cluster state of a kernel with `cluster=(x, y)`.
pub(crate) struct Cluster {
    shape: [i64; 2],
    /// Per set of multicast axes: this program's slice index and the `.b16` mask of the
    /// programs that share the copy.
    multicast: HashMap<Vec<usize>, (Reg, Reg)>,
    /// The lanes that signal releases (`lane < X·Y`) and their lane id, the rank they
    /// signal.
    signaller: Option<(Reg, Reg)>,
}

impl Cluster {
    pub(crate) fn of(f: &crate::ir::Func) -> Option<Cluster> {
        let [x, y, _] = crate::cluster::cluster_shape(f);
        (x * y > 1).then(|| Cluster { shape: [x, y], multicast: HashMap::new(), signaller: None })
    }

    pub(crate) fn size(&self) -> i64 {
        self.shape[0] * self.shape[1]
    }

    /// The entry's `.reqnctapercluster` line.
    pub(crate) fn directive(&self) -> String {
        format!(".reqnctapercluster {}, {}, 1", self.shape[0], self.shape[1])
    }
}

/// Every thread of the cluster arrives and waits: what each had written to shared
/// memory (its mbarrier initializations) is visible to the whole cluster after it.
pub(crate) fn cluster_sync(b: &mut Builder) {
    b.ins("barrier.cluster.arrive.release.aligned");
    b.ins("barrier.cluster.wait.acquire.aligned");
}

impl Emitter<'_> {
    pub(super) fn cluster_size(&self) -> i64 {
        self.cluster.as_ref().map_or(1, Cluster::size)
    }

    /// The slice index and the mask of programs of a copy multicast along `axes`
    /// (computed once, in the prologue).
    pub(super) fn multicast_of(&mut self, axes: &[usize]) -> Option<(Reg, Reg)> {
        let cluster = self.cluster.as_ref()?;
        if let Some(&found) = cluster.multicast.get(axes) {
            return Some(found);
        }
        let [x, y] = cluster.shape;
        let along_x = axes.contains(&0);
        let along_y = axes.contains(&1);
        let regs = self.b.in_prologue(|b| {
            let (cx, cy, slice, wide, mask) =
                (b.reg(Class::B32), b.reg(Class::B32), b.reg(Class::B32), b.reg(Class::B32), b.reg(Class::B16));
            b.ins(format!("mov.u32 {cx}, %cluster_ctaid.x"));
            b.ins(format!("mov.u32 {cy}, %cluster_ctaid.y"));
            match (along_x, along_y) {
                // The X programs of this row: ranks y·X .. y·X + X.
                (true, false) => {
                    b.ins(format!("mov.u32 {slice}, {cx}"));
                    b.ins(format!("mul.lo.u32 {wide}, {cy}, {x}"));
                    b.ins(format!("shl.b32 {wide}, {}, {wide}", (1u32 << x) - 1));
                }
                // The Y programs of this column: ranks x, x + X, x + 2X, ...
                (false, true) => {
                    let column: u32 = (0..y).map(|j| 1u32 << (j * x)).sum();
                    b.ins(format!("mov.u32 {slice}, {cy}"));
                    b.ins(format!("shl.b32 {wide}, {column}, {cx}"));
                }
                _ => {
                    b.ins(format!("mad.lo.u32 {slice}, {cy}, {x}, {cx}"));
                    b.ins(format!("mov.u32 {wide}, {}", (1u32 << (x * y)) - 1));
                }
            }
            b.ins(format!("cvt.u16.u32 {mask}, {wide}"));
            (slice, mask)
        });
        self.cluster.as_mut()?.multicast.insert(axes.to_vec(), regs);
        Some(regs)
    }

    /// A consumer release under a cluster: lane `r < X·Y` of each warp arrives at the
    /// empty barrier at `empty` (a shared address of this program) in program `r`.
    /// The warp's lanes are done with the slot: the release follows a `wgmma.wait_group`
    /// every lane ran, and `bar.warp.sync` orders their part before the signalling lane's.
    pub(super) fn release_in_cluster(&mut self, empty: Reg) {
        let Some(size) = self.cluster.as_ref().map(Cluster::size) else { return };
        let (signal, lane) = match self.cluster.as_ref().and_then(|c| c.signaller) {
            Some(s) => s,
            None => {
                let s = self.b.in_prologue(|b| {
                    let (lane, signal) = (b.reg(Class::B32), b.reg(Class::Pred));
                    b.ins(format!("mov.u32 {lane}, %laneid"));
                    b.ins(format!("setp.lt.u32 {signal}, {lane}, {size}"));
                    (signal, lane)
                });
                if let Some(c) = self.cluster.as_mut() {
                    c.signaller = Some(s);
                }
                s
            }
        };
        let remote = self.b.reg(Class::B32);
        self.b.ins("bar.warp.sync -1");
        self.b.ins_if(signal, false, format!("mapa.shared::cluster.u32 {remote}, {empty}, {lane}"));
        // The default `.release.cta`, as CUTLASS's `ClusterBarrier::arrive(cta_id)`: the
        // lanes' reads are complete (their `wgmma.wait_group`), and `.release.cluster`
        // would cost a GPU-wide `MEMBAR` per release in the main loop.
        self.b.ins_if(signal, false, format!("mbarrier.arrive.shared::cluster.b64 _, [{remote}]"));
    }

    /// Before a program's threads exit: each arrives at the cluster barrier, and the
    /// consumers (`wait`) stay until every thread of the cluster has, so no peer still
    /// signals this program's barriers or writes its slots.
    pub(super) fn leave_cluster(&mut self, wait: bool) {
        if self.cluster.is_none() {
            return;
        }
        // Not `.aligned`: the producer's leader arrives after the rest of its warp.
        self.b.ins("barrier.cluster.arrive.release");
        if wait {
            self.b.ins("barrier.cluster.wait.acquire");
        }
    }
}
