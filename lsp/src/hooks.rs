//! Where the IR passes plug into the language server. Everything else the server shows
//! comes from the frontend's `ide` layer; these three need the target-aware passes.
//!
//! Each returns plain data (byte offsets into the file's text); the server turns it
//! into protocol types.

use tessera_frontend::{Database, SourceFile, TextRange};
use tessera_passes::Target;

/// The IR of one kernel at one stage, for `tessera/lowering`.
pub struct Lowering {
    /// The IR text, deterministic, one op per line.
    pub text: String,
    /// For IR lines that came from source: (0-based line in `text`, source byte range).
    pub source_map: Vec<(u32, TextRange)>,
}

fn key_of<'db>(db: &'db Database, file: SourceFile, kernel: &str) -> Option<tessera_frontend::FnKey<'db>> {
    tessera_frontend::db::item_index(db, file).functions.iter().find(|f| f.key.name(db) == kernel).map(|f| f.key)
}

/// Lowers `kernel` of `file` to `stage` (`graph`, `sched`, `tile`, `target` or `all`)
/// for `target`, in its default configuration (the fixed schedule, or the first of its
/// autotune space; shape symbols its tiles use at 64). The server has already checked
/// that the kernel exists; an `Err` is sent to the client as the request's error.
pub fn lower(db: &Database, file: SourceFile, kernel: &str, stage: &str, target: Target) -> Result<Lowering, String> {
    use tessera_passes::Stage;
    let key = key_of(db, file, kernel).ok_or_else(|| format!("no function `{kernel}`"))?;
    let stages: Vec<Stage> = match stage {
        "all" => Stage::ALL.to_vec(),
        s => vec![Stage::parse(s).ok_or_else(|| format!("unknown stage `{s}`"))?],
    };
    let (config, _) = tessera_passes::default_config(db, key, &Default::default()).map_err(|e| e.message)?;
    let mut out = Lowering { text: String::new(), source_map: Vec::new() };
    for s in stages {
        let lowered = tessera_passes::lowering_text(db, key, s, target, &config).map_err(|e| e.message)?;
        if stage == "all" {
            out.text.push_str(&format!("// ===== {} IR: {kernel} ({target}) =====\n", s.name()));
        }
        let first = out.text.lines().count() as u32;
        out.source_map.extend(lowered.source_map.iter().map(|&(line, range)| (first + line, range)));
        out.text.push_str(&lowered.text);
        if !out.text.ends_with('\n') {
            out.text.push('\n');
        }
    }
    Ok(out)
}

fn kib(bytes: u64) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

/// Extra markdown for the hover of a kernel: estimated registers per thread, shared
/// memory per block and occupancy for `target` under its default configuration, from
/// the analyses behind W0600/W0602/E0500. `None` for the CPU and for functions that do
/// not lower.
pub fn kernel_resources(db: &Database, file: SourceFile, kernel: &str, target: Target) -> Option<String> {
    let key = key_of(db, file, kernel)?;
    if !target.is_gpu() {
        return None;
    }
    let (config, _) = tessera_passes::default_config(db, key, &Default::default()).ok()?;
    let r = tessera_passes::analysis::kernel_resources(db, key, config.clone(), target).clone().ok()?;
    let mut md = format!(
        "**On {target}** ({config}): ~{} registers/thread (estimate), {} shared memory, {} threads",
        r.registers.peak,
        kib(r.smem_bytes),
        r.threads
    );
    if let Some(o) = &r.occupancy {
        let limiters: Vec<&str> = o.limiters().iter().map(|l| l.name()).collect();
        md.push_str(&format!(
            "; occupancy {:.1}% ({} block{} of {} warps per SM, limited by {})",
            o.fraction() * 100.0,
            o.blocks,
            if o.blocks == 1 { "" } else { "s" },
            o.warps_per_block,
            limiters.join(" and ")
        ));
    }
    if !r.registers.largest.is_empty() {
        let largest: Vec<String> =
            r.registers.largest.iter().map(|v| format!("`{}` {} regs", v.name, v.registers)).collect();
        md.push_str(&format!("\n\nLargest live values at the peak: {}", largest.join(", ")));
    }
    Some(md)
}

/// Extra markdown for the hover of a shared-memory buffer (`buffer`, a local of
/// `kernel`): its size and bank-conflict verdict on `target` (W0601's analysis).
pub fn shared_buffer_notes(
    db: &Database,
    file: SourceFile,
    kernel: &str,
    buffer: &str,
    target: Target,
) -> Option<String> {
    let key = key_of(db, file, kernel)?;
    if !target.is_gpu() {
        return None;
    }
    let (config, _) = tessera_passes::default_config(db, key, &Default::default()).ok()?;
    let r = tessera_passes::analysis::kernel_resources(db, key, config.clone(), target).clone().ok()?;
    let conflicts = tessera_passes::analysis::kernel_bank_conflicts(db, key, config, target).clone().ok()?;
    let used = r.buffers.iter().find(|b| b.name == buffer)?;
    let mut md = format!("**On {target}**: {} (all pipeline stages)", kib(used.bytes));
    match conflicts.iter().find(|c| c.buffer == buffer) {
        Some(c) => {
            md.push_str(&format!("; **{}-way bank conflict** on {}", c.ways, c.access));
            match &c.fix {
                Some(tessera_passes::analysis::BankFix::Swizzle) => md.push_str(" — `swizzle=\"xor\"` removes it"),
                Some(tessera_passes::analysis::BankFix::Pad(p)) => md.push_str(&format!(" — `pad={p}` removes it")),
                None => {}
            }
        }
        None => md.push_str("; every access is free of bank conflicts"),
    }
    Some(md)
}
