//! Property-based fuzzing of what reads untrusted bytes: the SSE parser (a vendor's
//! streams), the profile and case loaders (files a user or a vendor hands over), and
//! envelope verification (a report and transcript from anyone). None may panic; each
//! must give the same answer however its input is cut, or refuse what was changed.
//!
//! `PROPTEST_CASES` sets the number of cases per property (default 256; CI runs more).
//! A failure proptest finds is saved under `proptest-regressions/` and replayed first
//! on every later run: commit that file with the fix.

use proptest::prelude::*;
use std::path::Path;
use std::sync::OnceLock;
use tenantcheck::adapter::SseParser;

/// Bytes that look like a stream: field names, separators, line ends of every kind,
/// JSON, multi-byte UTF-8 and invalid bytes.
fn sse_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"data:".to_vec()),
        Just(b"data: ".to_vec()),
        Just(b"event: ".to_vec()),
        Just(b"id: 7".to_vec()),
        Just(b":".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\n\n".to_vec()),
        Just(b"[DONE]".to_vec()),
        Just(br#"{"choices":[{"delta":{"content":"hi"}}]}"#.to_vec()),
        Just("é€😀".as_bytes().to_vec()),
        Just(vec![0xff, 0xfe, 0x00, 0x80]),
        proptest::collection::vec(any::<u8>(), 0..8),
    ];
    proptest::collection::vec(piece, 0..64).prop_map(|pieces| pieces.concat())
}

fn parse_in(chunks: &[&[u8]]) -> (Vec<(Option<String>, String)>, bool) {
    let mut parser = SseParser::default();
    let mut frames = Vec::new();
    for chunk in chunks {
        frames.extend(parser.push(chunk, 0.0).into_iter().map(|f| (f.event, f.data)));
    }
    (frames, parser.finish())
}

/// Edits of a valid text: characters replaced, inserted or removed, lines dropped.
fn mutated(original: &'static str) -> impl Strategy<Value = String> {
    let edit = (any::<prop::sample::Index>(), any::<char>(), 0u8..4);
    proptest::collection::vec(edit, 0..8).prop_map(move |edits| {
        let mut chars: Vec<char> = original.chars().collect();
        for (at, c, kind) in edits {
            if chars.is_empty() {
                chars.push(c);
                continue;
            }
            let i = at.index(chars.len());
            match kind {
                0 => chars[i] = c,
                1 => chars.insert(i, c),
                2 => {
                    chars.remove(i);
                }
                _ => {
                    // Drop the line holding position i.
                    let start = chars[..i].iter().rposition(|&c| c == '\n').map_or(0, |p| p + 1);
                    let end = chars[i..]
                        .iter()
                        .position(|&c| c == '\n')
                        .map_or(chars.len(), |p| i + p);
                    chars.drain(start..end);
                }
            }
        }
        chars.into_iter().collect()
    })
}

const SIM_PROFILE: &str = include_str!("../../vendors/sim.toml");
const CASE: &str = include_str!("../../suite/context/boundary.toml");

/// A small real run (one case against the embedded sim): its envelope, transcript and
/// public key.
struct Signed {
    envelope: Vec<u8>,
    transcript: Vec<u8>,
    key: ed25519_dalek::VerifyingKey,
}

fn signed() -> &'static Signed {
    static SIGNED: OnceLock<Signed> = OnceLock::new();
    SIGNED.get_or_init(|| {
        let tmp = crate::common::TempDir::new("fuzz-envelope");
        let run_dir = tmp.path().join("run");
        let (code, stdout, stderr) = crate::common::output(
            crate::common::tenantcheck()
                .args(["run", "--exact", "errors.semantics", "--out"])
                .arg(&run_dir),
        );
        assert_eq!(code, Some(0), "{stdout}\n{stderr}");
        Signed {
            envelope: std::fs::read(run_dir.join(tenantcheck::report::ENVELOPE_FILE)).unwrap(),
            transcript: std::fs::read(run_dir.join(tenantcheck::report::TRANSCRIPT_FILE)).unwrap(),
            key: tenantcheck::report::key::read_public(&run_dir.join(tenantcheck::report::key::PUBLIC_KEY_FILE))
                .unwrap(),
        }
    })
}

/// One change to a byte string: a bit flipped, a byte inserted or removed, or the
/// end cut off.
fn byte_edit() -> impl Strategy<Value = (prop::sample::Index, u8, u8)> {
    (any::<prop::sample::Index>(), any::<u8>(), 0u8..4)
}

fn apply(bytes: &[u8], (at, byte, kind): (prop::sample::Index, u8, u8)) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let i = at.index(out.len());
    match kind {
        0 => out[i] ^= byte.max(1),
        1 => out.insert(i, byte),
        2 => {
            out.remove(i);
        }
        _ => out.truncate(i),
    }
    out
}

/// Text a hostile vendor would send to be shown: terminal escapes, line ends, bell,
/// DEL, C1 controls, bidi formatting, markup of every sink, and anything else.
fn hostile_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("\u{1b}[2J\u{1b}[H".to_owned()),
        Just("\u{1b}]8;;http://127.0.0.2/\u{7}".to_owned()),
        Just("\r\nverdict:    PASS (11 passed, 0 failed)\n".to_owned()),
        Just("test isolation.canary-residue ... ok\n".to_owned()),
        Just("\u{7}\u{7f}\u{85}\u{9b}\u{0}".to_owned()),
        Just("\u{202e}\u{202a}\u{2066}\u{2069}\u{200f}\u{61c}\u{2028}".to_owned()),
        Just("<script>alert(1)</script><img src=x>".to_owned()),
        Just("]]></failure><failure>\"&'".to_owned()),
        Just("| [ok](http://127.0.0.2/) ![p](http://127.0.0.2/p.png) `c` **b** # h".to_owned()),
        any::<char>().prop_map(String::from),
        "[a-z ]{0,8}",
    ];
    // Never empty: an empty string leaves out what the renderers show only for text
    // (a highlight), which is no markup of the vendor's.
    proptest::collection::vec(piece, 1..12).prop_map(|p| format!("v{}", p.concat()))
}

/// The example report of a failing run, with `text` in every string a vendor can reach
/// (and, for a report a vendor hands over, every string at all).
fn hostile_report(text: &str) -> tenantcheck::report::Report {
    static EXAMPLE: OnceLock<tenantcheck::report::Report> = OnceLock::new();
    let mut r = EXAMPLE
        .get_or_init(|| {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/examples/stale-pages");
            let envelope = std::fs::read(dir.join(tenantcheck::report::ENVELOPE_FILE)).unwrap();
            let key =
                tenantcheck::report::key::read_public(&dir.join(tenantcheck::report::key::PUBLIC_KEY_FILE)).unwrap();
            tenantcheck::report::verify(&envelope, &key, None, None, |_| {})
                .unwrap()
                .report()
                .clone()
        })
        .clone();
    r.vendor.profile.name = text.to_owned();
    r.vendor.profile.model = text.to_owned();
    r.vendor.profile.base_url = text.to_owned();
    r.tool.version = text.to_owned();
    r.started_at = text.to_owned();
    for c in &mut r.cases {
        c.id = format!("{}{text}", c.id);
        c.requirement = text.to_owned();
        c.outcome.summary = format!("{text} {}", c.outcome.summary);
        for f in &mut c.outcome.findings {
            f.message = text.to_owned();
            if let Some(leak) = &mut f.leak {
                leak.excerpt = text.to_owned();
                leak.matched = text.to_owned();
                leak.owner = text.to_owned();
            }
        }
    }
    r.interrupted = Some(tenantcheck::report::Interruption {
        signal: text.to_owned(),
        stopped_at: text.to_owned(),
        unfinished: vec![text.to_owned()],
    });
    r
}

/// What a display must never hold: controls but line feed and tab, DEL, C1 controls,
/// bidi formatting, line and paragraph separators.
fn hazards(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| c != '\n' && c != '\t' && tenantcheck::inert::is_hazard(c))
        .collect()
}

/// Everything shown of `report`: the harness's closing lines, HTML, Markdown, JUnit.
fn shown(report: &tenantcheck::report::Report) -> [String; 4] {
    let mut console = Vec::new();
    let p = Path::new("run");
    tenantcheck::harness::print_summary(&mut console, report, p, p, p, false, Default::default()).unwrap();
    [
        String::from_utf8(console).unwrap(),
        tenantcheck::render::html(report, "key", None),
        tenantcheck::render::markdown(report, "key"),
        tenantcheck::render::junit(report),
    ]
}

/// Markdown table rows and their unescaped pipes: a vendor must not add a cell.
fn pipes(md: &str) -> Vec<usize> {
    md.lines()
        .filter(|l| l.starts_with('|'))
        .map(|l| {
            let b = l.as_bytes();
            (0..b.len())
                .filter(|&i| b[i] == b'|' && (i == 0 || b[i - 1] != b'\\'))
                .count()
        })
        .collect()
}

proptest! {
    #[test]
    fn the_sse_parser_gives_the_same_frames_however_the_bytes_are_cut(
        input in sse_bytes(),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let whole = parse_in(&[&input]);
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(input.len() + 1)).collect();
        points.sort_unstable();
        let mut chunks = Vec::new();
        let mut from = 0;
        for p in points {
            chunks.push(&input[from..p]);
            from = p;
        }
        chunks.push(&input[from..]);
        prop_assert_eq!(parse_in(&chunks), whole);
    }

    #[test]
    fn the_profile_loader_refuses_or_accepts_any_edit_without_panicking(text in mutated(SIM_PROFILE)) {
        let origin = Path::new("fuzz.toml");
        if let Ok(profile) = tenantcheck::vendor::from_toml(&text, origin) {
            let _ = tenantcheck::vendor::validate(&profile, origin);
        }
    }

    #[test]
    fn the_case_loader_refuses_or_accepts_any_edit_without_panicking(text in mutated(CASE)) {
        let _ = tenantcheck::suite::Suite::from_files([("context/boundary.toml".to_owned(), text)], Path::new("suite"));
    }

    #[test]
    fn a_changed_envelope_never_verifies_as_a_different_report(edit in byte_edit()) {
        let s = signed();
        let original = tenantcheck::report::verify(&s.envelope, &s.key, Some(&s.transcript), None, |_| {}).unwrap();
        let envelope = apply(&s.envelope, edit);
        if let Ok(v) = tenantcheck::report::verify(&envelope, &s.key, Some(&s.transcript), None, |_| {}) {
            // Only a change JSON ignores (white space between fields) may pass.
            prop_assert_eq!(v.report(), original.report());
        }
    }

    #[test]
    fn a_changed_transcript_never_verifies(edit in byte_edit()) {
        let s = signed();
        let transcript = apply(&s.transcript, edit);
        prop_assume!(transcript != s.transcript);
        let verified = tenantcheck::report::verify(&s.envelope, &s.key, Some(&transcript), None, |_| {});
        prop_assert!(verified.is_err());
    }

    #[test]
    fn vendor_text_is_inert_in_every_display(text in hostile_text()) {
        let plain = shown(&hostile_report("x"));
        let [console, html, md, junit] = shown(&hostile_report(&text));
        for (name, out) in [("console", &console), ("html", &html), ("markdown", &md), ("junit", &junit)] {
            prop_assert!(hazards(out).is_empty(), "{name}: {:?}", hazards(out));
        }
        // No line of its own on the console, no cell of its own in Markdown, no
        // element of its own in HTML or XML.
        prop_assert_eq!(console.lines().count(), plain[0].lines().count());
        prop_assert_eq!(md.lines().count(), plain[2].lines().count());
        prop_assert_eq!(pipes(&md), pipes(&plain[2]));
        prop_assert_eq!(html.matches('<').count(), plain[1].matches('<').count());
        prop_assert_eq!(junit.matches('<').count(), plain[3].matches('<').count());
        prop_assert!(!md.contains("](") && !md.contains("!["), "{}", md);
    }
}
