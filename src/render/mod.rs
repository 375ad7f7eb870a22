//! Renderers of a report: [`html`] (one self-contained page), [`markdown`] (a summary
//! that fits a pull-request comment) and [`junit`] (JUnit XML for CI test-report tools).
//!
//! They take a [`Report`] the caller trusts: the one a run just signed, or one
//! `tenantcheck render` obtained through `report::verify`. The HTML optionally takes the
//! transcript, to show the request that seeded each leaked canary.

mod html;

pub use html::html;

use crate::outcome::Verdict;
use crate::report::Report;
use std::fmt::Write;

/// Escapes text for XML and HTML.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Characters XML 1.0 cannot hold at all.
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\r' | '\t') => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// The report as Markdown: verdict, one row per case, the first findings, how to verify.
pub fn markdown(report: &Report, key_id: &str) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "### tenantcheck: {} — {}\n", report.verdict.label(), report.totals);
    let p = &report.vendor.profile;
    let _ = writeln!(
        md,
        "Vendor **{}** (`{}`, advertised context {} tokens), suite `{}…`, tool {} {}.\n",
        p.name,
        p.model,
        p.context_window,
        &report.suite.digest[..12],
        report.tool.name,
        report.tool.version
    );
    md.push_str("| case | threat | verdict | summary |\n|---|---|---|---|\n");
    for c in &report.cases {
        let mut summary: String = c.outcome.summary.chars().take(160).collect();
        if summary.len() < c.outcome.summary.len() {
            summary.push('…');
        }
        let _ = writeln!(
            md,
            "| `{}` | {} | {} | {} |",
            c.id,
            c.threat,
            c.outcome.verdict.label(),
            summary.replace('|', "\\|").replace('\n', " ")
        );
    }
    let findings: Vec<_> = report
        .cases
        .iter()
        .flat_map(|c| c.outcome.findings.iter().map(move |f| (c, f)))
        .collect();
    if !findings.is_empty() {
        md.push_str("\n**Findings**\n\n");
        for (c, f) in findings.iter().take(10) {
            let _ = writeln!(md, "- `{}` {:?}: {}", c.id, f.code, f.message.replace('\n', " "));
        }
        if findings.len() > 10 {
            let _ = writeln!(md, "- … and {} more in the report", findings.len() - 10);
        }
    }
    let _ = writeln!(
        md,
        "\nSigned by key `{key_id}`; check with `tenantcheck verify report.dsse.json --key signing-key.pub.pem`."
    );
    md
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
        escape(&report.vendor.profile.name),
        report.cases.len(),
        t.failed,
        t.inconclusive,
        t.skipped,
        escape(&report.started_at)
    );
    for c in &report.cases {
        let _ = write!(
            x,
            "    <testcase classname=\"tenantcheck.{}\" name=\"{}\"",
            c.threat,
            escape(&c.id)
        );
        let summary = escape(&c.outcome.summary);
        match c.outcome.verdict {
            Verdict::Pass => x.push_str("/>\n"),
            Verdict::Fail => {
                let kind = c
                    .outcome
                    .findings
                    .first()
                    .map_or("Fail".to_owned(), |f| format!("{:?}", f.code));
                let body: Vec<String> = c.outcome.findings.iter().map(|f| escape(&f.message)).collect();
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
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;\u{fffd}"
        );
    }
}
