//! A mesh across processes: one process per device, as `torchrun` starts them. Each
//! process holds one rank's buffers, runs the same program, and the collectives'
//! messages (the same ring and tree steps as on the simulated mesh, `collectives.rs`)
//! cross process boundaries through a [`Fabric`].
//!
//! Every step is a symmetric exchange: each process sends one frame to every other
//! process (the parcels addressed to that process's rank, possibly none) and receives
//! one frame from each. All processes run the same program, so they take the same steps
//! in the same order, and a step never waits for a message nobody sends.
//!
//! Two links carry the frames:
//! - TCP ([`tcp`]), for processes on CPUs (and as the rendezvous for NCCL);
//! - NCCL point-to-point `ncclSend`/`ncclRecv` between GPUs (`crate::nccl`, feature
//!   `nccl`).

pub mod tcp;

use std::sync::{Arc, Mutex};

/// One message of a collective step: chunk `chunk` of rank `to`'s buffer, from `from`.
#[derive(Clone, PartialEq, Debug)]
pub struct Parcel {
    pub from: usize,
    pub to: usize,
    pub chunk: usize,
    pub data: Vec<f64>,
}

/// What carries frames between the processes of a mesh.
pub trait Link: Send {
    /// Sends `frames[peer]` to every other process and returns the frame each one sent
    /// to this one (this process's own entry is empty in both).
    fn swap(&mut self, frames: Vec<Vec<f64>>) -> Result<Vec<Vec<f64>>, String>;
}

/// This process's place in a mesh of processes and the link to the others. Cloning
/// shares the link.
#[derive(Clone)]
pub struct Fabric {
    rank: usize,
    world: usize,
    name: &'static str,
    link: Arc<Mutex<Box<dyn Link>>>,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fabric({}, rank {} of {})", self.name, self.rank, self.world)
    }
}

impl PartialEq for Fabric {
    fn eq(&self, other: &Fabric) -> bool {
        Arc::ptr_eq(&self.link, &other.link)
    }
}

impl Eq for Fabric {}

impl Fabric {
    pub fn new(rank: usize, world: usize, name: &'static str, link: Box<dyn Link>) -> Fabric {
        Fabric { rank, world, name, link: Arc::new(Mutex::new(link)) }
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world(&self) -> usize {
        self.world
    }

    /// What carries the frames: "TCP" or "NCCL".
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether this process holds `rank`'s buffers.
    pub fn holds(&self, rank: usize) -> bool {
        rank == self.rank
    }

    /// One step: sends `outgoing` (parcels from this process's rank) and returns every
    /// parcel addressed to it, its own first, then the others' in rank order.
    pub fn exchange(&self, outgoing: Vec<Parcel>) -> Result<Vec<Parcel>, String> {
        let mut frames: Vec<Vec<f64>> = vec![Vec::new(); self.world];
        let mut mine = Vec::new();
        for p in outgoing {
            if p.to >= self.world {
                return Err(format!("a message for rank {} of a mesh of {}", p.to, self.world));
            }
            if p.to == self.rank {
                mine.push(p);
            } else {
                encode(&mut frames[p.to], &p);
            }
        }
        let received = self.swap(frames)?;
        for (peer, frame) in received.iter().enumerate() {
            if peer != self.rank {
                mine.extend(decode(frame).map_err(|e| format!("rank {peer} sent a bad frame: {e}"))?);
            }
        }
        Ok(mine)
    }

    /// Every rank's `data`, in rank order (a gather to every process).
    pub fn all_gather(&self, data: Vec<f64>) -> Result<Vec<Vec<f64>>, String> {
        let mut frames = vec![data.clone(); self.world];
        frames[self.rank].clear();
        let mut received = self.swap(frames)?;
        received[self.rank] = data;
        Ok(received)
    }

    fn swap(&self, frames: Vec<Vec<f64>>) -> Result<Vec<Vec<f64>>, String> {
        let mut link = self.link.lock().map_err(|_| "the fabric's link was poisoned by a panic".to_string())?;
        let received = link.swap(frames)?;
        if received.len() != self.world {
            return Err(format!("the link returned {} frames for {} processes", received.len(), self.world));
        }
        Ok(received)
    }
}

/// A frame is a flat list of f64: per parcel `from, to, chunk, len` and then `len`
/// values (indices are exact in f64 far beyond any mesh or buffer).
fn encode(frame: &mut Vec<f64>, p: &Parcel) {
    frame.extend([p.from as f64, p.to as f64, p.chunk as f64, p.data.len() as f64]);
    frame.extend_from_slice(&p.data);
}

fn decode(frame: &[f64]) -> Result<Vec<Parcel>, String> {
    let mut out = Vec::new();
    let mut rest = frame;
    while !rest.is_empty() {
        let [from, to, chunk, len] = match rest.get(..4) {
            Some(&[a, b, c, d]) => [a, b, c, d],
            _ => return Err(format!("{} values left where a header of 4 belongs", rest.len())),
        };
        let index = |x: f64| (x >= 0.0 && x.fract() == 0.0 && x < 2f64.powi(52)).then_some(x as usize);
        let (Some(from), Some(to), Some(chunk), Some(len)) = (index(from), index(to), index(chunk), index(len)) else {
            return Err("a header that is not four indices".into());
        };
        let data = rest.get(4..4 + len).ok_or_else(|| format!("a parcel of {len} values in a shorter frame"))?;
        out.push(Parcel { from, to, chunk, data: data.to_vec() });
        rest = &rest[4 + len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_bad_ones_are_refused() {
        let parcels = vec![
            Parcel { from: 3, to: 1, chunk: 2, data: vec![1.5, -0.0, f64::INFINITY] },
            Parcel { from: 3, to: 1, chunk: 0, data: vec![] },
        ];
        let mut frame = Vec::new();
        parcels.iter().for_each(|p| encode(&mut frame, p));
        assert_eq!(decode(&frame).unwrap(), parcels);
        assert!(decode(&frame[..frame.len() - 5]).is_err());
        assert!(decode(&[1.0, 2.0, 0.5, 0.0]).is_err());
    }
}
