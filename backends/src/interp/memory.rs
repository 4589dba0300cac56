//! Global memory shared by all tile programs, and each program's shared memory with the
//! bookkeeping that finds asynchronous-copy and barrier mistakes.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use tessera_passes::ir::OpId;

use crate::tensor::HostTensor;

/// A tensor argument during a run: each element's exact value as f64 bits (every value
/// of every dtype is exact in f64, integers up to 2^53), in atomics so that programs can
/// run on several threads without data races in the interpreter itself.
pub(crate) struct GlobalTensor {
    pub dims: Vec<i64>,
    pub strides: Vec<i64>,
    pub data: Vec<AtomicU64>,
    /// For tensors that `tile.store` writes: 1 + the linear id of the program that last
    /// stored each element (0: none), to find two programs storing the same element.
    pub owner: Option<Vec<AtomicU32>>,
}

impl GlobalTensor {
    pub fn new(t: &HostTensor, track_owner: bool) -> GlobalTensor {
        let dims: Vec<i64> = t.dims.iter().map(|&d| d as i64).collect();
        let mut strides = vec![1i64; dims.len()];
        for d in (0..dims.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * dims[d + 1];
        }
        let data = (0..t.numel()).map(|i| AtomicU64::new(t.get(i).to_bits())).collect();
        let owner = track_owner.then(|| (0..t.numel()).map(|_| AtomicU32::new(0)).collect());
        GlobalTensor { dims, strides, data, owner }
    }

    #[inline]
    pub fn get(&self, i: usize) -> f64 {
        f64::from_bits(self.data[i].load(Ordering::Relaxed))
    }

    #[inline]
    pub fn set(&self, i: usize, v: f64) {
        self.data[i].store(v.to_bits(), Ordering::Relaxed)
    }

    /// Replaces element `i` by `f` of it in one atomic step (`tile.atomic_add`).
    #[inline]
    pub fn add(&self, i: usize, f: impl Fn(f64) -> f64) {
        let _ = self.data[i]
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| Some(f(f64::from_bits(bits)).to_bits()));
    }

    pub fn write_back(&self, t: &mut HostTensor) {
        for i in 0..self.data.len() {
            t.set(i, self.get(i));
        }
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Which elements some program stored (`None` when stores are not tracked).
    pub fn stored_mask(&self) -> Option<Vec<bool>> {
        self.owner.as_ref().map(|o| o.iter().map(|x| x.load(Ordering::Relaxed) != 0).collect())
    }
}

/// The rows of a view's window: for each row of the view (all view dims but the last,
/// row-major), `f(first output element, tensor index of column 0, lo, hi)` where columns
/// `lo..hi` are inside the tensor; column `c` is tensor element `start + c * col_stride`.
pub(crate) struct Window<'a> {
    pub dims: &'a [i64],
    pub strides: &'a [i64],
    pub offsets: &'a [i64],
    pub sizes: &'a [i64],
    pub kept: &'a [usize],
}

impl Window<'_> {
    /// Returns `(row length, column stride)`.
    pub fn rows(&self, mut f: impl FnMut(usize, i64, usize, usize)) -> (usize, i64) {
        let rank = self.dims.len();
        let inside = |d: usize, c: i64| c >= 0 && c < self.dims[d];
        // A squeezed (size-1, dropped) dim outside the tensor empties the whole window.
        let squeezed_inside = (0..rank).filter(|d| !self.kept.contains(d)).all(|d| inside(d, self.offsets[d]));
        let Some((&last, outer)) = self.kept.split_last() else {
            // A window of one element.
            let start: i64 = (0..rank).map(|d| self.offsets[d] * self.strides[d]).sum();
            f(0, start, 0, usize::from(squeezed_inside));
            return (1, 1);
        };
        let row_len = self.sizes[last].max(0) as usize;
        let off = self.offsets[last];
        let lo = (-off).clamp(0, row_len as i64) as usize;
        let hi = (self.dims[last] - off).clamp(lo as i64, row_len as i64) as usize;
        let n_rows: usize = outer.iter().map(|&d| self.sizes[d].max(0) as usize).product();
        let mut coord = vec![0i64; outer.len()];
        for row in 0..n_rows {
            let mut valid = squeezed_inside;
            let mut start = 0i64;
            for d in 0..rank {
                let c = match outer.iter().position(|&o| o == d) {
                    Some(p) => self.offsets[d] + coord[p],
                    None => self.offsets[d],
                };
                if d != last && !inside(d, c) {
                    valid = false;
                }
                start += c * self.strides[d];
            }
            if valid {
                f(row * row_len, start, lo, hi);
            } else {
                f(row * row_len, start, 0, 0);
            }
            // Next row: odometer over the outer kept dims.
            for p in (0..outer.len()).rev() {
                coord[p] += 1;
                if coord[p] < self.sizes[outer[p]] {
                    break;
                }
                coord[p] = 0;
            }
        }
        (row_len, self.strides[last])
    }
}

/// What the program knows about one slot of a shared buffer.
#[derive(Clone, Debug, Default)]
pub(crate) struct SlotState {
    pub written: bool,
    /// The group of the last `tile.cp_async` into the slot and the op, while its
    /// completion matters (cleared by a `tile.store_shared`).
    pub copy: Option<(u64, OpId)>,
    /// The barrier epoch of the last `tile.store_shared` into the slot.
    pub store_epoch: Option<u64>,
    /// The barrier epoch and op of the last `tile.load_shared` of the slot.
    pub read: Option<(u64, OpId)>,
}

pub(crate) struct SmemBuf {
    pub slot_len: usize,
    pub data: Vec<f64>,
    pub slots: Vec<SlotState>,
}

/// A program's asynchronous copy groups (`cp.async.commit_group`/`wait_group`).
#[derive(Default)]
pub(crate) struct AsyncGroups {
    /// Groups committed so far; copies issued now join group `committed`.
    pub committed: u64,
    /// Groups `0..completed` are complete.
    pub completed: u64,
    /// The barrier epoch at which each completed group was waited for.
    pub done_epoch: Vec<u64>,
}

impl AsyncGroups {
    pub fn commit(&mut self) {
        self.committed += 1;
    }

    pub fn wait(&mut self, pending: u64, epoch: u64) {
        let target = self.committed.saturating_sub(pending);
        while self.completed < target {
            self.done_epoch.push(epoch);
            self.completed += 1;
        }
    }
}
