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

/// How many places [`answer`] puts a text in.
const PLACES: u64 = 8;

/// Whether [`answer`]'s `place` is one the vendor's machinery writes (a header, a
/// stream's comment), where a stretch names its owner by a distinctive word alone.
fn metadata_place(place: u64) -> bool {
    place % PLACES >= 6
}

/// An answer carrying `text` in one of [`PLACES`] places, chosen by `place`: the
/// content, reasoning, a tool call's arguments, logprob tokens, a stream's deltas, an
/// error message, a response header (folded to one line, as a header value must be),
/// and a stream's comment lines (an honest answer in its frames).
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
    match place % PLACES {
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
        6 => Exchange {
            headers: [
                ("content-type".to_owned(), "application/json".to_owned()),
                (
                    "x-debug-batch".to_owned(),
                    text.split_whitespace().collect::<Vec<_>>().join(" "),
                ),
            ]
            .into(),
            ..ok(serde_json::json!({"choices": [{"index": 0, "message": {"content": "Done."}}]}))
        },
        7 => Exchange {
            request,
            status: Some(200),
            frames: vec![SseFrame {
                event: None,
                data: serde_json::json!({"choices": [{"index": 0, "delta": {"content": "Done."}}]}).to_string(),
                at_ms: 0.0,
            }],
            stream_extra: text.lines().map(|l| format!(": {l}")).collect(),
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
/// `shared`: the words of `source` it covers.
fn kept_run<'s>(leak: &[String], source: &'s [String], shared: &[bool]) -> &'s [String] {
    let (mut best, mut end) = (0, 0);
    let mut prev = vec![0usize; source.len() + 1];
    for l in leak {
        let mut row = vec![0usize; source.len() + 1];
        for (j, s) in source.iter().enumerate() {
            if l == s && !shared[j] {
                row[j + 1] = prev[j] + 1;
                if row[j + 1] > best {
                    (best, end) = (row[j + 1], j + 1);
                }
            }
        }
        prev = row;
    }
    &source[end - best..end]
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
    // The chance of a coincidence each caught leak states (log10), by words kept.
    let mut chances: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    let marks = [secret.marks("a"), secret.marks("b")];
    let b_names: std::collections::HashSet<String> = marks[1].words.iter().flat_map(|w| canonical(w)).collect();
    // The records of both prompts, for the holders a template's re-set records name.
    let canaries: Vec<tenantcheck::canary::Canary> = (0..6)
        .flat_map(|i| [secret.canary("a", "prop", 10 + i), secret.canary("b", "prop", 20 + i)])
        .collect();
    let mut sighted = (0u32, 0u32);
    for seed in 0..seeds() {
        let mut passages = Passages::new(&["a".into(), "b".into()]).with_marks(&marks);
        let said = |x: &str| answer(request(x), "Noted, thank you.", 0);
        assert_eq!(passages.judge(1, "a", &said(&a_text)).text, None);
        assert_eq!(passages.judge(2, "b", &said(&b_text)).text, None);
        // Every other draw re-set by a template first (never drawn by `random`).
        let (leak, mut families) = match seed % 2 {
            0 => LeakTransform::random(seed).apply(&b_text),
            _ => LeakTransform::random(seed).apply(&LeakTransform::of(&[Family::Template], seed).apply(&b_text).0),
        };
        if seed % 2 == 1 {
            families.push(Family::Template);
        }
        let kept = kept_run(&canonical(&leak), &b_words, &b_shared);
        // In a header or a stream's comments a stretch names its owner by a distinctive
        // word alone: there, a run counts as long when it holds one of b's names.
        let run = match metadata_place(seed) && !kept.iter().any(|w| b_names.contains(w)) {
            true => 0,
            false => kept.len(),
        };
        let ex = answer(request(asked), &leak, seed);
        let hit = passages.judge(3, "a", &ex).text;
        if let Some(hit) = &hit {
            assert_eq!((hit.owner.as_str(), hit.source), ("b", 2), "seed {seed}: {hit:?}");
            assert!(hit.chance > 0.0 && hit.chance <= 1.0, "seed {seed}: {hit:?}");
            // A leak that keeps KEPT words holds two of the owner's invented names
            // (every sentence of its prose names two) or a record's digits.
            assert!(
                run < KEPT || hit.chance < 1e-3,
                "seed {seed}: {run} words of b's kept, a coincidence stated as {}: {hit:?}",
                hit.chance
            );
            chances.entry(run / 5 * 5).or_default().push(hit.chance.log10());
        }
        assert!(
            run < KEPT || hit.is_some(),
            "seed {seed}: {run} words of b's kept ({families:?}, place {}), not found: {leak:?}",
            seed % PLACES
        );
        // Records re-set by a template: their holders are sighted by name (what the
        // ledger does for every answer), never as a's own, whatever else was drawn.
        if families.contains(&Family::Template) {
            let found = tenantcheck::holder::sightings(&canaries, "a", &leak);
            assert!(found.iter().all(|s| s.canary.owner == "b"), "seed {seed}: {found:?}");
            sighted = (sighted.0 + u32::from(!found.is_empty()), sighted.1 + 1);
        }
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
    println!("records re-set by a template, their holders sighted / drawn: {sighted:?}");
    let stated: BTreeMap<usize, String> = chances
        .into_iter()
        .map(|(kept, mut c)| {
            c.sort_by(f64::total_cmp);
            let unbounded = c.iter().filter(|&&x| x >= 0.0).count();
            let median = c[c.len() / 2];
            let worst = c.iter().copied().filter(|x| *x < 0.0).fold(f64::MIN, f64::max);
            (
                kept,
                format!(
                    "median 1e{median:.0}, largest bounded 1e{worst:.0}, no bound {unbounded} of {}",
                    c.len()
                ),
            )
        })
        .collect();
    println!("chance of a coincidence stated by the caught, by words kept in a row: {stated:#?}");
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
    // A template keeps the records alone, re-set: its holders are sighted by name
    // (`tenantcheck::holder`, the ledger's), not its words by provenance.
    let canaries: Vec<tenantcheck::canary::Canary> = (0..6)
        .flat_map(|i| [secret.canary("a", "prop", 10 + i), secret.canary("b", "prop", 20 + i)])
        .collect();
    let (reset, _) = LeakTransform::of(&[Family::Template], 11).apply(&b_text);
    let sighted = tenantcheck::holder::sightings(&canaries, "a", &reset);
    assert!(
        !sighted.is_empty() && sighted.iter().all(|s| s.canary.owner == "b"),
        "{reset}: {sighted:?}"
    );
    for family in Family::ALL
        .iter()
        .filter(|f| !matches!(f, Family::Cut | Family::Template))
    {
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

    // The chance of a coincidence is stated: the filler names two of the owner's
    // invented names in every sentence, and a record's digits are drawn at random.
    let chance = leak.words.as_ref().unwrap().chance;
    assert!(chance < 1e-3, "{chance}: {:?}", leak.words);
    assert!(finding.message.contains("a coincidence at most"), "{}", finding.message);

    let (at, id) = (leak.returned_in, isolation.id.clone());
    // A report that makes the match look stronger than it is does not verify.
    let err = resigned(&run_dir, |r| {
        let o = &mut r.cases.iter_mut().find(|c| c.id == id).unwrap().outcome;
        for f in &mut o.findings {
            if let Some(w) = f.leak.as_mut().and_then(|l| l.words.as_mut()) {
                w.chance /= 1e6;
            }
        }
    })
    .unwrap_err();
    assert!(
        err.contains("the transcript shows") && err.contains("a coincidence at most"),
        "{err}"
    );
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

/// Runs `isolation.canary-residue` alone against the reference vendor with `flags`,
/// into a folder of its own, and requires it to fail; the folder (kept while the value
/// lives), the run folder and the case's verified report.
fn isolation_against(
    tag: &str,
    flags: &[&str],
) -> (
    crate::common::TempDir,
    std::path::PathBuf,
    tenantcheck::report::CaseReport,
) {
    use crate::common::{Sim, TempDir, run_exact, verified};
    let tmp = TempDir::new(tag);
    let (key_a, key_b) = (format!("key-a-{tag}"), format!("key-b-{tag}"));
    let sim = Sim::start(&key_a, &key_b, flags);
    let profile = sim.profile(tmp.path());
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = run_exact(&profile, &run_dir, ISOLATION, &key_a, &key_b);
    assert_eq!(code, Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let report = verified(&run_dir);
    let case = report.cases.into_iter().find(|c| c.id == ISOLATION).unwrap();
    assert_eq!(
        case.outcome.verdict,
        tenantcheck::outcome::Verdict::Fail,
        "{}",
        case.outcome.summary
    );
    (tmp, run_dir, case)
}

/// The case these runs fail.
const ISOLATION: &str = "isolation.canary-residue";

/// Where a leak's matched text stands in the answer recorded at `line`: the output
/// field ([`tenantcheck::provenance::outputs`]) whose canonical words hold it, by the
/// kind of field (`content`, `reasoning`, `tool-arguments`, `logprobs`), and whether the
/// answer was streamed.
fn placed(line: &serde_json::Value, matched: &str) -> (String, bool) {
    let exchange: Exchange = serde_json::from_value(line["exchange"].clone()).unwrap();
    let needle = canonical(matched).join(" ");
    let field = tenantcheck::provenance::outputs(&exchange)
        .into_iter()
        .find(|(_, text)| canonical(text).join(" ").contains(&needle))
        .map(|(name, _)| name)
        .unwrap_or_else(|| panic!("{matched:?} stands in no output field of #{}", line["seq"]));
    let kind = if field.contains("reasoning") {
        "reasoning"
    } else if field.contains("arguments") {
        "tool-arguments"
    } else if field.contains("logprobs") {
        "logprobs"
    } else {
        "content"
    };
    (kind.to_owned(), !exchange.frames.is_empty())
}

/// The reference vendor puts each leak in an output field drawn per answer
/// (`--leak-field random`: the content, a reasoning field, a tool call's arguments or
/// the logprob tokens alone), in plain answers and in streams, where each field comes
/// as its own kind of delta. Isolation streams every other rung, so the leaks it finds
/// must stand in streamed and plain answers alike, and in more than one kind of field;
/// the report that drops them does not verify.
#[test]
fn leaks_in_a_field_drawn_per_answer_are_found_in_plain_and_streamed_answers() {
    use crate::common::resigned;
    use std::collections::BTreeSet;
    use tenantcheck::outcome::Verdict;
    let flags = ["--fault", "stale-pages", "--leak-field", "random", "--leak-seed", "11"];
    let (_tmp, run_dir, isolation) = isolation_against("field", &flags);
    let case = ISOLATION;
    let lines = crate::common::transcript_exchanges(&run_dir);
    let mut seen = BTreeSet::new();
    for leak in isolation.outcome.findings.iter().filter_map(|f| f.leak.as_ref()) {
        assert_ne!(leak.owner, leak.recipient, "{leak:?}");
        seen.insert(placed(&lines[&leak.returned_in], &leak.matched));
    }
    eprintln!("leaks found, by field and whether streamed: {seen:?}");
    let fields: BTreeSet<&str> = seen.iter().map(|(f, _)| f.as_str()).collect();
    assert!(
        fields.len() >= 2,
        "every leak found stood in one kind of field: {seen:?}"
    );
    assert!(
        seen.iter().any(|(_, s)| *s),
        "no leak found in a streamed answer: {seen:?}"
    );
    assert!(
        seen.iter().any(|(_, s)| !*s),
        "no leak found in a plain answer: {seen:?}"
    );
    let err = resigned(&run_dir, |r| {
        let o = &mut r.cases.iter_mut().find(|c| c.id == case).unwrap().outcome;
        o.findings.clear();
        o.verdict = Verdict::Pass;
        r.tally();
    })
    .unwrap_err();
    assert!(err.contains("isolation.canary-residue"), "{err}");
}

/// Records whose every digit came back changed and whose addresses were turned around
/// (`--leak-transform renumber`) match nothing that was sent; isolation fails on the
/// rise in content no prompt held, and names each answer's foreign records as the
/// other tenant's by the holder's name that survived. `verify` re-derives whose they
/// are: a report that drops the name, or names another canary, does not verify.
#[test]
fn renumbered_records_are_named_as_the_other_tenants_by_their_holders_names() {
    use crate::common::resigned;
    use tenantcheck::canary::Fragment;
    use tenantcheck::outcome::FindingCode;
    let flags = [
        "--fault",
        "stale-pages",
        "--leak-transform",
        "renumber",
        "--leak-seed",
        "5",
    ];
    let (_tmp, run_dir, isolation) = isolation_against("renumber", &flags);
    let case = ISOLATION;
    let foreign: Vec<_> = isolation
        .outcome
        .findings
        .iter()
        .filter(|f| f.code == FindingCode::ForeignContent)
        .collect();
    let named: Vec<_> = foreign.iter().filter_map(|f| f.leak.as_ref()).collect();
    assert!(!named.is_empty(), "{}", isolation.outcome.summary);
    let lines = crate::common::transcript_exchanges(&run_dir);
    for leak in &named {
        assert_eq!(leak.fragment, Fragment::Name);
        assert_ne!(leak.owner, leak.recipient, "{leak:?}");
        assert!(
            leak.canary_id.starts_with(&format!("{}/{case}/", leak.owner)),
            "{leak:?}"
        );
        // The item came back in that answer, and the record it is no prompt held.
        let content = lines[&leak.returned_in]["exchange"]["content"].as_str().unwrap();
        assert!(content.contains(&leak.excerpt), "{leak:?}");
        assert!(leak.seeded_in.is_some_and(|s| s < leak.returned_in), "{leak:?}");
    }
    assert!(
        isolation.outcome.summary.contains("named by their holders' names"),
        "{}",
        isolation.outcome.summary
    );
    // "The rest" are the itemised answers no holder's name named, when there are any.
    assert_eq!(
        isolation
            .outcome
            .summary
            .contains("the rest suspected data of customers outside the run"),
        named.len() < foreign.len(),
        "{} named of {}: {}",
        named.len(),
        foreign.len(),
        isolation.outcome.summary
    );

    let at = named[0].returned_in;
    let err = resigned(&run_dir, |r| {
        let o = &mut r.cases.iter_mut().find(|c| c.id == case).unwrap().outcome;
        for f in o.findings.iter_mut().filter(|f| f.code == FindingCode::ForeignContent) {
            f.leak = None;
        }
    })
    .unwrap_err();
    assert!(
        err.contains("holders' names") && err.contains(&format!("({at}, \"")),
        "{err}"
    );
    let err = resigned(&run_dir, |r| {
        let o = &mut r.cases.iter_mut().find(|c| c.id == case).unwrap().outcome;
        let f = o
            .findings
            .iter_mut()
            .find(|f| f.leak.as_ref().is_some_and(|l| l.returned_in == at))
            .unwrap();
        f.leak.as_mut().unwrap().canary_id = format!("{}/{case}/9999", f.leak.as_ref().unwrap().owner);
    })
    .unwrap_err();
    // Refused by the names, or first by the leak the ledger sighted in the same line.
    assert!(
        err.contains("holders' names") || err.contains(&format!("#{at} holds canary")),
        "{err}"
    );
    let err = resigned(&run_dir, |r| {
        let o = &mut r.cases.iter_mut().find(|c| c.id == case).unwrap().outcome;
        let first = o
            .findings
            .iter()
            .position(|f| f.code == FindingCode::ForeignContent)
            .unwrap();
        o.findings.remove(first);
    })
    .unwrap_err();
    assert!(err.contains("foreign content to itemise"), "{err}");
}
