//! An interrupted run keeps its evidence and can be continued: SIGINT mid-way gives a
//! signed report marked incomplete that verifies with its transcript, and `run
//! --resume` finishes it into the same folder, with the transcript's chain unbroken and
//! a final report covering every case.

use crate::common::{TempDir, tenantcheck};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tenantcheck::outcome::Verdict;
use tenantcheck::report::TRANSCRIPT_FILE;

/// The cases that have sent a request so far.
fn cases_seen(transcript: &std::path::Path) -> usize {
    let text = std::fs::read_to_string(transcript).unwrap_or_default();
    let cases: std::collections::BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.split("\"case\":\"").nth(1)?.split('"').next())
        .filter(|c| *c != "preflight")
        .collect();
    cases.len()
}

#[test]
fn sigint_mid_run_leaves_a_signed_partial_report_and_resume_finishes_it() {
    let tmp = TempDir::new("interrupt");
    let run_dir = tmp.path().join("run");
    let child = tenantcheck()
        .args(["run", "--out"])
        .arg(&run_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Mid-way: once a third case (of eleven, in an order drawn per run) has sent its
    // first request; the nine that send requests send about 300 in all.
    let transcript = run_dir.join(TRANSCRIPT_FILE);
    let started = Instant::now();
    while cases_seen(&transcript) < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the run did not get going"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: kill only sends a signal to the child we started.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) }, 0);
    let signalled = Instant::now();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stdout}\n{stderr}");
    assert!(
        signalled.elapsed() < tenantcheck::session::IN_FLIGHT_GRACE + Duration::from_secs(20),
        "it stopped promptly"
    );
    assert!(stderr.contains("SIGINT: sending stops"), "{stderr}");
    assert!(stdout.contains("continue with: tenantcheck run --resume"), "{stdout}");

    let partial = crate::common::verified(&run_dir);
    let interrupted = partial.interrupted.clone().expect("marked incomplete");
    assert_eq!(interrupted.signal, "SIGINT");
    assert!(!interrupted.unfinished.is_empty());
    assert!(
        interrupted.unfinished.len() < partial.cases.len(),
        "some cases finished: {interrupted:?}"
    );
    for c in &partial.cases {
        let unfinished = interrupted.unfinished.contains(&c.id);
        assert_eq!(
            unfinished,
            c.outcome.verdict != Verdict::Pass,
            "{}: {}",
            c.id,
            c.outcome.summary
        );
        if unfinished {
            assert_eq!(c.outcome.verdict, Verdict::Inconclusive, "never a pass");
            assert!(
                c.outcome.summary.contains("interrupted by SIGINT"),
                "{}",
                c.outcome.summary
            );
        }
    }
    let partial_bytes = std::fs::read(&transcript).unwrap();
    let sent_before = partial.transcript.summary.lines;

    let (code, stdout, stderr) = crate::common::output(tenantcheck().arg("run").arg("--resume").arg(&run_dir));
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let full = crate::common::verified(&run_dir);
    assert!(full.interrupted.is_none());
    assert_eq!(full.resumed_at.len(), 1);
    assert_eq!(full.started_at, partial.started_at);
    assert_eq!(full.run_secret, partial.run_secret, "one run, one secret");
    assert_eq!(full.cases.len(), partial.cases.len());
    for c in &full.cases {
        assert_eq!(c.outcome.verdict, Verdict::Pass, "{}: {}", c.id, c.outcome.summary);
        if !interrupted.unfinished.contains(&c.id) {
            let before = partial.cases.iter().find(|p| p.id == c.id).unwrap();
            assert_eq!(c.outcome, before.outcome, "a finished case is kept as it was");
        }
    }
    // The first part's lines are untouched, and the chain goes on from them.
    let bytes = std::fs::read(&transcript).unwrap();
    assert!(bytes.starts_with(&partial_bytes));
    assert!(full.transcript.summary.lines > sent_before);
    let resume_line = String::from_utf8_lossy(&bytes[partial_bytes.len()..])
        .lines()
        .next()
        .unwrap()
        .to_owned();
    assert!(resume_line.contains("\"kind\":\"resume\""), "{resume_line}");

    // Nothing is left to resume.
    let (code, _, stderr) = crate::common::output(tenantcheck().arg("run").arg("--resume").arg(&run_dir));
    assert_eq!(code, Some(2));
    assert!(stderr.contains("nothing to resume"), "{stderr}");
}

#[test]
fn a_request_the_vendor_never_answers_is_abandoned_after_the_grace_and_recorded() {
    let tmp = TempDir::new("interrupt-hang");
    let (key_a, key_b) = ("sk-hang-tenant-a-000", "sk-hang-tenant-b-111");
    let sim = crate::common::Sim::start(key_a, key_b, &["--chaos", "no-response"]);
    let profile = sim.profile(tmp.path());
    let run_dir = tmp.path().join("run");
    let child = tenantcheck()
        .args(["run", "--vendor"])
        .arg(&profile)
        .args(["--exact", "stream.integrity", "--out"])
        .arg(&run_dir)
        .env("TENANTCHECK_KEY_A", key_a)
        .env("TENANTCHECK_KEY_B", key_b)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The credential checks are recorded; the first chat request then hangs (the
    // profile allows 60 s).
    let transcript = run_dir.join(TRANSCRIPT_FILE);
    let started = Instant::now();
    while std::fs::read_to_string(&transcript).map_or(0, |t| t.lines().count()) < 3 {
        assert!(started.elapsed() < Duration::from_secs(60), "no credential check");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill only sends a signal to the child we started.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    let signalled = Instant::now();
    let output = child.wait_with_output().unwrap();
    let waited = signalled.elapsed();
    assert_eq!(
        output.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        waited >= tenantcheck::session::IN_FLIGHT_GRACE,
        "the grace was given: {waited:?}"
    );
    assert!(waited < Duration::from_secs(30), "and not the 60 s timeout: {waited:?}");

    let report = crate::common::verified(&run_dir);
    assert_eq!(report.interrupted.as_ref().unwrap().signal, "SIGTERM");
    let abandoned: Vec<_> = crate::common::transcript_exchanges(&run_dir)
        .into_values()
        .filter(|l| l["exchange"]["transport_error"]["kind"] == "interrupted")
        .collect();
    assert_eq!(abandoned.len(), 1, "one request was in flight");
    let request = &abandoned[0]["exchange"]["request"]["body"];
    assert!(
        request["messages"][0]["content"]
            .as_str()
            .is_some_and(|c| !c.is_empty()),
        "{request}"
    );
    assert_eq!(request["stream"], true);
}
