//! Collects the suite embedded in the binary from `suite/`: every case file and every
//! advisory, in id order, so that adding a case is adding its file.

use std::path::{Path, PathBuf};

fn toml_files(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a readable folder entry").path();
        if path.is_dir() {
            toml_files(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "toml") {
            let rel = path.strip_prefix(root).expect("below the root");
            let rel = rel.to_str().expect("suite paths are UTF-8").replace('\\', "/");
            out.push(rel);
        }
    }
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("suite");
    println!("cargo:rerun-if-changed=suite");
    let mut files = Vec::new();
    toml_files(&root, &root, &mut files);
    // In id order: the path with `/` as `.`, without `.toml`.
    files.sort_by_key(|f| f.trim_end_matches(".toml").replace('/', "."));
    let entry =
        |f: &String| format!("    ({f:?}, include_str!(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/suite/{f}\"))),\n");
    let (advisories, cases): (Vec<&String>, Vec<&String>) = files.iter().partition(|f| f.starts_with("advisories/"));
    let mut code =
        String::from("/// The suite files embedded in the binary, in id order: (path below `suite/`, contents).\n");
    code.push_str("pub const BUILTIN_FILES: &[(&str, &str)] = &[\n");
    cases.into_iter().for_each(|f| code.push_str(&entry(f)));
    code.push_str("];\n\n/// The advisories embedded in the binary: (path below `suite/`, contents).\n");
    code.push_str("pub const BUILTIN_ADVISORIES: &[(&str, &str)] = &[\n");
    advisories.into_iter().for_each(|f| code.push_str(&entry(f)));
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it")).join("suite_files.rs");
    std::fs::write(&out, code).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
}
