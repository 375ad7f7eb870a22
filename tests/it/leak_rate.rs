//! Intermittent leaks (`tenantcheck sim --leak-rate`): a fault that leaks in one long
//! request of two is still caught, because the case spends exposures at the top of the
//! context until the leak rate it rules out reaches its `max_leak_rate`; a failed case
//! states no bound; a rate outside (0, 1] is refused. The calibration over hundreds of
//! runs is a benchmark (`cargo bench --bench leak_rate`, `docs/benchmarks.md`).

use crate::common::{Sim, TempDir, output, run_exact, tenantcheck, verified};
use tenantcheck::outcome::Verdict;

#[test]
fn a_leak_in_one_long_request_of_two_fails_and_states_no_bound() {
    let tmp = TempDir::new("leak-rate");
    for seed in ["1", "2"] {
        let flags = ["--fault", "stale-pages", "--leak-rate", "0.5", "--leak-seed", seed];
        let sim = Sim::start("key-a-intermittent", "key-b-intermittent", &flags);
        let profile = sim.profile(tmp.path());
        let run_dir = tmp.path().join(format!("run-{seed}"));
        let (code, stdout, stderr) = run_exact(
            &profile,
            &run_dir,
            "isolation.canary-residue",
            "key-a-intermittent",
            "key-b-intermittent",
        );
        assert_eq!(code, Some(1), "seed {seed}\nstdout:\n{stdout}\nstderr:\n{stderr}");
        let report = verified(&run_dir);
        let case = report
            .cases
            .iter()
            .find(|c| c.id == "isolation.canary-residue")
            .unwrap();
        assert_eq!(case.outcome.verdict, Verdict::Fail, "{}", case.outcome.summary);
        assert!(
            case.outcome.findings.iter().any(|f| f.leak.is_some()),
            "{:?}",
            case.outcome.findings
        );
        let power = case.outcome.power.as_ref().expect("the positive control");
        assert!(power.leak_rate.is_none(), "a failed case rules no rate out: {power:?}");
        // Not every long request leaked: some exposures at the top read their own
        // records back cleanly.
        let top = power.bands.last().unwrap();
        assert!(!top.echoed.is_empty(), "{top:?}");
    }
}

#[test]
fn a_healthy_pass_states_the_leak_rate_it_rules_out_at_the_top() {
    let tmp = TempDir::new("leak-rate-healthy");
    let sim = Sim::start("key-a-bound", "key-b-bound", &[]);
    let profile = sim.profile(tmp.path());
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = run_exact(
        &profile,
        &run_dir,
        "isolation.canary-residue",
        "key-a-bound",
        "key-b-bound",
    );
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let report = verified(&run_dir);
    let outcome = &report
        .cases
        .iter()
        .find(|c| c.id == "isolation.canary-residue")
        .unwrap()
        .outcome;
    let power = outcome.power.as_ref().unwrap();
    let bound = power.leak_rate.as_ref().expect("a pass states its bound");
    let top = power.bands.last().unwrap();
    // No pool is declared below the context: the top rung alone counts, and the case
    // spent pairs there until the bound met the suite's 0.5.
    assert_eq!(bound.from_tokens, top.tokens);
    assert_eq!(bound.exposures, top.exposed.len());
    assert!(bound.rate <= 0.5 && bound.rate > 0.0, "{bound:?}");
    assert!(top.exposed.len() > 2, "more than the ladder's two exposures: {top:?}");
    assert!(outcome.summary.contains(&bound.describe()), "{}", outcome.summary);
}

#[test]
fn a_leak_rate_outside_zero_to_one_is_refused() {
    for rate in ["0", "1.5", "half"] {
        let (code, _, stderr) = output(tenantcheck().args(["sim", "--listen", "127.0.0.1:0", "--leak-rate", rate]));
        assert_eq!(code, Some(2), "{rate}: {stderr}");
        assert!(stderr.contains("is not a chance in (0, 1]"), "{stderr}");
    }
}
