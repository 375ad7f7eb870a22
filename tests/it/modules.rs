//! The modules' dependencies point one way: within each crate, no module uses a
//! module that uses it, however many steps round (`docs/design.md`, "Crates, modules
//! and the direction of their dependencies"). Read from every `crate::NAME` path of
//! each top-level module's files, outside comments and `#[cfg(test)]` code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each top-level module of the crate whose sources are in `src`, and the top-level
/// modules of the same crate it names.
fn uses(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = vec![src.to_path_buf()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let rel = path.strip_prefix(src).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy();
        let module = first.trim_end_matches(".rs").to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let named = out.entry(module.clone()).or_default();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (i, _) in line.match_indices("crate::") {
                // `tenantcheck_evidence::x` is another crate; `crate::x` is this one.
                if line[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let name: String = line[i + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if !name.is_empty() && name != module {
                    named.insert(name);
                }
            }
        }
    }
    out
}

/// A cycle among `uses`, as the modules round it, if there is one.
fn cycle(uses: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        uses: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut round = path[at..].to_vec();
            round.push(m.to_owned());
            return Some(round);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_owned());
        for next in uses.get(m).into_iter().flatten() {
            if let Some(round) = visit(next, uses, path, done) {
                return Some(round);
            }
        }
        path.pop();
        done.insert(m.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    uses.keys().find_map(|m| visit(m, uses, &mut Vec::new(), &mut done))
}

#[test]
fn no_module_uses_a_module_that_uses_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for src in ["src", "crates/tenantcheck-evidence/src", "crates/tenantcheck-sim/src"] {
        let uses = uses(&root.join(src));
        assert!(uses.len() > 5, "{src}: {} modules read", uses.len());
        if let Some(round) = cycle(&uses) {
            panic!("{src}: {}", round.join(" -> "));
        }
    }
}

#[test]
fn a_cycle_is_found_however_many_steps_round() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry((*a).into()).or_default().insert((*b).into());
        }
        g
    };
    assert_eq!(cycle(&graph(&[("a", "b"), ("b", "c")])), None);
    assert_eq!(
        cycle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(
        cycle(&graph(&[("x", "p"), ("p", "q"), ("q", "p")])),
        Some(vec!["p".into(), "q".into(), "p".into()])
    );
}
