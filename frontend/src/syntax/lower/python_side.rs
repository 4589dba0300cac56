//! Python-side lines in a `.tsr` file: the seeds show `my_fn.inspect_ir("tile")` and
//! `tessera.compile(kernel, dump=[...])` next to Tessera code, and users paste them. They
//! are still E0100 (a `.tsr` file holds only the program), but the message names the tool
//! that does the same thing: `tessera lower` and the explorer.

/// A targeted message and note for a top-level statement that is a Python-side call, or
/// `None` when the statement is something else. `stmt` is the statement's source text.
pub(super) fn python_side_hint(stmt: &str) -> Option<(String, String)> {
    let stmt = stmt.trim_start();
    let open = stmt.find('(')?;
    let callee = stmt[..open].trim_end();
    if callee.is_empty() || !callee.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
        return None;
    }
    let (receiver, method) = match callee.rsplit_once('.') {
        Some((r, m)) => (Some(r), m),
        None => (None, callee),
    };
    let args = &stmt[open + 1..];
    let is_module = |r: &str| matches!(r, "tessera" | "ts");
    match method {
        "inspect_ir" => {
            // `my_fn.inspect_ir("tile")`, or `inspect_ir(my_fn, "tile")`.
            let kernel = match receiver {
                Some(r) if !is_module(r) => r.to_string(),
                _ => first_identifier(args).unwrap_or_else(|| "NAME".to_string()),
            };
            let stage = first_string(args)
                .filter(|s| matches!(s.as_str(), "graph" | "sched" | "tile" | "target"))
                .unwrap_or_else(|| "all".to_string());
            Some((
                format!("`{callee}(...)` is a Python-side call; a .tsr file holds only the program"),
                format!(
                    "print that IR with `tessera lower <file> --kernel {kernel} --stage {stage}`, or step through \
                     every level with `tessera-explore <file> --kernel {kernel}`"
                ),
            ))
        }
        "compile" if receiver.is_none_or(is_module) => {
            let kernel = first_identifier(args).unwrap_or_else(|| "NAME".to_string());
            Some((
                format!("`{callee}(...)` is a Python-side call; a .tsr file holds only the program"),
                format!(
                    "print the IR of every level and the target code with `tessera lower <file> --kernel {kernel} \
                     --stage all` (`--stage target` for PTX or LLVM IR); `tessera run <file> --kernel {kernel}` \
                     compiles and launches it"
                ),
            ))
        }
        _ => None,
    }
}

/// The first argument when it is a plain name (`kernel` in `compile(kernel, dump=...)`).
fn first_identifier(args: &str) -> Option<String> {
    let first = args.split([',', ')']).next()?.trim();
    let ok = !first.is_empty()
        && !first.starts_with(|c: char| c.is_ascii_digit())
        && first.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    ok.then(|| first.to_string())
}

/// The first string literal's contents (`"tile"` in `inspect_ir("tile")`).
fn first_string(args: &str) -> Option<String> {
    let start = args.find(['"', '\''])?;
    let quote = args[start..].chars().next()?;
    let rest = &args[start + 1..];
    Some(rest[..rest.find(quote)?].to_string())
}

#[cfg(test)]
mod tests {
    use super::python_side_hint;

    #[test]
    fn inspect_ir_names_tessera_lower_with_the_kernel_and_stage() {
        let (message, note) = python_side_hint("my_fn.inspect_ir(\"tile\")").unwrap();
        assert_eq!(message, "`my_fn.inspect_ir(...)` is a Python-side call; a .tsr file holds only the program");
        assert!(note.contains("tessera lower <file> --kernel my_fn --stage tile"), "{note}");
        assert!(note.contains("tessera-explore <file> --kernel my_fn"), "{note}");
        let (_, note) = python_side_hint("ts.inspect_ir(gemm, 'sched')").unwrap();
        assert!(note.contains("--kernel gemm --stage sched"), "{note}");
    }

    #[test]
    fn compile_with_dump_names_lower_and_run() {
        let (message, note) = python_side_hint("tessera.compile(kernel, dump=[\"tirh\",\"ptx\"])").unwrap();
        assert!(message.starts_with("`tessera.compile(...)` is a Python-side call"), "{message}");
        assert!(note.contains("tessera lower <file> --kernel kernel --stage all"), "{note}");
    }

    #[test]
    fn other_statements_get_no_hint() {
        for stmt in ["x.append(1)", "print(\"hi\")", "for i in range(3):", "model.compile(x)", "a + b"] {
            assert_eq!(python_side_hint(stmt), None, "{stmt}");
        }
    }
}
