//! Benchmark: whether the leak rate a pass rules out holds at its stated confidence.
//!
//! `cargo bench --bench leak_rate -- [RUNS] [--jobs J] [--fault FAULT] [--rates R,R,...]
//! [--ask-share S]` starts the reference vendor with `--fault FAULT` (default
//! `stale-pages`) acting on each occasion with chance R (`--leak-rate R`, a new
//! `--leak-seed` per run), runs `isolation.canary-residue` against it RUNS times per
//! rate (default 100; rates default 0.5, 0.2, 0.05), the case asking for a bound just
//! below each rate (`--ask-share` of it, default 0.9: the hardest test, since a pass
//! then claims a bound below R as soon as it can), and
//! counts, per rate, the runs whose verified report claims a bound below R: a claim
//! that a leak in more than the bound's share of long requests would have shown, made
//! of a vendor whose long requests leak at R. At the stated confidence (95%) that
//! share must stay at most 5%, within the binomial spread of RUNS runs.
//! `docs/benchmarks.md` has the figures.

mod common;

/// What one run's verified report says.
struct Seen {
    verdict: String,
    bound: Option<f64>,
}

fn one(fault: &str, rate: f64, seed: u64, dir: &std::path::Path, suite: &std::path::Path) -> Seen {
    let sim_flags: Vec<String> = [
        "--fault",
        fault,
        "--leak-rate",
        &rate.to_string(),
        "--leak-seed",
        &seed.to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    let (status, out) = common::against_sim(&sim_flags, None, &["--suite".as_ref(), suite.as_os_str()], dir);
    let (verified, _) = common::verified(&out, &status);
    let case = verified
        .report()
        .cases
        .iter()
        .find(|c| c.id == "isolation.canary-residue")
        .expect("the case ran");
    let seen = Seen {
        verdict: case.outcome.verdict.label().to_owned(),
        bound: case
            .outcome
            .power
            .as_ref()
            .and_then(|p| p.leak_rate.as_ref())
            .map(|b| b.rate),
    };
    let _ = std::fs::remove_dir_all(dir);
    seen
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let mut runs = 100;
    if let Some(n) = args.first().and_then(|a| a.parse().ok()) {
        runs = n;
        args.remove(0);
    }
    let mut opt = |name: &str, default: &str| -> String {
        match args.iter().position(|a| a == name) {
            Some(i) => {
                let v = args
                    .get(i + 1)
                    .cloned()
                    .unwrap_or_else(|| panic!("{name} takes a value"));
                args.drain(i..i + 2);
                v
            }
            None => default.to_owned(),
        }
    };
    let jobs: usize = opt("--jobs", "1").parse().expect("--jobs takes a number");
    let fault = opt("--fault", "stale-pages");
    let rates: Vec<f64> = opt("--rates", "0.5,0.2,0.05")
        .split(',')
        .map(|r| r.parse().expect("--rates takes chances"))
        .collect();
    let share: f64 = opt("--ask-share", "0.9").parse().expect("--ask-share takes a share");
    let work = std::env::temp_dir().join(format!("tenantcheck-leak-rate-{}", std::process::id()));
    // The built-in isolation case, asking for a bound of `share` times `rate`.
    let case = std::fs::read_to_string("suite/isolation/canary-residue.toml").expect("the built-in case");
    let suite_for = |i: usize, rate: f64| {
        let suite = work.join(format!("suite-{i}"));
        std::fs::create_dir_all(suite.join("isolation")).expect("the suite folder");
        let asked = case.replace(
            "[params]\n",
            &format!("[params]\nmax_leak_rate = {}\nextra_exposures = 1000\n", share * rate),
        );
        std::fs::write(suite.join("isolation/canary-residue.toml"), asked).expect("the case is written");
        suite
    };
    println!("fault {fault}, {runs} runs per rate, the case asking for a bound of {share} times the rate");
    println!(
        "| leak rate R | runs | failed | passed | passes claiming a bound below R | share | median bound of passes |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (i, &rate) in rates.iter().enumerate() {
        let suite = suite_for(i, rate);
        let seen = common::in_parallel(runs, jobs, |run| {
            let seed = (i * 1_000_000 + run) as u64;
            let s = one(&fault, rate, seed, &work.join(format!("run-{i}-{run}")), &suite);
            eprintln!("R {rate} run {}: {} {:?}", run + 1, s.verdict, s.bound);
            s
        });
        let failed = seen.iter().filter(|s| s.verdict == "FAIL").count();
        let mut passes: Vec<f64> = seen
            .iter()
            .filter(|s| s.verdict == "PASS")
            .map(|s| s.bound.unwrap_or(1.0))
            .collect();
        passes.sort_by(f64::total_cmp);
        let wrong = passes.iter().filter(|&&b| b < rate).count();
        let median = passes
            .get(passes.len() / 2)
            .map_or("-".to_owned(), |m| format!("{m:.3}"));
        println!(
            "| {rate} | {} | {failed} | {} | {wrong} | {:.3} | {median} |",
            seen.len(),
            passes.len(),
            wrong as f64 / seen.len().max(1) as f64
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}
