//! Benchmark: building a 1,048,576-token prompt with the prompt builder.
//!
//! Reports the median wall time of several builds and the peak resident memory the
//! builds added, beside a baseline measured in the same run: copying the same number
//! of bytes of one sentence into a `String` of the same capacity (the least any
//! builder must do). Run with `cargo bench --bench prompt`.

use std::time::Instant;
use tenantcheck::prompt::{Filler, Placed, PromptBuilder};

/// A tenant's marked filler, as the suite builds it.
fn filler(seed: u64) -> Filler {
    let secret = tenantcheck::canary::RunSecret::derive(&[7; 32], b"");
    Filler {
        seed,
        marks: secret.marks("a").words,
    }
}

const TOKENS: u64 = 1_048_576;
const RUNS: usize = 9;

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut builder = PromptBuilder::default();
    builder.learn(4_500, 1_000);
    let placed: Vec<Placed> = (0..5)
        .map(|i| Placed {
            depth: i as f64 / 4.0,
            text: format!("The value of parcel-{i:04} is amber-{i:04}."),
        })
        .collect();
    let chars = builder.chars_for(TOKENS);

    let before = peak_rss_kib();
    let mut build = Vec::new();
    let mut len = 0;
    for seed in 0..RUNS as u64 {
        let t = Instant::now();
        let p = builder.build(
            TOKENS,
            &filler(seed),
            "Read the notes below.\n\n",
            &placed,
            "\n\nQuestions follow.",
        );
        build.push(t.elapsed().as_secs_f64() * 1e3);
        len = p.len();
        std::hint::black_box(p);
    }
    let build_peak = peak_rss_kib().saturating_sub(before);

    let sentence = "The committee reviewed the quarterly budget before the long weekend. ";
    let mut copy = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let mut s = String::with_capacity(chars + 128);
        while s.len() < chars {
            s.push_str(sentence);
        }
        copy.push(t.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(s);
    }
    let (b, c) = (median(build), median(copy));
    println!("prompt builder: {TOKENS} tokens ({len} bytes), median of {RUNS}: {b:.1} ms");
    println!(
        "baseline (copy one sentence to the same length): median {c:.1} ms; builder/baseline = {:.1}x",
        b / c
    );
    println!(
        "peak resident memory added by the builds: {:.1} MiB (the prompt itself: {:.1} MiB)",
        build_peak as f64 / 1024.0,
        len as f64 / 1048576.0
    );
}
