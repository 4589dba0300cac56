//! Compiles the generated parser and the hand-written external scanner. The generated
//! files in `src/` are committed, so building never needs the tree-sitter CLI.

fn main() {
    let src_dir = std::path::Path::new("src");

    let mut build = cc::Build::new();
    build
        .std("c11")
        .include(src_dir)
        .warnings(false)
        .cargo_warnings(false)
        .file(src_dir.join("parser.c"))
        .file(src_dir.join("scanner.c"));
    #[cfg(target_env = "msvc")]
    build.flag("-utf-8");
    build.compile("tree-sitter-tessera");

    for file in ["parser.c", "scanner.c", "tree_sitter/parser.h", "tree_sitter/alloc.h", "tree_sitter/array.h"] {
        println!("cargo:rerun-if-changed={}", src_dir.join(file).display());
    }
    println!("cargo:rerun-if-changed=build.rs");
}
