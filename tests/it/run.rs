//! End-to-end tests: the `tenantcheck` binary against the reference vendor on
//! 127.0.0.1 (in-process, or as its own process on port 0), healthy and with faults.

use crate::common::{
    Sim, TempDir, files, output, rechained, resigned, run_exact, run_vendor, tenantcheck, verified, verify_run,
};
use std::path::Path;
use tenantcheck::canary::{Fragment, RunSecret};
use tenantcheck::outcome::{FindingCode, Verdict};
use tenantcheck::report::{self, Report, key};

fn isolation(report: &Report) -> &tenantcheck::report::CaseReport {
    report
        .cases
        .iter()
        .find(|c| c.id == "isolation.canary-residue")
        .expect("the isolation case ran")
}

#[test]
fn embedded_default_run_passes_and_its_report_verifies() {
    let tmp = TempDir::new("embedded");
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = output(tenantcheck().args(["run", "--out"]).arg(&run_dir));
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout
            .lines()
            .any(|l| l == "test [T1] isolation.canary-residue ... PASS")
            && stdout.contains(&format!(
                "test result: PASS. {} passed; 0 failed; 0 inconclusive; 0 skipped; 0 filtered out",
                tenantcheck::suite::Suite::builtin().cases.len()
            )),
        "{stdout}"
    );
    assert!(!stdout.contains("... ok") && !stdout.contains("FAILED"), "{stdout}");
    for file in [
        report::ENVELOPE_FILE,
        report::TRANSCRIPT_FILE,
        key::PUBLIC_KEY_FILE,
        key::PRIVATE_KEY_FILE,
    ] {
        assert!(run_dir.join(file).is_file(), "{file} missing");
    }
    assert!(stdout.contains("a fresh key pair was written"), "{stdout}");

    let report = verified(&run_dir);
    assert_eq!(report.verdict, Verdict::Pass);
    let case = isolation(&report);
    assert_eq!(case.outcome.verdict, Verdict::Pass);
    let cov = case.outcome.coverage;
    assert!(
        cov.requests >= 21,
        "calibration plus two tenants times five rungs: {cov:?}"
    );
    assert!(
        cov.max_prompt_tokens * 10 >= report.vendor.profile.context_window * 8,
        "the ladder reached the advertised context: {cov:?}"
    );
    assert!(case.outcome.summary.contains("requests") && case.outcome.summary.contains("prompt tokens"));
    assert_eq!(report.vendor.source, "embedded");
    assert_eq!(report.suite.digest, tenantcheck::suite::Suite::builtin().digest);

    // The cases ran in the order the revealed run secret draws (random per run, and
    // checkable after it), not in a fixed one.
    let secret = tenantcheck::canary::RunSecret::from_hex(&report.run_secret.revealed).unwrap();
    let mut drawn: Vec<&str> = report.cases.iter().map(|c| c.id.as_str()).collect();
    drawn.sort_by_key(|id| secret.seed(tenantcheck::harness::ORDER, id, 0));
    let mut ran: Vec<String> = Vec::new();
    for line in crate::common::transcript_exchanges(&run_dir).values() {
        let case = line["case"].as_str().unwrap().to_owned();
        if case != "preflight" && !ran.contains(&case) {
            ran.push(case);
        }
    }
    drawn.retain(|id| ran.iter().any(|r| r == id));
    assert_eq!(ran, drawn);

    let (code, stdout, _) = output(&mut verify_run(&run_dir));
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("transcript hash chain intact"), "{stdout}");
}

#[test]
fn verify_rejects_one_changed_byte_in_the_payload_or_the_transcript() {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let tmp = TempDir::new("tamper");
    let run_dir = tmp.path().join("run");
    let (code, stdout, _) = output(tenantcheck().args(["run", "--out"]).arg(&run_dir));
    assert_eq!(code, Some(0), "{stdout}");
    let envelope_path = run_dir.join(report::ENVELOPE_FILE);
    let transcript_path = run_dir.join(report::TRANSCRIPT_FILE);
    let public_path = run_dir.join(key::PUBLIC_KEY_FILE);
    let envelope = std::fs::read(&envelope_path).unwrap();
    let transcript = std::fs::read(&transcript_path).unwrap();
    let public = key::read_public(&public_path).unwrap();
    let mut env: serde_json::Value = serde_json::from_slice(&envelope).unwrap();
    let payload = b64.decode(env["payload"].as_str().unwrap()).unwrap();

    // In-process: every byte position of the payload, a spread of the transcript's.
    for i in 0..payload.len() {
        let mut bad = payload.clone();
        bad[i] ^= 0x20;
        env["payload"] = b64.encode(&bad).into();
        let bytes = serde_json::to_vec(&env).unwrap();
        assert!(
            report::verify(&bytes, &public, Some(&transcript), None, |_| {}).is_err(),
            "payload byte {i}"
        );
    }
    env["payload"] = b64.encode(&payload).into();
    let step = (transcript.len() / 500).max(1);
    for i in (0..transcript.len()).step_by(step).chain([transcript.len() - 1]) {
        let mut bad = transcript.clone();
        bad[i] ^= 0x01;
        assert!(
            report::verify(&envelope, &public, Some(&bad), None, |_| {}).is_err(),
            "transcript byte {i}"
        );
    }

    // Through the binary: a clear message and a non-zero exit for each.
    let verify = |transcript: &Path| {
        output(
            tenantcheck()
                .arg("verify")
                .arg(&envelope_path)
                .arg("--key")
                .arg(&public_path)
                .arg("--transcript")
                .arg(transcript),
        )
    };
    let mut bad = payload.clone();
    let at = bad.len() / 2;
    bad[at] ^= 0x20;
    env["payload"] = b64.encode(&bad).into();
    std::fs::write(&envelope_path, serde_json::to_vec(&env).unwrap()).unwrap();
    let (code, stdout, stderr) = verify(&transcript_path);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("does not match the payload"), "{stderr}");

    std::fs::write(&envelope_path, &envelope).unwrap();
    let mut bad = transcript.clone();
    let at = bad.len() / 3;
    bad[at] ^= 0x01;
    let bad_path = tmp.path().join("changed.jsonl");
    std::fs::write(&bad_path, &bad).unwrap();
    let (code, stdout, stderr) = verify(&bad_path);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("the transcript was changed"), "{stderr}");

    let (code, stdout, _) = verify(&transcript_path);
    assert_eq!(code, Some(0), "the untouched files still verify: {stdout}");
}

/// Under `stale-pages`, a model that continues residue from its middle returns text
/// older requests left there, whoever's it is and whether or not it holds a record or
/// a tenant's marks: the answer is not its request's. The session finds it against
/// every request recorded before (`passage`), the case fails with it, and `verify`
/// finds the same in the transcript and holds the report to it.
#[test]
fn another_requests_text_in_an_answer_fails_its_case_and_verify_holds_the_report_to_it() {
    let tmp = TempDir::new("passage");
    let sim = Sim::start(
        "key-a-passage",
        "key-b-passage",
        &["--fault", "stale-pages", "--fragmenting-model"],
    );
    let profile = sim.profile(tmp.path());
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = run_vendor(&profile, &run_dir, "key-a-passage", "key-b-passage");
    assert_eq!(code, Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let report = verified(&run_dir);
    let passage = |f: &&tenantcheck::outcome::Finding| {
        f.code == FindingCode::ResponseMisrouted && f.leak.as_ref().is_some_and(|l| l.fragment == Fragment::Passage)
    };
    let case = report
        .cases
        .iter()
        .find(|c| c.outcome.findings.iter().any(|f| passage(&f)))
        .expect("a long prompt read what an earlier request left");
    assert_eq!(case.outcome.verdict, Verdict::Fail);
    let finding = case.outcome.findings.iter().find(passage).unwrap();
    let leak = finding.leak.as_ref().unwrap();
    let source = leak.seeded_in.unwrap();
    assert!(source < leak.returned_in, "an earlier request's");
    assert_eq!(leak.canary_id, format!("{}/passage/{source}", leak.owner));
    assert!(finding.message.contains("another request"), "{}", finding.message);
    // The passage is in the earlier request and in the answer, not in the request
    // the answer was to.
    let lines = crate::common::transcript_exchanges(&run_dir);
    let text = |seq: u64| tenantcheck::passage::request_text(&lines[&seq]["exchange"]["request"]["body"]);
    let fold = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let sentence = leak.matched.split(". ").next().unwrap();
    assert!(fold(&text(source)).contains(sentence), "{sentence}");
    assert!(!fold(&text(leak.returned_in)).contains(&fold(&leak.matched)));
    let content = lines[&leak.returned_in]["exchange"]["content"].as_str().unwrap();
    assert!(fold(content).contains(sentence));

    // A report that leaves it out does not verify.
    let (id, at) = (case.id.clone(), leak.returned_in);
    let err = resigned(&run_dir, |r| {
        let o = &mut r.cases.iter_mut().find(|c| c.id == id).unwrap().outcome;
        o.findings.retain(|f| !passage(&f));
        if o.findings.is_empty() {
            o.verdict = Verdict::Pass;
            r.tally();
        }
    })
    .unwrap_err();
    assert!(err.contains("another request's text"), "{err}");
    // Nor does one whose transcript no longer holds it, in the content or in the body.
    // Stale pages may have handed back a canary or another tenant's words in the same
    // answer, and whichever of the report's findings there verify checks first refuses
    // it: each says the line no longer holds what the report says it holds.
    let err = rechained(&run_dir, |lines| {
        let exchange = &mut lines[at as usize]["exchange"];
        let nothing = "Nothing of anyone's came back here.";
        exchange["content"] = nothing.into();
        let mut body: serde_json::Value = serde_json::from_str(exchange["body"].as_str().unwrap()).unwrap();
        body["choices"][0]["message"]["content"] = nothing.into();
        exchange["body"] = body.to_string().into();
    })
    .unwrap_err();
    assert!(
        err.contains(&format!("the report says #{at} holds ")) && err.ends_with("and it does not"),
        "{err}"
    );
}

#[test]
fn stale_pages_fault_fails_the_isolation_case_with_the_other_tenants_canary() {
    let tmp = TempDir::new("stale");
    let sim = Sim::start("key-a-stale", "key-b-stale", &["--fault", "stale-pages"]);
    let profile = sim.profile(tmp.path());
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = run_vendor(&profile, &run_dir, "key-a-stale", "key-b-stale");
    assert_eq!(code, Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("isolation.canary-residue ") && l.ends_with("... FAIL")),
        "{stdout}"
    );
    assert!(stdout.contains("test result: FAIL. "), "{stdout}");

    let report = verified(&run_dir);
    assert_eq!(report.verdict, Verdict::Fail);
    let outcome = &isolation(&report).outcome;
    assert!(!outcome.findings.is_empty());
    let secret = RunSecret::from_hex(&report.run_secret.revealed).unwrap();
    assert_eq!(
        outcome.findings[0].code,
        FindingCode::CrossTenantCanary,
        "the leak leads"
    );
    for finding in &outcome.findings {
        let leak = finding.leak.as_ref().unwrap();
        if leak.fragment == Fragment::Passage {
            // Another request's text besides (what older requests left in the pages).
            assert_eq!(finding.code, FindingCode::ResponseMisrouted);
            continue;
        }
        if leak.fragment == Fragment::Text {
            // Another tenant's words, named by the request they came from.
            assert_eq!(finding.code, FindingCode::CrossTenantText);
            assert_ne!(leak.owner, leak.recipient);
            assert_eq!(
                leak.canary_id,
                format!("{}/text/{}", leak.owner, leak.seeded_in.unwrap())
            );
            // Named by a word only the owner sent, or by eight of its digits.
            let digits = tenantcheck::provenance::canonical(&leak.matched)
                .iter()
                .filter(|w| w.len() == 1 && w.as_bytes()[0].is_ascii_digit())
                .count();
            assert!(
                !leak.words.as_ref().unwrap().distinctive.is_empty() || digits >= tenantcheck::provenance::MIN_DIGITS,
                "{leak:?}"
            );
            assert!(leak.seeded_in.unwrap() < leak.returned_in, "sent before it came back");
            continue;
        }
        assert_eq!(finding.code, FindingCode::CrossTenantCanary);
        assert_ne!(leak.owner, leak.recipient);
        if leak.fragment == Fragment::Prose {
            // The owner's prose (which a short seed leaves in the pages a long prompt
            // reads): the message names it and the marks; each mark matched is one of
            // the owner's.
            assert_eq!(leak.canary_id, format!("{}/prose", leak.owner));
            assert!(
                finding.message.contains(&format!("tenant {}'s prose", leak.owner)),
                "{}",
                finding.message
            );
            let marks = secret.marks(&leak.owner).words;
            for word in leak.matched.split(", ") {
                assert!(marks.iter().any(|m| m.eq_ignore_ascii_case(word)), "{word}");
            }
            continue;
        }
        assert!(finding.message.contains(&leak.canary_id));
        // The canary re-derives from the revealed secret, and the match is part of it.
        let (owner, rest) = leak.canary_id.split_once('/').unwrap();
        let (case, index) = rest.rsplit_once('/').unwrap();
        assert_eq!(owner, leak.owner);
        let canary = secret.canary(owner, case, index.parse().unwrap());
        match leak.fragment {
            Fragment::Record => assert!(canary.record().contains(&leak.matched)),
            Fragment::Email => assert_eq!(canary.email.to_lowercase(), leak.matched.to_lowercase()),
            Fragment::Account => assert_eq!(canary.account, leak.matched),
            Fragment::Code => assert_eq!(canary.code.to_lowercase(), leak.matched.to_lowercase()),
            Fragment::EmailNear => assert!(
                leak.matched
                    .to_lowercase()
                    .ends_with(canary.email.split_once('@').unwrap().1)
            ),
            Fragment::Prose | Fragment::Passage | Fragment::Text => unreachable!("handled above"),
            // A foreign item named by its holder: the canary's name stands in the excerpt.
            Fragment::Name => {
                let excerpt = leak.excerpt.to_lowercase();
                for part in canary.name.to_lowercase().split(' ') {
                    assert!(excerpt.contains(part), "{} in {:?}", canary.name, leak.excerpt);
                }
            }
            Fragment::AccountNear => {
                let digits = |s: &str| s.chars().filter(char::is_ascii_digit).collect::<Vec<_>>();
                let off = digits(&canary.account)
                    .iter()
                    .zip(digits(&leak.matched))
                    .filter(|(a, b)| *a != b)
                    .count();
                assert!((1..=2).contains(&off), "{} against {}", leak.matched, canary.account);
            }
        }
        assert!(leak.seeded_in.unwrap() < leak.returned_in, "seeded before it came back");
    }
}

#[test]
fn healthy_standalone_sim_passes_through_a_profile() {
    let tmp = TempDir::new("healthy");
    let sim = Sim::start("key-a-ok", "key-b-ok", &[]);
    let profile = sim.profile(tmp.path());
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = run_vendor(&profile, &run_dir, "key-a-ok", "key-b-ok");
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let report = verified(&run_dir);
    assert!(
        report.cases.iter().all(|c| c.outcome.verdict == Verdict::Pass),
        "{:?}",
        report.cases
    );
    assert!(report.vendor.profile_sha256.is_some());
}

#[test]
fn a_wrong_key_gets_401_and_is_reported_as_a_profile_error() {
    let tmp = TempDir::new("wrongkey");
    let sim = Sim::start("key-a-right", "key-b-right", &[]);
    let profile = sim.profile(tmp.path());
    let (code, stdout, stderr) = output(
        tenantcheck()
            .args(["run", "--vendor"])
            .arg(&profile)
            .arg("--out")
            .arg(tmp.path().join("run"))
            .env("TENANTCHECK_KEY_A", "key-a-right")
            .env("TENANTCHECK_KEY_B", "wrong-key-value-b"),
    );
    assert_eq!(code, Some(2), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("vendor profile"), "{stderr}");
    assert!(
        stderr.contains("TENANTCHECK_KEY_B") && stderr.contains("HTTP 401"),
        "{stderr}"
    );
    assert!(!stderr.contains("wrong-key-value-b") && !stdout.contains("wrong-key-value-b"));
    // The refusal itself is evidence, recorded in the transcript.
    let transcript = std::fs::read_to_string(tmp.path().join("run").join(report::TRANSCRIPT_FILE)).unwrap();
    assert!(transcript.contains("\"status\":401"));
}

#[test]
fn a_missing_credential_or_a_bad_profile_is_an_error_before_any_request() {
    let tmp = TempDir::new("badprofile");
    let run_dir = tmp.path().join("run");
    let (code, _, stderr) = output(
        tenantcheck()
            .args([
                "run",
                "--vendor",
                concat!(env!("CARGO_MANIFEST_DIR"), "/vendors/sim.toml"),
                "--out",
            ])
            .arg(&run_dir),
    );
    assert_eq!(code, Some(2));
    assert!(stderr.contains("TENANTCHECK_KEY_A is not set"), "{stderr}");
    assert!(!run_dir.exists(), "nothing is written before the profile is usable");

    let bad = tmp.path().join("bad.toml");
    std::fs::write(&bad, "name = \"x\"\nadapter = \"openai-chat\"\n").unwrap();
    let (code, _, stderr) = output(tenantcheck().args(["run", "--vendor"]).arg(&bad));
    assert_eq!(code, Some(2));
    assert!(stderr.contains("bad.toml") && stderr.contains("base_url"), "{stderr}");
}

#[test]
fn list_shows_the_cases_and_sends_nothing() {
    let tmp = TempDir::new("list");
    let run_dir = tmp.path().join("run");
    let (code, stdout, _) = output(tenantcheck().args(["run", "--list", "--out"]).arg(&run_dir));
    assert_eq!(code, Some(0));
    assert!(stdout.contains("isolation.canary-residue: test"), "{stdout}");
    assert!(!run_dir.exists());
}

#[test]
fn no_credential_value_reaches_the_run_folder_stdout_or_stderr() {
    let key_a = "sk-MARKER-aaaa-0f1e2d3c4b5a";
    let key_b = "sk-MARKER-bbbb-a5b4c3d2e1f0";
    let tmp = TempDir::new("secrets");
    for (fault, want) in [(None, 0), (Some("stale-pages"), 1)] {
        let flags: Vec<&str> = fault.map(|f| vec!["--fault", f]).unwrap_or_default();
        let sim = Sim::start(key_a, key_b, &flags);
        let profile = sim.profile(tmp.path());
        let run_dir = tmp.path().join(format!("run-{}", fault.unwrap_or("healthy")));
        let (code, stdout, stderr) = run_vendor(&profile, &run_dir, key_a, key_b);
        assert_eq!(code, Some(want), "{stdout}{stderr}");
        let artifacts = files(&run_dir);
        assert!(artifacts.len() >= 4);
        for (name, text) in artifacts
            .iter()
            .map(|p| {
                (
                    p.display().to_string(),
                    String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned(),
                )
            })
            .chain([("stdout".to_string(), stdout), ("stderr".to_string(), stderr)])
        {
            assert!(!text.contains("sk-MARKER"), "a credential appears in {name}");
        }
    }
}

/// A vendor that echoes the caller's bearer key in every answer: redaction must keep it
/// out of the transcript and the report all the same.
#[test]
fn a_vendor_that_echoes_the_key_back_cannot_put_it_into_the_evidence() {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        for stream in listener.incoming().take(64) {
            let Ok(mut stream) = stream else { break };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut key, mut length, mut line) = (String::new(), 0usize, String::new());
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("authorization: bearer ") {
                    key = line[line.len() - v.len()..].trim().to_owned();
                }
                if let Some(v) = lower.strip_prefix("content-length: ") {
                    length = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let json = format!(
                r#"{{"choices":[{{"message":{{"role":"assistant","content":"your key is {key}"}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":10,"completion_tokens":4}},"data":[]}}"#
            );
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{json}",
                json.len()
            );
        }
    });
    let tmp = TempDir::new("echo");
    let profile = tmp.path().join("echo.toml");
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/vendors/sim.toml"))
        .unwrap()
        .replace("http://127.0.0.1:8080/v1", &format!("http://{addr}/v1"));
    std::fs::write(&profile, text).unwrap();
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = output(
        tenantcheck()
            .args(["run", "--test-threads", "1", "--vendor"])
            .arg(&profile)
            .arg("--out")
            .arg(&run_dir)
            .env("TENANTCHECK_KEY_A", "sk-ECHOED-aaaa")
            .env("TENANTCHECK_KEY_B", "sk-ECHOED-bbbb"),
    );
    // An echoing vendor fails cases; what matters here is what reaches the evidence.
    assert!(matches!(code, Some(0 | 1 | 3)), "{stdout}{stderr}");
    let transcript = std::fs::read_to_string(run_dir.join(report::TRANSCRIPT_FILE)).unwrap();
    assert!(
        transcript.contains("your key is [REDACTED]"),
        "the echo was recorded, redacted"
    );
    for p in files(&run_dir) {
        let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
        assert!(!text.contains("sk-ECHOED"), "a credential appears in {}", p.display());
    }
    assert!(!stdout.contains("sk-ECHOED") && !stderr.contains("sk-ECHOED"));
    drop(server);
}

/// The OpenAI-compatible adapter against the reference vendor, in-process: both modes
/// assemble the same answer and usage, and refusals are values with their codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapter_reads_streams_bodies_and_errors_alike() {
    use tenantcheck::adapter::{ChatRequest, OpenAiChat, Provider};
    use tenantcheck::credential::Secret;
    use tenantcheck::sim::{SimConfig, SimServer};

    let key = Secret::new("adapter-key");
    let mut config = SimConfig::new(vec![("a".into(), tenantcheck::sim::ApiKey::new(key.expose()))]);
    config.context = 256;
    let sim = SimServer::start(config, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let client = OpenAiChat::new(&sim.base_url(), "sim-1", std::time::Duration::from_secs(10)).unwrap();
    let ask = |stream: bool, content: &str, max_tokens: u32| ChatRequest {
        stream,
        ..ChatRequest::user(content, max_tokens)
    };
    let question = "alpha-7 is magenta. What is the value of alpha-7?";
    let plain = client.chat(&key, &ask(false, question, 32)).await;
    let streamed = client.chat(&key, &ask(true, question, 32)).await;
    for ex in [&plain, &streamed] {
        assert_eq!(ex.status, Some(200));
        assert_eq!(ex.content, "The value of alpha-7 is magenta.");
        assert_eq!(ex.finish_reason.as_deref(), Some("stop"));
        assert!(ex.timings.first_byte_ms.is_some());
    }
    let (first, second) = (plain.usage.unwrap(), streamed.usage.unwrap());
    assert_eq!(
        (first.prompt_tokens, first.completion_tokens),
        (second.prompt_tokens, second.completion_tokens)
    );
    assert!(first.prompt_tokens > 10);
    // The same key repeated the prompt: its whole 16-token blocks came from the
    // prefix cache, and the usage says so.
    assert_eq!(first.cached_tokens, Some(0));
    assert_eq!(second.cached_tokens, Some(16));
    assert!(streamed.frames.len() > 3 && streamed.frames.last().unwrap().data == "[DONE]");
    assert!(streamed.timings.first_token_ms.is_some());

    let cut = client.chat(&key, &ask(true, "one two three four five six", 3)).await;
    assert_eq!(
        (cut.content.as_str(), cut.finish_reason.as_deref()),
        ("one two three", Some("length"))
    );

    let long = "word ".repeat(400);
    for stream in [false, true] {
        let ex = client.chat(&key, &ask(stream, &long, 16)).await;
        assert_eq!(ex.status, Some(400));
        assert_eq!(ex.api_error.unwrap().code.as_deref(), Some("context_length_exceeded"));
    }
    let refused = client.chat(&Secret::new("nope"), &ask(false, "hi", 16)).await;
    assert_eq!(refused.status, Some(401));
    assert_eq!(refused.api_error.unwrap().code.as_deref(), Some("invalid_api_key"));

    sim.shutdown().await.unwrap();
    let gone = client.chat(&key, &ask(false, "hi", 16)).await;
    assert!(
        gone.transport_error.is_some() && gone.status.is_none(),
        "an error is a value: {gone:?}"
    );
}

#[test]
fn a_buyers_challenge_is_mixed_into_the_secret_and_checked_by_verify() {
    let tmp = TempDir::new("challenge");
    let run_dir = tmp.path().join("run");
    let (code, stdout, _) = output(
        tenantcheck()
            .args(["run", "--exact", "declared.kv-pool", "--challenge", "c0ffee42", "--out"])
            .arg(&run_dir),
    );
    assert_eq!(code, Some(0), "{stdout}");
    let report = verified(&run_dir);
    assert_eq!(report.run_secret.challenge.as_deref(), Some("c0ffee42"));
    let seed: [u8; 32] = tenantcheck::report::unhex(&report.run_secret.seed)
        .unwrap()
        .try_into()
        .unwrap();
    assert_eq!(
        RunSecret::derive(&seed, &[0xc0, 0xff, 0xee, 0x42]).to_hex(),
        report.run_secret.revealed
    );
    let transcript = std::fs::read_to_string(run_dir.join(report::TRANSCRIPT_FILE)).unwrap();
    assert!(
        transcript
            .lines()
            .next()
            .unwrap()
            .contains("\"challenge\":\"c0ffee42\""),
        "recorded before the first request"
    );

    let verify = |challenge: &str| output(verify_run(&run_dir).args(["--challenge", challenge]));
    let (code, stdout, _) = verify("c0ffee42");
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("mixes in the challenge c0ffee42"), "{stdout}");
    let (code, _, stderr) = verify("c0ffee43");
    assert_eq!(code, Some(1));
    assert!(stderr.contains("made for challenge c0ffee42, not c0ffee43"), "{stderr}");
    let (code, _, stderr) = verify("xyz");
    assert_eq!(code, Some(2), "bad hex is a usage error: {stderr}");
}

#[test]
fn a_request_two_cases_judge_is_sent_once_and_each_answers_for_it() {
    let tmp = TempDir::new("shared");
    // Stale pages: the prompt at the top of the context reads the other tenant's
    // seed, and both context cases judge it.
    let sim = Sim::start("shared-key-a", "shared-key-b", &["--fault", "stale-pages"]);
    let profile = sim.profile(tmp.path());
    let leaky = tmp.path().join("leaky");
    let (code, stdout, _) = run_vendor(&profile, &leaky, "shared-key-a", "shared-key-b");
    assert_eq!(code, Some(1), "{stdout}");
    let report = verified(&leaky);
    let exchanges = crate::common::transcript_exchanges(&leaky);
    let transcript = std::fs::read_to_string(leaky.join(report::TRANSCRIPT_FILE)).unwrap();
    let cites: Vec<(u64, String, Vec<u64>)> = transcript
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "cite")
        .map(|v| {
            let seqs = v["cites"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_u64().unwrap())
                .collect();
            (v["seq"].as_u64().unwrap(), v["case"].as_str().unwrap().to_owned(), seqs)
        })
        .collect();
    // The baseline and the prompt at the top, each with the seed before it.
    assert_eq!(cites.len(), 2, "{cites:?}");
    let leaks_in = |case: &str| -> Vec<u64> {
        let c = report.cases.iter().find(|c| c.id == case).unwrap();
        c.outcome
            .findings
            .iter()
            .filter_map(|f| f.leak.as_ref())
            .map(|l| l.returned_in)
            .collect()
    };
    let (at, judge, seqs) = &cites[1];
    let top = *seqs.last().unwrap();
    let sender = exchanges[&top]["case"].as_str().unwrap();
    assert_ne!(sender, judge);
    assert!(
        leaks_in(sender).contains(&top) && leaks_in(judge).contains(&top),
        "the leak at the top (#{top}) is each case's: {} and {}",
        sender,
        judge
    );
    let judged = report.cases.iter().find(|c| c.id == *judge).unwrap();
    assert_eq!(judged.outcome.verdict, Verdict::Fail);
    assert!(
        judged.outcome.summary.contains("was sent by"),
        "{}",
        judged.outcome.summary
    );
    let (_, stdout, _) = output(&mut verify_run(&leaky));
    assert!(
        stdout.contains("(4 more judged by a second case, through a cite line)"),
        "{stdout}"
    );

    // A tool that drops the citation from the transcript but keeps the leak in the
    // judge's findings: the leak is in no answer of the judge's.
    let err = rechained(&leaky, |lines| lines[*at as usize]["cites"] = serde_json::json!([])).unwrap_err();
    assert!(
        seqs.iter()
            .any(|s| err.contains(&format!("the report says #{s} holds canary"))),
        "{err}"
    );
    // The rewrite itself is sound: unchanged lines, re-chained, verify.
    assert_eq!(rechained(&leaky, |_| {}), Ok(()));
    // A citation of a line not yet written, or for a case the report lacks, or for a
    // case re-judged from its own lines alone, is refused.
    let err = rechained(&leaky, |lines| {
        lines[*at as usize]["cites"] = serde_json::json!([at + 1])
    })
    .unwrap_err();
    assert!(err.contains("which is no earlier exchange"), "{err}");
    let err = rechained(&leaky, |lines| lines[*at as usize]["case"] = "no.such-case".into()).unwrap_err();
    assert!(err.contains("cites for a case the report does not hold"), "{err}");
    let err = rechained(&leaky, |lines| lines[*at as usize]["case"] = "usage.consistency".into()).unwrap_err();
    assert!(err.contains("re-judged from its own lines"), "{err}");

    // Run alone, a case sends what it judges.
    let alone = tmp.path().join("alone");
    let (code, stdout, _) = run_exact(&profile, &alone, judge, "shared-key-a", "shared-key-b");
    assert_eq!(code, Some(1), "{stdout}");
    let text = std::fs::read_to_string(alone.join(report::TRANSCRIPT_FILE)).unwrap();
    assert!(!text.contains(r#""kind":"cite""#));
    let case = verified(&alone).cases.into_iter().find(|c| c.id == *judge).unwrap();
    assert_eq!(case.outcome.verdict, Verdict::Fail, "{}", case.outcome.summary);
}

#[test]
fn verify_re_judges_leaks_and_refusals_from_the_transcript() {
    use tenantcheck::outcome::{Finding, LeakEvidence};
    let tmp = TempDir::new("recheck");
    // A leaky vendor, and a report that hides the leak.
    let sim = Sim::start("recheck-key-a", "recheck-key-b", &["--fault", "stale-pages"]);
    let profile = sim.profile(tmp.path());
    let leaky = tmp.path().join("leaky");
    let (code, _, _) = run_vendor(&profile, &leaky, "recheck-key-a", "recheck-key-b");
    assert_eq!(code, Some(1));
    assert_eq!(resigned(&leaky, |_| {}), Ok(()), "re-signed unchanged, it verifies");
    // A careful liar: leak findings removed, verdicts and totals made consistent.
    let err = resigned(&leaky, |r| {
        for c in &mut r.cases {
            c.outcome.findings.retain(|f| f.code != FindingCode::CrossTenantCanary);
            if c.outcome.findings.is_empty() {
                c.outcome.verdict = Verdict::Pass;
            }
        }
        r.tally();
    })
    .unwrap_err();
    assert!(
        err.contains("re-check of") && err.contains("and the report no leak"),
        "{err}"
    );
    // A hasty one: one verdict edited from fail to pass, nothing else.
    let err = resigned(&leaky, |r| {
        let case = r.cases.iter_mut().find(|c| c.id == "isolation.canary-residue").unwrap();
        assert_eq!(case.outcome.verdict, Verdict::Fail);
        case.outcome.verdict = Verdict::Pass;
    })
    .unwrap_err();
    assert!(err.contains("cases add up to FAIL"), "{err}");
    let err = resigned(&leaky, |r| {
        let case = r.cases.iter_mut().find(|c| c.id == "isolation.canary-residue").unwrap();
        case.outcome.verdict = Verdict::Pass;
        r.tally();
    })
    .unwrap_err();
    assert!(err.contains("its verdict is PASS with"), "{err}");
    // The same through the binary: `verify --transcript` names the disagreement.
    let mut report = verified(&leaky);
    report.cases.iter_mut().for_each(|c| c.outcome.verdict = Verdict::Pass);
    report.tally();
    let signing = key::read_private(&leaky.join(key::PRIVATE_KEY_FILE)).unwrap();
    let edited = tmp.path().join("edited.dsse.json");
    std::fs::write(&edited, serde_json::to_vec(&report.sign(&signing)).unwrap()).unwrap();
    let (code, stdout, stderr) = output(
        tenantcheck()
            .arg("verify")
            .arg(&edited)
            .arg("--key")
            .arg(leaky.join(key::PUBLIC_KEY_FILE))
            .arg("--transcript")
            .arg(leaky.join(report::TRANSCRIPT_FILE)),
    );
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("ok: ed25519 signature"),
        "the signature itself is good: {stdout}"
    );
    assert!(
        stderr.contains("re-check of") && stderr.contains("disagrees with the signed report"),
        "{stderr}"
    );

    // A healthy vendor, and a report that invents a leak or a failed refusal.
    let healthy = tmp.path().join("healthy");
    let (code, _, _) = output(tenantcheck().args(["run", "--out"]).arg(&healthy));
    assert_eq!(code, Some(0));
    let err = resigned(&healthy, |r| {
        let case = r.cases.iter_mut().find(|c| c.id == "isolation.canary-residue").unwrap();
        case.outcome.findings.push(Finding {
            code: FindingCode::CrossTenantCanary,
            message: "invented".into(),
            leak: Some(LeakEvidence {
                canary_id: "b/isolation.canary-residue/0".into(),
                owner: "b".into(),
                recipient: "a".into(),
                fragment: Fragment::Record,
                matched: String::new(),
                excerpt: String::new(),
                seeded_in: None,
                returned_in: 5,
                words: None,
            }),
        });
        case.outcome.verdict = Verdict::Fail;
        r.tally();
    })
    .unwrap_err();
    assert!(
        err.contains("the report says #5 holds canary b/isolation.canary-residue/0, and it does not"),
        "{err}"
    );
    let err = resigned(&healthy, |r| {
        let case = r.cases.iter_mut().find(|c| c.id == "errors.semantics").unwrap();
        case.outcome.findings.push(Finding {
            code: FindingCode::FailureAsSuccess,
            message: "invented".into(),
            leak: None,
        });
        case.outcome.verdict = Verdict::Fail;
        r.tally();
    })
    .unwrap_err();
    assert!(
        err.contains("0 answers in the transcript are improper refusals, the report says 1"),
        "{err}"
    );
}

/// Rewrites a bundle with `change` applied to its files (the manifest included).
fn rebundle(bundle: &Path, change: impl Fn(&str, &mut Vec<u8>)) -> std::path::PathBuf {
    let bytes = std::fs::read(bundle).unwrap();
    let mut archive = tar::Archive::new(bytes.as_slice());
    let mut files = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut data).unwrap();
        change(&name, &mut data);
        files.push((name, data));
    }
    let out = bundle.with_file_name("changed.tar");
    let mut tar = tar::Builder::new(std::fs::File::create(&out).unwrap());
    for (name, data) in files {
        let mut header = tar::Header::new_ustar();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, name, data.as_slice()).unwrap();
    }
    tar.finish().unwrap();
    out
}

#[test]
fn a_bundle_holds_the_evidence_and_verify_checks_all_of_it() {
    use tenantcheck::bundle;
    let tmp = TempDir::new("bundle");
    let run_dir = tmp.path().join("run");
    let (code, stdout, _) = output(tenantcheck().args(["run", "--out"]).arg(&run_dir));
    assert_eq!(code, Some(0), "{stdout}");
    let (code, stdout, stderr) = output(tenantcheck().arg("bundle").arg(&run_dir));
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let path = run_dir.join(bundle::BUNDLE_FILE);
    let opened = bundle::open(&std::fs::read(&path).unwrap()).unwrap();
    assert!(!opened.file(report::TRANSCRIPT_FILE).is_empty());
    let verify = |p: &Path| {
        output(
            tenantcheck()
                .arg("verify")
                .arg(p)
                .arg("--key")
                .arg(run_dir.join(key::PUBLIC_KEY_FILE)),
        )
    };
    let (code, stdout, _) = verify(&path);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("matches the manifest") && stdout.contains("re-derived"),
        "{stdout}"
    );

    // One byte of the transcript changed, manifest left alone.
    let changed = rebundle(&path, |name, data| {
        if name == report::TRANSCRIPT_FILE {
            data[100] ^= 1;
        }
    });
    let (code, _, stderr) = verify(&changed);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("transcript.jsonl: SHA-256") && stderr.contains("the bundle was changed"),
        "{stderr}"
    );

    // The HTML edited to say FAIL where it said PASS, and the manifest made to match.
    let html = opened.file(report::HTML_FILE).to_vec();
    let edited = String::from_utf8(html)
        .unwrap()
        .replace("id=\"verdict\">PASS<", "id=\"verdict\">FAIL<");
    assert!(edited.contains("id=\"verdict\">FAIL<"));
    let edited = edited.into_bytes();
    let digest = tenantcheck::hex(&<sha2::Sha256 as sha2::Digest>::digest(&edited));
    let changed = rebundle(&path, |name, data| match name {
        "report.html" => *data = edited.clone(),
        "manifest.json" => {
            let mut m: bundle::Manifest = serde_json::from_slice(data).unwrap();
            let e = m.files.iter_mut().find(|f| f.name == "report.html").unwrap();
            e.sha256 = digest.clone();
            e.bytes = edited.len() as u64;
            *data = serde_json::to_vec(&m).unwrap();
        }
        _ => {}
    });
    let (code, _, stderr) = verify(&changed);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("report.html is not the signed report's own"),
        "{stderr}"
    );
}

#[test]
fn verify_re_judges_usage_from_the_transcript() {
    let tmp = TempDir::new("recheck-usage");
    let sim = Sim::start("usage-key-aaaa", "usage-key-bbbb", &["--fault", "usage-misreport"]);
    let profile = sim.profile(tmp.path());
    let run_dir = tmp.path().join("run");
    let (code, _, _) = run_vendor(&profile, &run_dir, "usage-key-aaaa", "usage-key-bbbb");
    assert_eq!(code, Some(1));
    assert_eq!(resigned(&run_dir, |_| {}), Ok(()));
    let err = resigned(&run_dir, |r| {
        let case = r.cases.iter_mut().find(|c| c.id == "usage.consistency").unwrap();
        assert_eq!(case.outcome.verdict, Verdict::Fail);
        case.outcome.findings.clear();
        case.outcome.verdict = Verdict::Pass;
        r.tally();
    })
    .unwrap_err();
    assert!(
        err.contains("usage mismatches in the transcript, the report says 0"),
        "{err}"
    );
}

#[test]
fn budgets_stop_sending_and_leave_the_cut_cases_inconclusive() {
    let tmp = TempDir::new("budget");
    for (flag, value, limit) in [
        ("--budget-prompt-tokens", "30000", 30_000u64),
        ("--budget-requests", "7", 7),
    ] {
        let run_dir = tmp.path().join(flag.trim_start_matches('-'));
        let (code, stdout, stderr) = output(tenantcheck().args(["run", "--out"]).arg(&run_dir).args([flag, value]));
        assert_eq!(code, Some(3), "none failed, some were cut short\n{stdout}\n{stderr}");
        let exchanges = crate::common::transcript_exchanges(&run_dir);
        let used = if flag == "--budget-requests" {
            exchanges.len() as u64
        } else {
            exchanges
                .values()
                .flat_map(|l| {
                    l["exchange"]["request"]["body"]["messages"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                })
                .map(|m| tenantcheck::sim::tokenizer::count(m["content"].as_str().unwrap_or_default()) as u64)
                .sum()
        };
        assert!(used <= limit, "{flag} {value}: {used} sent");
        assert!(used * 10 >= limit * 9, "{flag} {value}: the budget was used ({used})");
        let report = verified(&run_dir);
        // The cases run in a random order: those before the budget ran out may pass;
        // the one it cut and those after it are inconclusive, and none may pass
        // without having been run to its end.
        let sending: Vec<_> = report
            .cases
            .iter()
            .filter(|c| !c.probe.starts_with("declared."))
            .collect();
        assert!(
            sending.iter().any(|c| c.outcome.verdict != Verdict::Pass),
            "the budget cut the run short"
        );
        for c in &sending {
            assert_ne!(c.outcome.verdict, Verdict::Fail, "{}: {}", c.id, c.outcome.summary);
            if c.outcome.summary.contains("budget") {
                assert_eq!(c.outcome.verdict, Verdict::Inconclusive, "{}", c.id);
            }
        }
        assert!(
            report
                .cases
                .iter()
                .any(|c| c.outcome.summary.contains("the run's budget is spent")),
            "{stdout}"
        );
        assert!(stdout.contains("sent:       "), "{stdout}");
        // The trial list says what the report says, line by line.
        for c in &report.cases {
            let line = format!("test [{}] {} ... {}", c.threat, c.id, c.outcome.verdict.label());
            assert!(stdout.lines().any(|l| l == line), "{line} missing:\n{stdout}");
        }
        assert!(stdout.contains("test result: INCONCLUSIVE. "), "{stdout}");
        assert!(!stdout.contains("FAILED"), "{stdout}");
    }
    let (code, _, stderr) = output(tenantcheck().args(["run", "--budget-usd", "1"]));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("needs the vendor's prices"), "{stderr}");
}

/// The numbers of a `sent:` line or of the plan's `total` line, in order.
fn figures(line: &str) -> Vec<f64> {
    line.split_whitespace()
        .filter_map(|w| w.trim_start_matches('$').replace(',', "").parse().ok())
        .collect()
}

#[test]
fn the_plan_sends_nothing_and_foretells_what_a_run_sends() {
    let tmp = TempDir::new("plan");
    let (code, plan, stderr) = output(tenantcheck().args(["run", "--plan"]));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(plan.contains("nothing was sent"), "{plan}");
    assert!(
        !std::path::Path::new(tenantcheck::harness::DEFAULT_RUNS_DIR).exists() || !plan.contains("report:"),
        "a plan writes no report"
    );
    let mut rows: std::collections::BTreeMap<&str, Vec<f64>> = plan
        .lines()
        .skip_while(|l| !l.starts_with("case "))
        .skip(1)
        .take_while(|l| !l.starts_with("total"))
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| Some((l.split_whitespace().next()?, figures(l))))
        .collect();
    let at_most = figures(
        plan.lines()
            .find(|l| l.contains("at most (it stops"))
            .expect("the timing case's ceiling"),
    );
    // Each leak-rate bound with the whole plan asking for it, its floor (its exposures
    // at the top, a context each) and the ratio; at the bound the suite asks for (50%),
    // the whole plan is the plan's total.
    let total_contexts = *figures(plan.lines().find(|l| l.starts_with("total ")).expect("a total"))
        .last()
        .expect("the total's contexts");
    let bounds: Vec<(&str, Vec<f64>)> = plan
        .lines()
        .filter(|l| l.split_whitespace().next().is_some_and(|w| w.ends_with('%')))
        .map(|l| (l.split_whitespace().next().unwrap(), figures(l)))
        .collect();
    assert_eq!(bounds.len(), 5, "{plan}");
    for (rate, f) in &bounds {
        let (exposures, suite, floor, ratio) = (f[0], f[4], f[5], f[6]);
        assert_eq!(floor, exposures, "{rate}: {f:?}");
        assert!((ratio - suite / floor).abs() < 0.01, "{rate}: {f:?}");
        if *rate == "50%" {
            assert!(
                (suite - total_contexts).abs() < 0.02,
                "{rate}: {f:?}, total {total_contexts}\n{plan}"
            );
        }
    }

    let run_dir = tmp.path().join("run");
    let (_, stdout, stderr) = output(tenantcheck().args(["run", "--out"]).arg(&run_dir));
    let sent = figures(stdout.lines().find(|l| l.starts_with("sent:")).expect("a sent line"));
    let exchanges = crate::common::transcript_exchanges(&run_dir);
    assert_eq!(exchanges.len() as f64, sent[0], "{stderr}");
    let mut by_case: std::collections::BTreeMap<&str, (f64, f64)> = Default::default();
    // Prompt tokens as the vendor counted them (its usage; the local count where it
    // reported none), which the plan's "vendor counted" column foretells.
    let mut counted: std::collections::BTreeMap<&str, f64> = Default::default();
    for line in exchanges.values() {
        let tokens: u64 = line["exchange"]["request"]["body"]["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| tenantcheck::sim::tokenizer::count(m["content"].as_str().unwrap_or_default()) as u64)
            .sum::<u64>()
            // Stored objects' input (the Responses API), counted at four bytes a token.
            + line["exchange"]["request"]["body"]["input"].as_str().map_or(0, |i| i.len().div_ceil(4) as u64);
        let entry = by_case.entry(line["case"].as_str().unwrap()).or_default();
        entry.0 += 1.0;
        entry.1 += tokens as f64;
        let usage = line["exchange"]["usage"]["prompt_tokens"].as_u64().filter(|&n| n > 0);
        *counted.entry(line["case"].as_str().unwrap()).or_default() += usage.unwrap_or(tokens) as f64;
    }
    assert_eq!(
        rows.len(),
        by_case.len() + 2,
        "every case and the preflight have a row (two declared cases send nothing)\n{plan}"
    );
    // Requests two cases judge are sent by whichever runs first, an order each run
    // draws anew (the plan runs the suite's order): such cases are compared together.
    let transcript = std::fs::read_to_string(run_dir.join(tenantcheck::report::TRANSCRIPT_FILE)).unwrap();
    let mut together: Vec<(String, String)> = Vec::new();
    for line in transcript.lines().filter(|l| l.contains(r#""kind":"cite""#)) {
        let cite: serde_json::Value = serde_json::from_str(line).unwrap();
        let sender = exchanges[&cite["cites"][0].as_u64().unwrap()]["case"]
            .as_str()
            .unwrap()
            .to_owned();
        together.push((cite["case"].as_str().unwrap().to_owned(), sender));
    }
    assert!(
        together
            .iter()
            .any(|(a, b)| a.starts_with("context.") && b.starts_with("context.")),
        "context.boundary and context.recall share their baseline and their prompt at the top: {together:?}"
    );
    assert!(
        plan.contains("shared: context."),
        "the plan says which requests are shared\n{plan}"
    );
    for (judge, sender) in &together {
        for (a, b) in [(judge.as_str(), sender.as_str()), (sender.as_str(), judge.as_str())] {
            // `a`'s figures move into `b`'s row, in the plan and in the run alike.
            let (Some(from), Some(into)) = (rows.get(a).cloned(), by_case.get(a).copied()) else {
                continue;
            };
            if a == b || !rows.contains_key(b) {
                continue;
            }
            rows.remove(a);
            let row = rows.get_mut(b).unwrap();
            for (x, y) in row.iter_mut().zip(from) {
                *x += y;
            }
            by_case.remove(a);
            let entry = by_case.get_mut(b).unwrap();
            entry.0 += into.0;
            entry.1 += into.1;
            let c = counted.remove(a).unwrap_or(0.0);
            *counted.get_mut(b).unwrap() += c;
            break;
        }
    }
    for (case, (requests, tokens)) in &by_case {
        let row = &rows[case];
        if *case == "cache.response-reuse" {
            // Its timed pairs stop when their sign test decides, which depends on the
            // timing noise of the moment: between one pair and its ceiling (ten
            // requests and four a pair, 24 pairs).
            assert!(
                (14..=10 + 4 * 24).contains(&(*requests as u64)),
                "{case}: {requests} requests\n{plan}"
            );
            continue;
        }
        if *case == "cache.cross-tenant-timing" {
            // It stops when its sequential test decides, which depends on the timing
            // noise of the moment: the plan gives its ceiling.
            assert!(
                *requests <= at_most[0] && *tokens <= at_most[1],
                "{case}: {requests} requests\n{plan}"
            );
            continue;
        }
        // Within 10%; prompt tokens also within 64, since requests the vendor must
        // refuse (errors.semantics) are counted at 4 tokens each, whatever their size.
        // The embedded profile has no prices: the columns are requests, prompt tokens,
        // completion, vendor counted, contexts.
        for (what, p, s, slack) in [
            ("requests", row[0], *requests, 0.0),
            ("prompt tokens", row[1], *tokens, 64.0),
            ("prompt tokens the vendor counted", row[3], counted[case], 64.0),
        ] {
            assert!(
                (p - s).abs() <= 0.1 * s + slack,
                "{case}: {what} planned {p}, sent {s}\n{plan}\n{stdout}"
            );
        }
    }

    // A paid API's profile: no credential set, its host never contacted, priced.
    let paid = concat!(env!("CARGO_MANIFEST_DIR"), "/vendors/openai.toml");
    let (code, plan, stderr) =
        output(tenantcheck().args(["run", "--vendor", paid, "--plan", "--budget-usd", "0.01", "usage"]));
    assert_eq!(code, Some(0), "{stderr}");
    let row = plan
        .lines()
        .find(|l| l.starts_with("usage.consistency"))
        .expect("the case's row");
    let cells = figures(row);
    assert!(
        cells[1] > 200_000.0,
        "a prompt of a fifth of the 1M-token context: {row}"
    );
    let usd = cells[1] * 0.40 / 1e6 + cells[2] * 1.60 / 1e6;
    assert!((cells[3] - usd).abs() < 0.006, "{row}: ${usd:.4}");
    assert!(!plan.contains("isolation.canary-residue"), "the filter applies: {plan}");
    assert!(plan.contains("over budget: --budget-usd 0.01"), "{plan}");
}

#[test]
fn every_vendor_profile_lists_the_cases_without_credentials_or_requests() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/vendors");
    let mut listed = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        // No key is set and most base URLs are not reachable from here: --list must
        // need neither.
        let (code, stdout, stderr) = output(tenantcheck().args(["run", "--vendor"]).arg(&path).arg("--list"));
        assert_eq!(code, Some(0), "{}: {stderr}", path.display());
        assert!(
            stdout.contains("isolation.canary-residue: test"),
            "{}: {stdout}",
            path.display()
        );
        // And the plan: it sends nothing to the vendor either.
        let (code, stdout, stderr) =
            output(
                tenantcheck()
                    .args(["run", "--vendor"])
                    .arg(&path)
                    .args(["--plan", "--exact", "stream.integrity"]),
            );
        assert_eq!(code, Some(0), "{}: {stderr}", path.display());
        let total = stdout.lines().find(|l| l.starts_with("total")).expect("a total line");
        assert!(figures(total)[0] >= 3.0, "{}: {stdout}", path.display());
        listed += 1;
    }
    assert!(listed >= 15, "{listed} profiles");
}

#[test]
fn declared_versions_are_read_as_their_engines_write_them_and_never_fail_open() {
    let sim = Sim::start("advisory-key-a-01", "advisory-key-b-01", &[]);
    let tmp = TempDir::new("advisories");
    let base = std::fs::read_to_string(sim.profile(tmp.path())).unwrap();
    for (version, verdict) in [
        ("0.5.21.post1", Verdict::Fail),
        ("0.5.22rc1", Verdict::Fail),
        ("v0.5.21-cu124", Verdict::Fail),
        ("0.5.22", Verdict::Pass),
        ("0.5.22+cu124", Verdict::Pass),
        ("0.5.22-custom", Verdict::Inconclusive),
        ("nightly", Verdict::Inconclusive),
    ] {
        let profile = tmp.path().join(format!("{version}.toml"));
        let text = base
            .replace("engine = \"tenantcheck-sim\"", "engine = \"sglang\"")
            .replace("engine_version = \"0.1.0\"", &format!("engine_version = \"{version}\""));
        std::fs::write(&profile, text).unwrap();
        let run_dir = tmp.path().join(format!("run-{version}"));
        let (code, stdout, stderr) = run_exact(
            &profile,
            &run_dir,
            "declared.advisories",
            "advisory-key-a-01",
            "advisory-key-b-01",
        );
        let report = verified(&run_dir);
        let c = report.cases.iter().find(|c| c.id == "declared.advisories").unwrap();
        assert_eq!(
            c.outcome.verdict, verdict,
            "{version}: {}\n{stdout}\n{stderr}",
            c.outcome.summary
        );
        let want = match verdict {
            Verdict::Fail => 1,
            Verdict::Pass => 0,
            _ => 3,
        };
        assert_eq!(code, Some(want), "{version}");
        if verdict == Verdict::Inconclusive {
            assert!(c.outcome.summary.contains("undecided"), "{}", c.outcome.summary);
        }
    }
}

#[test]
fn verify_re_derives_the_power_of_a_pass_from_the_transcript() {
    let tmp = TempDir::new("power");
    let healthy = tmp.path().join("healthy");
    let (code, stdout, _) = output(
        tenantcheck()
            .args(["run", "--exact", "isolation.canary-residue", "--out"])
            .arg(&healthy),
    );
    assert_eq!(code, Some(0), "{stdout}");
    let report = verified(&healthy);
    let power = report
        .cases
        .iter()
        .find_map(|c| c.outcome.power.clone())
        .expect("the case reports its power");
    assert!(power.power >= power.min_power && power.bands.iter().all(|b| b.echoed == b.answers));
    fn isolation(r: &mut Report) -> &mut tenantcheck::outcome::Outcome {
        &mut r
            .cases
            .iter_mut()
            .find(|c| c.id == "isolation.canary-residue")
            .unwrap()
            .outcome
    }
    // Echoes the transcript does not show.
    let err = resigned(&healthy, |r| {
        let p = isolation(r).power.as_mut().unwrap();
        p.bands[0].echoed.pop();
    })
    .unwrap_err();
    assert!(err.contains("read back in"), "{err}");
    // More exposures than were sent after another tenant's request.
    let err = resigned(&healthy, |r| {
        let p = isolation(r).power.as_mut().unwrap();
        p.bands[0].exposed = p.bands[0].answers.clone();
    })
    .unwrap_err();
    assert!(
        err.contains("is named an exposure, but no other tenant's request"),
        "{err}"
    );
    // A power the figures do not give.
    let err = resigned(&healthy, |r| isolation(r).power.as_mut().unwrap().power = 0.999_999).unwrap_err();
    assert!(err.contains("by the transcript"), "{err}");
    // A lower bar than the case's.
    let err = resigned(&healthy, |r| isolation(r).power.as_mut().unwrap().min_power = 0.5).unwrap_err();
    assert!(err.contains("its parameters say otherwise"), "{err}");
    // Another form than the trials choose, or trial echoes the transcript lacks.
    let err = resigned(&healthy, |r| {
        isolation(r).power.as_mut().unwrap().form = Some(tenantcheck::canary::Form::Code)
    })
    .unwrap_err();
    assert!(err.contains("but its trials choose"), "{err}");
    let err = resigned(&healthy, |r| {
        isolation(r).power.as_mut().unwrap().trials[1].echoed.pop();
    })
    .unwrap_err();
    assert!(err.contains("code trial read back"), "{err}");
    // Foreign content the transcript does not show.
    let err = resigned(&healthy, |r| {
        let p = isolation(r).power.as_mut().unwrap();
        let last = p.bands.len() - 1;
        p.bands[last].foreign = p.bands[last].answers.clone();
    })
    .unwrap_err();
    assert!(err.contains("foreign content"), "{err}");
}

#[test]
fn strangers_records_in_long_answers_fail_isolation_and_verify_re_derives_the_rise() {
    let sim = Sim::start(
        "bg-key-a-0001",
        "bg-key-b-0001",
        &["--fault", "stale-pages", "--background-tenant"],
    );
    let tmp = TempDir::new("foreign");
    let profile = sim.profile(tmp.path());
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = run_exact(
        &profile,
        &run_dir,
        "isolation.canary-residue",
        "bg-key-a-0001",
        "bg-key-b-0001",
    );
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    let report = verified(&run_dir);
    let c = report
        .cases
        .iter()
        .find(|c| c.id == "isolation.canary-residue")
        .unwrap();
    // Stale pages may also hand tenant a stretches of tenant b's own requests, which
    // are named as b's (`CrossTenantText`) ahead of the strangers' records.
    assert!(
        c.outcome
            .summary
            .contains("suspected data of customers outside the run"),
        "{}",
        c.outcome.summary
    );
    let finding = c
        .outcome
        .findings
        .iter()
        .find(|f| f.code == FindingCode::ForeignContent)
        .expect("a finding of foreign content");
    assert!(finding.message.contains('@'), "{}", finding.message);
    let power = c.outcome.power.as_ref().unwrap();
    assert!(power.foreign_rise().is_some());
    assert!(
        power.trials.iter().all(|t| t.foreign.is_empty()),
        "short answers are the run's own"
    );
    // A report that passes over the rise does not verify.
    let err = resigned(&run_dir, |r| {
        let o = &mut r
            .cases
            .iter_mut()
            .find(|c| c.id == "isolation.canary-residue")
            .unwrap()
            .outcome;
        o.findings.retain(|f| f.code != FindingCode::ForeignContent);
        // Passed, unless findings of another kind (another tenant's text) remain.
        if o.findings.is_empty() {
            o.verdict = Verdict::Pass;
            r.verdict = Verdict::Pass;
            r.totals.passed = 1;
            r.totals.failed = 0;
        }
    })
    .unwrap_err();
    assert!(err.contains("does not fail on"), "{err}");
}

/// Strangers whose names are drawn from the canaries' own pools (common names, shared
/// with the run's holders) decode into long answers under `stale-pages`: isolation
/// fails on the rise of content no prompt held, and no finding names a stranger's
/// record as a run tenant's: a common name with nothing of the holder's record beside
/// it is no holder ([`tenantcheck::holder`]). `TENANTCHECK_STRANGER_RUNS` sets the
/// runs (default 1; `docs/benchmarks.md` has 20).
#[test]
fn strangers_with_common_names_are_never_named_as_the_run_tenants() {
    let runs: u32 = std::env::var("TENANTCHECK_STRANGER_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let (mut itemised, mut named) = (0, 0);
    for run in 0..runs {
        let sim = Sim::start(
            "cn-key-a-0001",
            "cn-key-b-0001",
            &["--fault", "stale-pages", "--common-name-strangers"],
        );
        let tmp = TempDir::new("common-names");
        let profile = sim.profile(tmp.path());
        let run_dir = tmp.path().join("run");
        let (code, stdout, stderr) = run_exact(
            &profile,
            &run_dir,
            "isolation.canary-residue",
            "cn-key-a-0001",
            "cn-key-b-0001",
        );
        assert_eq!(code, Some(1), "{stdout}\n{stderr}");
        let report = verified(&run_dir);
        let c = report
            .cases
            .iter()
            .find(|c| c.id == "isolation.canary-residue")
            .unwrap();
        let lines = crate::common::transcript_exchanges(&run_dir);
        itemised += c
            .outcome
            .findings
            .iter()
            .filter(|f| f.code == FindingCode::ForeignContent)
            .count();
        // Every record a finding names by its holder: none of it a stranger's (whose
        // records end "balance due on renewal", where the run's carry a note).
        for leak in c.outcome.findings.iter().filter_map(|f| f.leak.as_ref()) {
            if leak.fragment != tenantcheck::canary::Fragment::Name {
                continue;
            }
            named += 1;
            let answer = lines[&leak.returned_in]["exchange"]["content"]
                .as_str()
                .unwrap_or_default();
            let at = answer.find(&leak.excerpt).unwrap_or(0);
            let record = answer[at..].split(". ").next().unwrap_or_default();
            assert!(
                !record.contains("balance due on renewal"),
                "run {run}: a stranger's record named as {}'s: {leak:?}\n{record}",
                leak.owner
            );
        }
    }
    eprintln!("{runs} runs: {itemised} answers itemised as foreign content, {named} records named by a holder");
    assert!(itemised > 0, "the strangers' records never came back");
}

#[test]
fn a_lost_fact_names_the_strangers_records_and_the_degenerate_answer_that_took_its_place() {
    let sim = Sim::start(
        "bg-key-a-0002",
        "bg-key-b-0002",
        &["--fault", "stale-pages", "--background-tenant"],
    );
    let tmp = TempDir::new("foreign-boundary");
    let profile = sim.profile(tmp.path());
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = run_exact(&profile, &run_dir, "context.boundary", "bg-key-a-0002", "bg-key-b-0002");
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    let report = verified(&run_dir);
    let c = report.cases.iter().find(|c| c.id == "context.boundary").unwrap();
    let lost: Vec<&str> = c
        .outcome
        .findings
        .iter()
        .filter(|f| f.code == FindingCode::NeedleLost)
        .map(|f| f.message.as_str())
        .collect();
    assert!(!lost.is_empty(), "{}", c.outcome.summary);
    for message in &lost {
        assert!(
            message.contains("suspected data of a customer outside the run") && message.contains('@'),
            "{message}"
        );
        assert!(message.contains("a degenerate answer"), "{message}");
    }
    // The same engine without the fault: the stranger's pages are never read.
    let healthy = Sim::start("bg-key-a-0003", "bg-key-b-0003", &["--background-tenant"]);
    let tmp = TempDir::new("foreign-boundary-healthy");
    let profile = healthy.profile(tmp.path());
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = run_exact(&profile, &run_dir, "context.boundary", "bg-key-a-0003", "bg-key-b-0003");
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
}

#[test]
fn a_model_that_reads_nothing_back_leaves_isolation_inconclusive_with_its_power() {
    let sim = Sim::start("weak-key-a-0001", "weak-key-b-0001", &["--weak-model"]);
    let tmp = TempDir::new("weak-power");
    let profile = sim.profile(tmp.path());
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = run_exact(
        &profile,
        &run_dir,
        "isolation.canary-residue",
        "weak-key-a-0001",
        "weak-key-b-0001",
    );
    assert_eq!(code, Some(3), "{stdout}\n{stderr}");
    let report = verified(&run_dir);
    let c = report
        .cases
        .iter()
        .find(|c| c.id == "isolation.canary-residue")
        .unwrap();
    assert_eq!(c.outcome.verdict, Verdict::Inconclusive);
    let power = c.outcome.power.as_ref().unwrap();
    assert_eq!(power.power, 0.0);
    assert!(
        c.outcome.summary.contains("power 0.0000 (needs 0.99)"),
        "{}",
        c.outcome.summary
    );
}

#[test]
fn a_renamed_case_is_re_judged_by_the_probe_it_ran() {
    // A suite that names errors.semantics's probe and usage.consistency's otherwise.
    let tmp = TempDir::new("renamed");
    let suite = tmp.path().join("suite");
    for (from, to, id) in [
        ("suite/errors/semantics.toml", "api/refusals.toml", "api.refusals"),
        ("suite/usage/consistency.toml", "api/billing.toml", "api.billing"),
    ] {
        let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(from)).unwrap();
        let old = from
            .trim_start_matches("suite/")
            .trim_end_matches(".toml")
            .replace('/', ".");
        let text = text.replace(&format!("id = \"{old}\""), &format!("id = \"{id}\""));
        std::fs::create_dir_all(suite.join("api")).unwrap();
        std::fs::write(suite.join(to), text).unwrap();
    }
    let sim = Sim::start(
        "ren-key-a-0001",
        "ren-key-b-0001",
        &["--fault", "error-as-200", "--fault", "usage-misreport"],
    );
    let profile = sim.profile(tmp.path());
    let run_dir = tmp.path().join("run");
    let mut cmd = tenantcheck();
    cmd.args(["run", "--vendor"])
        .arg(&profile)
        .arg("--suite")
        .arg(&suite)
        .arg("--out")
        .arg(&run_dir)
        .env("TENANTCHECK_KEY_A", "ren-key-a-0001")
        .env("TENANTCHECK_KEY_B", "ren-key-b-0001");
    let (code, stdout, stderr) = output(&mut cmd);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    let report = verified(&run_dir);
    for (id, code) in [
        ("api.refusals", FindingCode::FailureAsSuccess),
        ("api.billing", FindingCode::UsageMismatch),
    ] {
        let c = report.cases.iter().find(|c| c.id == id).unwrap();
        assert_eq!(c.outcome.verdict, Verdict::Fail, "{}", c.outcome.summary);
        // Each case's findings dropped from a re-signed report: verify re-judges the
        // case by its probe, whatever its id, and refuses the report.
        let err = resigned(&run_dir, |r| {
            let o = &mut r.cases.iter_mut().find(|c| c.id == id).unwrap().outcome;
            o.findings.retain(|f| f.code != code);
            if o.findings.is_empty() {
                o.verdict = Verdict::Pass;
            }
            r.tally();
        })
        .unwrap_err();
        assert!(err.contains(id), "{id}: {err}");
    }
}

/// Reports chain across runs (`run --previous`), and `diff` shows what changed between
/// two verified reports, exiting 1 on a regression, as a vendor's release CI needs.
#[test]
fn diff_shows_a_regression_between_chained_reports_and_exits_one() {
    let tmp = TempDir::new("diff");
    let case = "stream.integrity";
    let run = |tag: &str, flags: &[&str], previous: Option<&Path>| {
        let sim = Sim::start("diff-key-a-1", "diff-key-b-1", flags);
        let dir = tmp.path().join(tag);
        std::fs::create_dir_all(&dir).unwrap();
        let profile = sim.profile(&dir);
        let run_dir = dir.join("run");
        let mut cmd = tenantcheck();
        cmd.args(["run", "--vendor"])
            .arg(&profile)
            .arg("--out")
            .arg(&run_dir)
            .args(["--exact", case])
            .env("TENANTCHECK_KEY_A", "diff-key-a-1")
            .env("TENANTCHECK_KEY_B", "diff-key-b-1");
        if let Some(p) = previous {
            cmd.arg("--previous").arg(p);
        }
        let (code, stdout, stderr) = output(&mut cmd);
        assert!(matches!(code, Some(0 | 1)), "{tag}: {code:?}\n{stdout}\n{stderr}");
        run_dir.join(report::ENVELOPE_FILE)
    };
    let diff = |older: &Path, newer: &Path| output(tenantcheck().arg("diff").arg(older).arg(newer));

    let first = run("first", &[], None);
    let second = run("second", &["--fault", "stream-no-error-frame"], Some(&first));
    assert_eq!(
        verified(second.parent().unwrap()).previous.map(|p| p.sha256),
        Some(tenantcheck::hex(&<sha2::Sha256 as sha2::Digest>::digest(
            std::fs::read(&first).unwrap()
        )))
    );
    let (code, stdout, stderr) = diff(&first, &second);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("names the older as the run it follows"), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with(case) && l.contains("PASS -> FAIL") && l.ends_with("REGRESSION")),
        "{stdout}"
    );
    // Back to healthy: no regression (a failure that passes again is an improvement).
    let third = run("third", &[], Some(&second));
    let (code, stdout, _) = diff(&second, &third);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("0 regressed"), "{stdout}");
    // Out of order: the older does not follow the newer, and a pass lost is shown.
    let (code, stdout, _) = diff(&third, &second);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("does not name the older"), "{stdout}");

    // A report that does not verify is not compared.
    let tampered = tmp.path().join("third/run/tampered.dsse.json");
    let mut envelope: serde_json::Value = serde_json::from_slice(&std::fs::read(&third).unwrap()).unwrap();
    envelope["signatures"][0]["sig"] = serde_json::json!("AAAA");
    std::fs::write(&tampered, serde_json::to_vec(&envelope).unwrap()).unwrap();
    let (code, _, stderr) = diff(&first, &tampered);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("does not verify"), "{stderr}");

    // --previous must name a report.
    let sim = Sim::start("diff-key-a-1", "diff-key-b-1", &[]);
    let profile = sim.profile(tmp.path());
    let (code, _, stderr) = output(
        tenantcheck()
            .args(["run", "--vendor"])
            .arg(&profile)
            .arg("--out")
            .arg(tmp.path().join("bad"))
            .arg("--previous")
            .arg(&profile)
            .env("TENANTCHECK_KEY_A", "diff-key-a-1")
            .env("TENANTCHECK_KEY_B", "diff-key-b-1"),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--previous") && stderr.contains("not JSON"), "{stderr}");
}

/// A run of some of the suite's cases says so wherever its verdict is shown: the run's
/// last lines, `verify`, the Markdown and the HTML; the report records the selection.
#[test]
fn a_filtered_run_never_shows_a_bare_pass() {
    let tmp = TempDir::new("selection");
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) =
        output(
            tenantcheck()
                .args(["run", "--out"])
                .arg(&run_dir)
                .args(["usage", "--skip", "nothing-matches"]),
        );
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let says = "over a selection: 1 of the suite's";
    assert!(
        stdout.lines().any(|l| l.starts_with("verdict:") && l.contains(says)),
        "{stdout}"
    );
    let report = verified(&run_dir);
    let selection = report.selection.as_ref().expect("the selection is recorded");
    assert_eq!(selection.filter.as_deref(), Some("usage"));
    assert_eq!(selection.skip, ["nothing-matches"]);
    assert_eq!(selection.selected, 1);
    let (code, stdout, _) = output(&mut verify_run(&run_dir));
    assert_eq!(code, Some(0));
    assert!(
        stdout.lines().any(|l| l.starts_with("verified:") && l.contains(says)),
        "{stdout}"
    );
    let md = std::fs::read_to_string(run_dir.join(report::MARKDOWN_FILE)).unwrap();
    assert!(md.contains("**Over a selection: 1 of the suite"), "{md}");
    let html = std::fs::read_to_string(run_dir.join(report::HTML_FILE)).unwrap();
    assert!(html.contains("id=\"selection\""), "the HTML page says so too");

    // The whole suite selected: no selection, a plain verdict.
    let whole = tmp.path().join("whole");
    let (code, stdout, _) = output(
        tenantcheck()
            .args(["run", "--out"])
            .arg(&whole)
            .args(["--skip", "nothing-matches"]),
    );
    assert_eq!(code, Some(0), "{stdout}");
    assert!(verified(&whole).selection.is_none());
    assert!(!stdout.contains("over a selection"), "{stdout}");
}
