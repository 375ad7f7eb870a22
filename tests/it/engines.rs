//! The suite against a real inference engine nobody on this project wrote: llama.cpp's
//! server with SmolLM2-135M-Instruct on 127.0.0.1, started by CI
//! (`tests/engines/llama-server.sh`). Ignored by a plain `cargo test`; CI runs it with
//! `TENANTCHECK_LLAMA_URL` set:
//!
//! ```sh
//! bash tests/engines/llama-server.sh install
//! export TENANTCHECK_LLAMA_KEY_A=llama-key-a-1 TENANTCHECK_LLAMA_KEY_B=llama-key-b-1
//! bash tests/engines/llama-server.sh start 18091
//! TENANTCHECK_LLAMA_URL=http://127.0.0.1:18091/v1 cargo test --test it engines:: -- --ignored
//! ```
//!
//! Four more configurations run one case each: `--context-shift` (the boundary case),
//! `--slot-save-path` (the metadata case, allowed to change state), and three slots
//! with `--kv-unified` and without it (the noisy-neighbour case); CI
//! starts each server and names it in its own variable (see `.ci/run`).
//!
//! Whatever the engine really does is the expected result; each expectation below
//! says why, and `docs/real-engines.md` records the run.

use crate::common::{output, tenantcheck, verified};
use tenantcheck::outcome::{CacheDecision, FindingCode, Verdict};
use tenantcheck::report::Report;

/// Runs the llama suite (`tests/engines/llama-suite`) against the server whose URL the
/// variable `url_var` holds, with `args` after `run`, the profile's context and
/// concurrency as given; returns the exit code, the output and the verified report.
fn run_llama(
    url_var: &str,
    name: &str,
    context: u64,
    concurrency: u32,
    allow_state_changes: bool,
    args: &[&str],
) -> (Option<i32>, String, String, Report) {
    let url = std::env::var(url_var).unwrap_or_else(|_| panic!("{url_var} names the running server"));
    let tmp = crate::common::TempDir::new(name);
    let profile = tmp.path().join("llama-server.toml");
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/vendors/llama-server.toml"))
        .unwrap()
        .replace("http://127.0.0.1:8091/v1", &url)
        .replace("context_window = 2048", &format!("context_window = {context}"))
        .replace("max_concurrency = 4", &format!("max_concurrency = {concurrency}"))
        .replacen(
            "[[tenants]]",
            if allow_state_changes {
                "allow_state_changes = true\n\n[[tenants]]"
            } else {
                "[[tenants]]"
            },
            1,
        );
    std::fs::write(&profile, text).unwrap();
    let run_dir = tmp.path().join("run");
    let mut cmd = tenantcheck();
    cmd.args(["run", "--vendor"])
        .arg(&profile)
        .arg("--suite")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/engines/llama-suite"))
        .arg("--out")
        .arg(&run_dir)
        .args(args);
    for var in ["TENANTCHECK_LLAMA_KEY_A", "TENANTCHECK_LLAMA_KEY_B"] {
        cmd.env(
            var,
            std::env::var(var).unwrap_or_else(|_| panic!("{var} holds the key the server was given")),
        );
    }
    let (code, stdout, stderr) = output(&mut cmd);
    println!("{stdout}");
    crate::common::keep_artifact(&format!("llama-server-{name}.txt"), &stdout);
    let report = verified(&run_dir);
    (code, stdout, stderr, report)
}

#[test]
#[ignore = "needs llama-server on 127.0.0.1 (CI starts it; see the file's doc)"]
fn llama_server_with_a_real_model() {
    let (code, stdout, stderr, report) = run_llama(
        "TENANTCHECK_LLAMA_URL",
        "run",
        2048,
        4,
        false,
        &["--skip", "availability.noisy-neighbour"],
    );
    assert_eq!(code, Some(1), "cases fail, so the exit code is 1\n{stdout}\n{stderr}");
    let verdict = |id: &str| {
        let c = report.cases.iter().find(|c| c.id == id).unwrap();
        (c.outcome.verdict, c.outcome.summary.clone(), c)
    };

    // No tenant's canary ever reached the other: llama.cpp keeps each request's KV in
    // its own slot and writes the whole prompt before decoding. Whether that is a pass
    // depends on the power the 135M model gives the case: it reads back little of what
    // it is given, so the case reports its echo rates and is inconclusive below 0.99.
    let (v, why, c) = verdict("isolation.canary-residue");
    assert_ne!(v, Verdict::Fail, "{why}");
    let power = c.outcome.power.as_ref().expect("the case reports its power");
    assert_eq!(v == Verdict::Pass, power.power >= power.min_power, "{why}");
    assert!(why.contains("own content read back in"), "{why}");
    eprintln!("isolation on llama.cpp: {why}");
    let (v, why, _) = verdict("concurrency.binding");
    assert_ne!(v, Verdict::Fail, "no answer may hold another request's nonce: {why}");

    // The prompt cache is one per server, shared by every API key: the timing case
    // must find exactly that (the same key's repeat is cached, and so is the other
    // key's), and says so from the vendor's own usage too.
    let (v, why, case) = verdict("cache.cross-tenant-timing");
    assert_eq!(v, Verdict::Fail, "{why}");
    let decisions: Vec<CacheDecision> = case.outcome.timing.iter().map(|l| l.decision).collect();
    assert_eq!(
        decisions,
        [CacheDecision::CacheObserved, CacheDecision::Shared],
        "{why}"
    );

    // And the counter every answer carries (`timings.cache_n`) reads the other key's
    // prompt out of that cache: tenant b recovers tenant a's 4-digit secret, one digit
    // at a time, within 40 guesses.
    let (v, why, case) = verdict("cache.prefix-extraction");
    assert_eq!(v, Verdict::Fail, "{why}");
    let finding = &case.outcome.findings[0].message;
    assert!(
        finding.contains("(4 of 4 digits, equal to tenant a's secret"),
        "{finding}"
    );
    let guesses: u32 = finding
        .split(" guesses")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("the finding says how many guesses");
    assert!(guesses <= 40, "{finding}");
    eprintln!("extraction on llama.cpp: {finding}");

    // llama.cpp serves one model whatever `model` names, and answers an empty
    // `messages` list: two wrong requests answered 200. A real finding of
    // errors.semantics (T5), which must name both.
    let (v, why, case) = verdict("errors.semantics");
    assert_eq!(v, Verdict::Fail, "{why}");
    let findings: Vec<&str> = case.outcome.findings.iter().map(|f| f.message.as_str()).collect();
    assert!(findings.iter().any(|m| m.starts_with("unknown model")), "{findings:?}");
    assert!(findings.iter().any(|m| m.starts_with("empty messages")), "{findings:?}");

    // A prompt past the slot's context is refused with 400: no over-limit admission.
    // A 135M model mostly does not recall a fact even in a short prompt, so the
    // within-context checks cannot tell: inconclusive, never a failure (regression:
    // the boundary case once reported its own failed baseline as a lost needle; and
    // once a baseline that recalled the fact at its start but not the two after it,
    // then a long prompt that lost it: a model that recalls one fact in three now and
    // then is not shown able, so the baseline must recall every fact it states). Now
    // and then (the wording and the filler are drawn per run) it does recall every
    // fact in the short prompt and the one at the start of the long one: then the
    // boundary passes, as it should. Asked to generate past the end of the slot, the server stops there
    // (no context shift by default): no finding. Now and then the model ends its answer
    // on its own before the end of the slot (16 of 123 tokens of room, once): the case
    // then says generation past the context went untested, which is true.
    let (v, why, case) = verdict("context.boundary");
    assert_ne!(v, Verdict::Fail, "{why}");
    assert!(case.outcome.findings.is_empty(), "{:?}", case.outcome.findings);
    assert!(
        v == Verdict::Inconclusive || why.starts_with("effective context"),
        "a pass says how far the fact was recalled: {why}"
    );
    assert!(
        why.contains("stopped at the context")
            || why.contains("past its room: refused")
            || (why.contains("the model stopped after") && why.contains("generation past the context is untested")),
        "{why}"
    );
    assert!(
        case.outcome
            .sweep
            .iter()
            .any(|p| p.tokens > 2048 && p.result == tenantcheck::outcome::SweepResult::Refused),
        "the prompt past the context was refused: {:?}",
        case.outcome.sweep
    );
    let (v, why, _) = verdict("context.recall");
    assert_ne!(v, Verdict::Fail, "a weak model is not a fault: {why}");

    // Usage is consistent across lengths, and streams keep the grammar.
    assert_eq!(verdict("usage.consistency").0, Verdict::Pass);
    assert_eq!(verdict("stream.integrity").0, Verdict::Pass);

    // `/slots` shows every request being served, with its sampling parameters and
    // seed, to any key of the server: tenant b's key sees tenant a's request.
    let (v, why, case) = verdict("metadata.cross-tenant");
    assert_eq!(v, Verdict::Fail, "{why}");
    assert!(
        case.outcome
            .findings
            .iter()
            .any(|f| f.code == FindingCode::MetadataExposed
                && f.message
                    .starts_with("GET /slots showed tenant b's key tenant a's request in flight")),
        "{:?}",
        case.outcome.findings
    );
    eprintln!("metadata on llama.cpp: {}", case.outcome.findings[0].message);

    // No stored responses, nothing declared but the engine.
    for id in ["objects.cross-tenant", "declared.kv-pool", "declared.advisories"] {
        assert_eq!(verdict(id).0, Verdict::Skipped, "{id}");
    }
}

/// llama.cpp's server with `--context-shift`: a prompt near the end of a slot, asking
/// for more tokens than the room left, is answered in full by dropping the head of the
/// conversation. CI starts it with `TENANTCHECK_LLAMA_SHIFT_URL`.
#[test]
#[ignore = "needs llama-server --context-shift on 127.0.0.1 (CI starts it)"]
fn llama_server_with_context_shift_fails_the_boundary() {
    let (_, _, _, report) = run_llama(
        "TENANTCHECK_LLAMA_SHIFT_URL",
        "context-shift",
        2048,
        4,
        false,
        &["--exact", "context.boundary"],
    );
    let case = report.cases.iter().find(|c| c.id == "context.boundary").unwrap();
    assert_eq!(case.outcome.verdict, Verdict::Fail, "{}", case.outcome.summary);
    let shifted = case
        .outcome
        .findings
        .iter()
        .find(|f| f.code == FindingCode::ContextShifted)
        .unwrap_or_else(|| panic!("{:?}", case.outcome.findings));
    eprintln!("context shift on llama.cpp: {}", shifted.message);
}

/// llama.cpp's server with `--slot-save-path`: every key may save a slot (the KV and
/// tokens of whoever is in it) to the server's disk, restore a file into it and erase it.
/// With the profile's `allow_state_changes = true`, the metadata case tries each with
/// tenant b's key while tenant a's request runs. CI starts it with
/// `TENANTCHECK_LLAMA_SAVE_URL`.
#[test]
#[ignore = "needs llama-server --slot-save-path on 127.0.0.1 (CI starts it)"]
fn llama_server_with_slot_save_path_accepts_state_changes_from_another_key() {
    let (_, _, _, report) = run_llama(
        "TENANTCHECK_LLAMA_SAVE_URL",
        "slot-save-path",
        2048,
        4,
        true,
        &["--exact", "metadata.cross-tenant"],
    );
    let case = report.cases.iter().find(|c| c.id == "metadata.cross-tenant").unwrap();
    assert_eq!(case.outcome.verdict, Verdict::Fail, "{}", case.outcome.summary);
    let accepted: Vec<&str> = case
        .outcome
        .findings
        .iter()
        .filter(|f| f.code == FindingCode::StateChangeAccepted)
        .map(|f| f.message.as_str())
        .collect();
    for action in ["save", "restore", "erase"] {
        assert!(
            accepted
                .iter()
                .any(|m| m.contains(&format!("/slots/0?action={action}"))),
            "{action}: {accepted:?}"
        );
    }
    // Without a key, the server refuses them all.
    assert!(accepted.iter().all(|m| m.contains("tenant b's key")), "{accepted:?}");
    for m in &accepted {
        eprintln!("slot actions on llama.cpp: {m}");
    }
}

/// Tenant a's long prompts at its concurrency beside tenant b's short ones, on three
/// slots of 1,024 tokens: with `--kv-unified` the slots share one pool of 1,024 that two
/// of a's 600-token prompts overflow, and every stream in flight, b's too, ends in an
/// error frame "Context size has been exceeded" (HTTP 500 when not streamed); with a
/// pool per slot, b is served, slower (two CPU cores prefill a's prompts first), within
/// the llama suite's bound of 40 times its time alone. CI starts both, with `TENANTCHECK_LLAMA_UNIFIED_URL` and
/// `TENANTCHECK_LLAMA_SLOTS_URL`.
#[test]
#[ignore = "needs two llama-servers with three slots on 127.0.0.1 (CI starts them)"]
fn llama_server_with_a_unified_pool_fails_a_noisy_neighbour() {
    let verdict = |url_var: &str, name: &str| {
        let (_, _, _, report) = run_llama(
            url_var,
            name,
            1024,
            3,
            false,
            &["--exact", "availability.noisy-neighbour"],
        );
        let case = report
            .cases
            .iter()
            .find(|c| c.id == "availability.noisy-neighbour")
            .unwrap()
            .clone();
        eprintln!("noisy neighbour on llama.cpp ({name}): {}", case.outcome.summary);
        case
    };
    let unified = verdict("TENANTCHECK_LLAMA_UNIFIED_URL", "kv-unified");
    assert_eq!(unified.outcome.verdict, Verdict::Fail, "{}", unified.outcome.summary);
    assert!(
        unified
            .outcome
            .findings
            .iter()
            .any(|f| f.code == FindingCode::NoisyNeighbour),
        "{:?}",
        unified.outcome.findings
    );
    let separate = verdict("TENANTCHECK_LLAMA_SLOTS_URL", "slots");
    assert_eq!(separate.outcome.verdict, Verdict::Pass, "{}", separate.outcome.summary);
}
