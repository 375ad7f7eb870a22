//! The 2026 incident at its own numbers: advertised context 1,048,576, prefill KV pool
//! 681,280, `--disaggregated --fault reject-continue`. The suite must fail, the boundary
//! case with other tenants' canaries in the over-pool answers and the effective context
//! measured; with pools as large as the context the same run passes; with the fault
//! off the boundary case passes, the short pool refused honestly. The declared facts of
//! such a deployment fail the declared cases without a request.

use crate::common::{Sim, TempDir};
use tenantcheck::outcome::{FindingCode, Verdict};
use tenantcheck::report::{self, Report, key};

const CONTEXT: &str = "1048576";
const PREFILL_POOL: u64 = 681_280;

fn incident_profile(sim: &Sim, dir: &std::path::Path) -> std::path::PathBuf {
    let path = sim.profile(dir);
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("context_window = 8192", &format!("context_window = {CONTEXT}"))
        .replace("kv_pool_tokens = 16384", "kv_pool_tokens = 2097152");
    std::fs::write(&path, text).unwrap();
    path
}

fn report_of(run_dir: &std::path::Path) -> Report {
    let envelope = std::fs::read(run_dir.join(report::ENVELOPE_FILE)).unwrap();
    let public = key::read_public(&run_dir.join(key::PUBLIC_KEY_FILE)).unwrap();
    let transcript = std::fs::read(run_dir.join(report::TRANSCRIPT_FILE)).unwrap();
    report::verify(&envelope, &public, Some(&transcript), None, |_| {})
        .unwrap()
        .report()
        .clone()
}

/// Runs `filter` (the whole suite when empty) against the sim with a prefill pool of
/// `prefill` tokens, with or without the fault; the exit code, the verified report and
/// the transcript.
fn run(prefill: &str, fault: bool, filter: &[&str]) -> (Option<i32>, Report, Vec<u8>) {
    let tmp = TempDir::new("incident");
    let mut flags = vec![
        "--context",
        CONTEXT,
        "--disaggregated",
        "--prefill-pool-tokens",
        prefill,
        "--decode-pool-tokens",
        "2097152",
    ];
    if fault {
        flags.extend(["--fault", "reject-continue"]);
    }
    let sim = Sim::start("incident-key-a", "incident-key-b", &flags);
    let profile = incident_profile(&sim, tmp.path());
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = {
        let mut cmd = crate::common::tenantcheck();
        cmd.arg("run")
            .args(filter)
            .arg("--vendor")
            .arg(&profile)
            .arg("--out")
            .arg(&run_dir)
            .env("TENANTCHECK_KEY_A", "incident-key-a")
            .env("TENANTCHECK_KEY_B", "incident-key-b");
        crate::common::output(&mut cmd)
    };
    assert!(matches!(code, Some(0 | 1)), "{stdout}\n{stderr}");
    let transcript = std::fs::read(run_dir.join(report::TRANSCRIPT_FILE)).unwrap();
    (code, report_of(&run_dir), transcript)
}

/// The whole suite's transcript at a million tokens of context is small enough to mail
/// (its long prompts recorded by reference) and reads back; a changed byte of a
/// prompt's recipe is refused by the reader, and by `verify` with the chain.
fn assert_mailable(transcript: &[u8]) {
    assert!(transcript.len() < 5_000_000, "{} bytes", transcript.len());
    let text = std::str::from_utf8(transcript).unwrap();
    let referenced: Vec<&str> = text.lines().filter(|l| l.contains("{\"generated\":{")).collect();
    assert!(
        referenced.len() >= 20,
        "{} lines hold a prompt by reference",
        referenced.len()
    );
    let lines: Vec<_> = tenantcheck::transcript::lines(transcript).collect();
    assert!(lines.iter().all(Result::is_ok));
    // The longest prompt read back is as long as a prompt at the context must be.
    let longest = lines
        .into_iter()
        .filter_map(|l| match l.unwrap() {
            tenantcheck::transcript::Line::Exchange { exchange, .. } => Some(exchange.request.body?.to_string().len()),
            _ => None,
        })
        .max()
        .unwrap();
    assert!(longest > 3_000_000, "{longest}");
    let line = referenced[0];
    let at = line.find("\"seed\":").unwrap() + "\"seed\":".len();
    let digit = line.as_bytes()[at];
    let changed = format!(
        "{}{}{}",
        &line[..at],
        if digit == b'1' { '2' } else { '1' },
        &line[at + 1..]
    );
    let e = tenantcheck::transcript::Line::parse(changed.as_bytes()).unwrap_err();
    assert!(e.contains("recorded by reference"), "{e}");
}

#[test]
fn reject_continue_at_the_incidents_numbers_is_caught_with_the_leaked_canaries() {
    let (code, report, transcript) = run("681280", true, &[]);
    assert_eq!(code, Some(1));
    assert_mailable(&transcript);
    let verdict = |id: &str| report.cases.iter().find(|c| c.id == id).unwrap().outcome.verdict;
    assert_eq!(verdict("isolation.canary-residue"), Verdict::Fail);
    assert_eq!(verdict("context.recall"), Verdict::Fail);
    let case = report.cases.iter().find(|c| c.id == "context.boundary").unwrap();
    assert_eq!(case.outcome.verdict, Verdict::Fail);
    let leaks: Vec<_> = case
        .outcome
        .findings
        .iter()
        .filter(|f| f.code == FindingCode::CrossTenantCanary)
        .collect();
    assert!(!leaks.is_empty(), "{:?}", case.outcome.findings);
    for f in &leaks {
        let leak = f.leak.as_ref().unwrap();
        assert_eq!((leak.owner.as_str(), leak.recipient.as_str()), ("b", "a"));
    }
    // The effective context is the prefill pool, within the search's resolution (2%).
    let effective = case.outcome.coverage.max_prompt_tokens;
    let context: u64 = CONTEXT.parse().unwrap();
    assert!(
        effective <= PREFILL_POOL && effective + context / 50 >= PREFILL_POOL,
        "effective {effective}"
    );
    assert!(case.outcome.summary.contains("effective context") && case.outcome.summary.contains("prompt tokens sent"));
    assert!(case.outcome.summary.contains("the first finding after"));
}

#[test]
fn with_pools_as_large_as_the_context_the_whole_suite_passes() {
    let (code, report, transcript) = run(CONTEXT, false, &[]);
    assert_eq!(code, Some(0), "{:?}", report.cases);
    assert_mailable(&transcript);
}

#[test]
fn the_same_deployment_without_the_fault_refuses_honestly_and_passes() {
    let (code, report, _) = run("681280", false, &["--exact", "context.boundary"]);
    assert_eq!(code, Some(0), "{:?}", report.cases);
    let case = report.cases.iter().find(|c| c.id == "context.boundary").unwrap();
    assert_eq!(case.outcome.verdict, Verdict::Pass);
    let effective = case.outcome.coverage.max_prompt_tokens;
    let context: u64 = CONTEXT.parse().unwrap();
    assert!(
        effective <= PREFILL_POOL && effective + context / 50 >= PREFILL_POOL,
        "effective {effective}"
    );
}

#[test]
fn the_incidents_declared_facts_fail_the_declared_cases() {
    let tmp = TempDir::new("declared");
    let sim = Sim::start("declared-key-a", "declared-key-b", &[]);
    let base = sim.profile(tmp.path());
    let declared = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/vendors/sglang-disaggregated.example.toml"
    ))
    .unwrap();
    let facts = &declared[declared.find("[declared]").unwrap()..];
    let own = std::fs::read_to_string(&base).unwrap();
    let own = &own[..own.find("[declared]").unwrap()];
    let profile = tmp.path().join("declared.toml");
    std::fs::write(
        &profile,
        format!("{own}{facts}").replace("context_window = 8192", "context_window = 1048576"),
    )
    .unwrap();
    let run_dir = tmp.path().join("run");
    let mut cmd = crate::common::tenantcheck();
    cmd.args(["run", "declared", "--vendor"])
        .arg(&profile)
        .arg("--out")
        .arg(&run_dir)
        .env("TENANTCHECK_KEY_A", "declared-key-a")
        .env("TENANTCHECK_KEY_B", "declared-key-b");
    let (code, stdout, _) = crate::common::output(&mut cmd);
    assert_eq!(code, Some(1), "{stdout}");
    let report = report_of(&run_dir);
    let verdict = |id: &str| report.cases.iter().find(|c| c.id == id).unwrap().outcome.clone();
    let pool = verdict("declared.kv-pool");
    assert_eq!(pool.verdict, Verdict::Fail);
    assert!(pool.findings[0].message.contains("681280") && pool.summary.contains("checksums"));
    let adv = verdict("declared.advisories");
    assert_eq!(adv.verdict, Verdict::Fail);
    assert!(adv.findings[0].message.contains("sglang-rejected-kv-reuse"));
}
