//! The explorer's Mesh view of a sharded graph function: the mesh, each parameter's
//! layout with its global and per-device shape, and each collective Graph IR holds with
//! its bytes and estimated time (`dist`'s answers, as `tessera lower` shows them).

use std::collections::BTreeMap;

use super::Analysis;
use crate::ir::Type;

/// One tensor parameter's layout.
#[derive(Clone, PartialEq, Debug)]
pub struct MeshValue {
    pub name: String,
    pub layout: String,
    pub global: String,
    pub per_device: String,
}

/// One collective of the function.
#[derive(Clone, PartialEq, Debug)]
pub struct MeshCollective {
    /// `all_reduce`, `all_gather`, `reduce_scatter` or `all_to_all`.
    pub kind: String,
    /// Written by the program (`dist.all_reduce(...)`), not implied by the layouts.
    pub explicit: bool,
    pub axis: String,
    /// The values it makes whole or complete.
    pub values: Vec<String>,
    pub bytes: Option<i64>,
    pub algorithm: Option<String>,
    pub time_us: Option<f64>,
    /// The kernels each device runs while it is in flight (the program on the mesh,
    /// `graph_plan::plan_on_mesh`); empty when it overlaps nothing or cannot be planned.
    pub overlaps: Vec<String>,
}

#[derive(Clone, PartialEq, Debug, Default)]
pub struct MeshView {
    pub axes: Vec<(String, usize)>,
    pub values: Vec<MeshValue>,
    pub collectives: Vec<MeshCollective>,
    pub conflicts: Vec<String>,
}

impl Analysis<'_> {
    /// The Mesh view of `function` at `dims` (for the bytes); `None` when it is not a
    /// sharded graph function.
    pub fn mesh_view(&self, function: &str, dims: &BTreeMap<String, i64>) -> Option<MeshView> {
        let f = self.function(function).ok()?;
        let program = crate::dist::function::sharded_program(self.db, f.key, dims).ok()??;
        let func = &program.inserted.func;
        let mesh = &program.mesh;
        let name = |v: crate::ir::ValueId| {
            func.values[v.0 as usize].name.clone().map_or(format!("%{}", v.0), |n| n.to_string())
        };
        let values = func
            .params
            .iter()
            .filter_map(|&v| {
                let Type::Tensor(t) = func.ty(v) else { return None };
                let s = program.propagation.sharding(v)?;
                let (global, per_device) = mesh.shapes(&t.dims, s);
                Some(MeshValue { name: name(v), layout: s.describe(), global, per_device })
            })
            .collect();
        let overlaps = crate::graph_plan::mesh_overlaps(func);
        let collectives = program
            .inserted
            .collectives()
            .into_iter()
            .enumerate()
            .map(|(i, c)| MeshCollective {
                overlaps: overlaps.get(i).cloned().unwrap_or_default(),
                kind: c.kind,
                explicit: c.explicit,
                axis: c.axis,
                values: c.operands.iter().map(|&v| name(v)).collect(),
                bytes: c.bytes,
                algorithm: c.algorithm,
                time_us: c.time_us,
            })
            .collect();
        Some(MeshView {
            axes: mesh.0.iter().map(|(a, s)| (a.to_string(), *s)).collect(),
            values,
            collectives,
            conflicts: program
                .propagation
                .conflicts
                .iter()
                .chain(&program.propagation.misplaced)
                .map(|c| c.message.clone())
                .collect(),
        })
    }
}
