//! The rule of `availability.noisy-neighbour` (T11): whether one tenant's valid load
//! failed, or stalled beyond a bound, another tenant's valid requests.
//!
//! The case hands it three sets of lines, recorded in the transcript as its `roles`:
//! the quiet tenant's short requests alone (`alone`), the loud tenant's long ones
//! (`load`) and the quiet tenant's sent with them (`under`). The run and `verify` call
//! [`judge`] on the same lines.

use crate::exchange::Exchange;
use serde::Deserialize;

/// The roles the case records, in the order it sends them.
pub const ROLES: [&str; 3] = ["alone", "load", "under"];

/// The case's parameters the rule reads (the rest decide what is sent).
#[derive(Clone, Debug, Deserialize)]
pub struct Rule {
    /// The most the quiet tenant's 95th-percentile time to first token may grow under
    /// load, as a factor of its baseline.
    pub max_slowdown: f64,
    /// The least baseline the factor applies to, in milliseconds.
    pub latency_floor_ms: f64,
}

/// What the rule finds against the vendor.
#[derive(Clone, Debug, PartialEq)]
pub enum Unfair {
    /// A request of the quiet tenant's under load got a server error, or a rate limit
    /// from a vendor that serves the two tenants as different organisations.
    Failed {
        /// Its line.
        seq: u64,
    },
    /// The quiet tenant's 95th-percentile time to first token grew past the bound.
    Slow {
        /// Its 95th percentile alone, in milliseconds.
        base: f64,
        /// Under load.
        loaded: f64,
        /// The bound.
        allowed: f64,
    },
}

/// The rule's judgement of the case's lines.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Judged {
    /// Findings against the vendor.
    pub unfair: Vec<Unfair>,
    /// The quiet tenant's first request that failed alone: nothing is judged then.
    pub failed_alone: Option<u64>,
    /// The quiet tenant's requests under load that failed fairly (a client error, a
    /// rate limit within one organisation): they are not judged.
    pub unjudged: Vec<u64>,
    /// The loud tenant's requests answered whole: none means there was no load.
    pub load_answered: usize,
    /// The 95th-percentile time to first token alone and under load, in milliseconds,
    /// and the bound.
    pub base: f64,
    /// Under load.
    pub loaded: f64,
    /// The bound.
    pub allowed: f64,
}

impl Judged {
    /// Whether the lines decide the case: the quiet tenant succeeded alone, the load
    /// was answered, and every request under it either succeeded or failed unfairly.
    pub fn decided(&self) -> bool {
        !self.unfair.is_empty() || (self.failed_alone.is_none() && self.load_answered > 0 && self.unjudged.is_empty())
    }
}

/// Judges the case's lines (`same_org`: whether the vendor serves both tenants as one
/// organisation, where a rate limit shared between them is fair).
pub fn judge(
    rule: &Rule,
    same_org: bool,
    alone: &[(u64, &Exchange)],
    load: &[(u64, &Exchange)],
    under: &[(u64, &Exchange)],
) -> Judged {
    let mut judged = Judged::default();
    if let Some((seq, _)) = alone.iter().find(|(_, ex)| !answered(ex)) {
        judged.failed_alone = Some(*seq);
        return judged;
    }
    judged.load_answered = load.iter().filter(|(_, ex)| answered(ex)).count();
    for (seq, ex) in under {
        let unfair = match ex.status {
            _ if server_error(ex) => true,
            Some(429) => !same_org,
            _ => false,
        };
        if unfair {
            judged.unfair.push(Unfair::Failed { seq: *seq });
        } else if !answered(ex) {
            judged.unjudged.push(*seq);
        }
    }
    let times = |lines: &[(u64, &Exchange)]| -> Vec<f64> {
        lines
            .iter()
            .filter(|(_, ex)| answered(ex))
            .map(|(_, ex)| ex.timings.first_answer_ms())
            .collect()
    };
    let loaded = times(under);
    judged.base = p95(&times(alone));
    judged.loaded = p95(&loaded);
    judged.allowed = rule.max_slowdown * judged.base.max(rule.latency_floor_ms);
    if !loaded.is_empty() && judged.loaded > judged.allowed {
        judged.unfair.push(Unfair::Slow {
            base: judged.base,
            loaded: judged.loaded,
            allowed: judged.allowed,
        });
    }
    judged
}

/// A server error: a 5xx, or a stream that began 200 and ended in an error frame of
/// the server's (llama.cpp's "Context size has been exceeded" under load).
pub fn server_error(ex: &Exchange) -> bool {
    ex.status.is_some_and(|c| c >= 500)
        || ex.api_error.as_ref().is_some_and(|e| {
            e.kind.as_deref().is_some_and(|k| k.contains("server"))
                || e.code.as_deref().is_some_and(|c| c.len() == 3 && c.starts_with('5'))
        })
}

/// Answered whole: a success with no error frame.
pub fn answered(ex: &Exchange) -> bool {
    ex.is_success() && ex.api_error.is_none()
}

/// The 95th percentile (nearest rank) of `values`; 0 for none.
pub fn p95(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((0.95 * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, ms: f64) -> Exchange {
        let mut ex = Exchange {
            status: Some(status),
            ..Exchange::default()
        };
        ex.timings.total_ms = ms;
        ex
    }

    const RULE: Rule = Rule {
        max_slowdown: 10.0,
        latency_floor_ms: 250.0,
    };

    #[test]
    fn the_95th_percentile_is_the_nearest_rank() {
        assert_eq!(p95(&[]), 0.0);
        assert_eq!(p95(&[3.0]), 3.0);
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(p95(&v), 19.0);
        assert_eq!(p95(&[5.0, 1.0, 9.0, 2.0, 3.0, 4.0, 6.0, 7.0]), 9.0);
    }

    #[test]
    fn a_server_error_under_load_is_unfair_and_a_rate_limit_only_across_organisations() {
        let ok = answer(200, 10.0);
        let (e500, e429) = (answer(503, 5.0), answer(429, 5.0));
        let alone = [(1, &ok), (2, &ok)];
        let load = [(3, &ok)];
        let under = [(4, &e500), (5, &e429), (6, &ok)];
        let across = judge(&RULE, false, &alone, &load, &under);
        assert_eq!(
            across.unfair,
            vec![Unfair::Failed { seq: 4 }, Unfair::Failed { seq: 5 }]
        );
        assert!(across.decided());
        let within = judge(&RULE, true, &alone, &load, &under);
        assert_eq!(within.unfair, vec![Unfair::Failed { seq: 4 }]);
        assert_eq!(within.unjudged, vec![5]);
    }

    #[test]
    fn a_slowdown_past_the_bound_is_unfair_and_the_floor_keeps_a_fast_baseline_from_making_any_queue_one() {
        let fast = answer(200, 1.0);
        let (queued, stalled) = (answer(200, 2_000.0), answer(200, 3_000.0));
        let alone = [(1, &fast), (2, &fast)];
        let load = [(3, &fast)];
        let within = judge(&RULE, false, &alone, &load, &[(4, &queued)]);
        assert!(within.unfair.is_empty() && within.decided(), "{within:?}");
        let past = judge(&RULE, false, &alone, &load, &[(4, &queued), (5, &stalled)]);
        assert_eq!(
            past.unfair,
            vec![Unfair::Slow {
                base: 1.0,
                loaded: 3_000.0,
                allowed: 2_500.0
            }]
        );
    }

    #[test]
    fn nothing_is_decided_when_the_quiet_tenant_fails_alone_or_the_load_was_refused() {
        let (ok, bad) = (answer(200, 1.0), answer(500, 1.0));
        let failed = judge(&RULE, false, &[(1, &ok), (2, &bad)], &[], &[]);
        assert_eq!(failed.failed_alone, Some(2));
        assert!(!failed.decided());
        let refused = answer(400, 1.0);
        let no_load = judge(&RULE, false, &[(1, &ok)], &[(2, &refused)], &[(3, &ok)]);
        assert!(!no_load.decided());
    }
}
