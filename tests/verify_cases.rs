//! `verify` tested from data: one trial per folder of `tests/verify-cases/` (see its
//! README). Each runs one case against the reference vendor with a fault that fails it,
//! re-signs the report with a lie told about that case, and checks what `verify`, given
//! the transcript, says of it.

#[allow(dead_code)]
#[path = "it/common/mod.rs"]
mod common;

use common::{Sim, TempDir, run_exact};
use libtest_mimic::{Arguments, Failed, Trial};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use tenantcheck::outcome::Verdict;
use tenantcheck::report::{self, key};

/// Cases of the built-in suite that no fault of the reference vendor fails, so that no
/// lie about a failure can be told: the declarations are the profile's, not the
/// vendor's behaviour.
const NEVER_FAILED_BY_A_FAULT: &[&str] = &["declared.advisories", "declared.kv-pool"];

/// One folder's `case.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Fixture {
    flags: Vec<String>,
    case: String,
    lie: Lie,
    /// For `lie = "drop"`: the codes of the findings dropped.
    #[serde(default)]
    drop: Vec<String>,
    /// A phrase the refusal must hold.
    refused: Option<String>,
    /// Why `verify` accepts the lie for now.
    accepted: Option<String>,
}

#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Lie {
    /// The case's findings dropped, its verdict PASS, the totals made to agree.
    Pass,
    /// The case's verdict PASS, nothing else changed.
    Verdict,
    /// The case's findings of the codes in `drop` dropped, its verdict what the rest
    /// make it, the totals made to agree.
    Drop,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/verify-cases")
}

fn read(dir: &Path) -> Result<Fixture, Failed> {
    let path = dir.join("case.toml");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let fixture: Fixture = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if matches!(fixture.lie, Lie::Drop) == fixture.drop.is_empty() {
        return Err(format!(
            "{}: `drop` lists the codes dropped by `lie = \"drop\"`, and only then",
            path.display()
        )
        .into());
    }
    if fixture.refused.is_some() == fixture.accepted.is_some() {
        return Err(format!("{}: give exactly one of `refused` and `accepted`", path.display()).into());
    }
    Ok(fixture)
}

/// Runs the fixture in `dir`.
fn trial(dir: &Path) -> Result<(), Failed> {
    let fixture = read(dir)?;
    let tmp = TempDir::new("verify-case");
    let flags: Vec<&str> = fixture.flags.iter().map(String::as_str).collect();
    let sim = Sim::start("verify-case-key-a", "verify-case-key-b", &flags);
    let profile = sim.profile(tmp.path());
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = run_exact(
        &profile,
        &run_dir,
        &fixture.case,
        "verify-case-key-a",
        "verify-case-key-b",
    );
    drop(sim);
    if code != Some(1) {
        return Err(format!("the run must fail (exit 1), not {code:?}\n{stdout}\n{stderr}").into());
    }
    let mut report = common::verified(&run_dir);
    let case = report
        .cases
        .iter_mut()
        .find(|c| c.id == fixture.case)
        .ok_or_else(|| format!("{} did not run", fixture.case))?;
    if case.outcome.verdict != Verdict::Fail {
        return Err(format!("{} did not fail: {}", fixture.case, case.outcome.summary).into());
    }
    match fixture.lie {
        Lie::Verdict => case.outcome.verdict = Verdict::Pass,
        Lie::Pass => {
            case.outcome.verdict = Verdict::Pass;
            case.outcome.findings.clear();
            report.tally();
        }
        Lie::Drop => {
            let before = case.outcome.findings.len();
            case.outcome
                .findings
                .retain(|f| !fixture.drop.contains(&format!("{:?}", f.code)));
            if case.outcome.findings.len() == before {
                return Err(format!("the run had no finding of {:?} to drop", fixture.drop).into());
            }
            if case.outcome.findings.is_empty() {
                case.outcome.verdict = Verdict::Pass;
            }
            report.tally();
        }
    }
    let signing = key::read_private(&run_dir.join(key::PRIVATE_KEY_FILE)).map_err(|e| e.to_string())?;
    let envelope = serde_json::to_vec(&report.sign(&signing)).map_err(|e| e.to_string())?;
    let transcript = std::fs::read(run_dir.join(report::TRANSCRIPT_FILE)).map_err(|e| e.to_string())?;
    let verdict = report::verify(&envelope, &signing.verifying_key(), Some(&transcript), None, |_| {});
    match (verdict, &fixture.refused, &fixture.accepted) {
        (Err(e), Some(phrase), _) if e.to_string().contains(phrase.as_str()) => Ok(()),
        (Err(e), Some(phrase), _) => Err(format!("refused, but not with {phrase:?}: {e}").into()),
        (Ok(_), Some(_), _) => Err("the lie verified".into()),
        (Ok(_), None, Some(_)) => Ok(()),
        (Err(e), None, _) => Err(format!(
            "`verify` now refuses the lie ({e}): replace `accepted` with `refused` and a phrase of that"
        )
        .into()),
        (Ok(_), None, None) => unreachable!("checked in `read`"),
    }
}

fn main() {
    let args = Arguments::from_args();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root())
        .expect("tests/verify-cases")
        .map(|e| e.expect("a folder entry").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    let mut trials: Vec<Trial> = dirs
        .iter()
        .map(|dir| {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            let dir = dir.clone();
            Trial::test(name, move || trial(&dir))
        })
        .collect();
    // Every case of the built-in suite that a fault can fail has a lie told about it.
    trials.push(Trial::test("every-failable-case-has-a-folder", move || {
        let lied: Vec<String> = dirs
            .iter()
            .filter_map(|d| read(d).ok())
            .filter(|f| matches!(f.lie, Lie::Pass))
            .map(|f| f.case)
            .collect();
        let missing: Vec<String> = tenantcheck::suite::Suite::builtin()
            .cases
            .iter()
            .map(|c| c.id.clone())
            .filter(|id| !NEVER_FAILED_BY_A_FAULT.contains(&id.as_str()) && !lied.contains(id))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("no folder with lie = \"pass\" for {missing:?}").into())
        }
    }));
    libtest_mimic::run(&args, trials).exit();
}
