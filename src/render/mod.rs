//! Renderers of a report: [`html`] (one self-contained page), [`markdown`] (a summary
//! that fits a pull-request comment) and [`junit`] (JUnit XML for CI test-report tools).
//!
//! They take a [`Report`] the caller trusts: the one a run just signed, or one
//! `tenantcheck render` obtained through `report::verify`. The HTML optionally takes the
//! transcript, to show the request that seeded each leaked canary.

mod html;

pub use html::html;

use crate::inert::{Sink, inert};
use crate::outcome::Verdict;
use crate::report::Report;
use std::fmt::Write;

/// Text for HTML: markup as entities, controls and bidi formatting shown escaped.
pub(crate) fn escape(text: &str) -> String {
    inert(text, Sink::Html).into_owned()
}

/// Text for XML 1.0 (JUnit): as [`escape`], for the characters XML cannot hold.
fn xml(text: &str) -> String {
    inert(text, Sink::Xml).into_owned()
}

/// Text for one line of Markdown.
fn md(text: &str) -> std::borrow::Cow<'_, str> {
    inert(text, Sink::Markdown)
}

/// An identifier as Markdown code when it is plainly one (letters, digits, `.-_/:…`),
/// else as escaped text: a backtick would end a code span, where escapes do not work.
fn md_code(text: &str) -> String {
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || ".-_/:…".contains(c)) {
        format!("`{text}`")
    } else {
        md(text).into_owned()
    }
}

/// Why the run did not finish every case, in words, if it did not.
pub(crate) fn incomplete(report: &Report) -> Option<String> {
    match (&report.interrupted, &report.refused) {
        (Some(i), _) => Some(format!(
            "interrupted by {} before every case finished; unfinished: {}",
            i.signal,
            i.unfinished.join(", ")
        )),
        (None, Some(r)) => Some(format!(
            "stopped: {}; unfinished: {}",
            r.reason,
            r.unfinished.join(", ")
        )),
        (None, None) => None,
    }
}

/// Whether the run entered a transparency log, in words: a reader of a report that was
/// not logged learns that other runs under its challenge cannot be counted.
fn logged(report: &Report) -> String {
    match &report.run_secret.log {
        Some(start) => format!(
            "The run's start is entry {} of the transparency log {}, logged before its first request; tenantcheck runs --challenge lists every run under its challenge.",
            start.entry.log_index, start.origin
        ),
        None => "The run was not logged in a transparency log: other runs made under its challenge cannot be counted."
            .to_owned(),
    }
}

/// The report as Markdown: verdict, one row per case, the first findings, how to verify.
pub fn markdown(report: &Report, key_id: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "### tenantcheck: {} — {}\n", report.verdict.label(), report.totals);
    if let Some(words) = report.selection_in_words() {
        let _ = writeln!(
            out,
            "**Over a selection: {}; not a verdict on the whole suite.**\n",
            md(&words)
        );
    }
    let p = &report.vendor.profile;
    let _ = writeln!(
        out,
        "Vendor **{}** ({}, advertised context {} tokens), suite {}, tool {} {}.\n",
        md(&p.name),
        md_code(&p.model),
        p.context_window,
        md_code(&format!(
            "{}…",
            report.suite.digest.chars().take(12).collect::<String>()
        )),
        md(&report.tool.name),
        md(&report.tool.version)
    );
    let _ = writeln!(out, "{}\n", md(&logged(report)));
    if let Some(why) = incomplete(report) {
        let _ = writeln!(out, "**Incomplete**: {}\n", md(&why));
    }
    if let Some(r) = &report.rate_limits {
        let _ = writeln!(out, "**Rate limits**: {}\n", md(&r.describe()));
    }
    out.push_str("| case | threat | verdict | summary |\n|---|---|---|---|\n");
    for c in &report.cases {
        let mut summary: String = c.outcome.summary.chars().take(160).collect();
        if summary.len() < c.outcome.summary.len() {
            summary.push('…');
        }
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            md_code(&c.id),
            c.threat,
            c.outcome.verdict.label(),
            md(&summary)
        );
    }
    let bounds: Vec<_> = report
        .cases
        .iter()
        .filter_map(|c| Some((c, c.outcome.power.as_ref()?.leak_rate.as_ref()?)))
        .collect();
    if !bounds.is_empty() {
        out.push_str("\n**Leak rates ruled out**\n\n");
        for (c, b) in bounds {
            let _ = writeln!(out, "- {}: {}", md_code(&c.id), md(&b.describe()));
        }
    }
    let findings: Vec<_> = report
        .cases
        .iter()
        .flat_map(|c| c.outcome.findings.iter().map(move |f| (c, f)))
        .collect();
    if !findings.is_empty() {
        out.push_str("\n**Findings**\n\n");
        for (c, f) in findings.iter().take(10) {
            let _ = writeln!(out, "- {} {:?}: {}", md_code(&c.id), f.code, md(&f.message));
        }
        if findings.len() > 10 {
            let _ = writeln!(out, "- … and {} more in the report", findings.len() - 10);
        }
    }
    let _ = writeln!(
        out,
        "\nSigned by key {}; check with `tenantcheck verify report.dsse.json --key signing-key.pub.pem`.",
        md_code(key_id)
    );
    out
}

/// The report as JUnit XML: one `testsuite`, one `testcase` per case. A fail is a
/// `failure` (type: the first finding's code), an inconclusive case an `error` (it is
/// not a pass), a skipped one `skipped`.
pub fn junit(report: &Report) -> String {
    let t = report.totals;
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<testsuites name=\"tenantcheck\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\">",
        report.cases.len(),
        t.failed,
        t.inconclusive,
        t.skipped
    );
    let _ = writeln!(
        x,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" timestamp=\"{}\">",
        xml(&report.vendor.profile.name),
        report.cases.len(),
        t.failed,
        t.inconclusive,
        t.skipped,
        xml(&report.started_at)
    );
    for c in &report.cases {
        let _ = write!(
            x,
            "    <testcase classname=\"tenantcheck.{}\" name=\"{}\"",
            c.threat,
            xml(&c.id)
        );
        let summary = xml(&c.outcome.summary);
        match c.outcome.verdict {
            Verdict::Pass => x.push_str("/>\n"),
            Verdict::Fail => {
                let kind = c
                    .outcome
                    .findings
                    .first()
                    .map_or("Fail".to_owned(), |f| format!("{:?}", f.code));
                let body: Vec<String> = c.outcome.findings.iter().map(|f| xml(&f.message)).collect();
                let _ = writeln!(
                    x,
                    ">\n      <failure type=\"{kind}\" message=\"{summary}\">{}</failure>\n    </testcase>",
                    body.join("\n")
                );
            }
            Verdict::Inconclusive => {
                let _ = writeln!(
                    x,
                    ">\n      <error type=\"Inconclusive\" message=\"{summary}\"/>\n    </testcase>"
                );
            }
            Verdict::Skipped => {
                let _ = writeln!(x, ">\n      <skipped message=\"{summary}\"/>\n    </testcase>");
            }
        }
    }
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_and_control_characters() {
        assert_eq!(
            escape("<a href=\"x\">&'\u{1}"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;\\u{1}"
        );
        assert_eq!(md_code("isolation.canary-residue"), "`isolation.canary-residue`");
        assert_eq!(md_code("a`b"), "a\\`b");
    }
}
