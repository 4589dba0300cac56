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
