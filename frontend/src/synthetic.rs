//! Generated Tessera modules for benchmarks and incrementality tests: the project's
//! examples repeated with unique names, so the result checks clean.

const TEMPLATES: &[&str] = &[
    include_str!("../../examples/gemm.tsr"),
    include_str!("../../examples/softmax.tsr"),
    include_str!("../../examples/layernorm.tsr"),
    include_str!("../../examples/flash_attention.tsr"),
    include_str!("../../examples/linear_gelu.tsr"),
    include_str!("../../examples/fp8_gemm.tsr"),
    include_str!("../../examples/transformer_block.tsr"),
    include_str!("../../examples/train_step.tsr"),
    include_str!("../../examples/vector_add.tsr"),
    include_str!("../../examples/saxpy.tsr"),
];

/// A module of at least `min_lines` lines.
pub fn module_with_lines(min_lines: usize) -> String {
    build(|_, lines| lines >= min_lines)
}

/// A module with exactly `functions` top-level functions.
pub fn module_with_functions(functions: usize) -> String {
    build(|count, _| count >= functions).lines_until_functions(functions)
}

trait Truncate {
    fn lines_until_functions(self, n: usize) -> String;
}

impl Truncate for String {
    /// Cuts after the n-th function (templates may hold several).
    fn lines_until_functions(self, n: usize) -> String {
        let mut seen = 0;
        let mut out = String::new();
        for line in self.lines() {
            if line.starts_with("def ") {
                seen += 1;
            }
            if seen > n && (line.starts_with('@') || line.starts_with("def ")) {
                break;
            }
            if seen > n {
                continue;
            }
            out.push_str(line);
            out.push('\n');
        }
        // A trailing decorator without its def would be a syntax error.
        while out.trim_end().lines().last().is_some_and(|l| {
            l.starts_with('@') || l.trim_start().starts_with("space=") || l.trim_start().starts_with("metric=")
        }) {
            let cut = out.trim_end().rfind('\n').map_or(0, |i| i + 1);
            out.truncate(cut);
        }
        out
    }
}

fn build(done: impl Fn(usize, usize) -> bool) -> String {
    let mut out = String::from("import tessera as ts\nfrom tessera import *\n\n");
    let mut functions = 0;
    let mut lines = 3;
    let mut instance = 0;
    while !done(functions, lines) {
        let template = TEMPLATES[instance % TEMPLATES.len()];
        let renamed = rename_items(template, instance);
        functions += renamed.lines().filter(|l| l.starts_with("def ")).count();
        lines += renamed.lines().count();
        out.push_str(&renamed);
        instance += 1;
    }
    out
}

/// Suffixes every top-level definition of `src` with `_{instance}` and drops imports.
fn rename_items(src: &str, instance: usize) -> String {
    let mut names: Vec<&str> = Vec::new();
    for line in src.lines() {
        if let Some(rest) = line.strip_prefix("def ") {
            names.extend(rest.split('(').next());
        } else if let Some((lhs, _)) = line.split_once(" = ") {
            if !line.starts_with(' ') && lhs.chars().all(|c| c.is_alphanumeric() || c == '_') {
                names.push(lhs);
            }
        }
    }
    let mut out = String::with_capacity(src.len() + 64);
    for line in src.lines() {
        if line.starts_with("import ") || line.starts_with("from ") {
            continue;
        }
        out.push_str(&rename_words(line, &names, instance));
        out.push('\n');
    }
    out
}

fn rename_words(line: &str, names: &[&str], instance: usize) -> String {
    let mut out = String::with_capacity(line.len() + 8);
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if names.contains(&word.as_str()) {
            out.push_str(&format!("{word}_{instance}"));
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    let mut prev_dot = false;
    for c in line.chars() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            // `dist.mesh` is a member, not a top-level name.
            if prev_dot {
                out.push_str(&word);
                word.clear();
            } else {
                flush(&mut word, &mut out);
            }
            prev_dot = c == '.';
            out.push(c);
        }
    }
    if prev_dot {
        out.push_str(&word);
    } else {
        flush(&mut word, &mut out);
    }
    out
}
