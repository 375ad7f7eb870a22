//! [`Scanner`]: finds canaries of one tenant in text returned to another.
//!
//! All patterns are matched at once (Aho–Corasick, leftmost-longest) over a
//! normalised view of the text: each character is folded by Unicode compatibility
//! decomposition (the NFKC/NFKD folding: full-width digits, ligatures and styled
//! letters become plain ones), lowercased, and only letters and digits are kept. So
//! `3391-0048-2215`, `３３９１ ００４８ ２２１５` and `MARIA.KELLER48213 @ POSTEO.DE` all
//! match, while the mapping back to the original text keeps the excerpt exact.
//!
//! A canary is reported once per scan, by its most complete fragment: the whole
//! record, else the e-mail address, else the account number. Only the two fragments
//! are patterns; a hit becomes a whole-record hit when the record stands around it.
//! See `benches/scan.rs` and `docs/benchmarks.md` for the speed.

use crate::canary::{Canary, Fragment};
use aho_corasick::{AhoCorasick, MatchKind};

/// Up to this many patterns the matcher is a DFA; beyond, aho-corasick chooses.
const MAX_DFA_PATTERNS: usize = 40_000;

/// Characters of context kept on each side of a match in an excerpt.
const EXCERPT_CONTEXT: usize = 80;

/// Finds canaries in text.
#[derive(Clone, Debug)]
pub struct Scanner {
    canaries: Vec<Canary>,
    matcher: Option<AhoCorasick>,
    /// For each pattern: the canary's index, the fragment, and where the fragment
    /// starts in the record's normalised form.
    patterns: Vec<(usize, Fragment, usize)>,
    /// Each canary's whole record, normalised.
    records: Vec<String>,
}

/// One canary found in text returned to a tenant that does not own it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hit {
    /// The canary found.
    pub canary: Canary,
    /// The most complete fragment of it that was found.
    pub fragment: Fragment,
    /// The matched text, as it stands in the original.
    pub matched: String,
    /// The match with some context around it.
    pub excerpt: String,
}

impl Scanner {
    /// A scanner for these canaries.
    ///
    /// Only the distinctive fragments (e-mail, account number) are patterns; a hit is
    /// upgraded to the whole record when the record stands around it. Fewer, shorter
    /// patterns keep the automaton small and fast.
    pub fn new(canaries: Vec<Canary>) -> Self {
        let mut patterns = Vec::new();
        let mut texts = Vec::new();
        let mut records = Vec::new();
        for (i, c) in canaries.iter().enumerate() {
            let record = normalise(&c.record(), |_, _| {});
            for (fragment, text) in c.fragments() {
                if fragment == Fragment::Record {
                    continue;
                }
                let skeleton = normalise(&text, |_, _| {});
                let offset = record.find(&skeleton).expect("a fragment is part of its record");
                texts.push(skeleton);
                patterns.push((i, fragment, offset));
            }
            records.push(record);
        }
        let matcher = (!texts.is_empty()).then(|| {
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                // A DFA is fastest and, up to this many patterns, small enough
                // (10,000 canaries: about 60 MB, built in under 0.2 s).
                .kind((texts.len() <= MAX_DFA_PATTERNS).then_some(aho_corasick::AhoCorasickKind::DFA))
                .build(&texts)
                .expect("canary patterns are plain strings")
        });
        Scanner {
            canaries,
            matcher,
            patterns,
            records,
        }
    }

    /// How many canaries it looks for.
    pub fn len(&self) -> usize {
        self.canaries.len()
    }

    /// Whether it looks for none.
    pub fn is_empty(&self) -> bool {
        self.canaries.is_empty()
    }

    /// Canaries not owned by `recipient` found in `text`, one hit per canary.
    pub fn scan(&self, text: &str, recipient: &str) -> Vec<Hit> {
        let Some(matcher) = &self.matcher else {
            return Vec::new();
        };
        let skeleton = normalise(text, |_, _| {});
        let mut best: Vec<Option<(Fragment, usize, usize)>> = vec![None; self.canaries.len()];
        for m in matcher.find_iter(&skeleton) {
            let (ci, fragment, offset) = self.patterns[m.pattern().as_usize()];
            if self.canaries[ci].owner == recipient {
                continue;
            }
            let record = &self.records[ci];
            let whole = m
                .start()
                .checked_sub(offset)
                .filter(|&at| skeleton.as_bytes()[at..].starts_with(record.as_bytes()))
                .map(|at| (Fragment::Record, at, at + record.len()));
            let found = whole.unwrap_or((fragment, m.start(), m.end()));
            if best[ci].is_none_or(|(f, _, _)| found.0 > f) {
                best[ci] = Some(found);
            }
        }
        // Hits are rare: only now map skeleton positions back to the original text.
        let wanted: std::collections::HashSet<usize> =
            best.iter().flatten().flat_map(|&(_, s, e)| [s, e - 1]).collect();
        let mut spans = std::collections::HashMap::new();
        if !wanted.is_empty() {
            normalise(text, |pos, span| {
                if wanted.contains(&pos) {
                    spans.insert(pos, span);
                }
            });
        }
        let best: Vec<Option<(Fragment, usize, usize)>> = best
            .into_iter()
            .map(|b| b.map(|(f, s, e)| (f, spans[&s].0, spans[&(e - 1)].1)))
            .collect();
        best.into_iter()
            .enumerate()
            .filter_map(|(ci, b)| {
                let (fragment, start, end) = b?;
                Some(Hit {
                    canary: self.canaries[ci].clone(),
                    fragment,
                    matched: text[start..end].to_owned(),
                    excerpt: excerpt(text, start, end),
                })
            })
            .collect()
    }
}

/// The normalised view of `text`; `at(pos, span)` is told, for each byte of it, the
/// span of the original character it came from. ASCII text, the common case, takes a
/// fast path of one comparison per byte.
fn normalise(text: &str, mut at: impl FnMut(usize, (usize, usize))) -> String {
    let mut skeleton = Vec::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b.is_ascii() {
            if b.is_ascii_alphanumeric() {
                at(skeleton.len(), (i, i + 1));
                skeleton.push(b.to_ascii_lowercase());
            }
            i += 1;
            continue;
        }
        let ch = text[i..].chars().next().expect("a character starts here");
        let span = (i, i + ch.len_utf8());
        unicode_normalization::char::decompose_compatible(ch, |c| {
            for lc in c.to_lowercase() {
                if lc.is_alphanumeric() {
                    let mut buf = [0u8; 4];
                    for &byte in lc.encode_utf8(&mut buf).as_bytes() {
                        at(skeleton.len(), span);
                        skeleton.push(byte);
                    }
                }
            }
        });
        i = span.1;
    }
    String::from_utf8(skeleton).expect("built from whole characters")
}

fn excerpt(text: &str, start: usize, end: usize) -> String {
    let mut from = start.saturating_sub(EXCERPT_CONTEXT);
    while !text.is_char_boundary(from) {
        from -= 1;
    }
    let mut to = (end + EXCERPT_CONTEXT).min(text.len());
    while !text.is_char_boundary(to) {
        to += 1;
    }
    text[from..to].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canary::RunSecret;

    fn setup() -> (Canary, Canary, Scanner) {
        let s = RunSecret::generate();
        let a = s.canary("a", "t", 0);
        let b = s.canary("b", "t", 0);
        (a.clone(), b.clone(), Scanner::new(vec![a, b]))
    }

    #[test]
    fn finds_a_whole_record_of_another_tenant_only() {
        let (a, _, scanner) = setup();
        let text = format!("Sure! {} Anything else?", a.record());
        let hits = scanner.scan(&text, "b");
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].canary, a);
        assert_eq!(hits[0].fragment, Fragment::Record);
        // The match spans letters and digits: the closing full stop is not part of it.
        assert_eq!(hits[0].matched, a.record().trim_end_matches('.'));
        assert!(scanner.scan(&text, "a").is_empty(), "a tenant's own canary is no leak");
    }

    #[test]
    fn finds_fragments_after_normalisation() {
        let (a, _, scanner) = setup();
        let digits: String = a.account.chars().filter(char::is_ascii_digit).collect();
        let fullwidth: String = digits
            .chars()
            .map(|c| char::from_u32(c as u32 - '0' as u32 + 0xFF10).unwrap())
            .collect();
        for text in [
            format!("acct {}", a.account.replace(' ', "-")),
            format!("number: {fullwidth}."),
            format!("write to {}", a.email.to_uppercase().replace('@', " @ ")),
        ] {
            let hits = scanner.scan(&text, "b");
            assert_eq!(hits.len(), 1, "{text}");
            assert_ne!(hits[0].fragment, Fragment::Record);
            assert!(hits[0].excerpt.contains(&hits[0].matched));
        }
    }

    #[test]
    fn ordinary_text_and_names_alone_are_not_hits() {
        let (a, _, scanner) = setup();
        let text = format!("{} called about an account. Numbers 1234 5678.", a.name);
        assert!(scanner.scan(&text, "b").is_empty());
    }
}
