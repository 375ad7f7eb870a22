//! Leaks found by where the text came from, tested against classes of leak: the
//! reference vendor's leak transforms ([`tenantcheck::sim::transform`]) drawn at random,
//! placed in a random output field, against the one judgement the run and `verify`
//! share ([`tenantcheck::passage::Passages::judge`]).
//!
//! - Every leak that keeps at least [`KEPT`] words in a row of another tenant's request
//!   (canonical words: case, spacing, punctuation folded, numbers and addresses in one
//!   spelling), words the asking tenant never sent in that order, is found and named as
//!   that tenant's, from the line that sent it.
//! - Shorter leaks are found at a rate the test prints (`--nocapture`) and
//!   `docs/benchmarks.md` states, per transform family.
//! - The asking tenant's own text, transformed the same ways, is never another tenant's.
//!
//! `TENANTCHECK_LEAK_SEEDS` sets the number of draws (default 400).

use std::collections::BTreeMap;
use tenantcheck::adapter::{ApiError, Exchange, RecordedRequest, SseFrame};
use tenantcheck::canary::RunSecret;
use tenantcheck::passage::Passages;
use tenantcheck::prompt::{Placed, PromptBuilder};
use tenantcheck::provenance::canonical;
use tenantcheck::sim::transform::{Family, LeakTransform};

/// Words in a row of another tenant's text that a leak must keep to be found always.
const KEPT: usize = 20;

fn seeds() -> u64 {
    std::env::var("TENANTCHECK_LEAK_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400)
}

/// A tenant's long prompt: its records in its marked filler, as the suite sends them.
fn prompt(secret: &RunSecret, owner: &str, index: u32) -> String {
    let placed: Vec<Placed> = (0..6)
        .map(|i| Placed {
            depth: 0.1 + 0.15 * f64::from(i),
            text: secret.canary(owner, "prop", index * 10 + i).record(),
        })
        .collect();
    PromptBuilder::default().build(
        1500,
        &secret.filler(owner, "prop", index),
        "Below are customer records we keep on file.\n",
        &placed,
        "\nRead back the first record exactly as it is written.",
    )
}

fn request(text: &str) -> RecordedRequest {
    RecordedRequest {
        method: "POST".into(),
        url: "http://127.0.0.1:1/v1/chat/completions".into(),
        body: Some(serde_json::json!({"model": "m", "messages": [{"role": "user", "content": text}]})),
        ..Default::default()
    }
}

/// An answer carrying `text` in one of six places, chosen by `place`.
fn answer(request: RecordedRequest, text: &str, place: u64) -> Exchange {
    let ok = |body: serde_json::Value| Exchange {
        request: request.clone(),
        status: Some(200),
        body: Some(body.to_string()),
        ..Default::default()
    };
    let pieces = |n: usize| -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        chars.chunks(n).map(|c| c.iter().collect()).collect()
    };
    match place % 6 {
        0 => Exchange {
            content: text.into(),
            ..ok(serde_json::json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}))
        },
        1 => ok(
            serde_json::json!({"choices": [{"index": 0, "message": {"content": "Done.", "reasoning_content": text}}]}),
        ),
        2 => ok(
            serde_json::json!({"choices": [{"index": 0, "message": {"content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "save", "arguments": serde_json::json!({"note": text}).to_string()}}]}}]}),
        ),
        3 => {
            let tokens: Vec<serde_json::Value> = pieces(4)
                .iter()
                .map(|t| serde_json::json!({"token": t, "logprob": -0.1}))
                .collect();
            ok(
                serde_json::json!({"choices": [{"index": 0, "message": {"content": "Done."}, "logprobs": {"content": tokens}}]}),
            )
        }
        4 => Exchange {
            request,
            status: Some(200),
            frames: pieces(7)
                .iter()
                .map(|p| SseFrame {
                    event: None,
                    data: serde_json::json!({"choices": [{"index": 0, "delta": {"content": p}}]}).to_string(),
                    at_ms: 0.0,
                })
                .collect(),
            ..Default::default()
        },
        _ => Exchange {
            request,
            status: Some(400),
            api_error: Some(ApiError {
                kind: Some("invalid_request_error".into()),
                code: None,
                message: text.into(),
            }),
            ..Default::default()
        },
    }
}

/// Which words of `source` stand in a stretch the asking tenant sent too (six words in
/// a row of `asked`, such as an instruction every tenant's prompt ends with).
fn shared(source: &[String], asked: &[String]) -> Vec<bool> {
    let grams: std::collections::HashSet<&[String]> = asked.windows(6).collect();
    let mut shared = vec![false; source.len()];
    for (at, w) in source.windows(6).enumerate() {
        if grams.contains(w) {
            shared[at..at + 6].iter_mut().for_each(|s| *s = true);
        }
    }
    shared
}

/// The longest run of canonical words `leak` shares with `source`, of words not in
/// `shared`.
fn kept(leak: &[String], source: &[String], shared: &[bool]) -> usize {
    let mut best = 0;
    let mut prev = vec![0usize; source.len() + 1];
    for l in leak {
        let mut row = vec![0usize; source.len() + 1];
        for (j, s) in source.iter().enumerate() {
            if l == s && !shared[j] {
                row[j + 1] = prev[j] + 1;
                best = best.max(row[j + 1]);
            }
        }
        prev = row;
    }
    best
}

#[test]
fn another_tenants_text_in_any_form_and_field_is_named_as_theirs() {
    let secret = RunSecret::derive(&[7; 32], b"provenance");
    let (a_text, b_text) = (prompt(&secret, "a", 1), prompt(&secret, "b", 2));
    let b_words = canonical(&b_text);
    let asked = "Read back the first record exactly as it is written.";
    let b_shared = shared(&b_words, &[canonical(&a_text), canonical(asked)].concat());
    // Caught and drawn, by run kept (in buckets of five words) and by family.
    let mut by_kept: BTreeMap<usize, (u32, u32)> = BTreeMap::new();
    let mut by_family: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for seed in 0..seeds() {
        let mut passages = Passages::new(&["a".into(), "b".into()]);
        let said = |x: &str| answer(request(x), "Noted, thank you.", 0);
        assert_eq!(passages.judge(1, "a", &said(&a_text)).text, None);
        assert_eq!(passages.judge(2, "b", &said(&b_text)).text, None);
        let (leak, families) = LeakTransform::random(seed).apply(&b_text);
        let run = kept(&canonical(&leak), &b_words, &b_shared);
        let ex = answer(request(asked), &leak, seed);
        let hit = passages.judge(3, "a", &ex).text;
        if let Some(hit) = &hit {
            assert_eq!((hit.owner.as_str(), hit.source), ("b", 2), "seed {seed}: {hit:?}");
        }
        assert!(
            run < KEPT || hit.is_some(),
            "seed {seed}: {run} words of b's kept ({families:?}, place {}), not found: {leak:?}",
            seed % 6
        );
        let caught = u32::from(hit.is_some());
        let e = by_kept.entry(run / 5 * 5).or_default();
        (e.0, e.1) = (e.0 + caught, e.1 + 1);
        if run < KEPT {
            for f in &families {
                let e = by_family.entry(format!("{f:?}")).or_default();
                (e.0, e.1) = (e.0 + caught, e.1 + 1);
            }
        }
    }
    println!("caught / drawn, by words kept in a row: {by_kept:?}");
    println!("caught / drawn below {KEPT} words kept, by family drawn: {by_family:?}");
}

#[test]
fn the_askers_own_text_in_any_form_is_nobody_elses() {
    let secret = RunSecret::derive(&[9; 32], b"provenance");
    let (a_text, b_text, a_later) = (
        prompt(&secret, "a", 1),
        prompt(&secret, "b", 2),
        prompt(&secret, "a", 3),
    );
    for seed in 0..seeds() {
        let mut passages = Passages::new(&["a".into(), "b".into()]);
        let said = |x: &str| answer(request(x), "Noted, thank you.", 0);
        passages.judge(1, "a", &said(&a_text));
        passages.judge(2, "b", &said(&b_text));
        // Its earlier request's text, and the text of the request it answers.
        let (earlier, _) = LeakTransform::random(seed).apply(&a_text);
        let (own, families) = LeakTransform::random(seed ^ 1).apply(&a_later);
        for (seq, text) in [(3, earlier), (4, own)] {
            let ex = answer(request(&a_later), &text, seed);
            let judged = passages.judge(seq, "a", &ex);
            assert_eq!(judged.text, None, "seed {seed} ({families:?}): {text:?}");
        }
    }
}

#[test]
fn every_family_alone_keeps_a_long_leak_attributable() {
    let secret = RunSecret::derive(&[5; 32], b"provenance");
    let (a_text, b_text) = (prompt(&secret, "a", 1), prompt(&secret, "b", 2));
    for family in Family::ALL.iter().filter(|f| **f != Family::Cut) {
        let mut passages = Passages::new(&["a".into(), "b".into()]);
        let said = |x: &str| answer(request(x), "Noted, thank you.", 0);
        passages.judge(1, "a", &said(&a_text));
        passages.judge(2, "b", &said(&b_text));
        let (leak, _) = LeakTransform::of(&[*family], 11).apply(&b_text);
        let ex = answer(request("Go on."), &leak, 0);
        let hit = passages
            .judge(3, "a", &ex)
            .text
            .unwrap_or_else(|| panic!("{family:?}: not found"));
        assert_eq!(hit.owner, "b", "{family:?}");
    }
}

/// Against the reference vendor under `stale-pages`, residue that comes back with every
/// number spelled out and every address read aloud (which no canary pattern matches)
/// fails the case that received it as the other tenant's data, naming that tenant and
/// the request it came from; and a re-signed report that leaves the finding out, or a
/// transcript rewritten so that the answer no longer holds it, does not verify.
#[test]
fn a_spelled_out_leak_is_named_as_the_other_tenants_and_verify_holds_the_report_to_it() {
    use crate::common::{Sim, TempDir, rechained, resigned, run_vendor, verified};
    use tenantcheck::outcome::{FindingCode, Verdict};
    let tmp = TempDir::new("provenance");
    let flags = [
        "--fault",
        "stale-pages",
        "--leak-transform",
        "digit-words,spelled-address,separators,whitespace",
        "--leak-seed",
        "3",
    ];
    let sim = Sim::start("key-a-provenance", "key-b-provenance", &flags);
    let profile = sim.profile(tmp.path());
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = run_vendor(&profile, &run_dir, "key-a-provenance", "key-b-provenance");
    assert_eq!(code, Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let report = verified(&run_dir);
    let isolation = report
        .cases
        .iter()
        .find(|c| c.id == "isolation.canary-residue")
        .unwrap();
    assert_eq!(isolation.outcome.verdict, Verdict::Fail);
    let finding = isolation
        .outcome
        .findings
        .iter()
        .find(|f| f.code == FindingCode::CrossTenantText)
        .expect("the spelled-out residue named as the other tenant's");
    let leak = finding.leak.as_ref().unwrap();
    assert_ne!(leak.owner, leak.recipient);
    let source = leak.seeded_in.unwrap();
    assert!(source < leak.returned_in);
    assert_eq!(leak.canary_id, format!("{}/text/{source}", leak.owner));
    assert!(
        finding.message.contains(&format!("tenant {}'s data", leak.owner)),
        "{}",
        finding.message
    );
    // The request it names is the owner's, and its canonical words hold the stretch.
    let lines = crate::common::transcript_exchanges(&run_dir);
    assert_eq!(lines[&source]["tenant"].as_str(), Some(leak.owner.as_str()));
    let sent = canonical(&tenantcheck::passage::request_text(
        &lines[&source]["exchange"]["request"]["body"],
    ))
    .join(" ");
    let words = canonical(&leak.matched);
    assert!(
        words.windows(6).any(|w| sent.contains(&w.join(" "))),
        "{:?}",
        leak.matched
    );

    let (at, id) = (leak.returned_in, isolation.id.clone());
    let err = resigned(&run_dir, |r| {
        let o = &mut r.cases.iter_mut().find(|c| c.id == id).unwrap().outcome;
        o.findings.retain(|f| f.code != FindingCode::CrossTenantText);
        // No canary pattern matches a spelled-out leak: it may have been the only
        // evidence, and a lying signer passes the case too.
        if o.findings.is_empty() {
            o.verdict = Verdict::Pass;
            r.tally();
        }
    })
    .unwrap_err();
    assert!(err.contains("another tenant's request text"), "{err}");
    let err = rechained(&run_dir, |lines| {
        lines[at as usize]["exchange"]["content"] = "Nothing of anyone's came back here.".into();
        lines[at as usize]["exchange"]["body"] = serde_json::Value::Null;
        lines[at as usize]["exchange"]["frames"] = serde_json::json!([]);
    })
    .unwrap_err();
    // Refused at that line (for this finding, or for a canary the same answer held).
    assert!(err.contains(&format!("#{at}")), "{err}");
}
