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
//! Whatever the engine really does is the expected result; each expectation below
//! says why, and `docs/real-engines.md` records the run.

use crate::common::{output, tenantcheck, verified};
use tenantcheck::outcome::{CacheDecision, Verdict};

#[test]
#[ignore = "needs llama-server on 127.0.0.1 (CI starts it; see the file's doc)"]
fn llama_server_with_a_real_model() {
    let url = std::env::var("TENANTCHECK_LLAMA_URL").expect("TENANTCHECK_LLAMA_URL names the running server");
    let tmp = crate::common::TempDir::new("llama");
    let profile = tmp.path().join("llama-server.toml");
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/vendors/llama-server.toml"))
        .unwrap()
        .replace("http://127.0.0.1:8091/v1", &url);
    std::fs::write(&profile, text).unwrap();
    let run_dir = tmp.path().join("run");
    let mut cmd = tenantcheck();
    cmd.args(["run", "--vendor"])
        .arg(&profile)
        .arg("--suite")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/engines/llama-suite"))
        .arg("--out")
        .arg(&run_dir);
    for var in ["TENANTCHECK_LLAMA_KEY_A", "TENANTCHECK_LLAMA_KEY_B"] {
        cmd.env(
            var,
            std::env::var(var).unwrap_or_else(|_| panic!("{var} holds the key the server was given")),
        );
    }
    let (code, stdout, stderr) = output(&mut cmd);
    println!("{stdout}");
    let _ = std::fs::create_dir_all(concat!(env!("CARGO_MANIFEST_DIR"), "/target/test-artifacts"));
    let _ = std::fs::write(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/target/test-artifacts/llama-server-run.txt"
        ),
        &stdout,
    );
    assert_eq!(code, Some(1), "cases fail, so the exit code is 1\n{stdout}\n{stderr}");
    let report = verified(&run_dir);
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

    // llama.cpp serves one model whatever `model` names, and answers an empty
    // `messages` list: two wrong requests answered 200. A real finding of
    // errors.semantics (T5), which must name both.
    let (v, why, case) = verdict("errors.semantics");
    assert_eq!(v, Verdict::Fail, "{why}");
    let findings: Vec<&str> = case.outcome.findings.iter().map(|f| f.message.as_str()).collect();
    assert!(findings.iter().any(|m| m.starts_with("unknown model")), "{findings:?}");
    assert!(findings.iter().any(|m| m.starts_with("empty messages")), "{findings:?}");

    // A prompt past the slot's context is refused with 400: no over-limit admission.
    // A 135M model does not recall a fact even in a short prompt, so the within-context
    // checks cannot tell: inconclusive, never a failure (regression: the boundary case
    // once reported its own failed baseline as a lost needle).
    let (v, why, case) = verdict("context.boundary");
    assert_eq!(v, Verdict::Inconclusive, "{why}");
    assert!(case.outcome.findings.is_empty(), "{:?}", case.outcome.findings);
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

    // No stored responses, nothing declared but the engine.
    for id in ["objects.cross-tenant", "declared.kv-pool", "declared.advisories"] {
        assert_eq!(verdict(id).0, Verdict::Skipped, "{id}");
    }
}
