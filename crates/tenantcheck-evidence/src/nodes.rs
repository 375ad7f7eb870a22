//! [`NodeCoverage`]: which of a vendor's nodes a case's long prompts reached.
//!
//! A hosted model is many replicas behind a router; a misconfigured one among many is
//! what a short test misses. Where the vendor names the serving node (a response
//! header or a field of the answer), every answer says where it was served, and the
//! chance that some node serving the model was never seen is estimated by Good–Turing:
//! the share of the long prompts whose node got exactly one of them (`f1 / n`; a long
//! prompt is one draw of the router, its pinned seed is not another), and at least the
//! chance that one more node, as likely as each seen, got none of them
//! (`(s / (s + 1))^n`), since Good–Turing says 0 once every node seen got two; a
//! declared node never named is unseen for certain. Where it does not, but declares how many
//! nodes it runs, the report gives the chance that uniform routing left one of them
//! without a long prompt (inclusion–exclusion over the declared count). Where it does
//! neither, coverage is unknown and the case treats the vendor as one node, saying so.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Which nodes a case's exposures reached.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NodeCoverage {
    /// Where answers named the serving node: the response header (lowercase), or
    /// `body` and the field's JSON Pointer (`body /system_fingerprint`); none: not named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// The nodes the profile declares, if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared: Option<u32>,
    /// Answers of the case whose node was named, per node: the transcript lines.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub answers: BTreeMap<String, Vec<u64>>,
    /// Exposures per node: long prompts answered on a node where the request served
    /// just before it on that node was another tenant's, at most half as long
    /// ([`counts`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub exposures: BTreeMap<String, Vec<u64>>,
    /// Exposures in all, named or not.
    pub total_exposures: u64,
    /// Exposures each node needs for the case's power at the echo measured.
    pub needed: u32,
    /// The estimated chance that a node serving the model got no exposure; none:
    /// unknown (no node named, no count declared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unseen: Option<f64>,
    /// The largest a pass allows.
    pub max_unseen: f64,
}

impl NodeCoverage {
    /// The coverage of a case: `served` lists its answered requests in order
    /// (transcript line, tenant, the node named, the messages' length in characters),
    /// `exposed` the lines of its long prompts, and each node needs `needed` exposures.
    /// One rule for the run and for `verify`.
    pub fn of(
        fleet: &crate::profile::FleetSpec,
        served: &[(u64, String, Option<String>, usize)],
        exposed: &std::collections::BTreeSet<u64>,
        needed: u32,
    ) -> NodeCoverage {
        let signal = fleet.signal();
        let mut answers: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let mut exposures: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        // The tenant served last on each node, and its prompt's length.
        let mut last: BTreeMap<&str, (&str, usize)> = BTreeMap::new();
        if signal.is_some() {
            for (seq, tenant, node, chars) in served {
                let Some(node) = node else { continue };
                answers.entry(node.clone()).or_default().push(*seq);
                if exposed.contains(seq) && counts(last.get(node.as_str()).copied(), tenant, *chars) {
                    exposures.entry(node.clone()).or_default().push(*seq);
                }
                last.insert(node, (tenant, *chars));
            }
        }
        let total_exposures = exposed.len() as u64;
        // Good–Turing counts draws of the router: each long prompt is one (its
        // pinned seed went where it went by construction, so counting both would
        // see every node at least twice and the unseen share would always be 0).
        let draws: Vec<Vec<u64>> = answers
            .values()
            .map(|seqs| seqs.iter().copied().filter(|s| exposed.contains(s)).collect())
            .collect();
        let unseen = match (&signal, fleet.nodes) {
            // A declared node never named is known to be unseen.
            (Some(_), Some(n)) if (answers.len() as u64) < u64::from(n) => Some(1.0),
            (Some(_), _) if !answers.is_empty() => {
                Some(good_turing(&draws).max(one_more_unseen(&draws, answers.len())))
            }
            (Some(_), _) => None,
            (None, Some(n)) => Some(1.0 - all_reached(n, total_exposures)),
            (None, None) => None,
        };
        NodeCoverage {
            signal,
            declared: fleet.nodes,
            answers,
            exposures,
            total_exposures,
            needed,
            unseen,
            max_unseen: fleet.max_unseen,
        }
    }

    /// Whether the case reached every node it must have: the unseen chance is known
    /// and at most the target, and every node seen had the exposures it needs.
    pub fn suffices(&self) -> bool {
        self.unseen.is_some_and(|u| u <= self.max_unseen)
            && (self.signal.is_none()
                || self
                    .answers
                    .keys()
                    .all(|n| self.exposures_on(n) >= self.needed as usize))
    }

    /// Exposures on `node`.
    pub fn exposures_on(&self, node: &str) -> usize {
        self.exposures.get(node).map_or(0, Vec::len)
    }

    /// The figures, in words.
    pub fn describe(&self) -> String {
        let unseen = match self.unseen {
            Some(u) => format!("{u:.4}"),
            None => "unknown".into(),
        };
        match &self.signal {
            Some(signal) => {
                let by = match signal.strip_prefix("body ") {
                    Some(field) => format!("the answer's field {field}"),
                    None => format!("the response header {signal}"),
                };
                let per: Vec<String> = self
                    .answers
                    .keys()
                    .map(|n| format!("{n} {}", self.exposures_on(n)))
                    .collect();
                format!(
                    "nodes by {by}: {} seen, exposures per node {} (each needs {}); chance of an unseen node {unseen} (Good-Turing, or one more node as likely as each seen; at most {})",
                    self.answers.len(),
                    per.join(", "),
                    self.needed,
                    self.max_unseen
                )
            }
            None => {
                let coverage = match self.declared {
                    Some(n) => format!(
                        "no node named; of {n} declared nodes, the chance that uniform routing left one without any of the {} exposures is {unseen} (at most {})",
                        self.total_exposures, self.max_unseen
                    ),
                    None => "no node named and no node count declared: node coverage unknown".into(),
                };
                format!(
                    "{coverage}; the nodes were not identified, so a leak rate ruled out is the run's, over whichever nodes served it, not each node's (one bad node among many leaks in that share of requests only)"
                )
            }
        }
    }
}

/// Whether a prompt of `tokens` is one of `context.boundary`'s long prompts: within the
/// context, and within a tenth of the top length it aims for (the top itself, or a
/// length its search tried near it).
pub fn at_the_top(tokens: u64, top: u64, context: u64) -> bool {
    tokens <= context && tokens * 10 >= top * 9
}

/// Whether a long prompt of `tenant` (`chars` long) is an exposure on its node, given
/// the request served there just before it (its tenant and length): another tenant's,
/// and at most half as long, so that it wrote what it held where a node that drops the
/// writes of long prompts (the 2026 incident's engine) still stores the short ones.
pub fn counts(before: Option<(&str, usize)>, tenant: &str, chars: usize) -> bool {
    before.is_some_and(|(t, c)| t != tenant && 2 * c <= chars)
}

/// Whether a long prompt of `tenant` (`chars` long) would be an exposure on every node
/// seen in `served` (transcript line, tenant, node, characters, in order), wherever a
/// router that ignores pins sends it: each node's last request [`counts`].
pub fn primed(served: &[(u64, String, Option<String>, usize)], tenant: &str, chars: usize) -> bool {
    let mut last: BTreeMap<&str, (&str, usize)> = BTreeMap::new();
    for (_, t, node, c) in served {
        if let Some(node) = node {
            last.insert(node.as_str(), (t.as_str(), *c));
        }
    }
    last.values().all(|&before| counts(Some(before), tenant, chars))
}

/// The chance that one more node, with a share of the routing equal to each seen
/// node's, got none of the long prompts: `(seen / (seen + 1))^n` over the `n` draws.
/// Good–Turing alone says 0 as soon as every node seen got two draws, however few the
/// draws (6 nodes seen twice each of 8 behind the router: 0); this bound does not.
pub fn one_more_unseen(draws: &[Vec<u64>], seen: usize) -> f64 {
    let n: usize = draws.iter().map(Vec::len).sum();
    let s = seen as f64;
    (s / (s + 1.0)).powf(n as f64)
}

/// Good–Turing's estimate of the unseen share: the share of observations whose node
/// was seen exactly once; 1 with no observation.
pub fn good_turing<'a>(counts: impl IntoIterator<Item = &'a Vec<u64>>) -> f64 {
    let (mut once, mut n) = (0usize, 0usize);
    for c in counts {
        n += c.len();
        once += usize::from(c.len() == 1);
    }
    if n == 0 { 1.0 } else { once as f64 / n as f64 }
}

/// The chance that `exposures` requests, each routed uniformly to one of `nodes`,
/// reach every node: exact by inclusion–exclusion up to 32 nodes; above, where its
/// alternating terms lose all precision, the union bound's lower bound
/// `1 - nodes (1 - 1/nodes)^exposures` (so the unseen chance is never understated).
pub fn all_reached(nodes: u32, exposures: u64) -> f64 {
    if nodes > 32 {
        let n = f64::from(nodes);
        return (1.0 - n * (1.0 - 1.0 / n).powf(exposures as f64)).clamp(0.0, 1.0);
    }
    let n = f64::from(nodes);
    let mut sum = 0.0;
    let mut binom = 1.0;
    for j in 0..=nodes {
        if j > 0 {
            binom *= (n - f64::from(j) + 1.0) / f64::from(j);
        }
        let term = binom * (1.0 - f64::from(j) / n).powf(exposures as f64);
        sum += if j % 2 == 0 { term } else { -term };
    }
    sum.clamp(0.0, 1.0)
}

/// Exposures one node needs for `min_power` at an echo rate of at least `echo_low`.
pub fn needed(echo_low: f64, min_power: f64) -> u32 {
    if echo_low <= 0.0 {
        return u32::MAX;
    }
    if echo_low >= 1.0 {
        return 1;
    }
    ((1.0 - min_power).ln() / (1.0 - echo_low).ln()).ceil().max(1.0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_reached_matches_the_coupon_collector_table() {
        // RESEARCH: 95% of all 8 nodes covered at 38 requests, 99% at 51; 6 nodes: 27 and 36.
        assert!(all_reached(8, 38) >= 0.95 && all_reached(8, 37) < 0.95);
        assert!(all_reached(8, 51) >= 0.99 && all_reached(8, 50) < 0.99);
        assert!(all_reached(6, 27) >= 0.95 && all_reached(6, 36) >= 0.99);
        assert_eq!(all_reached(1, 1), 1.0);
        assert_eq!(all_reached(4, 3), 0.0);
        // 32 nodes: 99% at 255 (exact). Above, the union bound, never more than the
        // exact chance (64 nodes: 99% at 557 exactly; the bound crosses it there too,
        // at 0.9901) and finite however many nodes are declared.
        assert!(all_reached(32, 255) >= 0.99 && all_reached(32, 254) < 0.99);
        assert!(all_reached(64, 557) >= 0.99 && all_reached(64, 540) < 0.99);
        let big = all_reached(1_000_000, 20_000_000);
        assert!(big.is_finite() && big > 0.99, "{big}");
        assert_eq!(all_reached(1_000, 10), 0.0);
    }

    #[test]
    fn one_more_node_is_unseen_until_the_draws_make_it_unlikely() {
        // Six nodes seen, two long prompts each: Good–Turing says 0; one more node
        // as likely as each would have been missed 16% of the time.
        let six: Vec<Vec<u64>> = (0..6).map(|i| vec![2 * i, 2 * i + 1]).collect();
        assert_eq!(good_turing(&six), 0.0);
        let bound = one_more_unseen(&six, 6);
        assert!(
            (bound - (6.0f64 / 7.0).powi(12)).abs() < 1e-12 && bound > 0.15,
            "{bound}"
        );
        // Eight nodes: 40 draws bring it under 1%.
        let forty: Vec<Vec<u64>> = (0..8).map(|i| (0..5).map(|j| i * 5 + j).collect()).collect();
        assert!(one_more_unseen(&forty, 8) < 0.01);
        assert!(one_more_unseen(&forty[..7], 8) > 0.01, "35 draws are not enough");
    }

    #[test]
    fn good_turing_is_the_share_seen_once() {
        let counts = [vec![1, 2, 3], vec![4], vec![5, 6]];
        assert!((good_turing(&counts) - 1.0 / 6.0).abs() < 1e-12);
        assert_eq!(good_turing(&[] as &[Vec<u64>]), 1.0);
    }

    #[test]
    fn an_exposure_counts_after_a_shorter_prompt_of_another_tenant() {
        assert!(counts(Some(("a", 100)), "b", 200));
        assert!(
            !counts(Some(("a", 101)), "b", 200),
            "not short enough to have been written"
        );
        assert!(!counts(Some(("b", 10)), "b", 200), "its own tenant's");
        assert!(!counts(None, "b", 200), "nothing before it on that node");
    }

    #[test]
    fn a_fleet_is_primed_when_every_node_last_served_another_tenants_shorter_prompt() {
        let line = |seq: u64, tenant: &str, node: Option<&str>, chars: usize| {
            (seq, tenant.to_owned(), node.map(str::to_owned), chars)
        };
        let mut served = vec![
            line(1, "b", Some("node-0"), 100),
            line(2, "b", Some("node-1"), 100),
            line(3, "a", None, 10),
        ];
        assert!(primed(&served, "a", 1000));
        assert!(
            !primed(&served, "a", 150),
            "a seed more than half as long primes nothing"
        );
        assert!(!primed(&served, "b", 1000), "the prober's own prompts prime nothing");
        // a's long prompt lands on node-1: that node must be seeded again.
        served.push(line(4, "a", Some("node-1"), 1000));
        assert!(!primed(&served, "a", 1000));
        served.push(line(5, "b", Some("node-1"), 100));
        assert!(primed(&served, "a", 1000));
        assert!(primed(&[], "a", 1000), "no node seen: nothing to prime");
    }

    #[test]
    fn a_node_needs_the_exposures_that_give_the_power() {
        assert_eq!(needed(1.0, 0.99), 1);
        assert_eq!(needed(0.9, 0.99), 2);
        assert_eq!(needed(0.5, 0.99), 7);
        assert_eq!(needed(0.0, 0.99), u32::MAX);
    }
}
