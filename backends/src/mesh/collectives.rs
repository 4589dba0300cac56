//! Collectives on the simulated mesh. Buffers are indexed by rank; a collective over a
//! mesh axis runs in every group of that axis at once. Every transfer is a message:
//! copied out of the sender's buffer, then delivered, one step at a time, so a step's
//! sends all read the state before the step, as on real links.
//!
//! - all-reduce, ring: a reduce-scatter then an all-gather, 2(p−1) steps of one chunk;
//! - all-reduce, tree: a binomial reduce to the group's first device, then a binomial
//!   broadcast from it, 2⌈log₂ p⌉ steps of the whole buffer;
//! - all-gather, reduce-scatter: the ring halves, p−1 steps;
//! - all-to-all: pairwise exchange, p−1 steps (step s: position i sends to i+s).
//!
//! Chunks split a buffer by elements, the first `len % p` one element longer. Every
//! device of a group ends with bitwise the same all-reduce result: each element is
//! summed once, in one order, and then copied.

use tessera_passes::dist::cost::Algorithm;

use super::fabric::{Fabric, Parcel};
use super::Mesh;

/// What a collective can move and add.
pub trait Element: Copy + Default + std::ops::Add<Output = Self> {
    const BYTES: u64;
    /// Exactly, for a [`Fabric`]'s frames.
    fn to_f64(self) -> f64;
    fn from_f64(x: f64) -> Self;
}

impl Element for f32 {
    const BYTES: u64 = 4;
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_f64(x: f64) -> f32 {
        x as f32
    }
}

impl Element for f64 {
    const BYTES: u64 = 8;
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(x: f64) -> f64 {
        x
    }
}

/// What the collectives moved: bytes sent per rank and sequential steps. With a
/// fabric, this process holds one rank's buffers (the others' are empty), its messages
/// to other ranks cross the fabric, and only its own sends are counted.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Network {
    pub sent: Vec<u64>,
    pub steps: u32,
    pub fabric: Option<Fabric>,
}

impl Network {
    pub fn new(devices: usize) -> Network {
        Network { sent: vec![0; devices], steps: 0, fabric: None }
    }

    pub fn over(devices: usize, fabric: Option<Fabric>) -> Network {
        Network { sent: vec![0; devices], steps: 0, fabric }
    }

    /// Whether this process holds `rank`'s buffers.
    pub fn holds(&self, rank: usize) -> bool {
        self.fabric.as_ref().is_none_or(|f| f.holds(rank))
    }

    pub fn busiest(&self) -> u64 {
        self.sent.iter().copied().max().unwrap_or(0)
    }
}

/// One message for rank `to`: the elements of chunk `chunk` (or a whole buffer).
struct Message<T> {
    to: usize,
    chunk: usize,
    data: Vec<T>,
}

/// The element range of chunk `c` of `len` elements split `p` ways.
fn chunk(len: usize, p: usize, c: usize) -> std::ops::Range<usize> {
    let (base, extra) = (len / p, len % p);
    let start = c * base + c.min(extra);
    start..start + base + usize::from(c < extra)
}

/// One step in every group: every message is built from the buffers as they were
/// before the step, counted against its sender, then delivered. With a fabric, only
/// this process's rank sends, and every process takes part in every step.
fn step<T: Element>(
    bufs: &mut [Vec<T>],
    net: &mut Network,
    sends: impl Fn(&[Vec<T>], &mut dyn FnMut(usize, Message<T>)),
    mut deliver: impl FnMut(&mut Vec<T>, usize, Vec<T>),
) -> Result<(), String> {
    let mut messages = Vec::new();
    sends(bufs, &mut |from, m: Message<T>| {
        debug_assert_ne!(from, m.to);
        if !net.holds(from) {
            return;
        }
        net.sent[from] += m.data.len() as u64 * T::BYTES;
        messages.push((from, m));
    });
    // Across processes, a step counts where this rank sends or receives.
    let took_part = !messages.is_empty();
    if let Some(fabric) = &net.fabric {
        let parcels = messages
            .into_iter()
            .map(|(from, m)| Parcel {
                from,
                to: m.to,
                chunk: m.chunk,
                data: m.data.iter().map(|x| x.to_f64()).collect(),
            })
            .collect();
        let arrived = fabric.exchange(parcels)?;
        messages = arrived
            .into_iter()
            .map(|p| {
                (p.from, Message { to: p.to, chunk: p.chunk, data: p.data.into_iter().map(T::from_f64).collect() })
            })
            .collect();
    }
    if !took_part && messages.is_empty() {
        return Ok(());
    }
    net.steps += 1;
    for (_, m) in messages {
        deliver(&mut bufs[m.to], m.chunk, m.data);
    }
    Ok(())
}

fn check_devices<T>(bufs: &[Vec<T>], mesh: &Mesh, net: &Network) -> Result<(), String> {
    if bufs.len() != mesh.devices() || net.sent.len() != mesh.devices() {
        return Err(format!("{} buffers for a mesh of {} devices", bufs.len(), mesh.devices()));
    }
    Ok(())
}

/// The groups of `axis`, after checking that each group's buffers have one length.
fn groups_of<T>(
    bufs: &[Vec<T>],
    mesh: &Mesh,
    axis: usize,
    net: &Network,
    what: &str,
) -> Result<Vec<Vec<usize>>, String> {
    let groups = mesh.groups(axis);
    for g in &groups {
        let held: Vec<usize> = g.iter().copied().filter(|&r| net.holds(r)).collect();
        let Some(&first) = held.first() else { continue };
        let len = bufs[first].len();
        if let Some(&r) = held.iter().find(|&&r| bufs[r].len() != len) {
            return Err(format!("{what}: device {r} holds {} elements, device {first} holds {len}", bufs[r].len()));
        }
    }
    Ok(groups)
}

/// Sums each group's buffers into every buffer of the group.
pub fn all_reduce<T: Element>(
    bufs: &mut [Vec<T>],
    mesh: &Mesh,
    axis: usize,
    algorithm: Algorithm,
    net: &mut Network,
) -> Result<(), String> {
    all_reduce_with(bufs, mesh, axis, algorithm, net, |a, b| a + b)
}

/// [`all_reduce`] with another combining function (max, min), applied in the same
/// order as the sum.
pub fn all_reduce_with<T: Element>(
    bufs: &mut [Vec<T>],
    mesh: &Mesh,
    axis: usize,
    algorithm: Algorithm,
    net: &mut Network,
    combine: impl Fn(T, T) -> T + Copy,
) -> Result<(), String> {
    check_devices(bufs, mesh, net)?;
    let groups = groups_of(bufs, mesh, axis, net, "all_reduce")?;
    let p = mesh.axis_size(axis);
    match algorithm {
        _ if p == 1 => {}
        Algorithm::Local => return Err(format!("a local all_reduce over an axis of {p} devices")),
        Algorithm::Pairwise | Algorithm::PointToPoint => {
            return Err(format!("all_reduce has no {} algorithm", algorithm.name()))
        }
        Algorithm::Ring => {
            ring_reduce_scatter(bufs, &groups, net, combine)?;
            ring_all_gather(bufs, &groups, net)?;
        }
        Algorithm::Tree => {
            let depth = usize::BITS - (p - 1).leading_zeros();
            // Reduce: at level k, position i (bit k set, lower bits clear) sends its
            // partial sum to position i - 2^k.
            for k in 0..depth {
                let mask = 1usize << k;
                let sends = |bufs: &[Vec<T>], send: &mut dyn FnMut(usize, Message<T>)| {
                    for g in &groups {
                        for (i, &r) in g.iter().enumerate() {
                            if i & ((mask << 1) - 1) == mask {
                                send(r, Message { to: g[i - mask], chunk: 0, data: bufs[r].clone() });
                            }
                        }
                    }
                };
                step(bufs, net, sends, |buf, _, data| buf.iter_mut().zip(data).for_each(|(a, b)| *a = combine(*a, b)))?;
            }
            // Broadcast, the same tree top-down.
            for k in (0..depth).rev() {
                let mask = 1usize << k;
                let sends = |bufs: &[Vec<T>], send: &mut dyn FnMut(usize, Message<T>)| {
                    for g in &groups {
                        for (i, &r) in g.iter().enumerate() {
                            if i & ((mask << 1) - 1) == 0 && i + mask < p {
                                send(r, Message { to: g[i + mask], chunk: 0, data: bufs[r].clone() });
                            }
                        }
                    }
                };
                step(bufs, net, sends, |buf, _, data| *buf = data)?;
            }
        }
    }
    Ok(())
}

/// Ring reduce-scatter in place: at step s position i sends chunk i−1−s to position
/// i+1, which adds it to its own copy; after p−1 steps position i holds the whole sum
/// of chunk i (its other chunks hold partial sums).
fn ring_reduce_scatter<T: Element>(
    bufs: &mut [Vec<T>],
    groups: &[Vec<usize>],
    net: &mut Network,
    combine: impl Fn(T, T) -> T + Copy,
) -> Result<(), String> {
    let p = groups[0].len();
    for s in 0..p - 1 {
        let sends = |bufs: &[Vec<T>], send: &mut dyn FnMut(usize, Message<T>)| {
            for g in groups {
                for (i, &r) in g.iter().enumerate() {
                    let c = (i + 2 * p - 1 - s) % p;
                    let data = bufs[r][chunk(bufs[r].len(), p, c)].to_vec();
                    send(r, Message { to: g[(i + 1) % p], chunk: c, data });
                }
            }
        };
        step(bufs, net, sends, |buf, c, data| {
            let range = chunk(buf.len(), p, c);
            buf[range].iter_mut().zip(data).for_each(|(a, b)| *a = combine(*a, b));
        })?;
    }
    Ok(())
}

/// Ring all-gather in place, when position i owns chunk i: at step s position i sends
/// chunk i−s to position i+1, which overwrites its copy.
fn ring_all_gather<T: Element>(bufs: &mut [Vec<T>], groups: &[Vec<usize>], net: &mut Network) -> Result<(), String> {
    let p = groups[0].len();
    for s in 0..p - 1 {
        let sends = |bufs: &[Vec<T>], send: &mut dyn FnMut(usize, Message<T>)| {
            for g in groups {
                for (i, &r) in g.iter().enumerate() {
                    let c = (i + p - s) % p;
                    let data = bufs[r][chunk(bufs[r].len(), p, c)].to_vec();
                    send(r, Message { to: g[(i + 1) % p], chunk: c, data });
                }
            }
        };
        step(bufs, net, sends, |buf, c, data| {
            let range = chunk(buf.len(), p, c);
            buf[range].copy_from_slice(&data);
        })?;
    }
    Ok(())
}

/// Concatenates each group's buffers, in group order, into every buffer of the group.
pub fn all_gather<T: Element>(bufs: &mut [Vec<T>], mesh: &Mesh, axis: usize, net: &mut Network) -> Result<(), String> {
    check_devices(bufs, mesh, net)?;
    let groups = groups_of(bufs, mesh, axis, net, "all_gather")?;
    let p = mesh.axis_size(axis);
    for g in &groups {
        for (i, &r) in g.iter().enumerate() {
            let shard = std::mem::take(&mut bufs[r]);
            let mut full = vec![T::default(); shard.len() * p];
            full[i * shard.len()..(i + 1) * shard.len()].copy_from_slice(&shard);
            bufs[r] = full;
        }
    }
    if p > 1 {
        ring_all_gather(bufs, &groups, net)?;
    }
    Ok(())
}

/// Sums each group's buffers and leaves chunk i of the sum at position i.
pub fn reduce_scatter<T: Element>(
    bufs: &mut [Vec<T>],
    mesh: &Mesh,
    axis: usize,
    net: &mut Network,
) -> Result<(), String> {
    check_devices(bufs, mesh, net)?;
    let groups = groups_of(bufs, mesh, axis, net, "reduce_scatter")?;
    let p = mesh.axis_size(axis);
    if p > 1 {
        ring_reduce_scatter(bufs, &groups, net, |a, b| a + b)?;
    }
    for g in &groups {
        for (i, &r) in g.iter().enumerate() {
            let range = chunk(bufs[r].len(), p, i);
            bufs[r] = bufs[r][range].to_vec();
        }
    }
    Ok(())
}

/// Chunk j of position i's buffer becomes chunk i of position j's (pairwise exchange:
/// at step s position i sends to position i+s). Buffers must split evenly.
pub fn all_to_all<T: Element>(bufs: &mut [Vec<T>], mesh: &Mesh, axis: usize, net: &mut Network) -> Result<(), String> {
    check_devices(bufs, mesh, net)?;
    let groups = groups_of(bufs, mesh, axis, net, "all_to_all")?;
    let p = mesh.axis_size(axis);
    if let Some(&r) = groups.iter().flatten().find(|&&r| net.holds(r) && !bufs[r].len().is_multiple_of(p)) {
        return Err(format!("all_to_all: {} elements do not split into {p} equal chunks", bufs[r].len()));
    }
    let inputs: Vec<Vec<T>> = bufs.to_vec();
    for s in 1..p {
        let sends = |_: &[Vec<T>], send: &mut dyn FnMut(usize, Message<T>)| {
            for g in &groups {
                for (i, &r) in g.iter().enumerate() {
                    let j = (i + s) % p;
                    let data = inputs[r][chunk(inputs[r].len(), p, j)].to_vec();
                    send(r, Message { to: g[j], chunk: i, data });
                }
            }
        };
        step(bufs, net, sends, |buf, c, data| {
            let range = chunk(buf.len(), p, c);
            buf[range].copy_from_slice(&data);
        })?;
    }
    Ok(())
}
