//! The standard library of kernels that ships with the compiler (`tessera.stdlib`),
//! written in Tessera itself and embedded in the binary.

/// (module file name, source) of every stdlib file.
pub const FILES: &[(&str, &str)] = &[
    ("matmul.tsr", include_str!("../stdlib/matmul.tsr")),
    ("softmax.tsr", include_str!("../stdlib/softmax.tsr")),
    ("norms.tsr", include_str!("../stdlib/norms.tsr")),
    ("attention.tsr", include_str!("../stdlib/attention.tsr")),
    ("optim.tsr", include_str!("../stdlib/optim.tsr")),
    ("rotary.tsr", include_str!("../stdlib/rotary.tsr")),
];

/// The names of the functions the stdlib defines (for `from tessera.stdlib import X`).
pub fn kernel_names() -> Vec<&'static str> {
    let mut names = Vec::new();
    for (_, src) in FILES {
        for line in src.lines() {
            if let Some(rest) = line.strip_prefix("def ") {
                if let Some(name) = rest.split('(').next() {
                    names.push(name.trim());
                }
            }
        }
    }
    names
}

/// The stdlib file (name, text) that defines the kernel `kernel`.
pub fn file_of(kernel: &str) -> Option<(&'static str, &'static str)> {
    let def = format!("def {kernel}(");
    FILES.iter().copied().find(|(_, src)| src.lines().any(|l| l.starts_with(&def)))
}

/// The path and text of the stdlib file defining `kernel` with its dtype `T` set to
/// `dtype` (its `T = ...` line rewritten): what the database holds as that instance
/// (`check::stdlib_instance`, and the original of a derived stdlib kernel).
pub fn instance(kernel: &str, dtype: &str) -> Option<(String, String)> {
    let (name, src) = file_of(kernel)?;
    let text: String =
        src.lines().map(|l| if l.starts_with("T = ") { format!("T = {dtype}\n") } else { format!("{l}\n") }).collect();
    let stem = name.trim_end_matches(".tsr");
    Some((format!("<tessera.stdlib>/{stem}.{dtype}.tsr"), text))
}
