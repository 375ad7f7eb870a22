//! Benchmark: the canary scanner.
//!
//! 10,000 canaries, scanned over ~100 MiB of response-like text (no hits, the common
//! case), one core: prose in which about one sentence in three holds a short number
//! (a year, a count, a price), one in fifty a curly quote or a dash (non-ASCII), and one
//! in a hundred a long number (an order or phone number: the digit runs every canary
//! fragment has, which the scanner must read closely). Reports the median throughput of
//! several passes, beside a baseline measured in the same run: counting the
//! alphanumeric bytes of the same text (a pass that reads every byte), and the scan of
//! a text with a non-ASCII character in every sentence (nothing can be skipped).
//! Run with `cargo bench --bench scan`.

use std::time::Instant;
use tenantcheck::canary::RunSecret;
use tenantcheck::prompt::PromptBuilder;
use tenantcheck::scan::Scanner;

const CANARIES: u32 = 10_000;
const TEXT_TOKENS: u64 = 23_000_000; // ~100 MiB
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
    let prose = PromptBuilder::default().build(TEXT_TOKENS, &tenantcheck::prompt::Filler::plain(1), "", &[], "");
    let text = responses(&prose, 100);
    let dense = responses(&prose, 1);
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
    let mut worst = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        assert!(scanner.scan(&dense, "b").is_empty());
        worst.push(t.elapsed().as_secs_f64());
    }
    let dense_mib = dense.len() as f64 / (1024.0 * 1024.0);
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
    println!(
        "worst case (non-ASCII in every sentence, nothing skipped): median {:.0} MiB/s",
        dense_mib / median(worst)
    );
}

/// Response-like text from `prose`: short numbers in about a third of the sentences, a
/// long number in one of `long_every` and non-ASCII punctuation in one of
/// `long_every / 2` (every sentence when `long_every` is 1).
fn responses(prose: &str, long_every: u64) -> String {
    let mut out = String::with_capacity(prose.len() + prose.len() / 8);
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for sentence in prose.split_inclusive(". ") {
        let r = next();
        out.push_str(sentence.trim_end_matches(". "));
        match r % 3 {
            0 => out.push_str(&format!(" in {}", 1990 + r % 35)),
            1 => out.push_str(&format!(", about {}%", r % 97)),
            _ => {}
        }
        if (r >> 8) % long_every.max(2).div_ceil(2) == 0 || long_every == 1 {
            out.push_str(" \u{2014} as the client\u{2019}s note says");
        }
        if (r >> 16) % long_every == 0 {
            out.push_str(&format!(
                ", order {}-{}",
                10_000 + (r >> 20) % 90_000,
                1000 + (r >> 40) % 9000
            ));
        }
        out.push_str(". ");
    }
    out
}
