//! Measurement: the timing case's false-positive rate and power, and how many requests
//! its sequential test needs, against the reference vendor.
//!
//! `cargo bench --bench cache_timing -- [RUNS] [PROMPT_TOKENS] [ALPHA]` runs the
//! case `cache.cross-tenant-timing` alone RUNS times (default 50) against a sim with a
//! per-tenant prefix cache (every fail is a false positive) and RUNS times against one
//! with a global cache (every fail is a detection), each run a fresh `tenantcheck run`
//! with PROMPT_TOKENS-token prompts (default 2048) at ALPHA (default 1e-6), and prints
//! the verdict counts and the median pairs and requests per level. Arguments after
//! `--sim` go to both sims (`--sim --no-cache-counter --prefill-ns-per-token 15000
//! --transfer-jitter 40`, say). `docs/performance.md` has the figures.

use base64::Engine as _;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_tenantcheck");

fn main() {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let split = all.iter().position(|a| a == "--sim").unwrap_or(all.len());
    let sim_flags: Vec<String> = all[split..].iter().skip(1).cloned().collect();
    let args: Vec<String> = all[..split].iter().filter(|a| !a.starts_with("--")).cloned().collect();
    let runs: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(50);
    let tokens: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2048);
    let alpha: f64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1e-6);
    let work = std::env::temp_dir().join(format!("tenantcheck-cache-timing-{}", std::process::id()));
    let suite = work.join("suite/cache");
    std::fs::create_dir_all(&suite).unwrap();
    let case = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/suite/cache/cross-tenant-timing.toml"
    ))
    .unwrap()
    .replace("prompt_tokens = 4096", &format!("prompt_tokens = {tokens}"))
    .replace("alpha = 1e-6", &format!("alpha = {alpha:e}"));
    std::fs::write(suite.join("cross-tenant-timing.toml"), case).unwrap();
    for scope in ["per-tenant", "global"] {
        let (base_url, mut sim) = start_sim(scope, &sim_flags);
        let profile = work.join(format!("{scope}.toml"));
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/vendors/sim.toml"))
            .unwrap()
            .replace("http://127.0.0.1:8080/v1", &base_url);
        std::fs::write(&profile, text).unwrap();
        let mut verdicts: BTreeMap<String, usize> = BTreeMap::new();
        let mut pairs_per_level: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut requests = Vec::new();
        for run in 0..runs {
            let out = work.join(format!("{scope}-{run}"));
            let status = Command::new(BIN)
                .args(["run", "--vendor"])
                .arg(&profile)
                .arg("--suite")
                .arg(work.join("suite"))
                .arg("--out")
                .arg(&out)
                .env("TENANTCHECK_KEY_A", "timing-bench-key-a")
                .env("TENANTCHECK_KEY_B", "timing-bench-key-b")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap();
            assert!(matches!(status.code(), Some(0 | 1 | 3)), "run {run}: {status}");
            let outcome = outcome(&out);
            *verdicts
                .entry(outcome["verdict"].as_str().unwrap().to_owned())
                .or_default() += 1;
            requests.push(outcome["coverage"]["requests"].as_u64().unwrap() as usize);
            for level in outcome["timing"].as_array().unwrap() {
                pairs_per_level
                    .entry(format!(
                        "{} ({})",
                        level["level"].as_str().unwrap(),
                        level["decision"].as_str().unwrap()
                    ))
                    .or_default()
                    .push(level["pairs"].as_array().unwrap().len());
            }
            let _ = std::fs::remove_dir_all(&out);
        }
        let _ = sim.kill();
        let _ = sim.wait();
        println!(
            "prefix cache {scope} {}: {runs} runs, {tokens}-token prompts, alpha {alpha:e}: verdicts {verdicts:?}",
            sim_flags.join(" ")
        );
        println!("  requests per run: median {}", median(requests));
        for (level, pairs) in pairs_per_level {
            println!(
                "  {level}: {} levels, median {} pairs ({} requests), max {}",
                pairs.len(),
                median(pairs.clone()),
                3 * median(pairs.clone()),
                pairs.iter().max().unwrap()
            );
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}

fn median(mut v: Vec<usize>) -> usize {
    v.sort_unstable();
    v[v.len() / 2]
}

fn start_sim(scope: &str, flags: &[String]) -> (String, std::process::Child) {
    let mut child = Command::new(BIN)
        .args(["sim", "--listen", "127.0.0.1:0", "--prefix-cache", scope])
        .args(flags)
        .env("TENANTCHECK_KEY_A", "timing-bench-key-a")
        .env("TENANTCHECK_KEY_B", "timing-bench-key-b")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_owned();
    (url, child)
}

/// The timing case's outcome in a run's signed report.
fn outcome(run_dir: &Path) -> serde_json::Value {
    let envelope: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("report.dsse.json")).unwrap()).unwrap();
    let payload = base64::engine::general_purpose::STANDARD
        .decode(envelope["payload"].as_str().unwrap())
        .unwrap();
    let statement: serde_json::Value = serde_json::from_slice(&payload).unwrap();
    statement["predicate"]["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "cache.cross-tenant-timing")
        .unwrap()["outcome"]
        .clone()
}
