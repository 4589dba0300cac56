//! Thread-block clusters (sm_90): a cluster's programs run together, a round each in
//! turn, and reach into each other's shared memory: `mapa`, remote
//! `mbarrier.arrive.shared::cluster`, TMA multicast (`super::tma`), `barrier.cluster`.
//!
//! Written from the PTX ISA, not from `passes::ptx::cluster`:
//! - `%cluster_ctarank` is x-major: `x + y·X + z·X·Y`.
//! - A `shared::cluster` address from `mapa` names the target program (here: its rank + 1
//!   in bits 24.., above any shared window) and the offset in its window.
//! - What a program does to another (a remote arrival, a multicast box) is delivered
//!   after the round of the program that did it. Delivering into a program that has
//!   exited is an error: on hardware it writes freed shared memory.
//! - `barrier.cluster.arrive` counts per thread; `barrier.cluster.wait` returns once every
//!   thread of the cluster has arrived as often as the waiting one has. A thread that
//!   exits without arriving is never counted.

use super::execute::{Cta, Global, State};
use super::tma::BoxCopy;

/// A program's effect on a program of its cluster (possibly itself), by rank.
pub(crate) enum Remote {
    Arrive { rank: usize, barrier: u64, pc: usize },
    Copy { rank: usize, copy: BoxCopy, pc: usize },
}

const RANK_SHIFT: u32 = 24;

/// Rounds rank 0 runs for each round of its peers.
const LEAD: usize = 4;

/// The `shared::cluster` address of `local` in program `rank`.
fn cluster_address(rank: u64, local: u64) -> u64 {
    ((rank + 1) << RANK_SHIFT) | local
}

/// The program (`None`: the executing one) and local offset of a `shared::cluster`
/// address.
pub(crate) fn split_cluster_address(addr: u64) -> (Option<usize>, u64) {
    match addr >> RANK_SHIFT {
        0 => (None, addr),
        r => (Some(r as usize - 1), addr & ((1 << RANK_SHIFT) - 1)),
    }
}

impl Cta<'_> {
    pub(crate) fn cluster_rank(&self) -> u64 {
        let [x, y, z] = self.cluster_pos;
        let [dx, dy, _] = self.cluster_dims;
        x + y * dx + z * dx * dy
    }

    pub(crate) fn cluster_size(&self) -> u64 {
        self.cluster_dims.iter().product()
    }

    /// `mapa.shared::cluster.u32 d, a, rank`.
    pub(crate) fn mapa(&mut self, t: usize, pc: usize) -> Result<(), String> {
        let (a, rank) = (self.src(t, pc, 1)?, self.src(t, pc, 2)?);
        if rank >= self.cluster_size() {
            return Err(self.err(pc, format!("mapa to rank {rank} of a cluster of {}", self.cluster_size())));
        }
        if a >= self.smem.len() as u64 {
            return Err(self.err(pc, format!("mapa of shared address {a}, past {} bytes", self.smem.len())));
        }
        let d = self.dst(pc, 0)?;
        self.set(t, d, cluster_address(rank, a));
        Ok(())
    }

    /// `barrier.cluster.arrive[.sem][.aligned]` and `barrier.cluster.wait[.acquire][.aligned]`
    /// for thread `t`; returns its next pc (a waiting thread stays, see `run_cluster`).
    pub(crate) fn cluster_barrier(&mut self, t: usize, pc: usize, op: &[&str]) -> Result<usize, String> {
        match op.get(2) {
            Some(&"arrive") => {
                self.threads[t].cluster_arrivals += 1;
                Ok(pc + 1)
            }
            Some(&"wait") => {
                self.threads[t].state = State::ClusterWait;
                Ok(pc)
            }
            other => Err(self.err(pc, format!("barrier.cluster.{other:?} is not emulated"))),
        }
    }

    fn exited(&self) -> bool {
        self.threads.iter().all(|t| t.state == State::Done)
    }
}

/// Runs one cluster's programs (in rank order) to their end; `global` is the grid's
/// memory.
///
/// The programs run at different speeds: rank 0 takes [`LEAD`] rounds for each of the
/// others', so it runs ahead wherever the protocol lets it (and a program that may exit
/// before its peers are done with it does).
pub(crate) fn run_cluster(ctas: &mut [Cta], global: &mut Global) -> Result<(), String> {
    let name = |c: &Cta| format!("program ({}, {}, {})", c.ctaid[0], c.ctaid[1], c.ctaid[2]);
    loop {
        let mut progressed = false;
        let size = ctas.len();
        let lead = if size > 1 { LEAD } else { 1 };
        for i in (0..size).flat_map(|i| std::iter::repeat_n(i, if i == 0 { lead } else { 1 })) {
            std::mem::swap(&mut ctas[i].global, global);
            let stepped = ctas[i].round();
            std::mem::swap(&mut ctas[i].global, global);
            progressed |= stepped.map_err(|e| format!("{}: {e}", name(&ctas[i])))?;
            for remote in std::mem::take(&mut ctas[i].outbox) {
                let (rank, pc) = match &remote {
                    Remote::Arrive { rank, pc, .. } | Remote::Copy { rank, pc, .. } => (*rank, *pc),
                };
                let Some(target) = ctas.get(rank) else {
                    return Err(format!("{}: a remote access to rank {rank} outside the cluster", name(&ctas[i])));
                };
                if target.exited() {
                    let what = if matches!(remote, Remote::Arrive { .. }) { "arrives on" } else { "multicasts into" };
                    return Err(format!(
                        "{}: {}",
                        name(&ctas[i]),
                        ctas[i].err(pc, format!("{what} {}, which has exited", name(target)))
                    ));
                }
                let target = &mut ctas[rank];
                let delivered = match remote {
                    Remote::Arrive { barrier, pc, .. } => target.arrive_on(pc, barrier),
                    Remote::Copy { copy, pc, .. } => target.receive_copy(pc, copy),
                };
                delivered.map_err(|e| format!("{} (from {}): {e}", name(&ctas[rank]), name(&ctas[i])))?;
            }
        }
        // The cluster barrier: a waiting thread goes on once every thread has arrived as
        // often as it has.
        let fewest = ctas.iter().flat_map(|c| c.threads.iter().map(|t| t.cluster_arrivals)).min().unwrap_or(0);
        for c in ctas.iter_mut() {
            for t in c.threads.iter_mut().filter(|t| t.state == State::ClusterWait) {
                if t.cluster_arrivals <= fewest {
                    t.state = State::Run;
                    t.pc += 1;
                    progressed = true;
                }
            }
        }
        if progressed {
            continue;
        }
        for c in ctas.iter() {
            if let Some(t) = c.threads.iter().position(|t| t.state == State::ClusterWait) {
                let short: usize = ctas
                    .iter()
                    .map(|o| o.threads.iter().filter(|u| u.cluster_arrivals < c.threads[t].cluster_arrivals).count())
                    .sum();
                return Err(format!(
                    "{}: thread {t} waits at the cluster barrier (PTX line {}) that {short} threads of the cluster \
                     never reach",
                    name(c),
                    c.m.code[c.threads[t].pc].line
                ));
            }
        }
        for c in ctas.iter() {
            c.stalled().map_err(|e| format!("{}: {e}", name(c)))?;
        }
        return Ok(());
    }
}
