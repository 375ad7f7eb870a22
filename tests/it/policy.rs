//! A buyer's policy (`verify --policy`): a full run satisfies it; a filtered run, an
//! expired one, one with another challenge, context or model, one signed by a key the
//! buyer does not trust, and a case passed below the policy's power each fail it with
//! the requirement named (exit 4); a malformed policy is a setup error naming its line.

use crate::common::{TempDir, output, tenantcheck};
use std::path::Path;
use tenantcheck::report::{self, key};

const CHALLENGE: &str = "c0ffee0123456789";

/// `verify RUN/report.dsse.json --key RUN/signing-key.pub.pem --policy (policy text)`.
fn judged(run_dir: &Path, tmp: &Path, policy: &str) -> (Option<i32>, String, String) {
    let file = tmp.join(format!("policy-{}.toml", tenantcheck::hex(&policy.len().to_le_bytes())));
    std::fs::write(&file, policy).unwrap();
    output(
        tenantcheck()
            .arg("verify")
            .arg(run_dir.join(report::ENVELOPE_FILE))
            .arg("--key")
            .arg(run_dir.join(key::PUBLIC_KEY_FILE))
            .arg("--policy")
            .arg(&file),
    )
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
min_context_share = 0.9
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
    unmet(
        &full,
        &with("min_power = 0.99", "min_power = 0.99999999"),
        "power: isolation.canary-residue at least 0.99999999",
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
            .any(|l| l.starts_with("policy: UNMET cases: every case of the suite ran (1 of 14 ran")),
        "{stdout}"
    );
    // The buyer who asks for that case alone accepts it.
    let (code, stdout, _) = judged(&filtered, tmp.path(), "[cases]\nrequired = [\"usage.consistency\"]\n");
    assert_eq!(code, Some(0), "{stdout}");

    // The example for a 1M-context model reads, and this 8,192-token run is not what it
    // asks for.
    let (code, stdout, stderr) = output(
        tenantcheck()
            .arg("verify")
            .arg(full.join(report::ENVELOPE_FILE))
            .arg("--key")
            .arg(full.join(key::PUBLIC_KEY_FILE))
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
