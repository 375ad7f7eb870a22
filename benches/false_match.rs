//! Benchmark: how often each leak detector matches by accident on a healthy vendor.
//!
//! `cargo bench --bench false_match -- [RUNS] [--jobs J] [RUN ARGS...]` runs the whole
//! suite RUNS times (default 10), J at once (default 1; a run mostly waits on the
//! vendor), with `tenantcheck run [RUN ARGS...]` (default: the built-in
//! reference vendor, healthy; give `--vendor PROFILE` for another, such as llama.cpp's
//! server), verifies each signed report, and counts, over every answer of every run,
//! the matches of each detector: a canary of another tenant by match kind (exact,
//! near, code, prose marks), another tenant's request text by provenance (`Text`),
//! sentences of another request (`Passage`), answers holding record-shaped content that
//! no prompt held, and significant rises of such content. On a healthy vendor every match is a false
//! one; with none in N answers, the one-sided 95% upper bound on the rate per answer is
//! `1 - 0.05^(1/N)`. `docs/benchmarks.md` has the figures.

mod common;
use std::collections::BTreeMap;
use std::process::Command;

/// What one verified run showed.
#[derive(Default)]
struct Tally {
    answers: usize,
    foreign_answers: usize,
    rises: usize,
    by_kind: BTreeMap<String, usize>,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.answers += other.answers;
        self.foreign_answers += other.foreign_answers;
        self.rises += other.rises;
        for (k, n) in other.by_kind {
            *self.by_kind.entry(k).or_default() += n;
        }
    }
}

/// Runs the suite once into `out` with `args`, verifies it, and counts its matches.
fn one(run: usize, out: &std::path::Path, args: &[String]) -> Tally {
    let status = Command::new(env!("CARGO_BIN_EXE_tenantcheck"))
        .arg("run")
        .args(args)
        .arg("--out")
        .arg(out)
        .arg("--quiet")
        .output()
        .expect("tenantcheck runs");
    let (verified, transcript) = common::verified(out, &status);
    let mut tally = Tally {
        answers: transcript
            .split(|&b| b == b'\n')
            .filter_map(|line| serde_json::from_slice::<serde_json::Value>(line).ok())
            .filter(|v| !v["exchange"]["status"].is_null())
            .count(),
        ..Tally::default()
    };
    for c in &verified.report().cases {
        for f in &c.outcome.findings {
            if let Some(leak) = &f.leak {
                *tally.by_kind.entry(format!("{:?}", leak.fragment)).or_default() += 1;
            }
        }
        if let Some(power) = &c.outcome.power {
            tally.foreign_answers += power.bands.iter().map(|b| b.foreign.len()).sum::<usize>();
            tally.foreign_answers += power.trials.iter().map(|t| t.foreign.len()).sum::<usize>();
            tally.rises += usize::from(power.foreign_rise().is_some());
        }
    }
    eprintln!(
        "run {}: {} cases, verdict {:?}",
        run + 1,
        verified.report().cases.len(),
        verified.report().verdict
    );
    let _ = std::fs::remove_dir_all(out);
    tally
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let runs: usize = match args.first().and_then(|a| a.parse().ok()) {
        Some(n) => {
            args.remove(0);
            n
        }
        None => 10,
    };
    // `--jobs J`: runs at once (a run mostly waits on the vendor).
    let jobs: usize = match args.first().map(String::as_str) {
        Some("--jobs") => {
            let j = args.get(1).and_then(|j| j.parse().ok()).expect("--jobs takes a number");
            args.drain(..2);
            j
        }
        _ => 1,
    };
    let work = std::env::temp_dir().join(format!("tenantcheck-false-match-{}", std::process::id()));
    let mut total = Tally::default();
    for tally in common::in_parallel(runs, jobs, |run| one(run, &work.join(format!("run-{run}")), &args)) {
        total.add(tally);
    }
    let Tally {
        answers,
        foreign_answers,
        rises,
        by_kind,
    } = total;
    let _ = std::fs::remove_dir_all(&work);
    let bound = |k: usize| match k {
        0 => format!("below {:.1e} (95%)", 1.0 - 0.05f64.powf(1.0 / answers.max(1) as f64)),
        k => format!("{:.1e} observed", k as f64 / answers as f64),
    };
    println!("{runs} runs, {answers} answers scanned");
    println!("| detector | false matches | rate per answer |");
    println!("|---|---|---|");
    for kind in [
        "Record",
        "Code",
        "Email",
        "Account",
        "EmailNear",
        "AccountNear",
        "Prose",
        "Text",
        "Passage",
    ] {
        let k = by_kind.get(kind).copied().unwrap_or(0);
        let what = match kind {
            "Text" => "another tenant's request text (provenance)".to_owned(),
            "Passage" => "three sentences of another request".to_owned(),
            _ => format!("canary: {kind}"),
        };
        println!("| {what} | {k} | {} |", bound(k));
    }
    println!(
        "| answers with record-shaped content no prompt held | {foreign_answers} | {} |",
        bound(foreign_answers)
    );
    println!("| significant rises of it (cases failed) | {rises} | - |");
}
