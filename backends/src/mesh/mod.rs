//! A simulated device mesh: N logical devices in one process, as JAX simulates host
//! devices. Each device owns its buffers; the collectives move real data between them
//! message by message, with the algorithm the cost model chose (ring or binomial
//! tree), and count the bytes each device sends, so the cost model's figures are
//! checked against an implementation that does not share its code.

pub mod collectives;
pub mod fabric;

pub use collectives::{all_gather, all_reduce, all_reduce_with, all_to_all, reduce_scatter, Element, Network};
pub use fabric::Fabric;

/// A mesh of devices with named axes; ranks are row-major (the last axis varies
/// fastest), as `dist.mesh(axes=("dp", "tp"), shape=(4, 2))` numbers its devices.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Mesh {
    axes: Vec<(String, usize)>,
}

impl Mesh {
    pub fn new<S: AsRef<str>>(axes: &[(S, usize)]) -> Result<Mesh, String> {
        if axes.is_empty() {
            return Err("a mesh needs at least one axis".into());
        }
        let mut seen = std::collections::BTreeSet::new();
        for (name, size) in axes {
            let name = name.as_ref();
            if *size == 0 {
                return Err(format!("mesh axis `{name}` has size 0"));
            }
            if !seen.insert(name.to_string()) {
                return Err(format!("mesh axis `{name}` is named twice"));
            }
        }
        Ok(Mesh { axes: axes.iter().map(|(n, s)| (n.as_ref().to_string(), *s)).collect() })
    }

    /// A one-axis mesh of `devices` devices named `name`.
    pub fn line(name: &str, devices: usize) -> Result<Mesh, String> {
        Mesh::new(&[(name, devices)])
    }

    pub fn devices(&self) -> usize {
        self.axes.iter().map(|(_, s)| s).product()
    }

    pub fn axes(&self) -> &[(String, usize)] {
        &self.axes
    }

    pub fn axis(&self, name: &str) -> Option<usize> {
        self.axes.iter().position(|(n, _)| n == name)
    }

    pub fn axis_size(&self, axis: usize) -> usize {
        self.axes[axis].1
    }

    /// The coordinates of `rank`, one per axis.
    pub fn coords(&self, rank: usize) -> Vec<usize> {
        let mut rest = rank;
        let mut coords = vec![0; self.axes.len()];
        for (i, (_, size)) in self.axes.iter().enumerate().rev() {
            coords[i] = rest % size;
            rest /= size;
        }
        coords
    }

    pub fn rank(&self, coords: &[usize]) -> usize {
        coords.iter().zip(&self.axes).fold(0, |rank, (c, (_, size))| rank * size + c)
    }

    /// The groups a collective over `axis` runs in: devices that differ only in their
    /// coordinate on `axis`, each group in that coordinate's order.
    pub fn groups(&self, axis: usize) -> Vec<Vec<usize>> {
        let mut groups = Vec::new();
        for rank in 0..self.devices() {
            let mut coords = self.coords(rank);
            if coords[axis] != 0 {
                continue;
            }
            let group = (0..self.axes[axis].1)
                .map(|c| {
                    coords[axis] = c;
                    self.rank(&coords)
                })
                .collect();
            groups.push(group);
        }
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_four_by_two_mesh_groups_its_axes() {
        let mesh = Mesh::new(&[("dp", 4), ("tp", 2)]).unwrap();
        assert_eq!(mesh.devices(), 8);
        assert_eq!(mesh.coords(5), vec![2, 1]);
        assert_eq!(mesh.rank(&[2, 1]), 5);
        assert_eq!(mesh.groups(1), vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]]);
        assert_eq!(mesh.groups(0), vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]]);
    }

    #[test]
    fn bad_meshes_are_refused() {
        assert!(Mesh::new(&[("dp", 0)]).is_err());
        assert!(Mesh::new(&[("dp", 2), ("dp", 2)]).is_err());
        assert!(Mesh::new::<&str>(&[]).is_err());
    }
}
