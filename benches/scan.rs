//! Benchmark: the canary scanner.
//!
//! 10,000 canaries, scanned over ~100 MiB of response-like prose (no hits, the common
//! case), one core. Reports the median throughput of several passes, beside a baseline
//! measured in the same run: `memchr`-free byte counting of the same text (the least
//! any scanner must do: read every byte). Run with `cargo bench --bench scan`.

use std::time::Instant;
use tenantcheck::canary::RunSecret;
use tenantcheck::prompt::PromptBuilder;
use tenantcheck::scan::Scanner;

const CANARIES: u32 = 10_000;
const TEXT_TOKENS: u64 = 23_000_000; // ~100 MiB of prose
const RUNS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let secret = RunSecret::generate();
    let canaries = (0..CANARIES).map(|i| secret.canary("a", "bench", i)).collect();
    let t = Instant::now();
    let scanner = Scanner::new(canaries);
    let build_ms = t.elapsed().as_secs_f64() * 1e3;
    let text = PromptBuilder::default().build(TEXT_TOKENS, 1, "", &[], "");
    let mib = text.len() as f64 / (1024.0 * 1024.0);

    let mut scan = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let hits = scanner.scan(&text, "b");
        scan.push(t.elapsed().as_secs_f64());
        assert!(hits.is_empty());
    }
    // The same over one canary: normalisation plus a trivial automaton.
    let one = Scanner::new(vec![secret.canary("a", "bench", 0)]);
    let mut single = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        assert!(one.scan(&text, "b").is_empty());
        single.push(t.elapsed().as_secs_f64());
    }
    let mut read = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let n = text.bytes().filter(|b| b.is_ascii_alphanumeric()).count();
        read.push(t.elapsed().as_secs_f64());
        std::hint::black_box(n);
    }
    let (s, r, o) = (median(scan), median(read), median(single));
    println!(
        "scanner: {CANARIES} canaries (built in {build_ms:.0} ms) over {mib:.0} MiB: median {:.0} MiB/s",
        mib / s
    );
    println!(
        "one canary (normalisation, trivial automaton): median {:.0} MiB/s",
        mib / o
    );
    println!(
        "baseline (count alphanumeric bytes): median {:.0} MiB/s; scanner/baseline = {:.2}",
        mib / r,
        r / s
    );
}
