//! Data-driven checks: every file under `suite/` and `vendors/` goes through its
//! loader and validation, one trial per file, and the suite embedded in the binary
//! must be exactly the files on disk.

use libtest_mimic::{Arguments, Failed, Trial};
use std::path::{Path, PathBuf};
use tenantcheck::schema::Schema;
use tenantcheck::suite::{BUILTIN_ADVISORIES, BUILTIN_FILES, Suite};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn toml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            toml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "toml") {
            out.push(path);
        }
    }
}

fn main() {
    let args = Arguments::from_args();
    let mut trials = Vec::new();

    let suite_dir = root().join("suite");
    let mut cases = Vec::new();
    toml_files(&suite_dir, &mut cases);
    for path in cases {
        let rel = path
            .strip_prefix(&suite_dir)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if rel.starts_with("advisories/") {
            continue;
        }
        trials.push(Trial::test(format!("suite/{rel}"), move || {
            let text = std::fs::read_to_string(&path).map_err(|e| Failed::from(e.to_string()))?;
            let suite = Suite::from_files([(rel.clone(), text)], Path::new("suite")).map_err(|e| e.to_string())?;
            let case = &suite.cases[0];
            if case.references.is_empty() {
                return Err(format!("{rel}: a case names at least one reference").into());
            }
            Ok(())
        }));
    }

    let mut profiles = Vec::new();
    toml_files(&root().join("vendors"), &mut profiles);
    for path in profiles {
        let name = format!("vendors/{}", path.file_name().unwrap().to_string_lossy());
        trials.push(Trial::test(name, move || {
            tenantcheck::vendor::load(&path).map_err(|e| e.to_string())?;
            Ok(())
        }));
    }

    trials.push(Trial::test("suite/embedded-matches-disk", || {
        let on_disk = Suite::load_dir(&root().join("suite")).map_err(|e| e.to_string())?;
        let embedded = Suite::builtin();
        let disk_files: Vec<&str> = on_disk.cases.iter().map(|c| c.file.as_str()).collect();
        let embedded_files: Vec<&str> = BUILTIN_FILES.iter().map(|(p, _)| *p).collect();
        let disk_advisories: Vec<&str> = on_disk.advisories.iter().map(|a| a.file.as_str()).collect();
        let embedded_advisories: Vec<&str> = BUILTIN_ADVISORIES.iter().map(|(p, _)| *p).collect();
        if disk_advisories != embedded_advisories {
            return Err(format!(
                "list every advisory in suite::BUILTIN_ADVISORIES\n  on disk:  {disk_advisories:?}\n  embedded: {embedded_advisories:?}"
            )
            .into());
        }
        if disk_files != embedded_files || on_disk.digest != embedded.digest {
            return Err(format!(
                "the embedded suite differs from suite/: list every case file in suite::BUILTIN_FILES\n  on disk:  {disk_files:?}\n  embedded: {embedded_files:?}"
            )
            .into());
        }
        Ok(())
    }));

    for kind in Schema::ALL {
        trials.push(Trial::test(
            format!("reports/schema/{}.schema.json", kind.name()),
            move || {
                let path = root()
                    .join("reports/schema")
                    .join(format!("{}.schema.json", kind.name()));
                let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
                if on_disk != kind.to_file_text() {
                    return Err(format!(
                        "{} is stale; regenerate: cargo run -q -- schema {} > {}",
                        path.display(),
                        kind.name(),
                        path.display()
                    )
                    .into());
                }
                Ok(())
            },
        ));
    }

    libtest_mimic::run(&args, trials).exit();
}
