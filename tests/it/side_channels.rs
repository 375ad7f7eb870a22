//! Concurrency and side channels (T6, T7) against the reference vendor as its own
//! process: the faults each probe must catch, the evidence it must leave, and the
//! profile settings (cache salts, declared sharing) that change what counts as a fail.

use crate::common::{Sim, TempDir, resigned, transcript_exchanges, verified};
use std::path::PathBuf;
use tenantcheck::outcome::{CacheDecision, FindingCode, Verdict};
use tenantcheck::report::CaseReport;

/// Runs the cases matching `filter` (arguments of `run`, split at spaces) against a sim with `flags`, the profile edited by
/// `edit`; returns the run folder and the named case's verified report.
fn run_case(
    tmp: &TempDir,
    flags: &[&str],
    filter: &str,
    edit: impl Fn(String) -> String,
    case: &str,
) -> (PathBuf, CaseReport) {
    let sim = Sim::start("side-key-a-1234", "side-key-b-1234", flags);
    let profile = sim.profile(tmp.path());
    std::fs::write(&profile, edit(std::fs::read_to_string(&profile).unwrap())).unwrap();
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = crate::common::output(
        crate::common::tenantcheck()
            .args(["run", "--vendor"])
            .arg(&profile)
            .arg("--out")
            .arg(&run_dir)
            .args(filter.split_whitespace())
            .env("TENANTCHECK_KEY_A", "side-key-a-1234")
            .env("TENANTCHECK_KEY_B", "side-key-b-1234"),
    );
    assert!(matches!(code, Some(0 | 1 | 3)), "exit {code:?}\n{stdout}\n{stderr}");
    let report = verified(&run_dir);
    let case = report
        .cases
        .iter()
        .find(|c| c.id == case)
        .unwrap_or_else(|| panic!("{case} ran"))
        .clone();
    (run_dir, case)
}

fn timing_case(r: &mut tenantcheck::report::Report) -> &mut CaseReport {
    r.cases
        .iter_mut()
        .find(|c| c.id == "cache.cross-tenant-timing")
        .unwrap()
}

fn unchanged(profile: String) -> String {
    profile
}

#[test]
fn cancel_swap_fails_binding_and_names_the_cancelled_requests_nonce() {
    let tmp = TempDir::new("cancel-swap");
    let (run_dir, case) = run_case(
        &tmp,
        &["--fault", "cancel-swap"],
        "concurrency",
        unchanged,
        "concurrency.binding",
    );
    assert_eq!(case.outcome.verdict, Verdict::Fail, "{}", case.outcome.summary);
    let exchanges = transcript_exchanges(&run_dir);
    let mut checked = 0;
    for f in &case.outcome.findings {
        let leak = f.leak.as_ref().expect("every binding finding carries its evidence");
        match f.code {
            FindingCode::CrossTenantCanary => assert_ne!(leak.owner, leak.recipient),
            FindingCode::ResponseMisrouted => assert_eq!(leak.owner, leak.recipient),
            // The swapped rest came from another tenant's stream: its words, named by
            // the request that sent them (which asked for the nonce back).
            FindingCode::CrossTenantText => {
                assert_ne!(leak.owner, leak.recipient);
                let source = leak.seeded_in.expect("the request it came from");
                assert_eq!(leak.canary_id, format!("{}/text/{source}", leak.owner));
                assert_eq!(exchanges[&source]["tenant"].as_str(), Some(leak.owner.as_str()));
                assert!(source < leak.returned_in);
                continue;
            }
            other => panic!("unexpected finding {other:?}"),
        }
        assert!(leak.canary_id.contains("/concurrency.binding/"));
        assert!(
            f.message.contains(&leak.canary_id),
            "the swapped nonce is named: {:?}",
            f.message
        );
        // The request that carried the nonce was a stream its client cancelled, and
        // the answer that holds it is another request's.
        let seeded = leak.seeded_in.expect("the nonce's request is known");
        assert_ne!(seeded, leak.returned_in);
        assert_eq!(exchanges[&seeded]["exchange"]["cancelled"], true, "{:?}", f.message);
        let returned = exchanges[&leak.returned_in]["exchange"]["content"].as_str().unwrap();
        assert!(
            returned.contains(&leak.matched),
            "#{} does not hold {:?}",
            leak.returned_in,
            leak.matched
        );
        checked += 1;
    }
    assert!(checked > 0);
}

#[test]
fn a_global_prefix_cache_fails_timing_at_alpha_with_every_raw_time_in_the_transcript() {
    let tmp = TempDir::new("global-cache");
    let (run_dir, case) = run_case(
        &tmp,
        &["--prefix-cache", "global"],
        "cache",
        unchanged,
        "cache.cross-tenant-timing",
    );
    assert_eq!(case.outcome.verdict, Verdict::Fail, "{}", case.outcome.summary);
    assert_eq!(case.outcome.findings[0].code, FindingCode::SharedPrefixCache);
    let [control, other] = case.outcome.timing.as_slice() else {
        panic!(
            "two levels for two tenants of two organisations: {:?}",
            case.outcome.timing
        )
    };
    assert_eq!(
        (control.level.as_str(), control.decision),
        ("same key", CacheDecision::CacheObserved)
    );
    assert_eq!(
        (other.level.as_str(), other.decision),
        ("other organisation", CacheDecision::Shared)
    );
    // Decided by the sequential test at the case's alpha (1e-6), well inside the budget.
    assert!(other.log10_evidence[0] >= 6.0, "{:?}", other.log10_evidence);
    assert!(other.pairs.len() < 250);
    assert!(
        other.cached_prefix > 0,
        "the sim reports cached tokens: direct evidence"
    );
    let exchanges = transcript_exchanges(&run_dir);
    for level in [control, other] {
        for p in &level.pairs {
            for (seq, ms, tenant) in [
                (p.hit_seq, p.hit_ms, &level.attacker),
                (p.miss_seq, p.miss_ms, &level.attacker),
            ] {
                let line = &exchanges[&seq];
                assert_eq!(line["tenant"], tenant.as_str());
                // The clock is the time until the answer began, not its total.
                assert_eq!(line["exchange"]["timings"]["first_byte_ms"].as_f64(), Some(ms));
            }
        }
    }

    // verify replays the test from the transcript: a report that hides the sharing, or
    // that moves one time, does not verify even when signed with the run's key.
    assert_eq!(resigned(&run_dir, |_| {}), Ok(()));
    let err = resigned(&run_dir, |r| {
        let case = timing_case(r);
        case.outcome.findings.clear();
        case.outcome.verdict = Verdict::Pass;
        case.outcome.timing[1].decision = CacheDecision::NotShared;
        r.tally();
    })
    .unwrap_err();
    assert!(
        err.contains("its pairs decide Shared, the report says NotShared"),
        "{err}"
    );
    let err = resigned(&run_dir, |r| {
        timing_case(r).outcome.timing[1].pairs[0].hit_ms += 3.0;
    })
    .unwrap_err();
    assert!(err.contains("as tenant b's answer in"), "{err}");
    // Nor one that judges a level at a bound its control does not give.
    let err = resigned(&run_dir, |r| {
        timing_case(r).outcome.timing[1].threshold_ms += 50.0;
    })
    .unwrap_err();
    assert!(err.contains("its control's pairs give"), "{err}");
}

/// A shared cache behind a server that holds back the end of one answer in two by
/// 40 ms (headers and body written apart): the totals are bimodal, the times until
/// the answers began are not, and the case judges on those. Sharing fails the case;
/// a cache of each tenant's own passes with the speed-up it rules out.
#[test]
fn transfer_jitter_neither_hides_a_shared_cache_nor_fails_an_honest_one() {
    const JITTERY: &[&str] = &[
        "--no-cache-counter",
        "--prefill-ns-per-token",
        "15000",
        "--transfer-jitter",
        "40",
    ];
    let exact = "--exact cache.cross-tenant-timing";
    let case = "cache.cross-tenant-timing";
    let tmp = TempDir::new("jitter-shared");
    let shared = [JITTERY, &["--prefix-cache", "global"]].concat();
    let (run_dir, c) = run_case(&tmp, &shared, exact, unchanged, case);
    assert_eq!(c.outcome.verdict, Verdict::Fail, "{}", c.outcome.summary);
    assert_eq!(c.outcome.timing[1].decision, CacheDecision::Shared);
    assert_eq!(c.outcome.timing[1].cached_reported, 0, "time was the only channel");
    // The jitter was there: about half the answers ended 40 ms or more after they
    // began, the rest within a few.
    let lines = transcript_exchanges(&run_dir);
    let held = lines
        .values()
        .filter_map(|l| {
            let t = &l["exchange"]["timings"];
            Some(t["total_ms"].as_f64()? - t["first_byte_ms"].as_f64()?)
        })
        .collect::<Vec<f64>>();
    let late = held.iter().filter(|d| **d >= 40.0).count();
    assert!(
        late * 4 > held.len() && late * 4 < held.len() * 3,
        "{late} of {} answers held back",
        held.len()
    );

    let tmp = TempDir::new("jitter-own");
    let (_, c) = run_case(&tmp, JITTERY, exact, unchanged, case);
    assert_eq!(c.outcome.verdict, Verdict::Pass, "{}", c.outcome.summary);
    assert!(c.outcome.summary.contains("is ruled out"), "{}", c.outcome.summary);
}

#[test]
fn cache_salts_isolate_a_global_cache_and_declared_sharing_is_a_declared_risk() {
    let salted = |p: String| p.replace("stored_responses = true", "stored_responses = true\ncache_salt = true");
    let tmp = TempDir::new("salted");
    let (_, case) = run_case(
        &tmp,
        &["--prefix-cache", "global"],
        "cache",
        salted,
        "cache.cross-tenant-timing",
    );
    assert_eq!(case.outcome.verdict, Verdict::Pass, "{}", case.outcome.summary);
    assert!(case.outcome.summary.contains("its own cache_salt"));
    let decisions: Vec<CacheDecision> = case.outcome.timing.iter().map(|l| l.decision).collect();
    assert_eq!(decisions, [CacheDecision::CacheObserved, CacheDecision::NotShared]);

    let declared = |p: String| {
        p.replace(
            "kv_canaries = false",
            "kv_canaries = false\nprefix_cache_scope = \"global\"",
        )
    };
    let tmp = TempDir::new("declared");
    let (_, case) = run_case(
        &tmp,
        &["--prefix-cache", "global"],
        "cache",
        declared,
        "cache.cross-tenant-timing",
    );
    assert_eq!(case.outcome.verdict, Verdict::Pass, "{}", case.outcome.summary);
    assert!(
        case.outcome.summary.contains("declared risk"),
        "{}",
        case.outcome.summary
    );
    assert_eq!(case.outcome.timing[1].decision, CacheDecision::SharedAsDeclared);
}

#[test]
fn without_a_cache_the_timing_case_passes_with_what_it_ruled_out() {
    let tmp = TempDir::new("no-cache");
    // A prefill of 15 µs a token, so that the cache ruled out would save tens of
    // milliseconds: at the default 1 µs a loaded two-core machine's own jitter once
    // left the control undecided after 250 pairs (inconclusive, rightly: the data did
    // not rule a cache out), while the other tests of the binary ran beside it.
    let (_, case) = run_case(
        &tmp,
        &["--prefix-cache", "off", "--prefill-ns-per-token", "15000"],
        "cache",
        unchanged,
        "cache.cross-tenant-timing",
    );
    // What the owner cannot see of its own prefix, no other key can: a pass, which
    // says what size of cache it ruled out.
    assert_eq!(case.outcome.verdict, Verdict::Pass, "{}", case.outcome.summary);
    assert!(
        case.outcome.summary.contains("no prefix cache observed")
            && case.outcome.summary.contains("ruled out for every key"),
        "{}",
        case.outcome.summary
    );
    assert_eq!(case.outcome.timing.len(), 1, "no cross-key level without a cache");
    assert_eq!(case.outcome.timing[0].decision, CacheDecision::NoCacheObserved);
    assert!(case.outcome.timing[0].log10_evidence[1] >= 6.0);
}

/// Where answers carry no reuse counter, `cache.prefix-extraction` times its guesses:
/// against one cache for all tenants it reads the secret out (at a prefill of 1 ms a
/// token, each sample's piece of 48 tokens is worth about 48 ms); against a cache per
/// tenant its guesses are decided "no faster" and it passes, with the control's figure;
/// where the time does not show the owner its own cached piece with as many samples as
/// a guess takes (the default 1 µs a token, a saving of 48 µs), no guess can read it
/// either: a pass that says what it rules out and what it does not (or, where the
/// owner's samples show the saving faintly, inconclusive), never a failure.
#[test]
fn without_a_counter_extraction_times_its_guesses() {
    const SLOW: &[&str] = &["--no-cache-counter", "--prefill-ns-per-token", "1000000"];
    let exact = "--exact cache.prefix-extraction";
    let case = "cache.prefix-extraction";

    let tmp = TempDir::new("timed-extraction-shared");
    let shared = [SLOW, &["--prefix-cache", "global"]].concat();
    let (run_dir, c) = run_case(&tmp, &shared, exact, unchanged, case);
    assert_eq!(c.outcome.verdict, Verdict::Fail, "{}", c.outcome.summary);
    let f = &c.outcome.findings[0];
    assert_eq!(f.code, FindingCode::PrefixExtracted);
    assert!(
        f.message.contains("reading the time of its own answers"),
        "{}",
        f.message
    );
    // The answers really carried no counter: the channel was time alone.
    for line in transcript_exchanges(&run_dir).values() {
        assert!(line["exchange"]["usage"].get("cached_tokens").is_none(), "{line}");
    }

    let tmp = TempDir::new("timed-extraction-isolated");
    let (_, c) = run_case(&tmp, SLOW, exact, unchanged, case);
    assert_eq!(c.outcome.verdict, Verdict::Pass, "{}", c.outcome.summary);
    assert!(
        c.outcome.summary.contains("none faster than their baselines"),
        "{}",
        c.outcome.summary
    );
    assert!(
        c.outcome.summary.contains("own right guess was faster"),
        "{}",
        c.outcome.summary
    );

    let tmp = TempDir::new("timed-extraction-blind");
    let (_, c) = run_case(&tmp, &["--no-cache-counter"], exact, unchanged, case);
    let summary = &c.outcome.summary;
    match c.outcome.verdict {
        Verdict::Pass => assert!(
            summary.contains("does not show even the owner")
                && summary.contains("is ruled out (95%)")
                && summary.contains("needing more samples than 32 a guess is not"),
            "{summary}"
        ),
        Verdict::Inconclusive => assert!(
            summary.contains("timed the guesses instead") && summary.contains("faintly"),
            "{summary}"
        ),
        v => panic!("{v:?}: {summary}"),
    }
    assert!(c.outcome.findings.is_empty(), "{summary}");
}

/// Where the counter is there but tells the owner nothing (no prefix cache at all),
/// the case times the guesses, and the time tells the owner nothing either: a pass,
/// with the samples it took and the saving it rules out.
#[test]
fn without_a_cache_extraction_passes_with_what_it_ruled_out() {
    let tmp = TempDir::new("extraction-no-cache");
    let (_, c) = run_case(
        &tmp,
        &["--prefix-cache", "off"],
        "--exact cache.prefix-extraction",
        unchanged,
        "cache.prefix-extraction",
    );
    assert_eq!(c.outcome.verdict, Verdict::Pass, "{}", c.outcome.summary);
    assert!(
        c.outcome.summary.contains("does not show even the owner")
            && c.outcome.summary.contains("as often as chance makes it"),
        "{}",
        c.outcome.summary
    );
    // 32 control pairs and the prompts sent again before every fourth: the owner had
    // what a guess has.
    assert!(c.outcome.coverage.requests >= 64, "{:?}", c.outcome.coverage);
}

/// A response cache keyed without the caller that gives its hits a new id and time,
/// in front of a model at 1 ms a token, shows in the timed pairs alone: b's copies of
/// a's requests come sooner than b's own prompts. `verify` replays the pairs' sign
/// test from the transcript: a roles line that swaps the arms of the pairs (b's own
/// prompts named as copies of a's) is refused, and so is a report that drops the
/// finding.
#[test]
fn a_cache_that_renames_its_hits_fails_by_the_timed_pairs_and_verify_replays_them() {
    let tmp = TempDir::new("reuse-timed");
    let flags = [
        "--response-cache",
        "global-renamed",
        "--plain-decode",
        "--decode-step-us",
        "1000",
    ];
    let (run_dir, case) = run_case(
        &tmp,
        &flags,
        "--exact cache.response-reuse",
        |p| p,
        "cache.response-reuse",
    );
    assert_eq!(case.outcome.verdict, Verdict::Fail, "{}", case.outcome.summary);
    let timed = case
        .outcome
        .findings
        .iter()
        .find(|f| f.code == FindingCode::ResponseReused && f.message.contains("timed pairs"))
        .unwrap_or_else(|| panic!("no finding of the timed pairs: {}", case.outcome.summary));
    assert!(timed.message.contains("a's answers given again"), "{}", timed.message);
    let err = crate::common::rechained(&run_dir, |lines| {
        let roles = lines
            .iter_mut()
            .find(|l| l["kind"] == "roles" && l["case"] == "cache.response-reuse")
            .expect("the case's roles line");
        let hit = roles["roles"]["hit"].take();
        let miss = roles["roles"]["miss"].take();
        roles["roles"]["hit"] = miss;
        roles["roles"]["miss"] = hit;
    })
    .unwrap_err();
    assert!(err.contains("must carry the text of"), "{err}");
    let err = resigned(&run_dir, |r| {
        let o = &mut r
            .cases
            .iter_mut()
            .find(|c| c.id == "cache.response-reuse")
            .unwrap()
            .outcome;
        o.findings.retain(|f| !f.message.contains("timed pairs"));
        // A careful liar: the case passed where nothing else fails it.
        if o.findings.is_empty() {
            o.verdict = Verdict::Pass;
        }
        r.tally();
    })
    .unwrap_err();
    assert!(err.contains("findings of ResponseReused"), "{err}");
}
