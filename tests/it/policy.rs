//! A buyer's policy (`verify --policy`): a full run satisfies it; a filtered run, an
//! expired one, one with another challenge, context or model, one signed by a key the
//! buyer does not trust, and a case whose pass rules out less than the policy's leak
//! rate each fail it with the requirement named (exit 4); a malformed policy is a setup
//! error naming its line.

use crate::common::{TempDir, output, tenantcheck, verify_run};
use std::path::Path;
use tenantcheck::report::{self, key};

const CHALLENGE: &str = "c0ffee0123456789";

/// `verify RUN/report.dsse.json --key RUN/signing-key.pub.pem --policy (policy text)`.
fn judged(run_dir: &Path, tmp: &Path, policy: &str) -> (Option<i32>, String, String) {
    let file = tmp.join(format!("policy-{}.toml", tenantcheck::hex(&policy.len().to_le_bytes())));
    std::fs::write(&file, policy).unwrap();
    output(verify_run(run_dir).arg("--policy").arg(&file))
}

/// The key id `verify` prints for the run's signer.
fn signer(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("ok: ed25519 signature by key "))
        .expect("the signer's key id")
        .to_owned()
}

#[test]
fn a_full_run_meets_the_policy_and_each_shortfall_is_named() {
    let tmp = TempDir::new("policy");
    let full = tmp.path().join("full");
    let (code, stdout, stderr) = output(
        tenantcheck()
            .args(["run", "--out"])
            .arg(&full)
            .args(["--challenge", CHALLENGE]),
    );
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");

    // What the buyer asked for, all of it met.
    let (code, stdout, _) = judged(&full, tmp.path(), "");
    let key_id = signer(&stdout);
    let policy = format!(
        r#"trusted_keys = ["{key_id}"]
[suite]
tool_version = "{version}"
[run]
model = "sim-1"
context_window = 8192
max_age_days = 1
challenge = "{CHALLENGE}"
[coverage]
min_context_share = 0.95
min_power = 0.99
[declared]
facts = ["engine"]
"#,
        version = env!("CARGO_PKG_VERSION")
    );
    assert_eq!(code, Some(0), "the empty policy: every case ran and passed\n{stdout}");
    let (code, stdout, stderr) = judged(&full, tmp.path(), &policy);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("policy: accepted"), "{stdout}");
    assert!(!stdout.contains("UNMET"), "{stdout}");

    // Each shortfall, alone, is named with its figure and exits 4.
    let unmet = |run: &Path, policy: &str, requirement: &str| {
        let (code, stdout, stderr) = judged(run, tmp.path(), policy);
        assert_eq!(code, Some(4), "{requirement}: {stdout}\n{stderr}");
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("policy: UNMET") && l.contains(requirement)),
            "{requirement}: {stdout}"
        );
        assert!(
            stdout.contains("policy: rejected (1 of"),
            "only {requirement}: {stdout}"
        );
    };
    let with = |from: &str, to: &str| {
        assert!(policy.contains(from), "{from}");
        policy.replace(from, to)
    };
    // The age is counted in whole seconds: a report verified in the second it
    // finished is 0 days old, and meets `max_age_days = 0`. Wait for the next second.
    let finished = tenantcheck::policy::unix_seconds(&crate::common::verified(&full).finished_at).unwrap();
    let now = || {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        since.unwrap().as_secs() as i64
    };
    while now() <= finished {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    unmet(
        &full,
        &with("max_age_days = 1", "max_age_days = 0"),
        "age: finished at most 0 days ago",
    );
    unmet(
        &full,
        &with(
            &format!("challenge = \"{CHALLENGE}\""),
            "challenge = \"0011223344556677\"",
        ),
        "challenge: 0011223344556677",
    );
    unmet(
        &full,
        &with("context_window = 8192", "context_window = 1047576"),
        "context: at least 1047576 tokens",
    );
    unmet(
        &full,
        &with("model = \"sim-1\"", "model = \"gpt-4.1\""),
        "model: gpt-4.1",
    );
    unmet(
        &full,
        &with(
            &format!("trusted_keys = [\"{key_id}\"]"),
            &format!("trusted_keys = [\"{}\"]", "0".repeat(64)),
        ),
        "signer: one of the trusted keys",
    );
    // The shipped example policy's share (0.95) is met; the longest prompt the
    // boundary may send leaves room for its answer and a margin (97.4% of 8,192), so
    // 99% never is.
    unmet(
        &full,
        &with("min_context_share = 0.95", "min_context_share = 0.99"),
        "coverage: context.boundary processed at least 99% of the context",
    );
    unmet(
        &full,
        &format!("{policy}[cases.by_case]\n\"usage.consistency\" = [\"fail\", \"inconclusive\"]\n"),
        "verdict: usage.consistency is FAIL or INCONCLUSIVE",
    );
    // The suite buys a bound of a half on the leak rate at the top of the context (and
    // with it a power too close to 1 for a shortfall to show here); a buyer asking for
    // 1% of one case is told what was ruled out.
    let (code, stdout, _) = judged(
        &full,
        tmp.path(),
        &with("min_power = 0.99", "min_power = 0.99\nmax_leak_rate = 0.5"),
    );
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.starts_with("policy: met")
            && l.contains("leak rate: isolation.canary-residue rules out a leak in more than 50.0%")),
        "{stdout}"
    );
    unmet(
        &full,
        &format!("{policy}[coverage.max_leak_rate_by_case]\n\"isolation.canary-residue\" = 0.01\n"),
        "leak rate: isolation.canary-residue rules out a leak in more than 1.0% of exposed requests",
    );
    // A report re-signed with a lower bound than its transcript gives is refused.
    let lowered = crate::common::resigned(&full, |r| {
        let c = r.cases.iter_mut().find(|c| c.id == "isolation.canary-residue").unwrap();
        c.outcome.power.as_mut().unwrap().leak_rate.as_mut().unwrap().rate /= 2.0;
    });
    assert!(
        lowered
            .as_ref()
            .is_err_and(|e| e.contains("by the transcript and the declared pools")),
        "{lowered:?}"
    );

    // A run of one case: the suite's other cases did not run.
    let filtered = tmp.path().join("filtered");
    let (code, stdout, _) = output(tenantcheck().args(["run", "--out"]).arg(&filtered).args([
        "--challenge",
        CHALLENGE,
        "--exact",
        "usage.consistency",
    ]));
    assert_eq!(code, Some(0), "{stdout}");
    let key_id = signer(&judged(&filtered, tmp.path(), "").1);
    let (code, stdout, _) = judged(
        &filtered,
        tmp.path(),
        &policy.replace(&signer(&judged(&full, tmp.path(), "").1), &key_id),
    );
    assert_eq!(code, Some(4), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("policy: UNMET cases: every case of the suite ran (1 of 15 ran")),
        "{stdout}"
    );
    // The buyer who asks for that case alone accepts it.
    let (code, stdout, _) = judged(&filtered, tmp.path(), "[cases]\nrequired = [\"usage.consistency\"]\n");
    assert_eq!(code, Some(0), "{stdout}");

    // The example for a 1M-context model reads, and this 8,192-token run is not what it
    // asks for.
    let (code, stdout, stderr) = output(
        verify_run(&full)
            .arg("--policy")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/policy-1m.toml")),
    );
    assert_eq!(code, Some(4), "{stdout}\n{stderr}");
    assert!(stdout.contains("policy: UNMET context: at least 1047576"), "{stdout}");

    // A malformed policy is a setup error naming the line and the fix.
    let (code, _, stderr) = judged(&full, tmp.path(), "[run]\nmax_age = 3\n");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("line 2") && stderr.contains("max_age") && stderr.contains("fix:"),
        "{stderr}"
    );
}

#[test]
fn the_run_attests_an_in_toto_test_result_and_an_accepted_report_gets_the_buyers_summary() {
    use tenantcheck::attestation::{SVR_TYPE, TEST_RESULT_FILE};
    use tenantcheck::report::dsse::{Envelope, PAYLOAD_TYPE};
    let tmp = TempDir::new("attest");
    let run = tmp.path().join("run");
    let (code, stdout, _) = output(tenantcheck().args(["run", "--out"]).arg(&run).args([
        "--challenge",
        CHALLENGE,
        "--exact",
        "usage.consistency",
    ]));
    assert_eq!(code, Some(0), "{stdout}");
    let statement = |file: &Path| -> serde_json::Value {
        let env: Envelope = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
        serde_json::from_slice(&env.unverified_payload().unwrap()).unwrap()
    };

    // A run of one case passes it, and its Test Result only warns: the rest of the
    // suite did not run.
    let test_result = statement(&run.join(TEST_RESULT_FILE));
    assert_eq!(test_result["predicate"]["result"], "WARNED", "{test_result}");
    assert_eq!(
        test_result["predicate"]["passedTests"],
        serde_json::json!(["usage.consistency"])
    );
    let (code, stdout, _) = judged(&run, tmp.path(), "[cases]\nrequired = [\"usage.consistency\"]\n");
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("ok: in-toto Test Result (test-result.dsse.json)") && stdout.contains("result WARNED"),
        "{stdout}"
    );

    // The buyer's summary: written only for an accepted report, signed with its key,
    // about the report's envelope, naming the policy by digest.
    let buyer = tmp.path().join("buyer");
    let (code, ..) = output(tenantcheck().args(["keygen", "--out"]).arg(&buyer));
    assert_eq!(code, Some(0));
    let policy = tmp.path().join("one-case.toml");
    std::fs::write(&policy, "[cases]\nrequired = [\"usage.consistency\"]\n").unwrap();
    let svr = tmp.path().join("accepted.svr.json");
    let summarise = |policy: &Path| {
        output(
            verify_run(&run)
                .arg("--policy")
                .arg(policy)
                .arg("--svr")
                .arg(&svr)
                .arg("--svr-key")
                .arg(buyer.join(key::PRIVATE_KEY_FILE)),
        )
    };
    let (code, stdout, stderr) = summarise(&policy);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let buyer_key = key::read_public(&buyer.join(key::PUBLIC_KEY_FILE)).unwrap();
    let env: Envelope = serde_json::from_slice(&std::fs::read(&svr).unwrap()).unwrap();
    env.verified_payload(&buyer_key)
        .expect("the summary is signed by the buyer's key");
    let summary = statement(&svr);
    assert_eq!(summary["predicateType"], SVR_TYPE);
    let report_digest = tenantcheck_evidence::sha256_hex(&std::fs::read(run.join(report::ENVELOPE_FILE)).unwrap());
    assert_eq!(summary["subject"][0]["digest"]["sha256"], report_digest.as_str());
    let policy_digest = tenantcheck_evidence::sha256_hex(&std::fs::read(&policy).unwrap());
    assert_eq!(
        summary["predicate"]["verifier"]["policies"][0]["digest"]["sha256"],
        policy_digest.as_str()
    );
    let properties = summary["predicate"]["properties"].as_array().unwrap();
    for p in [
        "TENANTCHECK_POLICY_ACCEPTED",
        "TENANTCHECK_CASE_USAGE_CONSISTENCY_PASS",
        "TENANTCHECK_CONTEXT_8192",
    ] {
        assert!(properties.iter().any(|x| x == p), "{p}: {summary}");
    }
    // verify reads the summary: the buyer's signature, its properties; beside the run,
    // that it is about that run's report.
    let (code, stdout, _) = output(
        tenantcheck()
            .arg("verify")
            .arg(&svr)
            .arg("--key")
            .arg(buyer.join(key::PUBLIC_KEY_FILE)),
    );
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("property: TENANTCHECK_POLICY_ACCEPTED"), "{stdout}");
    let (code, ..) = output(
        tenantcheck()
            .arg("verify")
            .arg(&svr)
            .arg("--key")
            .arg(run.join(key::PUBLIC_KEY_FILE)),
    );
    assert_eq!(code, Some(1), "the vendor's key did not sign the buyer's summary");
    std::fs::copy(&svr, run.join("accepted.svr.json")).unwrap();
    let (code, stdout, _) = output(
        tenantcheck()
            .arg("verify")
            .arg(run.join("accepted.svr.json"))
            .arg("--key")
            .arg(buyer.join(key::PUBLIC_KEY_FILE)),
    );
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("ok: it is about"), "{stdout}");
    // The Test Result alone is not what verify takes: it says to verify the report.
    let (code, _, stderr) = output(
        tenantcheck()
            .arg("verify")
            .arg(run.join(TEST_RESULT_FILE))
            .arg("--key")
            .arg(run.join(key::PUBLIC_KEY_FILE)),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("verify the report beside it"), "{stderr}");

    // The default policy (every case of the suite) rejects the run: no summary.
    std::fs::remove_file(&svr).unwrap();
    let empty = tmp.path().join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let (code, stdout, _) = summarise(&empty);
    assert_eq!(code, Some(4), "{stdout}");
    assert!(stdout.contains("no verification summary written"), "{stdout}");
    assert!(!svr.exists());
    // --svr without a key to sign it is a usage error.
    let (code, ..) = output(verify_run(&run).arg("--policy").arg(&policy).arg("--svr").arg(&svr));
    assert_eq!(code, Some(2));

    // A Test Result re-signed with the run's own key to say PASSED no longer follows
    // from the report: verify refuses the run.
    let mut forged = test_result.clone();
    forged["predicate"]["result"] = "PASSED".into();
    let signing_key = key::read_private(&run.join(key::PRIVATE_KEY_FILE)).unwrap();
    let resigned = Envelope::sign(PAYLOAD_TYPE, &serde_json::to_vec(&forged).unwrap(), &signing_key);
    std::fs::write(
        run.join(TEST_RESULT_FILE),
        serde_json::to_vec_pretty(&resigned).unwrap(),
    )
    .unwrap();
    let (code, stdout, stderr) = judged(&run, tmp.path(), "");
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stderr.contains("test-result.dsse.json does not follow from the report: it says PASSED"),
        "{stderr}"
    );
}

/// A policy's `[log]` and a challenge file are read before anything is verified, and
/// each mistake names the field, the file and the fix.
#[test]
fn a_policy_log_table_and_a_challenge_file_that_cannot_be_used_are_named() {
    let tmp = TempDir::new("policy-log");
    let verify = |args: &[&str]| {
        let mut cmd = tenantcheck();
        cmd.arg("verify")
            .arg(tmp.path().join("report.dsse.json"))
            .args(["--key", "unused.pem"])
            .args(args);
        output(&mut cmd)
    };
    let policy = |name: &str, text: &str| {
        let path = tmp.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };

    let missing = policy("missing.toml", "[log]\nchallenge = \"nowhere.json\"\n");
    let (code, _, stderr) = verify(&["--policy", &missing]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("field `log.challenge`") && stderr.contains("nowhere.json") && stderr.contains("fix:"),
        "{stderr}"
    );

    // A challenge without a log: a nonce alone cannot say how many runs were made.
    let (code, stdout, stderr) = output(
        tenantcheck()
            .arg("challenge")
            .arg("--out")
            .arg(tmp.path().join("bare.json")),
    );
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    // Issued once: the file is not written over.
    let before = std::fs::read(tmp.path().join("bare.json")).unwrap();
    let again =
        |cmd: &mut std::process::Command| output(cmd.arg("challenge").arg("--out").arg(tmp.path().join("bare.json")));
    let (code, _, stderr) = again(&mut tenantcheck());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("is issued once"), "{stderr}");
    assert_eq!(std::fs::read(tmp.path().join("bare.json")).unwrap(), before);
    let bare = policy(
        "bare.toml",
        "[log]\nchallenge = \"bare.json\"\nall_runs_disclosed = true\n",
    );
    let (code, _, stderr) = verify(&["--policy", &bare]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("names no log"), "{stderr}");

    let plain = policy("plain.toml", "[run]\nmodel = \"sim-1\"\n");
    let (code, _, stderr) = verify(&["--policy", &plain, "--disclosed", "other.dsse.json"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--disclosed needs a policy with a [log] table"),
        "{stderr}"
    );

    let garbage = tmp.path().join("garbage.json");
    std::fs::write(&garbage, "{\"format\": \"something else\"}").unwrap();
    let (code, _, stderr) = verify(&["--challenge", &garbage.display().to_string()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("not a challenge file"), "{stderr}");
    let (code, _, stderr) = verify(&["--challenge", "no-such-file"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("neither hex"), "{stderr}");
}
