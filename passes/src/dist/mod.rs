//! Distribution: sharding propagation over Graph IR (`propagate`), the collectives it
//! implies put into Graph IR as effects (`insert`), and the device mesh's cost model
//! for them (`cost`), and a pipeline's schedule as Graph IR holds it (`schedule`); see
//! `docs/mesh.md`.

pub mod cost;
pub mod function;
pub mod insert;
pub mod propagate;
pub mod schedule;
