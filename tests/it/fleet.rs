//! Every node of a fleet: the reference vendor as eight nodes behind a router, the
//! fault on one of them, and the profile's `[fleet]` telling the suite where the node
//! shows. `isolation.canary-residue` and `context.boundary` must fail on the bad node
//! or be inconclusive with their coverage; neither passes while a node went unreached.

use crate::common::{Sim, TempDir, resigned, run_exact, transcript_exchanges, verified};
use tenantcheck::outcome::{FindingCode, Verdict};
use tenantcheck::report::CaseReport;

const CASE: &str = "isolation.canary-residue";

/// Runs the isolation case against a sim with `flags`, the profile given `fleet` as its
/// `[fleet]` table; returns the run's folder (kept while it lives), its exchanges and
/// the case.
fn isolation(
    tag: &str,
    flags: &[&str],
    fleet: &str,
) -> (Run, std::collections::BTreeMap<u64, serde_json::Value>, CaseReport) {
    case_on_fleet(CASE, tag, flags, fleet)
}

/// Runs `case` against a sim with `flags`, the profile given `fleet` as its `[fleet]`.
fn case_on_fleet(
    case: &str,
    tag: &str,
    flags: &[&str],
    fleet: &str,
) -> (Run, std::collections::BTreeMap<u64, serde_json::Value>, CaseReport) {
    let tmp = TempDir::new(tag);
    let sim = Sim::start("fleet-key-a-1", "fleet-key-b-1", flags);
    let profile = sim.profile(tmp.path());
    let text = std::fs::read_to_string(&profile).unwrap();
    std::fs::write(&profile, format!("{text}\n[fleet]\n{fleet}\n")).unwrap();
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = run_exact(&profile, &run_dir, case, "fleet-key-a-1", "fleet-key-b-1");
    assert!(matches!(code, Some(0 | 1 | 3)), "{code:?}\n{stdout}\n{stderr}");
    let report = verified(&run_dir);
    let case = report.cases.iter().find(|c| c.id == case).unwrap().clone();
    let exchanges = transcript_exchanges(&run_dir);
    (
        Run {
            _tmp: tmp,
            dir: run_dir,
        },
        exchanges,
        case,
    )
}

/// A run folder, kept while its temporary directory lives.
struct Run {
    _tmp: TempDir,
    dir: std::path::PathBuf,
}

/// The node that served the answer a finding names.
fn leaking_node(exchanges: &std::collections::BTreeMap<u64, serde_json::Value>, case: &CaseReport) -> String {
    let leak = case
        .outcome
        .findings
        .iter()
        .find(|f| f.code == FindingCode::CrossTenantCanary)
        .and_then(|f| f.leak.as_ref())
        .unwrap_or_else(|| panic!("a leak: {}", case.outcome.summary));
    exchanges[&leak.returned_in]["exchange"]["headers"]["x-served-by"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn one_bad_node_of_eight_fails_on_that_node_under_every_routing() {
    let header = "node_header = \"x-served-by\"";
    let with_affinity = "node_header = \"x-served-by\"\naffinity_header = \"x-session-affinity\"";
    for (routing, fleet) in [("random", header), ("prefix-hash", header), ("affinity", with_affinity)] {
        let flags = [
            "--nodes",
            "8",
            "--bad-nodes",
            "1",
            "--routing",
            routing,
            "--fault",
            "stale-pages",
        ];
        let (_run, exchanges, case) = isolation(&format!("fleet-bad-{routing}"), &flags, fleet);
        // Never a pass over an unreached node; here the pairs pinned to one node reach
        // node-0 and read the other tenant's pages there.
        assert_eq!(
            case.outcome.verdict,
            Verdict::Fail,
            "{routing}: {}",
            case.outcome.summary
        );
        assert_eq!(leaking_node(&exchanges, &case), "node-0", "{routing}");
    }
}

#[test]
fn a_healthy_fleet_passes_only_with_every_node_covered() {
    let with_affinity = "node_header = \"x-served-by\"\naffinity_header = \"x-session-affinity\"";
    for (routing, fleet) in [
        ("prefix-hash", "node_header = \"x-served-by\""),
        ("affinity", with_affinity),
        // The router ignores the pin: the nodes are primed before each probe.
        ("random", "node_header = \"x-served-by\""),
    ] {
        let (run, exchanges, case) = isolation(
            &format!("fleet-healthy-{routing}"),
            &["--nodes", "8", "--routing", routing],
            fleet,
        );
        assert_eq!(
            case.outcome.verdict,
            Verdict::Pass,
            "{routing}: {}",
            case.outcome.summary
        );
        let nodes = case.outcome.nodes.as_ref().expect("the coverage is reported");
        assert_eq!(nodes.answers.len(), 8, "{routing}: {}", nodes.describe());
        assert!(nodes.suffices(), "{}", nodes.describe());
        for node in nodes.answers.keys() {
            assert!(
                nodes.exposures_on(node) >= nodes.needed as usize,
                "{}",
                nodes.describe()
            );
        }
        assert!(case.outcome.summary.contains("8 seen"), "{}", case.outcome.summary);
        assert_eq!(
            case.outcome.summary.contains("primed the nodes the router chose"),
            routing == "random",
            "{routing}: {}",
            case.outcome.summary
        );
        // verify derives the coverage again from the node each answer names: a report
        // that claims a node had exposures it did not, or other figures than the
        // profile's, does not verify even when signed with the run's key.
        let err = resigned(&run.dir, |r| {
            let nodes = nodes_of(r);
            let first = nodes.exposures.keys().next().unwrap().clone();
            nodes.exposures.get_mut(&first).unwrap().push(1);
        })
        .unwrap_err();
        assert!(err.contains("node coverage is not what the transcript shows"), "{err}");
        let err = resigned(&run.dir, |r| {
            let nodes = nodes_of(r);
            nodes.max_unseen = 0.5;
        })
        .unwrap_err();
        assert!(err.contains("does not follow the profile's [fleet]"), "{err}");
        if routing == "affinity" {
            // Each pinned pair carried one affinity value, recorded with its requests,
            // and both of its requests met on one node; the pairs spread over all.
            let mut by_value: std::collections::BTreeMap<&str, std::collections::BTreeSet<&str>> = Default::default();
            for l in exchanges.values() {
                if let Some(v) = l["exchange"]["request"]["headers"]["x-session-affinity"].as_str() {
                    let node = l["exchange"]["headers"]["x-served-by"].as_str().unwrap();
                    by_value.entry(v).or_default().insert(node);
                }
            }
            assert!(!by_value.is_empty(), "no request carried the affinity header");
            assert!(by_value.values().all(|n| n.len() == 1), "{by_value:?}");
            let reached: std::collections::BTreeSet<&str> = by_value.values().flatten().copied().collect();
            assert_eq!(reached.len(), 8, "{by_value:?}");
        }
    }
}

#[test]
fn without_a_node_signal_coverage_is_estimated_from_the_declared_count_or_unknown() {
    // Eight declared nodes, none named: the chance that uniform routing missed one.
    let (_run, _, case) = isolation(
        "fleet-declared",
        &["--nodes", "8", "--node-header", "none"],
        "nodes = 8",
    );
    let nodes = case.outcome.nodes.as_ref().expect("the coverage is reported");
    assert_eq!(nodes.signal, None);
    let unseen = nodes.unseen.expect("estimated from the declared count");
    assert_eq!(
        case.outcome.verdict == Verdict::Pass,
        unseen <= nodes.max_unseen,
        "{}",
        case.outcome.summary
    );
    assert!(
        case.outcome.summary.contains("of 8 declared nodes"),
        "{}",
        case.outcome.summary
    );

    // Neither named nor declared, though the profile says it is a fleet: unknown, and
    // no pass.
    let (_run, _, case) = isolation(
        "fleet-unknown",
        &["--nodes", "8", "--node-header", "none"],
        "max_unseen = 0.01",
    );
    assert_eq!(case.outcome.verdict, Verdict::Inconclusive, "{}", case.outcome.summary);
    assert!(
        case.outcome.summary.contains("node coverage unknown"),
        "{}",
        case.outcome.summary
    );
}

/// The isolation case's node coverage in a report, to change.
fn nodes_of(r: &mut tenantcheck::report::Report) -> &mut tenantcheck::nodes::NodeCoverage {
    nodes_of_case(r, CASE)
}

/// A case's node coverage in a report, to change.
fn nodes_of_case<'a>(r: &'a mut tenantcheck::report::Report, id: &str) -> &'a mut tenantcheck::nodes::NodeCoverage {
    let case = r.cases.iter_mut().find(|c| c.id == id).unwrap();
    case.outcome.nodes.as_mut().unwrap()
}

/// The node named in a field of the answer (`system_fingerprint`, as a vendor whose
/// fingerprint differs per replica), not in a header: the bad node is found there, a
/// healthy fleet passes only with every node covered, and `verify` derives the coverage
/// from the field again.
#[test]
fn a_node_named_in_the_answers_fingerprint_is_covered_as_a_header_is() {
    let field = "node_field = \"/system_fingerprint\"";
    let base = [
        "--nodes",
        "8",
        "--routing",
        "prefix-hash",
        "--node-header",
        "none",
        "--node-fingerprint",
    ];
    let bad: Vec<&str> = base
        .iter()
        .copied()
        .chain(["--bad-nodes", "1", "--fault", "stale-pages"])
        .collect();
    let (_run, exchanges, case) = isolation("fleet-field-bad", &bad, field);
    assert_eq!(case.outcome.verdict, Verdict::Fail, "{}", case.outcome.summary);
    let leak = case
        .outcome
        .findings
        .iter()
        .find_map(|f| f.leak.as_ref())
        .expect("a leak");
    // In the body, or in a streamed answer's frames.
    let returned = &exchanges[&leak.returned_in]["exchange"];
    let texts = returned["body"].as_str().into_iter().chain(
        returned["frames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["data"].as_str()),
    );
    let named = texts
        .filter_map(|t| serde_json::from_str::<serde_json::Value>(t).ok())
        .find_map(|v| v["system_fingerprint"].as_str().map(str::to_owned));
    assert_eq!(named.as_deref(), Some("fp_node0"), "{returned}");
    assert!(returned["headers"]["x-served-by"].is_null());

    let (run, _, case) = isolation("fleet-field-healthy", &base, field);
    assert_eq!(case.outcome.verdict, Verdict::Pass, "{}", case.outcome.summary);
    let nodes = case.outcome.nodes.as_ref().expect("the coverage is reported");
    assert_eq!(nodes.signal.as_deref(), Some("body /system_fingerprint"));
    assert_eq!(nodes.answers.len(), 8, "{}", nodes.describe());
    assert!(
        case.outcome
            .summary
            .contains("nodes by the answer's field /system_fingerprint: 8 seen"),
        "{}",
        case.outcome.summary
    );
    let err = resigned(&run.dir, |r| {
        let nodes = nodes_of(r);
        let first = nodes.answers.keys().next().unwrap().clone();
        nodes.answers.remove(&first);
    })
    .unwrap_err();
    assert!(err.contains("node coverage is not what the transcript shows"), "{err}");
}

/// The boundary's long prompts over a fleet: pinned rounds at the top length (the other
/// tenant's seed, then the prompt, on one node) until every node seen had one after a
/// seed; the bad node is found, and a healthy fleet is never passed short of coverage.
#[test]
fn the_boundary_reaches_every_node_with_its_top_length() {
    const BOUNDARY: &str = "context.boundary";
    let header = "node_header = \"x-served-by\"";
    let fleet = ["--nodes", "8", "--routing", "prefix-hash"];
    let bad: Vec<&str> = fleet
        .iter()
        .copied()
        .chain(["--bad-nodes", "1", "--fault", "stale-pages"])
        .collect();
    let (_run, exchanges, case) = case_on_fleet(BOUNDARY, "fleet-boundary-bad", &bad, header);
    assert_eq!(case.outcome.verdict, Verdict::Fail, "{}", case.outcome.summary);
    // The finding names an answer of the bad node.
    let seq: u64 = case.outcome.findings[0]
        .message
        .split("(transcript #")
        .nth(1)
        .and_then(|t| t.split(')').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", case.outcome.findings[0].message));
    assert_eq!(exchanges[&seq]["exchange"]["headers"]["x-served-by"], "node-0");

    let (run, exchanges, case) = case_on_fleet(BOUNDARY, "fleet-boundary-healthy", &fleet, header);
    let nodes = case.outcome.nodes.as_ref().expect("the coverage is reported");
    // Pass only with the coverage; else inconclusive, saying so.
    assert_eq!(
        case.outcome.verdict == Verdict::Pass,
        nodes.suffices(),
        "{}",
        case.outcome.summary
    );
    assert_ne!(case.outcome.verdict, Verdict::Fail, "{}", case.outcome.summary);
    if case.outcome.verdict == Verdict::Inconclusive {
        assert!(
            case.outcome.summary.contains("not every node"),
            "{}",
            case.outcome.summary
        );
    }
    // Each round's seed and prompt carried one affinity value and met on one node.
    let mut by_opening: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    for l in exchanges.values() {
        let request = &l["exchange"]["request"]["body"];
        if let Some(system) = request["messages"][0]["content"]
            .as_str()
            .filter(|_| request["messages"][0]["role"] == "system")
        {
            let node = l["exchange"]["headers"]["x-served-by"]
                .as_str()
                .unwrap_or("-")
                .to_owned();
            by_opening.entry(system[..40].to_owned()).or_default().insert(node);
        }
    }
    assert!(by_opening.len() >= 8, "{} pinned rounds", by_opening.len());
    assert!(by_opening.values().all(|n| n.len() == 1), "{by_opening:?}");
    // verify derives the coverage again: a claimed exposure that is not there is refused.
    let err = resigned(&run.dir, |r| {
        let nodes = nodes_of_case(r, BOUNDARY);
        let first = nodes.answers.keys().next().unwrap().clone();
        nodes.exposures.entry(first).or_default().push(2);
    })
    .unwrap_err();
    assert!(err.contains("node coverage is not what the transcript shows"), "{err}");
}
