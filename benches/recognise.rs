//! Benchmark: how much of a run a vendor that wants to recognise the suite recognises,
//! and how much of its customers' traffic it would take for the suite by mistake.
//!
//! `cargo bench --bench recognise -- [--context TOKENS] [--train N] [--fresh M]
//! [--min-requests K] [--by-case]`
//! runs the default suite against the reference vendor (`sim --context TOKENS`, default
//! 32768) N + M times (defaults 2 and 1), each with a secret of its own, teaches
//! [`Recogniser`] the requests of the first N (and half of a reference workload, the
//! vendor's own customers; what stood in K requests of a run, default 3, 1 for a vendor
//! that keeps every phrase of its logs), and scores the requests of the other M and the other half
//! of the workload: every request, and the prompts of a tenth of the context or longer
//! (the ones that matter: a defeat device needs to spot only those to serve them from
//! a clean pool); with `--by-case`, each case's requests of the fresh runs too.
//! `docs/benchmarks.md` has the figures.
//!
//! The reference workload is prompts the suite did not generate:
//! `benches/workload/prompts.jsonl` (short requests of many kinds, with the parameters
//! such applications send) and documents people send with a task (every README,
//! changelog, licence and `src/lib.rs` of the crates this build fetched, whole or in
//! part, alone or six files together, under one of [`DOC_TASKS`]).

mod common;
use std::path::{Path, PathBuf};
use tenantcheck::sim::recogniser::{Feature, Recogniser, Request};

/// Tasks people send with a document, before it or after it.
const DOC_TASKS: &[&str] = &[
    "Summarise the following document in five bullet points.",
    "Can you review this and tell me if anything looks wrong?",
    "What are the key obligations in the text below?",
    "Translate the following into French, keeping the formatting.",
    "Extract every version number and date mentioned below as a table.",
    "Explain this to a new member of the team who has never seen it.",
    "Write release notes for customers based on this.",
    "Find any bugs or risky patterns in this code and suggest fixes.",
    "I need a one-paragraph summary of this for my manager.",
    "List the questions I should ask the authors about this document.",
    "Rewrite this in plain English.",
    "Does this licence allow me to use the software in a commercial product? Quote the relevant parts.",
    "Turn this into a FAQ with at most ten questions.",
    "What changed between the versions described here? Group by theme.",
    "Write unit tests for the functions below.",
    "here's the doc, what do you think",
    "Please proofread this and mark every change you make.",
    "Give me a short title and three tags for this text.",
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .map(|v| v.parse().unwrap_or_else(|_| panic!("{flag} takes a number, not {v:?}")))
            .unwrap_or(default)
    };
    let context = value("--context", 32_768);
    let train = value("--train", 2) as usize;
    let fresh = value("--fresh", 1) as usize;
    let min_requests = value("--min-requests", 3) as usize;
    let work = std::env::temp_dir().join(format!("tenantcheck-recognise-{}", std::process::id()));
    let long_chars = (context * 4 / 10) as usize;

    let mut runs = common::in_parallel(train + fresh, 2, |i| (i, one_run(context, &work.join(i.to_string()))));
    runs.sort_by_key(|(i, _)| *i);
    let mut runs: Vec<Vec<(String, Request)>> = runs.into_iter().map(|(_, r)| r).collect();
    let fresh_runs: Vec<(String, Request)> = runs.split_off(train).into_iter().flatten().collect();
    let runs: Vec<Vec<Request>> = runs
        .into_iter()
        .map(|run| run.into_iter().map(|(_, r)| r).collect())
        .collect();

    let workload = workload(context);
    let (known, unseen): (Vec<_>, Vec<_>) = workload.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
    let known: Vec<Request> = known.into_iter().map(|(_, r)| r).collect();
    let unseen: Vec<Request> = unseen.into_iter().map(|(_, r)| r).collect();

    let recogniser = Recogniser::learn_from(&runs, &known, long_chars, min_requests);
    let _ = std::fs::remove_dir_all(&work);

    println!(
        "recogniser: taught {train} runs ({} requests) and {} customer requests, learning what stood in {min_requests} requests of a run; context {context} tokens, long = {long_chars} characters or more",
        runs.iter().map(Vec::len).sum::<usize>(),
        known.len()
    );
    for f in Feature::ALL {
        println!("  learnt {:>7} {}", recogniser.learnt(f), f.name());
    }
    println!();
    println!("| requests | all: recognised | long: recognised | by phrase | by parameters | by length |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let fresh_all: Vec<&Request> = fresh_runs.iter().map(|(_, r)| r).collect();
    row(&format!("{fresh} fresh run(s)"), &recogniser, &fresh_all, long_chars);
    let unseen: Vec<&Request> = unseen.iter().collect();
    row("workload (the half not taught)", &recogniser, &unseen, long_chars);
    if args.iter().any(|a| a == "--by-case") {
        let mut cases: Vec<&str> = fresh_runs.iter().map(|(c, _)| c.as_str()).collect();
        cases.sort_unstable();
        cases.dedup();
        for case in cases {
            let of_case: Vec<&Request> = fresh_runs.iter().filter(|(c, _)| c == case).map(|(_, r)| r).collect();
            row(case, &recogniser, &of_case, long_chars);
        }
    }
}

/// Prints one table row: how many of `requests` are recognised, all and long ones.
fn row(label: &str, r: &Recogniser, requests: &[&Request], long_chars: usize) {
    let mut all = 0;
    let mut long = (0, 0);
    let mut by = [0usize; 3];
    for q in requests {
        let found = r.recognise(q);
        let is_long = q.text().len() >= long_chars;
        if is_long {
            long.1 += 1;
        }
        if !found.is_empty() {
            all += 1;
            if is_long {
                long.0 += 1;
            }
        }
        for (i, f) in Feature::ALL.iter().enumerate() {
            if found.contains(f) {
                by[i] += 1;
            }
        }
    }
    let share = |n: usize, of: usize| {
        if of == 0 {
            "none sent".to_owned()
        } else {
            format!("{n} of {of} ({:.1}%)", 100.0 * n as f64 / of as f64)
        }
    };
    println!(
        "| {label} | {} | {} | {} | {} | {} |",
        share(all, requests.len()),
        share(long.0, long.1),
        by[0],
        by[1],
        by[2]
    );
}

/// The requests of one run of the default suite against the reference vendor at
/// `context` tokens, each run with a secret of its own.
fn one_run(context: u64, dir: &Path) -> Vec<(String, Request)> {
    let (status, out) = common::against_sim(&["--context".into(), context.to_string()], Some(context), &[], dir);
    let (_, transcript) = common::verified(&out, &status);
    let mut requests = Vec::new();
    for line in tenantcheck_evidence::transcript::lines(&transcript) {
        if let tenantcheck_evidence::transcript::Line::Exchange { exchange, case, .. } =
            line.expect("a transcript line reads")
        {
            let request = Request {
                path: path_of(&exchange.request.url),
                body: exchange.request.body.clone().unwrap_or_default(),
            };
            requests.push((case, request));
        }
    }
    requests
}

/// The path of `url` (`http://host:port/v1/x?y` gives `/v1/x`).
fn path_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let path = rest.find('/').map_or("/", |at| &rest[at..]);
    path.split('?').next().unwrap_or(path).to_owned()
}

/// The reference workload as chat requests: the short prompts of
/// `benches/workload/prompts.jsonl`, then documents with a task.
fn workload(context: u64) -> Vec<Request> {
    let mut out = Vec::new();
    let text = std::fs::read_to_string("benches/workload/prompts.jsonl").expect("benches/workload/prompts.jsonl");
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).expect("a workload line is JSON");
        let prompt = v["prompt"].as_str().expect("a workload line has a prompt");
        out.push(chat(v.get("system").and_then(|s| s.as_str()), prompt, &v));
    }
    let max_chars = (context as usize * 4) * 9 / 10;
    let mut state = 0x5eed_u64;
    let docs: Vec<(String, String)> = documents()
        .into_iter()
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).ok()?;
            let parent = p.parent()?.file_name()?.to_string_lossy().into_owned();
            Some((format!("{parent}/{}", p.file_name()?.to_string_lossy()), text))
        })
        .collect();
    // Single documents, then bundles of several files sent together (a project's
    // files pasted into one prompt).
    let bundles = docs.chunks(6).map(|files| {
        files
            .iter()
            .map(|(name, text)| format!("--- {name} ---\n{text}\n"))
            .collect::<String>()
    });
    let texts: Vec<String> = docs.iter().map(|(_, text)| text.clone()).chain(bundles).collect();
    for (i, body) in texts.iter().enumerate() {
        let body = if body.len() > max_chars {
            let mut end = max_chars;
            while !body.is_char_boundary(end) {
                end -= 1;
            }
            &body[..end]
        } else {
            &body[..]
        };
        let task = DOC_TASKS[next(&mut state) as usize % DOC_TASKS.len()];
        // Some put the task after the document; some send an excerpt only.
        let excerpt = if i % 3 == 2 {
            let mut end = body.len().min(800 + next(&mut state) as usize % 4000);
            while !body.is_char_boundary(end) {
                end -= 1;
            }
            &body[..end]
        } else {
            body
        };
        let prompt = if i % 2 == 0 {
            format!("{task}\n\n{excerpt}")
        } else {
            format!("{excerpt}\n\n{task}")
        };
        let params = realistic_parameters(&mut state);
        out.push(chat(None, &prompt, &params));
    }
    out
}

/// A chat request carrying `prompt` (after `system`, where given) with the parameters
/// `params` holds (`temperature`, `max_tokens`, `top_p`, `stream`).
fn chat(system: Option<&str>, prompt: &str, params: &serde_json::Value) -> Request {
    let mut messages = Vec::new();
    if let Some(s) = system {
        messages.push(serde_json::json!({"role": "system", "content": s}));
    }
    messages.push(serde_json::json!({"role": "user", "content": prompt}));
    let mut body = serde_json::json!({"model": "sim-1", "messages": messages});
    for key in ["temperature", "max_tokens", "top_p", "stream"] {
        if let Some(v) = params.get(key) {
            body[key] = v.clone();
        }
    }
    Request {
        path: "/v1/chat/completions".into(),
        body,
    }
}

/// Parameters as document-handling applications send them: often none at all.
fn realistic_parameters(state: &mut u64) -> serde_json::Value {
    let mut p = serde_json::json!({});
    const TEMPERATURES: &[f64] = &[0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0];
    const MAX_TOKENS: &[u64] = &[256, 512, 1000, 1024, 2000, 2048, 4096];
    if next(state) % 3 != 0 {
        p["temperature"] = TEMPERATURES[next(state) as usize % TEMPERATURES.len()].into();
    }
    if next(state) % 2 == 0 {
        p["max_tokens"] = MAX_TOKENS[next(state) as usize % MAX_TOKENS.len()].into();
    }
    if next(state) % 4 == 0 {
        p["stream"] = true.into();
    }
    p
}

/// The documents: README, changelog, licence and `src/lib.rs` of every crate this
/// build fetched, in a fixed order.
fn documents() -> Vec<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let mut found = Vec::new();
    let Ok(registries) = std::fs::read_dir(home.join("registry").join("src")) else {
        eprintln!(
            "recognise: no fetched crates under {}; the workload has its short prompts only",
            home.display()
        );
        return found;
    };
    for registry in registries.flatten() {
        let Ok(crates) = std::fs::read_dir(registry.path()) else {
            continue;
        };
        for krate in crates.flatten() {
            for name in [
                "README.md",
                "CHANGELOG.md",
                "LICENSE-APACHE",
                "LICENSE-MIT",
                "src/lib.rs",
            ] {
                let p = krate.path().join(name);
                if p.is_file() {
                    found.push(p);
                }
            }
        }
    }
    found.sort();
    found
}

fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
