//! The mesh part of `tessera run` for a sharded graph function: the simulated mesh, the
//! collectives Graph IR holds (with their estimated cost) and what the run moved, and the
//! mesh run's own check against the f64 reference.

use serde_json::{json, Value};
use tessera_backends::launch::graph::{CollectiveInfo, MeshCheck};
use tessera_backends::launch::Verdict;
use tessera_backends::mesh::fabric::tcp::Rendezvous;
use tessera_backends::mesh::Fabric;

/// This process's place in a mesh of processes, from the launcher's environment, over
/// `link` ("tcp" or "nccl"); `program` is what every rank must run.
pub(crate) fn connect(link: &str, program: &[u8]) -> Result<Fabric, String> {
    let rendezvous = Rendezvous::from_env().map_err(|e| format!("--fabric {link}: {e} (start one process per device with torchrun, or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT)"))?;
    // FNV-1a: the same in every build, so that ranks of one binary agree.
    let fingerprint =
        program.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    match link {
        "nccl" => tessera_backends::nccl::fabric(&rendezvous, fingerprint),
        _ => rendezvous.connect(fingerprint),
    }
    .map_err(|e| format!("--fabric {link}: {e}"))
}

pub(crate) fn json(m: &MeshCheck) -> Value {
    json!({
        "devices": m.devices(),
        "fabric": m.fabric.as_ref().map_or(Value::Null, |(link, rank, world)| json!({"link": link, "rank": rank, "processes": world})),
        "axes": m.axes.iter().map(|(a, s)| json!({"name": a, "size": s})).collect::<Vec<_>>(),
        "layouts": m.layouts.iter().map(|(n, l)| (n.clone(), Value::String(l.clone()))).collect::<serde_json::Map<_, _>>(),
        "collectives": m.collectives.iter().enumerate().map(|(i, c)| json!({
            "kind": c.kind,
            "explicit": c.explicit,
            "axis": c.axis,
            "bytes_per_device": c.bytes,
            "algorithm": c.algorithm,
            "estimated_us": c.time_us,
            "overlaps": m.overlaps.get(i).cloned().unwrap_or_default(),
        })).collect::<Vec<_>>(),
        "pipelines": m.pipelines.iter().map(|p| json!({
            "axis": p.axis,
            "stages": p.stages,
            "microbatches": p.microbatches,
            "ticks": p.ticks,
            "bubble": p.bubble(),
            "schedule": p.cells,
            "backward_from_tick": p.backward_from,
        })).collect::<Vec<_>>(),
        "estimated_collective_us": m.estimated_us(),
        "bytes_sent_busiest_device": m.bytes_sent,
        "steps": m.steps,
        "verdict": crate::verdict::verdict_name(m.verdict),
        "max_abs_err": m.checks.iter().map(|c| c.comparison.max_abs).fold(0.0, f64::max),
        "max_rel_err": m.checks.iter().map(|c| c.comparison.max_rel).fold(0.0, f64::max),
    })
}

pub(crate) fn text(m: &MeshCheck) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let axes: Vec<String> = m.axes.iter().map(|(a, n)| format!("{a}={n}")).collect();
    match &m.fabric {
        None => {
            let _ = writeln!(s, "  mesh      {} simulated devices ({}), one process", m.devices(), axes.join(", "));
        }
        Some((link, rank, world)) => {
            let _ = writeln!(
                s,
                "  mesh      {} devices ({}), one process each: this is rank {rank} of {world}, messages over {link}",
                m.devices(),
                axes.join(", ")
            );
        }
    }
    let layouts: Vec<String> = m.layouts.iter().map(|(n, l)| format!("{n} {l}")).collect();
    if !layouts.is_empty() {
        let _ = writeln!(s, "  layout    {}", layouts.join("; "));
    }
    // Collectives alike one after the other (a pipeline's sends) on one line: `4 × ...`.
    let mut i = 0;
    while i < m.collectives.len() {
        let c = &m.collectives[i];
        let alike = |d: &CollectiveInfo| {
            (&d.kind, &d.axis, d.explicit, d.bytes, &d.algorithm, d.time_us)
                == (&c.kind, &c.axis, c.explicit, c.bytes, &c.algorithm, c.time_us)
        };
        let n = m.collectives[i..].iter().take_while(|d| alike(d)).count();
        let bytes = c.bytes.map_or("? bytes".to_string(), |b| format!("{b} bytes/device"));
        let each = if n > 1 { " each" } else { "" };
        let cost = match (&c.algorithm, c.time_us) {
            (Some(a), Some(t)) => format!(", {a}, ~{t:.1} µs estimated{each}"),
            _ => String::new(),
        };
        let written = if c.explicit { " (written)" } else { "" };
        let times = if n > 1 { format!("{n} × ") } else { String::new() };
        let _ = writeln!(s, "            {times}{}{written} over {}: {bytes}{cost}", c.kind, c.axis);
        if let Some(o) = m.overlaps.get(i).filter(|o| n == 1 && !o.is_empty()) {
            let _ = writeln!(s, "              overlaps {}", o.join(", "));
        }
        i += n;
    }
    for p in &m.pipelines {
        let _ = writeln!(s, "  pipeline  {}", p.summary());
        s.push_str(&p.table("            "));
    }
    if m.collectives.is_empty() {
        let _ = writeln!(s, "            no collectives: every op runs on its own blocks");
    }
    let _ = writeln!(
        s,
        "            moved {} bytes from the busiest device in {} steps (counted by {})",
        m.bytes_sent,
        m.steps,
        if m.fabric.is_some() { "each rank for its own sends" } else { "the simulated network" }
    );
    for c in &m.checks {
        let state = if c.comparison.passed { "ok" } else { "MISMATCHES" };
        let _ = writeln!(
            s,
            "  check     {} on the mesh: against the f64 reference, max abs err {:.3e}, max rel err {:.3e}: {state}",
            c.name, c.comparison.max_abs, c.comparison.max_rel
        );
    }
    let _ = writeln!(
        s,
        "  mesh      {}",
        match m.verdict {
            Verdict::Correct => "correct",
            Verdict::Wrong => "WRONG: the mesh run differs from the f64 reference",
            _ => "non-finite",
        }
    );
    s
}
