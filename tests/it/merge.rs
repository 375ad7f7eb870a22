//! Runs at scale: the shares of a partitioned run (`run --partition i/n`) run as
//! parallel processes, `tenantcheck merge` verifies each and signs one summary, and
//! `verify` re-derives the summary from the reports it names.

use crate::common::{Sim, TempDir, output, tenantcheck, verified};
use std::path::{Path, PathBuf};
use tenantcheck::outcome::Verdict;
use tenantcheck::partition::Partition;
use tenantcheck::report::key;
use tenantcheck::shard::SUMMARY_FILE;

const KEY_A: &str = "merge-key-a-0001";
const KEY_B: &str = "merge-key-b-0001";

/// Four quick cases of the suite, in a folder of their own: in id order
/// `declared.kv-pool`, `errors.semantics`, `stream.integrity`, `usage.consistency`.
fn small_suite(dir: &Path) -> PathBuf {
    let suite = dir.join("suite");
    for file in [
        "declared/kv-pool.toml",
        "errors/semantics.toml",
        "stream/integrity.toml",
        "usage/consistency.toml",
    ] {
        let to = suite.join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("suite").join(file), to).unwrap();
    }
    suite
}

/// `tenantcheck run` of the small suite against `profile` into `out`, with `extra`.
fn run_suite(profile: &Path, suite: &Path, out: &Path, extra: &[&str]) -> std::process::Command {
    let mut cmd = tenantcheck();
    cmd.args(["run", "--vendor"])
        .arg(profile)
        .arg("--suite")
        .arg(suite)
        .arg("--out")
        .arg(out)
        .args(extra)
        .env("TENANTCHECK_KEY_A", KEY_A)
        .env("TENANTCHECK_KEY_B", KEY_B);
    cmd
}

fn merge(args: &[&Path], out: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    output(tenantcheck().arg("merge").args(args).arg("--out").arg(out).args(extra))
}

fn verify(summary_dir: &Path) -> (Option<i32>, String, String) {
    output(
        tenantcheck()
            .arg("verify")
            .arg(summary_dir.join(SUMMARY_FILE))
            .arg("--key")
            .arg(summary_dir.join(key::PUBLIC_KEY_FILE)),
    )
}

#[test]
fn shares_run_as_parallel_processes_merge_into_a_summary_that_verify_re_derives() {
    let tmp = TempDir::new("merge");
    let suite = small_suite(tmp.path());
    // usage.consistency (share 2 of 2) fails on this vendor; the other cases pass.
    let sim = Sim::start(KEY_A, KEY_B, &["--fault", "usage-misreport"]);
    let profile = sim.profile(tmp.path());
    let share_dir = |i: u32| tmp.path().join(format!("share-{i}"));
    let children: Vec<_> = (1..=2)
        .map(|i| {
            run_suite(&profile, &suite, &share_dir(i), &["--partition", &format!("{i}/2")])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let codes: Vec<Option<i32>> = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            if !matches!(out.status.code(), Some(0 | 1)) {
                panic!(
                    "{}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            out.status.code()
        })
        .collect();
    assert_eq!(codes, [Some(0), Some(1)]);
    for i in 1..=2 {
        let report = verified(&share_dir(i));
        assert_eq!(report.partition, Some(Partition { index: i, count: 2 }));
        for (position, c) in report.cases.iter().enumerate() {
            let ours = position % 2 == (i - 1) as usize;
            assert_eq!(c.outcome.verdict == Verdict::Skipped, !ours, "share {i}: {}", c.id);
            if !ours {
                assert!(c.outcome.summary.contains("another share"), "{}", c.outcome.summary);
            }
        }
    }

    // The merge: every case's verdict from the share that owns it.
    let merged = tmp.path().join("merged");
    let (code, stdout, stderr) = merge(&[&share_dir(1), &share_dir(2)], &merged, &[]);
    assert_eq!(code, Some(1), "the merged run failed\n{stdout}\n{stderr}");
    for (verdict, case, share) in [
        ("PASS", "declared.kv-pool", "1/2"),
        ("PASS", "errors.semantics", "2/2"),
        ("PASS", "stream.integrity", "1/2"),
        ("FAIL", "usage.consistency", "2/2"),
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(verdict) && l.contains(case) && l.contains(share)),
            "{case}: {stdout}"
        );
    }
    let (code, stdout, stderr) = verify(&merged);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("shards/02/report.dsse.json verified"), "{stdout}");
    assert!(stdout.contains("the summary follows from its 2 reports"), "{stdout}");

    // A summary that does not follow from its reports: re-signed with the merge key,
    // claiming the failed case passed.
    let merge_key = key::read_private(&merged.join(key::PRIVATE_KEY_FILE)).unwrap();
    let envelope = std::fs::read(merged.join(SUMMARY_FILE)).unwrap();
    let summary = tenantcheck::merge::verify(
        &merged.join(SUMMARY_FILE),
        &envelope,
        &merge_key.verifying_key(),
        |_| {},
    )
    .unwrap()
    .summary()
    .clone();
    let mut forged = summary.clone();
    let case = forged.runs[0]
        .cases
        .iter_mut()
        .find(|c| c.id == "usage.consistency")
        .unwrap();
    case.verdict = Verdict::Pass;
    (forged.runs[0].totals, forged.runs[0].verdict) =
        tenantcheck::report::tally(forged.runs[0].cases.iter().map(|c| c.verdict));
    (forged.totals, forged.verdict) = (forged.runs[0].totals, forged.runs[0].verdict);
    let lied = tmp.path().join("lied");
    copy_dir(&merged, &lied);
    std::fs::write(
        lied.join(SUMMARY_FILE),
        serde_json::to_vec(&forged.sign(&merge_key)).unwrap(),
    )
    .unwrap();
    let (code, stdout, _) = verify(&lied);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("does not follow from its reports: usage.consistency"),
        "{stdout}"
    );

    // A report swapped in the merge folder: its digest is not the subject's.
    let swapped = tmp.path().join("swapped");
    copy_dir(&merged, &swapped);
    for file in ["report.dsse.json", "transcript.jsonl", "signing-key.pub.pem"] {
        std::fs::copy(
            swapped.join("shards/01").join(file),
            swapped.join("shards/02").join(file),
        )
        .unwrap();
    }
    let (code, stdout, _) = verify(&swapped);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("shards/02/report.dsse.json: its SHA-256 is"),
        "{stdout}"
    );

    // Shares that do not make a whole run are refused, naming what is wrong; nothing
    // is written.
    let tries = std::cell::Cell::new(0);
    let refused = |args: &[&Path], extra: &[&str], says: &str| {
        tries.set(tries.get() + 1);
        let out = tmp.path().join(format!("refused-{}", tries.get()));
        let (code, stdout, stderr) = merge(args, &out, extra);
        assert_eq!(code, Some(1), "{says}: {stdout}\n{stderr}");
        assert!(stderr.contains(says), "{says}: {stderr}");
        assert!(!out.join(SUMMARY_FILE).exists(), "{says}");
    };
    refused(&[&share_dir(1)], &[], "share 2/2 missing");
    refused(
        &[&share_dir(1), &share_dir(1), &share_dir(2)],
        &[],
        "share 1/2 is given twice",
    );
    // A report signed by a key the merger does not trust.
    let stranger = tmp.path().join("stranger");
    std::fs::create_dir_all(&stranger).unwrap();
    let (_, _, stranger_public) = key::write_new_pair(&stranger).unwrap();
    refused(
        &[&share_dir(1), &share_dir(2)],
        &["--shard-key", stranger_public.to_str().unwrap()],
        "is signed by none of the trusted keys",
    );
    // A share whose transcript was changed after it was signed.
    let transcript = share_dir(2).join(tenantcheck::report::TRANSCRIPT_FILE);
    let mut bytes = std::fs::read(&transcript).unwrap();
    let at = bytes.len() / 2;
    bytes[at] = if bytes[at] == b'a' { b'b' } else { b'a' };
    std::fs::write(&transcript, bytes).unwrap();
    refused(
        &[&share_dir(1), &share_dir(2)],
        &[],
        "share-2/report.dsse.json does not verify, so nothing was merged",
    );
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::create_dir_all(to).unwrap();
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// One report per profile: two vendors' whole runs make a summary of two runs, signed
/// with the key given; the same profile's whole run twice is refused.
#[test]
fn one_report_per_profile_merges_into_a_run_each_and_a_profile_twice_is_refused() {
    let tmp = TempDir::new("merge-profiles");
    let suite = small_suite(tmp.path());
    let run = |tag: &str, flags: &[&str]| {
        let sim = Sim::start(KEY_A, KEY_B, flags);
        let dir = tmp.path().join(tag);
        std::fs::create_dir_all(&dir).unwrap();
        let profile = sim.profile(&dir);
        let run_dir = dir.join("run");
        let (code, stdout, stderr) = output(&mut run_suite(
            &profile,
            &suite,
            &run_dir,
            &["--exact", "stream.integrity"],
        ));
        assert!(matches!(code, Some(0 | 1)), "{tag}: {stdout}\n{stderr}");
        run_dir
    };
    let healthy = run("healthy", &[]);
    let broken = run("broken", &["--fault", "stream-no-error-frame"]);
    let keys = tmp.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let (merge_key, private, _) = key::write_new_pair(&keys).unwrap();
    let merged = tmp.path().join("merged");
    let (code, stdout, stderr) = merge(&[&healthy, &broken], &merged, &["--key", private.to_str().unwrap()]);
    assert_eq!(code, Some(1), "one profile failed\n{stdout}\n{stderr}");
    assert!(stdout.contains("over 2 runs"), "{stdout}");
    assert!(stdout.contains(&key::key_id(&merge_key.verifying_key())), "{stdout}");
    assert!(
        !merged.join(key::PRIVATE_KEY_FILE).exists(),
        "no fresh key when one is given"
    );
    let (code, stdout, stderr) = verify(&merged);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let summary = std::fs::read(merged.join(SUMMARY_FILE)).unwrap();
    let verified =
        tenantcheck::merge::verify(&merged.join(SUMMARY_FILE), &summary, &merge_key.verifying_key(), |_| {}).unwrap();
    let verdicts: Vec<(Verdict, Verdict)> = verified
        .summary()
        .runs
        .iter()
        .map(|r| {
            (
                r.verdict,
                r.cases.iter().find(|c| c.id == "stream.integrity").unwrap().verdict,
            )
        })
        .collect();
    assert!(verdicts.contains(&(Verdict::Pass, Verdict::Pass)), "{verdicts:?}");
    assert!(verdicts.contains(&(Verdict::Fail, Verdict::Fail)), "{verdicts:?}");

    let (code, _, stderr) = merge(&[&healthy, &healthy], &tmp.path().join("twice"), &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("are two whole runs of one profile and suite"),
        "{stderr}"
    );
}
