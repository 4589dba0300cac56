//! Distribution: the device mesh's cost model for collectives. Sharding propagation
//! and the collectives' place in Graph IR build on it (see `docs/mesh.md`).

pub mod cost;
