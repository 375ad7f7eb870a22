//! The report as one self-contained HTML page.
//!
//! No script, no external resource: a Content-Security-Policy forbids any request
//! (`default-src 'none'`), styles are inline, and the one picture (each length search of
//! `context.boundary`: prompt length against what the vendor did) is inline SVG. The
//! verdict comes first, then the cases, the pictures, each finding with the evidence
//! that proves it (the leaked canary highlighted in the response, and in the request
//! that seeded it when the transcript is given), what the vendor declared beside what was
//! measured, and how to check the signature.

use super::escape;
use crate::canary::RunSecret;
use crate::outcome::{Outcome, SweepResult, TimingLevel, Verdict};
use crate::report::Report;
use std::collections::BTreeMap;
use std::fmt::Write;

const STYLE: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:70em;padding:0 1em;color:#1b1b1b}\
h1{margin:0 0 .2em}table{border-collapse:collapse;width:100%;margin:.5em 0 1.5em}\
td,th{border:1px solid #ccd;padding:.35em .5em;vertical-align:top;text-align:left}th{background:#f2f3f7}\
.verdict{font-size:1.6em;font-weight:700;padding:.4em .7em;border-radius:.3em;display:inline-block;color:#fff}\
.pass{background:#1e7e34}.fail{background:#b3261e}.inconclusive{background:#a15c00}.skipped{background:#6b6f7a}\
.tag{font-weight:700;padding:0 .35em;border-radius:.2em;color:#fff}\
pre{white-space:pre-wrap;word-break:break-word;background:#f7f7f9;border:1px solid #ddd;padding:.6em;font-size:13px}\
mark{background:#ffd54f;padding:0 .1em}.cols{display:grid;grid-template-columns:1fr 1fr;gap:1.5em}\
.muted{color:#5f6368}code{font-size:13px}td,pre,code,mark,p{unicode-bidi:isolate}";

/// Renders the report; `transcript` (the run's `transcript.jsonl`) adds the seeding
/// request to each leak.
pub fn html(report: &Report, key_id: &str, transcript: Option<&[u8]>) -> String {
    let seeding: Vec<u64> = report
        .cases
        .iter()
        .flat_map(|c| &c.outcome.findings)
        .filter_map(|f| f.leak.as_ref()?.seeded_in)
        .collect();
    let requests = transcript.map(|t| requests_by_seq(t, &seeding)).unwrap_or_default();
    let secret = RunSecret::from_hex(&report.run_secret.revealed);
    let mut h = String::new();
    let verdict = report.verdict;
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
<title>tenantcheck: {} — {}</title><style>{STYLE}</style></head><body>\n",
        verdict.label(),
        escape(&report.vendor.profile.name)
    );
    let _ = writeln!(
        h,
        "<h1>tenantcheck report</h1><p><span class=\"verdict {}\" id=\"verdict\">{}</span> {}</p>",
        class(verdict),
        verdict.label(),
        report.totals
    );
    if let Some(words) = report.selection_in_words() {
        let _ = writeln!(
            h,
            "<p id=\"selection\"><strong>Over a selection: {}; not a verdict on the whole suite.</strong></p>",
            escape(&words)
        );
    }
    let p = &report.vendor.profile;
    let _ = writeln!(
        h,
        "<p>Vendor <b>{}</b>, model <code>{}</code> at <code>{}</code>, advertised context {} tokens. \
Run {} to {} by {} {}; suite digest <code>{}</code>; run secret commitment <code>{}</code>{}.</p>",
        escape(&p.name),
        escape(&p.model),
        escape(&p.base_url),
        p.context_window,
        escape(&report.started_at),
        escape(&report.finished_at),
        escape(&report.tool.name),
        escape(&report.tool.version),
        escape(&report.suite.digest),
        escape(&report.run_secret.commitment),
        report
            .run_secret
            .challenge
            .as_ref()
            .map(|c| format!("; buyer challenge <code>{}</code>", escape(c)))
            .unwrap_or_default()
    );

    let _ = writeln!(h, "<p id=\"log\">{}</p>", escape(&super::logged(report)));
    if let Some(why) = super::incomplete(report) {
        let _ = writeln!(h, "<p><b>Incomplete</b>: {}</p>", escape(&why));
    }
    if let Some(r) = &report.rate_limits {
        let _ = writeln!(h, "<p><b>Rate limits</b>: {}</p>", escape(&r.describe()));
    }
    h.push_str("<h2>Cases</h2><table><tr><th>case</th><th>threat</th><th>severity</th><th>outcome</th><th>requests</th><th>prompt tokens</th><th>longest prompt</th><th>summary</th></tr>\n");
    for c in &report.cases {
        let cov = c.outcome.coverage;
        let _ = writeln!(
            h,
            "<tr id=\"case-{id}\"><td><code>{id}</code></td><td>{} {}</td><td>{:?}</td><td><span class=\"tag {}\">{}</span></td>\
<td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            c.threat,
            escape(c.threat.title()),
            c.severity,
            class(c.outcome.verdict),
            c.outcome.verdict.label(),
            cov.requests,
            cov.prompt_tokens,
            cov.max_prompt_tokens,
            escape(&c.outcome.summary),
            id = escape(&c.id)
        );
    }
    h.push_str("</table>\n");

    for c in report.cases.iter() {
        let Some(power) = &c.outcome.power else { continue };
        let _ = writeln!(
            h,
            "<h2>What it could have seen: <code>{}</code></h2><p>{}; a pass needs power {}.</p>\
<table><tr><th>prompts</th><th>own content read back</th><th>lower bound (95%)</th><th>exposures</th><th>foreign content</th></tr>",
            escape(&c.id),
            escape(&power.control),
            power.min_power
        );
        for t in &power.trials {
            let carried = if power.form == Some(t.form) { ", carried" } else { "" };
            let _ = writeln!(
                h,
                "<tr><td>short, {}s{carried}</td><td>{} of {}</td><td>{:.3}</td><td>-</td><td>{}</td></tr>",
                t.form.noun(),
                t.echoed.len(),
                t.answers.len(),
                t.echo_low,
                t.foreign.len()
            );
        }
        for b in &power.bands {
            let _ = writeln!(
                h,
                "<tr><td>{} tokens</td><td>{} of {}</td><td>{:.3}</td><td>{}</td><td>{}</td></tr>",
                b.tokens,
                b.echoed.len(),
                b.answers.len(),
                b.echo_low,
                b.exposed.len(),
                b.foreign.len()
            );
        }
        let _ = writeln!(h, "</table><p>Power: <b>{:.4}</b></p>", power.power);
        if let Some(bound) = &power.leak_rate {
            let _ = writeln!(h, "<p>Leak rate ruled out: {}.</p>", escape(&bound.describe()));
        }
    }
    for c in report.cases.iter().filter(|c| !c.outcome.sweep.is_empty()) {
        let _ = writeln!(h, "<h2>Prompt lengths tried: <code>{}</code></h2>", escape(&c.id));
        h.push_str(&sweep_svg(&c.outcome, p.context_window));
    }

    for c in report.cases.iter().filter(|c| !c.outcome.timing.is_empty()) {
        let _ = writeln!(h, "<h2>Times to answer: <code>{}</code></h2>", escape(&c.id));
        for level in &c.outcome.timing {
            h.push_str(&timing_svg(level));
        }
    }

    let failing: Vec<_> = report.cases.iter().filter(|c| !c.outcome.findings.is_empty()).collect();
    if !failing.is_empty() {
        h.push_str("<h2>Findings</h2>\n");
    }
    for c in failing {
        let _ = writeln!(h, "<h3><code>{}</code>: {}</h3>", escape(&c.id), escape(&c.requirement));
        for f in &c.outcome.findings {
            let _ = writeln!(h, "<p><b>{:?}</b>: {}</p>", f.code, escape(&f.message));
            let Some(leak) = &f.leak else { continue };
            let _ = writeln!(
                h,
                "<p class=\"muted\">Tenant {}'s canary <code>{}</code> in the response to tenant {} (transcript #{}):</p><pre class=\"leak\">{}</pre>",
                escape(&leak.owner),
                escape(&leak.canary_id),
                escape(&leak.recipient),
                leak.returned_in,
                highlight(&leak.excerpt, &leak.matched)
            );
            let seeded = leak.seeded_in.and_then(|seq| requests.get(&seq).map(|r| (seq, r)));
            let canary = secret.as_ref().and_then(|s| canary_of(s, &leak.canary_id));
            if let (Some((seq, request)), Some(record)) = (seeded, canary) {
                if let Some(at) = request.find(&record) {
                    let _ = writeln!(
                        h,
                        "<p class=\"muted\">Seeded by tenant {} in transcript #{seq}:</p><pre>{}</pre>",
                        escape(&leak.owner),
                        highlight(&window(request, at, record.len()), &record)
                    );
                }
            }
        }
    }

    h.push_str("<h2>Declared and measured</h2><div class=\"cols\"><div><h3>Declared by the vendor</h3>\n");
    match &p.declared {
        Some(d) => {
            h.push_str("<table>");
            let row = |k: &str, v: String| format!("<tr><th>{k}</th><td>{}</td></tr>", escape(&v));
            let or_none = |v: Option<String>| v.unwrap_or_else(|| "not declared".into());
            h.push_str(&row("engine", or_none(d.engine.clone())));
            h.push_str(&row("version", or_none(d.engine_version.clone())));
            for n in &d.nodes {
                h.push_str(&row(
                    &format!("{:?} KV pool", n.role),
                    format!("{} tokens", n.kv_pool_tokens),
                ));
            }
            h.push_str(&row(
                "KV-transfer checksums",
                or_none(d.kv_transfer_checksum.map(on_off)),
            ));
            h.push_str(&row("KV canaries", or_none(d.kv_canaries.map(on_off))));
            h.push_str("</table>\n");
        }
        None => h.push_str("<p class=\"muted\">No deployment facts declared.</p>\n"),
    }
    h.push_str("<h3>Questionnaire</h3><table>\n");
    let answers = p.questionnaire.clone().unwrap_or_default();
    for (q, a) in answers.answers() {
        let _ = writeln!(
            h,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(q),
            a.map_or("<i class=\"muted\">unanswered</i>".to_owned(), escape)
        );
    }
    h.push_str("</table></div><div><h3>Measured by this run</h3><table>\n");
    for c in &report.cases {
        let measured = match (c.probe.as_str(), c.outcome.verdict) {
            (crate::judge::kind::CONTEXT_BOUNDARY, Verdict::Pass | Verdict::Fail) => {
                format!("effective context {} tokens", c.outcome.coverage.max_prompt_tokens)
            }
            (_, v) => v.label().to_lowercase(),
        };
        let _ = writeln!(
            h,
            "<tr><th><code>{}</code></th><td>{}</td></tr>",
            escape(&c.id),
            escape(&measured)
        );
    }
    h.push_str("</table></div></div>\n");

    let _ = writeln!(
        h,
        "<h2>Signature</h2><p>An in-toto Statement v1 in a DSSE envelope, signed with ed25519 by key id <code>{}</code>; \
its subject is the transcript, SHA-256 <code>{}</code> ({} lines).</p>\
<pre>tenantcheck verify report.dsse.json --key signing-key.pub.pem --transcript transcript.jsonl</pre>\
<p class=\"muted\">With Python: <code>Envelope.from_dict(json.load(open(\"report.dsse.json\"))).verify([SSlibKey.from_dict(d.pop(\"keyid\"), d)], 1)</code> \
with <code>d</code> from <code>signing-key.pub.json</code> (package <code>securesystemslib</code>).</p>",
        escape(key_id),
        escape(&report.transcript.summary.sha256),
        report.transcript.summary.lines
    );
    h.push_str("</body></html>\n");
    h
}

fn class(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::Fail => "fail",
        Verdict::Inconclusive => "inconclusive",
        Verdict::Skipped => "skipped",
    }
}

fn on_off(b: bool) -> String {
    if b { "on".into() } else { "off".into() }
}

/// `text` escaped, with the first occurrence of `needle` in a `<mark>`.
fn highlight(text: &str, needle: &str) -> String {
    match (!needle.is_empty()).then(|| text.find(needle)).flatten() {
        Some(at) => format!(
            "{}<mark>{}</mark>{}",
            escape(&text[..at]),
            escape(needle),
            escape(&text[at + needle.len()..])
        ),
        None => escape(text),
    }
}

/// Up to 200 bytes around `text[at..at + len]`, on character boundaries.
fn window(text: &str, at: usize, len: usize) -> String {
    let mut from = at.saturating_sub(200);
    while !text.is_char_boundary(from) {
        from -= 1;
    }
    let mut to = (at + len + 200).min(text.len());
    while !text.is_char_boundary(to) {
        to += 1;
    }
    text[from..to].to_owned()
}

fn canary_of(secret: &RunSecret, id: &str) -> Option<String> {
    let (owner, rest) = id.split_once('/')?;
    let (case, index) = rest.rsplit_once('/')?;
    Some(secret.canary(owner, case, index.parse().ok()?).record())
}

/// The first message of the chat requests at these sequence numbers. A transcript's
/// line `n` (from 0) holds `seq` n, so only those lines are parsed.
fn requests_by_seq(transcript: &[u8], wanted: &[u64]) -> BTreeMap<u64, String> {
    let lines: Vec<&[u8]> = transcript.split(|&b| b == b'\n').collect();
    wanted
        .iter()
        .filter_map(|&seq| {
            let crate::transcript::Line::Exchange {
                seq: found, exchange, ..
            } = crate::transcript::Line::parse(lines.get(seq as usize)?).ok()?
            else {
                return None;
            };
            let content = exchange.request.body.as_ref()?["messages"][0]["content"].as_str()?;
            (found == seq).then(|| (seq, content.to_owned()))
        })
        .collect()
}

/// One timing level: every hit-arm and miss-arm time on one axis, one row each, with
/// the medians marked.
fn timing_svg(level: &TimingLevel) -> String {
    let (w, h, pad) = (760.0, 96.0, 120.0);
    let times = || level.pairs.iter().flat_map(|p| [p.hit_ms, p.miss_ms]);
    let max = times().fold(0.0_f64, f64::max).max(1.0) * 1.05;
    let x = |ms: f64| pad + (ms / max) * (w - pad - 20.0);
    let mut s = format!(
        "<p>{} (tenant {} after tenant {}): {} pairs, decision <b>{:?}</b>; evidence log10 {:.1} against no speed-up, {:.1} against a speed-up</p>\n\
<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"times to answer, {}\">",
        escape(&level.level),
        escape(&level.attacker),
        escape(&level.victim),
        level.pairs.len(),
        level.decision,
        level.log10_evidence[0],
        level.log10_evidence[1],
        escape(&level.level),
    );
    for (y, label, color, pick) in [
        (30.0, "shared prefix", "#b3261e", true),
        (60.0, "fresh prompt", "#1e5fa8", false),
    ] {
        let mut arm: Vec<(f64, u64)> = level
            .pairs
            .iter()
            .map(|p| {
                if pick {
                    (p.hit_ms, p.hit_seq)
                } else {
                    (p.miss_ms, p.miss_seq)
                }
            })
            .collect();
        let _ = write!(
            s,
            "<text x=\"2\" y=\"{}\" font-size=\"11\" fill=\"#555\">{label}</text>",
            y + 4.0
        );
        for &(ms, seq) in &arm {
            let _ = write!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{y}\" r=\"3\" fill=\"{color}\" fill-opacity=\"0.5\"><title>{ms:.2} ms (transcript #{seq})</title></circle>",
                x(ms)
            );
        }
        arm.sort_by(|a, b| a.0.total_cmp(&b.0));
        if let Some(&(median, _)) = arm.get(arm.len() / 2) {
            let _ = write!(
                s,
                "<line x1=\"{m:.1}\" y1=\"{}\" x2=\"{m:.1}\" y2=\"{}\" stroke=\"#222\" stroke-width=\"2\"><title>median {median:.2} ms</title></line>",
                y - 9.0,
                y + 9.0,
                m = x(median)
            );
        }
    }
    let _ = writeln!(
        s,
        "<line x1=\"{pad}\" y1=\"80\" x2=\"{}\" y2=\"80\" stroke=\"#999\"/><text x=\"{pad}\" y=\"93\" font-size=\"10\" fill=\"#555\">0 ms</text><text x=\"{}\" y=\"93\" font-size=\"10\" fill=\"#555\" text-anchor=\"end\">{max:.1} ms</text></svg>",
        w - 20.0,
        w - 20.0
    );
    s
}

/// Prompt length (x) against what the vendor did, with the advertised context marked.
fn sweep_svg(outcome: &Outcome, context: u64) -> String {
    let (w, h, pad) = (760.0, 150.0, 80.0);
    let max = outcome.sweep.iter().map(|p| p.tokens).max().unwrap_or(0).max(context) as f64 * 1.05;
    let x = |t: u64| pad + (t as f64 / max) * (w - 2.0 * pad);
    let row = |r: SweepResult| match r {
        SweepResult::Processed => (40.0, "#1e7e34", "processed"),
        SweepResult::Refused => (65.0, "#6b6f7a", "refused"),
        SweepResult::Wrong => (90.0, "#b3261e", "200, wrong"),
        SweepResult::Unknown => (115.0, "#a15c00", "no answer"),
    };
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"prompt lengths tried\">\
<line x1=\"{pad}\" y1=\"{y}\" x2=\"{x2}\" y2=\"{y}\" stroke=\"#999\"/>",
        y = h - 15.0,
        x2 = w - pad
    );
    let cx = x(context);
    let _ = write!(
        s,
        "<line x1=\"{cx}\" y1=\"20\" x2=\"{cx}\" y2=\"{}\" stroke=\"#333\" stroke-dasharray=\"4 3\"/>\
<text x=\"{cx}\" y=\"14\" font-size=\"11\" text-anchor=\"middle\">advertised context {context}</text>",
        h - 15.0
    );
    for r in [
        SweepResult::Processed,
        SweepResult::Refused,
        SweepResult::Wrong,
        SweepResult::Unknown,
    ] {
        let (y, _, label) = row(r);
        let _ = write!(
            s,
            "<text x=\"2\" y=\"{}\" font-size=\"11\" fill=\"#555\">{label}</text>",
            y + 4.0
        );
    }
    for p in &outcome.sweep {
        let (y, color, label) = row(p.result);
        let _ = write!(
            s,
            "<circle cx=\"{:.1}\" cy=\"{y}\" r=\"5\" fill=\"{color}\"><title>{} tokens: {label} (transcript #{})</title></circle>",
            x(p.tokens),
            p.tokens,
            p.seq
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{pad}\" y=\"{}\" font-size=\"10\" fill=\"#555\">0</text><text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#555\" text-anchor=\"end\">{} tokens</text></svg>",
        h - 2.0,
        w - pad,
        h - 2.0,
        max as u64
    );
    s
}
