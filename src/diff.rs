//! [`diff`]: what changed between two verified reports of one vendor, case by case, for
//! a vendor's release CI (`tenantcheck diff OLDER NEWER` exits 1 on a regression).
//!
//! A *regression* is a case that passed and no longer does (it failed, was
//! inconclusive, or was not run), or one that was inconclusive and now fails. Changes
//! that are no regression are shown too: the power a pass had, the longest prompt a
//! case reached, the nodes it reached, and what the profile declares (model, context
//! window, declared facts).

use crate::outcome::{Outcome, Verdict};
use crate::report::Report;
use std::collections::BTreeSet;

/// One case in both reports.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseChange {
    /// The case id.
    pub id: String,
    /// Its verdict in the older report (`None`: not in it).
    pub older: Option<Verdict>,
    /// Its verdict in the newer report.
    pub newer: Option<Verdict>,
    /// The figures that changed, in words (`power 0.9950 -> 0.9904`).
    pub changed: Vec<String>,
    /// Whether it regressed.
    pub regressed: bool,
}

/// What changed between two reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Diff {
    /// Every case of either report, by id.
    pub cases: Vec<CaseChange>,
    /// What the profiles say differently (model, context window, base URL, declared
    /// facts), in words.
    pub declared: Vec<String>,
    /// Whether the newer report names the older as the one it follows.
    pub follows: bool,
}

impl Diff {
    /// The cases that regressed.
    pub fn regressions(&self) -> usize {
        self.cases.iter().filter(|c| c.regressed).count()
    }

    /// The comparison as text, one line per case that changed.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        out.push(if self.follows {
            "the newer report names the older as the run it follows".to_owned()
        } else {
            "note: the newer report does not name the older as the run it follows (run --previous)".to_owned()
        });
        for d in &self.declared {
            out.push(format!("profile: {d}"));
        }
        let shown = |v: Option<Verdict>| v.map_or("absent", Verdict::label);
        let mut unchanged = 0;
        for c in &self.cases {
            if c.older == c.newer && c.changed.is_empty() {
                unchanged += 1;
                continue;
            }
            let mut line = format!("{:<32} {:>12} -> {:<12}", c.id, shown(c.older), shown(c.newer));
            if !c.changed.is_empty() {
                line.push_str(&format!(" {}", c.changed.join("; ")));
            }
            if c.regressed {
                line.push_str("  REGRESSION");
            }
            out.push(line);
        }
        out.push(format!(
            "{} cases: {} regressed, {} changed otherwise, {unchanged} unchanged",
            self.cases.len(),
            self.regressions(),
            self.cases.len() - self.regressions() - unchanged
        ));
        out.join("\n")
    }
}

/// Compares `older` with `newer`; `older_envelope` is the older report's envelope
/// bytes, to see whether the newer names it as the run it follows.
pub fn diff(older: &Report, newer: &Report, older_envelope: &[u8]) -> Diff {
    let ids: BTreeSet<&str> = older.cases.iter().chain(&newer.cases).map(|c| c.id.as_str()).collect();
    let find = |r: &'_ Report, id: &str| r.cases.iter().find(|c| c.id == id).map(|c| c.outcome.clone());
    let cases = ids
        .into_iter()
        .map(|id| {
            let (a, b) = (find(older, id), find(newer, id));
            let (va, vb) = (a.as_ref().map(|o| o.verdict), b.as_ref().map(|o| o.verdict));
            CaseChange {
                id: id.to_owned(),
                older: va,
                newer: vb,
                changed: a
                    .as_ref()
                    .zip(b.as_ref())
                    .map(|(a, b)| figures(a, b))
                    .unwrap_or_default(),
                regressed: regressed(va, vb),
            }
        })
        .collect();
    let (pa, pb) = (&older.vendor.profile, &newer.vendor.profile);
    let mut declared = Vec::new();
    if pa.model != pb.model {
        declared.push(format!("model {} -> {}", pa.model, pb.model));
    }
    if pa.context_window != pb.context_window {
        declared.push(format!("context window {} -> {}", pa.context_window, pb.context_window));
    }
    if pa.base_url != pb.base_url {
        declared.push(format!("base URL {} -> {}", pa.base_url, pb.base_url));
    }
    let json = |v: &Option<crate::vendor::Declared>| serde_json::to_string(v).unwrap_or_default();
    if json(&pa.declared) != json(&pb.declared) {
        declared.push(format!(
            "declared facts {} -> {}",
            json(&pa.declared),
            json(&pb.declared)
        ));
    }
    Diff {
        cases,
        declared,
        follows: newer
            .previous
            .as_ref()
            .is_some_and(|p| p.sha256 == crate::sha256_hex(older_envelope)),
    }
}

/// Whether going from `a` to `b` is a regression.
fn regressed(a: Option<Verdict>, b: Option<Verdict>) -> bool {
    match (a, b) {
        (Some(Verdict::Pass), b) => b != Some(Verdict::Pass),
        (Some(Verdict::Inconclusive), Some(Verdict::Fail)) => true,
        _ => false,
    }
}

/// The figures of a case that changed, in words.
fn figures(a: &Outcome, b: &Outcome) -> Vec<String> {
    let mut changed = Vec::new();
    if let (Some(pa), Some(pb)) = (&a.power, &b.power)
        && (pa.power - pb.power).abs() >= 1e-4
    {
        changed.push(format!("power {:.4} -> {:.4}", pa.power, pb.power));
    }
    let (ta, tb) = (a.coverage.max_prompt_tokens, b.coverage.max_prompt_tokens);
    if ta != tb {
        changed.push(format!("longest prompt {ta} -> {tb} tokens"));
    }
    let reached = |o: &Outcome| o.nodes.as_ref().map(|n| n.answers.len());
    if reached(a) != reached(b) {
        let shown = |n: Option<usize>| n.map_or("-".to_owned(), |n| n.to_string());
        changed.push(format!("nodes seen {} -> {}", shown(reached(a)), shown(reached(b))));
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::regressed;
    use crate::outcome::Verdict::{Fail, Inconclusive, Pass, Skipped};

    #[test]
    fn a_regression_is_a_lost_pass_or_a_new_failure() {
        assert!(regressed(Some(Pass), Some(Fail)));
        assert!(regressed(Some(Pass), Some(Inconclusive)));
        assert!(regressed(Some(Pass), Some(Skipped)));
        assert!(regressed(Some(Pass), None));
        assert!(regressed(Some(Inconclusive), Some(Fail)));
        assert!(!regressed(Some(Pass), Some(Pass)));
        assert!(!regressed(Some(Fail), Some(Pass)));
        assert!(!regressed(Some(Fail), Some(Fail)));
        assert!(!regressed(Some(Inconclusive), Some(Pass)));
        assert!(!regressed(None, Some(Fail)));
    }
}
