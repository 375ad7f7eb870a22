//! [`Scanner`]: finds canaries of one tenant in text returned to another.
//!
//! All patterns are matched at once (Aho–Corasick, every match, overlapping ones
//! included: two canaries may share a pattern, an e-mail's digits and domain, and one
//! must not hide the other) over a normalised view of the text: each character is
//! folded by Unicode compatibility decomposition (the NFKC/NFKD folding: full-width
//! digits, ligatures and styled letters become plain ones), lowercased, and only
//! letters and digits are kept. So
//! `3391-0048-2215`, `３３９１ ００４８ ２２１５` and `MARIA.KELLER48213 @ POSTEO.DE` all
//! match, while the mapping back to the original text keeps the excerpt exact.
//!
//! A canary is reported once per scan, by its most complete fragment: the whole
//! record, else the code, else the e-mail address, else the account number, else a
//! *near* e-mail, else a *near* account number. Only the fragments are patterns; a hit
//! becomes a whole-record hit when the record stands around it.
//!
//! A leak rarely comes back verbatim: a model decoding over another request's KV
//! garbles what it copies. What is matched, and the chance that each kind matches by
//! accident (per candidate in the text, per canary of the run):
//!
//! | kind | matched | chance by accident |
//! |---|---|---|
//! | `record`, `account`, `email`, `code` | exactly, after normalisation | 2^-32 or less |
//! | `account_near` | 12 digits, one off the account | 108 in 10^12 (1.1e-10) per 12-digit number |
//! | `account_near` | two off, the family name within [`NEAR_NAME_WINDOW`] letters | 5,346 in 10^12 × the name's chance (1 in 64) |
//! | `account_near` | a digit dropped (11 digits) or one put in (13) | 12 in 10^11 (1.2e-10) per 11-digit number; 130 in 10^13 per 13-digit one |
//! | `email_near` | digits and domain exact (20.6 bits), the letters before them one swap or one letter off | below 2^-20 × the chance that such letters precede |
//! | `prose` | two distinct names of one tenant's [`crate::canary::Marks`], as whole words | a model inventing names at random: (24/32,768)^2, 5e-7 per pair of invented words |
//!
//! A run of a few hundred canaries over a few thousand numbers: below 1e-3 in all.
//! Digits that are exactly one of the recipient's own account numbers never count
//! towards a near hit: its own prompt explains them, and its echo of its own records
//! is where most numbers of an answer come from (a healthy fleet run of about a
//! thousand canaries once failed on one of its own numbers, two digits off another
//! tenant's under a family name the two records shared).
//! Candidates for near accounts are found by the pigeonhole principle: a number one or
//! two digits off shares at least one of the three 4-digit blocks exactly. A name alone
//! is never a hit: 4,096 names and a run's hundreds of canaries would make one common.
//!
//! A tenant's prose is matched word by word over the whole text (answers are short);
//! the canary patterns each hold a run of at least five digits, so text without one is
//! skipped.
//! See `benches/scan.rs` and `docs/benchmarks.md` for the speed.

use crate::canary::{Canary, Fragment};
use aho_corasick::{AhoCorasick, MatchKind};

/// Account numbers (their 12 digits) and the tenants whose canaries hold them: digits
/// that are exactly one of the recipient's own numbers are explained by its own
/// prompt, and never make a near hit of another tenant's.
type Owners = std::collections::HashMap<[u8; 12], Vec<String>>;

/// Up to this many patterns (500 canaries, four patterns each) the matcher is a DFA;
/// beyond, a contiguous NFA. The DFA's table grows with patterns times byte classes:
/// over 10,000 canaries it took 94 MB more than the NFA and three times as long to
/// build (368 against 109 ms), for 16% more speed on prose that is mostly skipped
/// anyway (`cargo bench --bench scan`, 602 against 504 MiB/s); a run at a million
/// tokens of context issues about 5,500 canaries and must stay within 256 MiB.
const MAX_DFA_PATTERNS: usize = 2_000;

/// Every canary fragment holds at least this many digits in a row, once normalised
/// (the e-mail's five, the account's twelve): text without such a run is skipped.
const MIN_DIGIT_RUN: usize = 5;

/// The longest run of ASCII digits in `s`.
fn longest_digit_run(s: &str) -> usize {
    s.as_bytes()
        .split(|b| !b.is_ascii_digit())
        .map(<[u8]>::len)
        .max()
        .unwrap_or(0)
}

/// Letters and digits on each side of a number two digits off a canary's account
/// within which the canary's family name must stand for a near hit.
pub const NEAR_NAME_WINDOW: usize = 160;

/// Characters of context kept on each side of a match in an excerpt.
const EXCERPT_CONTEXT: usize = 80;

/// Finds canaries in text.
#[derive(Clone, Debug)]
pub struct Scanner {
    canaries: Vec<Canary>,
    matcher: Option<AhoCorasick>,
    /// For each pattern: the canary's index, the fragment, and where the fragment
    /// starts in the record's normalised form (none for the code and the near e-mail,
    /// which a record does not hold as such).
    patterns: Vec<(usize, Fragment, Option<usize>)>,
    /// Each canary's e-mail local part, normalised (for near e-mail hits).
    locals: Vec<String>,
    /// Mark (lowercase) → its tenant; marks drawn for two tenants are left out.
    marks: std::collections::HashMap<String, String>,
    /// Each canary's whole record, normalised.
    records: Vec<String>,
    /// Each canary's account digits, and its family name normalised.
    accounts: Vec<([u8; 12], String)>,
    /// (block 0-2, its 4 digits) → the canaries whose account has them there.
    blocks: std::collections::HashMap<(u8, [u8; 4]), Vec<usize>>,
    /// Its canaries' account numbers and their owners.
    owners: Owners,
    /// How many letters and digits around a run of digits can belong to a hit (the
    /// longest record); `None` when a pattern lacks such a run and the whole text must
    /// be scanned.
    context: Option<usize>,
}

/// A [`Scanner`] over canaries that keep coming (a run issues more with every
/// prompt): the canaries in contiguous runs, each with its own scanner, sizes halving
/// from the oldest, so that a new canary costs a small scanner now and a merge now and
/// then (every canary is rebuilt into a scanner about log2(n) times), never a rebuild
/// of all of them per scan. Hits come in the order one scanner over all of them would
/// give: canaries in the order added, then prose.
#[derive(Debug, Default)]
pub struct GrowingScanner {
    canaries: Vec<Canary>,
    /// (first canary, scanner over it and those up to the next run).
    runs: Vec<(usize, Scanner)>,
    /// A scanner of the tenants' prose marks alone.
    marks: Option<Scanner>,
    /// Every canary's account number and its owners, across the runs.
    owners: Owners,
}

impl GrowingScanner {
    /// An empty scanner that also looks for these tenants' prose.
    pub fn new(marks: &[crate::canary::Marks]) -> Self {
        GrowingScanner {
            canaries: Vec::new(),
            runs: Vec::new(),
            marks: Some(Scanner::new(Vec::new()).with_marks(marks)),
            owners: Owners::new(),
        }
    }

    /// Looks for `canary` too, from the next scan on.
    pub fn add(&mut self, canary: Canary) {
        own(&mut self.owners, &canary);
        self.canaries.push(canary);
    }

    /// How many canaries it looks for.
    pub fn len(&self) -> usize {
        self.canaries.len()
    }

    /// Whether it looks for none.
    pub fn is_empty(&self) -> bool {
        self.canaries.is_empty()
    }

    /// Builds the scanners of the canaries added since the last scan, merging runs
    /// while the newest is at least half the size of the one before it.
    pub fn settle(&mut self) {
        let covered = self.runs.last().map_or(0, |(start, s)| start + s.len());
        if covered < self.canaries.len() {
            self.runs
                .push((covered, Scanner::new(self.canaries[covered..].to_vec())));
        }
        while self.runs.len() >= 2 {
            let n = self.runs.len();
            let (newest, before) = (self.runs[n - 1].1.len(), self.runs[n - 2].1.len());
            if 2 * newest < before {
                break;
            }
            self.runs.pop();
            let (start, _) = self.runs.pop().expect("two runs");
            self.runs.push((start, Scanner::new(self.canaries[start..].to_vec())));
        }
    }

    /// As [`Scanner::scan`] over every canary added.
    pub fn scan(&mut self, text: &str, recipient: &str) -> Vec<Hit> {
        self.settle();
        self.scan_settled(text, recipient)
    }

    /// As [`GrowingScanner::scan`] through a shared borrow, once
    /// [settled](GrowingScanner::settle) since the last canary was added: a reader
    /// that scans much after the last canary (`verify`'s positive controls) shares the
    /// one scanner instead of building another.
    ///
    /// # Panics
    ///
    /// When a canary was added since it was last settled: it would not be looked for.
    pub fn scan_settled(&self, text: &str, recipient: &str) -> Vec<Hit> {
        let covered = self.runs.last().map_or(0, |(start, s)| start + s.len());
        assert_eq!(
            covered,
            self.canaries.len(),
            "a growing scanner scanned through a shared borrow before it was settled"
        );
        let owners = &self.owners;
        let mut hits: Vec<Hit> = self
            .runs
            .iter()
            .flat_map(|(_, s)| s.scan_explaining(text, recipient, owners))
            .collect();
        if let Some(marks) = &self.marks {
            hits.extend(marks.scan(text, recipient));
        }
        hits
    }
}

/// One canary (or one tenant's prose) found in text returned to a tenant that does
/// not own it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hit {
    /// The canary's id (`owner/case/index`), or `owner/prose` for a tenant's marks.
    pub id: String,
    /// The tenant it belongs to.
    pub owner: String,
    /// The most complete fragment of it that was found.
    pub fragment: Fragment,
    /// The matched text, as it stands in the original (for marks: the marks found,
    /// joined by commas).
    pub matched: String,
    /// The match with some context around it.
    pub excerpt: String,
}

/// Records `canary`'s account number under its owner.
fn own(owners: &mut Owners, canary: &Canary) {
    let digits: Vec<u8> = canary.account.bytes().filter(u8::is_ascii_digit).collect();
    if let Ok(digits) = <[u8; 12]>::try_from(digits) {
        let list = owners.entry(digits).or_default();
        if !list.contains(&canary.owner) {
            list.push(canary.owner.clone());
        }
    }
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
        let mut accounts = Vec::new();
        let mut locals = Vec::new();
        let mut blocks: std::collections::HashMap<(u8, [u8; 4]), Vec<usize>> = Default::default();
        let mut owners = Owners::new();
        for (i, c) in canaries.iter().enumerate() {
            own(&mut owners, c);
            let digits: Vec<u8> = c.account.bytes().filter(u8::is_ascii_digit).collect();
            let digits: [u8; 12] = digits.try_into().unwrap_or([0; 12]);
            for k in 0..3u8 {
                let block: [u8; 4] = digits[usize::from(k) * 4..usize::from(k) * 4 + 4]
                    .try_into()
                    .expect("4 digits");
                blocks.entry((k, block)).or_default().push(i);
            }
            let family = c.name.rsplit(' ').next().unwrap_or_default();
            accounts.push((digits, normalise(family, |_, _| {})));
            let record = normalise(&c.record(), |_, _| {});
            for (fragment, text) in c.fragments() {
                if fragment == Fragment::Record {
                    continue;
                }
                let skeleton = normalise(&text, |_, _| {});
                let offset = record.find(&skeleton);
                debug_assert!(offset.is_some() || fragment == Fragment::Code);
                texts.push(skeleton);
                patterns.push((i, fragment, offset));
            }
            // The e-mail's digits and domain: a hit when the local part's letters
            // before them are near the canary's.
            let (local, domain) = c.email.split_once('@').unwrap_or((&c.email, ""));
            let letters: String = local.chars().take_while(|ch| !ch.is_ascii_digit()).collect();
            let digits = &local[letters.len()..];
            texts.push(normalise(&format!("{digits}@{domain}"), |_, _| {}));
            patterns.push((i, Fragment::EmailNear, None));
            locals.push(normalise(&letters, |_, _| {}));
            records.push(record);
        }
        let matcher = (!texts.is_empty()).then(|| {
            AhoCorasick::builder()
                // Every match, overlapping ones included: two canaries may share a
                // pattern (an e-mail's five digits and domain) or hold one inside
                // another's, and a match one stands in must not hide the other's. The
                // most complete hit per canary is kept below.
                .match_kind(MatchKind::Standard)
                // A DFA is fastest and, up to this many patterns, small.
                .kind(Some(if texts.len() <= MAX_DFA_PATTERNS {
                    aho_corasick::AhoCorasickKind::DFA
                } else {
                    aho_corasick::AhoCorasickKind::ContiguousNFA
                }))
                .build(&texts)
                .expect("canary patterns are plain strings")
        });
        let every_pattern_has_a_run = texts.iter().all(|t| longest_digit_run(t) >= MIN_DIGIT_RUN);
        let context = every_pattern_has_a_run.then(|| records.iter().map(String::len).max().unwrap_or(0));
        Scanner {
            canaries,
            matcher,
            patterns,
            records,
            accounts,
            locals,
            blocks,
            owners,
            context,
            marks: Default::default(),
        }
    }

    /// The scanner, also looking for these tenants' prose: two or more marks of one
    /// tenant in a text returned to another are a hit ([`Fragment::Prose`]).
    pub fn with_marks(mut self, marks: &[crate::canary::Marks]) -> Self {
        let mut owners: std::collections::HashMap<String, Option<String>> = Default::default();
        for m in marks {
            for w in &m.words {
                let entry = owners.entry(w.to_lowercase()).or_insert_with(|| Some(m.owner.clone()));
                if entry.as_deref() != Some(m.owner.as_str()) {
                    *entry = None;
                }
            }
        }
        self.marks = owners.into_iter().filter_map(|(w, o)| Some((w, o?))).collect();
        self
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
        self.scan_explaining(text, recipient, &self.owners)
    }

    /// As [`Scanner::scan`], with `owners` telling which account numbers are the
    /// recipient's own (a [`GrowingScanner`]'s runs each hold some of the canaries).
    fn scan_explaining(&self, text: &str, recipient: &str, owners: &Owners) -> Vec<Hit> {
        let mut best: Vec<Option<(Fragment, usize, usize)>> = vec![None; self.canaries.len()];
        match self.context {
            Some(context) => {
                for (start, end) in regions(text, context) {
                    self.scan_region(text, start, end, recipient, owners, &mut best);
                }
            }
            None => self.scan_region(text, 0, text.len(), recipient, owners, &mut best),
        }
        let mut hits: Vec<Hit> = best
            .into_iter()
            .enumerate()
            .filter_map(|(ci, b)| {
                let (fragment, start, end) = b?;
                Some(Hit {
                    id: self.canaries[ci].id.clone(),
                    owner: self.canaries[ci].owner.clone(),
                    fragment,
                    matched: text[start..end].to_owned(),
                    excerpt: excerpt(text, start, end),
                })
            })
            .collect();
        hits.extend(self.prose(text, recipient));
        hits
    }

    /// One hit per tenant other than `recipient` with at least two of its marks in
    /// `text`, as whole words (case ignored).
    fn prose(&self, text: &str, recipient: &str) -> Vec<Hit> {
        if self.marks.is_empty() {
            return Vec::new();
        }
        // owner → (first mark's span, the distinct marks in order).
        let mut seen: std::collections::BTreeMap<&str, ((usize, usize), Vec<&str>)> = Default::default();
        let mut at = 0;
        for word in text.split(|c: char| !c.is_alphanumeric()) {
            let start = at;
            at += word.len() + text[at + word.len()..].chars().next().map_or(0, char::len_utf8);
            if word.len() < 5 {
                continue;
            }
            let Some(owner) = self.marks.get(&word.to_lowercase()) else {
                continue;
            };
            if owner == recipient {
                continue;
            }
            let entry = seen
                .entry(owner.as_str())
                .or_insert_with(|| ((start, start + word.len()), Vec::new()));
            if !entry.1.iter().any(|w| w.eq_ignore_ascii_case(word)) {
                entry.1.push(word);
            }
        }
        seen.into_iter()
            .filter(|(_, (_, words))| words.len() >= 2)
            .map(|(owner, ((s, e), words))| Hit {
                id: format!("{owner}/prose"),
                owner: owner.to_owned(),
                fragment: Fragment::Prose,
                matched: words.join(", "),
                excerpt: excerpt(text, s, e),
            })
            .collect()
    }
}

impl Scanner {
    /// Scans `text[start..end]` and keeps in `best` each canary's most complete hit, as
    /// a span of `text`.
    fn scan_region(
        &self,
        text: &str,
        start: usize,
        end: usize,
        recipient: &str,
        owners: &Owners,
        best: &mut [Option<(Fragment, usize, usize)>],
    ) {
        let Some(matcher) = &self.matcher else {
            return;
        };
        let region = &text[start..end];
        let skeleton = normalise(region, |_, _| {});
        let mut found: Vec<(usize, Fragment, usize, usize)> = Vec::new();
        for m in matcher.find_overlapping_iter(&skeleton) {
            let (ci, fragment, offset) = self.patterns[m.pattern().as_usize()];
            if self.canaries[ci].owner == recipient {
                continue;
            }
            if fragment == Fragment::EmailNear {
                let local = &self.locals[ci];
                let before = &skeleton.as_bytes()[m.start().saturating_sub(local.len())..m.start()];
                if near_letters(local.as_bytes(), before) {
                    found.push((ci, fragment, m.start() - before.len(), m.end()));
                }
                continue;
            }
            let record = &self.records[ci];
            let whole = offset
                .and_then(|offset| m.start().checked_sub(offset))
                .filter(|&at| skeleton.as_bytes()[at..].starts_with(record.as_bytes()))
                .map(|at| (Fragment::Record, at, at + record.len()));
            let (fragment, s, e) = whole.unwrap_or((fragment, m.start(), m.end()));
            found.push((ci, fragment, s, e));
        }
        self.near_accounts(&skeleton, recipient, owners, &mut found);
        if found.is_empty() {
            return;
        }
        // Hits are rare: only now map skeleton positions back to the original text.
        let wanted: std::collections::HashSet<usize> = found.iter().flat_map(|&(_, _, s, e)| [s, e - 1]).collect();
        let mut spans = std::collections::HashMap::new();
        normalise(region, |pos, span| {
            if wanted.contains(&pos) {
                spans.insert(pos, span);
            }
        });
        for (ci, fragment, s, e) in found {
            let span = (fragment, start + spans[&s].0, start + spans[&(e - 1)].1);
            if best[ci].is_none_or(|(f, _, _)| fragment > f) {
                best[ci] = Some(span);
            }
        }
    }
}

impl Scanner {
    /// Adds to `found` every run of 12 digits in `skeleton` near a canary's account
    /// number (see the module) that is not `recipient`'s, and that leans on no digit of
    /// one of `recipient`'s own account numbers as it stands (per `owners`): those
    /// digits are its own prompt's, and a near match over them is chance (a faithful
    /// echo of its records, or two of its numbers side by side).
    fn near_accounts(
        &self,
        skeleton: &str,
        recipient: &str,
        owners: &Owners,
        found: &mut Vec<(usize, Fragment, usize, usize)>,
    ) {
        let bytes = skeleton.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if !bytes[i].is_ascii_digit() {
                i += 1;
                continue;
            }
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            let windows = start..(i.max(start + 11) - 11);
            let own: Vec<usize> = windows
                .clone()
                .filter(|&w| {
                    let window: [u8; 12] = bytes[w..w + 12].try_into().expect("12 digits");
                    owners.get(&window).is_some_and(|o| o.iter().any(|t| t == recipient))
                })
                .collect();
            let explained = |w: usize, len: usize| own.iter().any(|&o| w < o + 12 && o < w + len);
            for w in windows {
                if explained(w, 12) {
                    continue;
                }
                let window: [u8; 12] = bytes[w..w + 12].try_into().expect("12 digits");
                let mut seen = Vec::new();
                for k in 0..3u8 {
                    let block: [u8; 4] = window[usize::from(k) * 4..usize::from(k) * 4 + 4]
                        .try_into()
                        .expect("4 digits");
                    for &ci in self.blocks.get(&(k, block)).into_iter().flatten() {
                        if seen.contains(&ci) || self.canaries[ci].owner == recipient {
                            continue;
                        }
                        seen.push(ci);
                        let (account, family) = &self.accounts[ci];
                        let off = account.iter().zip(&window).filter(|(a, b)| a != b).count();
                        let named = || {
                            let from = w.saturating_sub(NEAR_NAME_WINDOW);
                            let to = (w + 12 + NEAR_NAME_WINDOW).min(bytes.len());
                            !family.is_empty() && bytes[from..to].windows(family.len()).any(|x| x == family.as_bytes())
                        };
                        if off == 1 || (off == 2 && named()) {
                            found.push((ci, Fragment::AccountNear, w, w + 12));
                        }
                    }
                }
            }
            // A digit dropped (11 digits) or one put in (13): one of the outer blocks
            // still stands exactly at the window's start or end.
            for len in [11, 13] {
                for w in start..(i + 1).saturating_sub(len).max(start) {
                    if explained(w, len) {
                        continue;
                    }
                    let window = &bytes[w..w + len];
                    let head: [u8; 4] = window[..4].try_into().expect("4 digits");
                    let tail: [u8; 4] = window[len - 4..].try_into().expect("4 digits");
                    let mut seen = Vec::new();
                    for key in [(0u8, head), (2u8, tail)] {
                        for &ci in self.blocks.get(&key).into_iter().flatten() {
                            if seen.contains(&ci) || self.canaries[ci].owner == recipient {
                                continue;
                            }
                            seen.push(ci);
                            let account = &self.accounts[ci].0;
                            let near = match len {
                                11 => one_dropped(account, window),
                                _ => one_dropped(window, account),
                            };
                            if near {
                                found.push((ci, Fragment::AccountNear, w, w + len));
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Whether `short` is `long` with exactly one element left out.
fn one_dropped(long: &[u8], short: &[u8]) -> bool {
    if long.len() != short.len() + 1 {
        return false;
    }
    let same_head = long.iter().zip(short).take_while(|(a, b)| a == b).count();
    long[same_head + 1..] == short[same_head..]
}

/// Spans of record-shaped items in `text`: e-mail addresses, and numbers of at least
/// [`RECORD_DIGITS`] digits (groups joined by single spaces, dashes or dots). What
/// leaks of customers the run does not know look like: the suite cannot match them
/// against anything, only notice that no prompt held them.
pub fn record_shaped(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut spans = Vec::new();
    // Numbers.
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let (start, mut digits) = (i, 0);
        let mut end = i;
        while i < bytes.len() {
            if bytes[i].is_ascii_digit() {
                digits += 1;
                i += 1;
                end = i;
            } else if matches!(bytes[i], b' ' | b'-' | b'.') && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
                i += 1;
            } else {
                break;
            }
        }
        if digits >= RECORD_DIGITS {
            spans.push((start, end));
        }
    }
    // E-mail addresses.
    let local = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'%' | b'+' | b'-');
    let domain = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-');
    for (at, _) in text.match_indices('@') {
        let mut s = at;
        while s > 0 && local(bytes[s - 1]) {
            s -= 1;
        }
        let mut e = at + 1;
        while e < bytes.len() && domain(bytes[e]) {
            e += 1;
        }
        while e > at + 1 && bytes[e - 1] == b'.' {
            e -= 1;
        }
        if s < at && text[at + 1..e].contains('.') {
            spans.push((s, e));
        }
    }
    spans.sort_unstable();
    spans
}

/// Digits a number needs to be record-shaped (an account, a card, a phone number).
pub const RECORD_DIGITS: usize = 9;

/// Whether `got` is `want` with two neighbouring letters swapped or one letter
/// changed (not equal: an exact e-mail is matched as such).
fn near_letters(want: &[u8], got: &[u8]) -> bool {
    if want.len() != got.len() || want == got {
        return false;
    }
    let diff: Vec<usize> = (0..want.len()).filter(|&i| want[i] != got[i]).collect();
    match diff[..] {
        [_] => true,
        [i, j] => j == i + 1 && want[i] == got[j] && want[j] == got[i],
        _ => false,
    }
}

/// The parts of `text` that can hold a canary, given that every pattern holds a run
/// of at least [`MIN_DIGIT_RUN`] digits in its normalised form: each run of digits
/// (ASCII digits, and any non-ASCII character, which may fold to digits), separated
/// only by characters that are neither letters nor digits, at least that long, widened
/// by `context` letters and digits on each side, merged where they overlap. Text
/// without such a run is skipped 32 bytes at a time.
fn regions(text: &str, context: usize) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let (mut run, mut run_start, mut run_end) = (0, 0, 0);
    let mut i = 0;
    while i < bytes.len() {
        if run == 0 {
            // Nothing can start before the next digit or non-ASCII byte: find it a
            // chunk at a time (the test over a chunk vectorises), then within it.
            let starts = |b: &u8| b.wrapping_sub(b'0') < 10 || *b >= 0x80;
            while let Some(chunk) = bytes.get(i..i + 32) {
                if chunk.iter().fold(false, |any, b| any | starts(b)) {
                    break;
                }
                i += 32;
            }
            match bytes[i.min(bytes.len())..].iter().position(starts) {
                Some(at) => i += at,
                None => break,
            }
        }
        let b = bytes[i];
        let (digits, len) = if b.is_ascii_digit() {
            (1, 1)
        } else if b >= 0x80 {
            let len = text[i..].chars().next().map_or(1, char::len_utf8);
            (MIN_DIGIT_RUN, len)
        } else {
            (0, 1)
        };
        if digits > 0 {
            if run == 0 {
                run_start = i;
            }
            run += digits;
            run_end = i + len;
        } else if b.is_ascii_alphabetic() {
            if run >= MIN_DIGIT_RUN {
                runs.push((run_start, run_end));
            }
            run = 0;
        }
        i += len;
    }
    if run >= MIN_DIGIT_RUN {
        runs.push((run_start, run_end));
    }
    // Runs closer than two contexts apart share a region: the letters and digits
    // between them are counted once, and each region is widened once.
    let mut merged: Vec<(usize, usize)> = Vec::new();
    let mut group: Option<(usize, usize)> = None;
    for (s, e) in runs {
        group = match group {
            Some((gs, ge)) if alnum_between(bytes, ge, s, 2 * context) < 2 * context => Some((gs, e)),
            Some((gs, ge)) => {
                merged.push((widen_back(text, gs, context), widen_forward(text, ge, context)));
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    if let Some((gs, ge)) = group {
        merged.push((widen_back(text, gs, context), widen_forward(text, ge, context)));
    }
    // Widening can still make neighbours touch.
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(merged.len());
    for (s, e) in merged {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// ASCII letters and digits in `bytes[from..to]`, counted up to `limit`.
fn alnum_between(bytes: &[u8], from: usize, to: usize, limit: usize) -> usize {
    let mut n = 0;
    for &b in &bytes[from..to] {
        n += usize::from(b.is_ascii_alphanumeric());
        if n >= limit {
            break;
        }
    }
    n
}

/// The position `context` ASCII letters or digits before `at` (or the start), on a
/// character boundary. Non-ASCII characters count as none, so the region is never
/// narrower than asked.
fn widen_back(text: &str, at: usize, context: usize) -> usize {
    let bytes = text.as_bytes();
    let (mut i, mut seen) = (at, 0);
    while i > 0 && seen < context {
        i -= 1;
        seen += usize::from(bytes[i].is_ascii_alphanumeric());
    }
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The position `context` ASCII letters or digits after `at` (or the end), on a
/// character boundary.
fn widen_forward(text: &str, at: usize, context: usize) -> usize {
    let bytes = text.as_bytes();
    let (mut i, mut seen) = (at, 0);
    while i < bytes.len() && seen < context {
        seen += usize::from(bytes[i].is_ascii_alphanumeric());
        i += 1;
    }
    while !text.is_char_boundary(i) {
        i += 1;
    }
    i
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

    /// `account` with the digits at `at` changed.
    fn off(account: &str, at: &[usize]) -> String {
        let mut n = 0;
        account
            .chars()
            .map(|c| {
                if !c.is_ascii_digit() {
                    return c;
                }
                n += 1;
                match at.contains(&(n - 1)) {
                    true => char::from(b'0' + (c as u8 - b'0' + 3) % 10),
                    false => c,
                }
            })
            .collect()
    }

    #[test]
    fn a_growing_scanner_finds_what_one_scanner_over_all_finds_in_the_same_order() {
        let s = RunSecret::generate();
        let marks = [s.marks("a"), s.marks("b")];
        let all: Vec<Canary> = (0..70)
            .map(|i| s.canary(if i % 3 == 0 { "b" } else { "a" }, "t", i))
            .collect();
        let mut growing = GrowingScanner::new(&marks);
        let mut text = String::new();
        for (i, c) in all.iter().enumerate() {
            growing.add(c.clone());
            if i % 7 == 0 {
                text.push_str(&format!("{} and ", c.record()));
            }
            // Scans between additions settle the runs as a run does.
            if i % 5 == 0 {
                let one = Scanner::new(all[..=i].to_vec()).with_marks(&marks);
                assert_eq!(growing.scan(&text, "a"), one.scan(&text, "a"), "after {i}");
            }
        }
        let one = Scanner::new(all.clone()).with_marks(&marks);
        assert_eq!(growing.scan(&text, "a"), one.scan(&text, "a"));
        assert!(!growing.scan(&text, "a").is_empty());
        assert!(growing.runs.len() <= 8, "{} runs for 70 canaries", growing.runs.len());
    }

    #[test]
    fn a_settled_growing_scanner_scans_through_a_shared_borrow_as_it_scans_and_refuses_unsettled() {
        let s = RunSecret::generate();
        let marks = [s.marks("a"), s.marks("b")];
        let mut growing = GrowingScanner::new(&marks);
        let all: Vec<Canary> = (0..9)
            .map(|i| s.canary(if i % 2 == 0 { "b" } else { "a" }, "t", i))
            .collect();
        let text: String = all.iter().map(|c| format!("{} and ", c.record())).collect();
        for c in &all[..5] {
            growing.add(c.clone());
        }
        growing.settle();
        let settled = growing.scan_settled(&text, "a");
        assert!(!settled.is_empty());
        assert_eq!(settled, growing.scan(&text, "a"));
        // Another tenant's canary (even indices are b's), added after the settle.
        growing.add(all[6].clone());
        let unsettled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| growing.scan_settled(&text, "a")));
        assert!(
            unsettled.is_err(),
            "a canary added since the last settle would be missed"
        );
        growing.settle();
        assert_eq!(growing.scan_settled(&text, "a").len(), growing.scan(&text, "a").len());
        assert!(growing.scan_settled(&text, "a").len() > settled.len());
    }

    #[test]
    fn past_the_dfas_patterns_the_nfa_finds_what_the_dfa_finds() {
        // Enough canaries that the matcher is a contiguous NFA; each hit must be the
        // one a scanner over that canary alone (a DFA) finds.
        let s = RunSecret::generate();
        let all: Vec<Canary> = (0..MAX_DFA_PATTERNS as u32).map(|i| s.canary("b", "t", i)).collect();
        let big = Scanner::new(all.clone());
        for i in [0, 7, MAX_DFA_PATTERNS / 3, MAX_DFA_PATTERNS - 1] {
            let c = &all[i];
            for text in [
                format!("Noted: {}.", c.record()),
                format!("mail {} now", c.email),
                format!("the account {} it is", c.account),
            ] {
                let alone = Scanner::new(vec![c.clone()]).scan(&text, "a");
                assert!(!alone.is_empty(), "{text}");
                let found = big.scan(&text, "a");
                assert_eq!(
                    found.iter().map(|h| (&h.id, h.fragment)).collect::<Vec<_>>(),
                    alone.iter().map(|h| (&h.id, h.fragment)).collect::<Vec<_>>(),
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn canaries_sharing_an_e_mails_digits_and_domain_each_stay_found() {
        // Five e-mail digits and a few domains: in a run of thousands of canaries, two
        // share the tail a near e-mail hit is matched on. One must not hide the other,
        // in one scanner over both or in a growing scanner's separate runs.
        let s = RunSecret::generate();
        let a = s.canary("a", "t", 0);
        let b0 = s.canary("b", "t", 0);
        let (_, tail) = a.email.split_at(a.email.find(|c: char| c.is_ascii_digit()).unwrap());
        let b = Canary {
            email: format!(
                "{}{tail}",
                b0.email
                    .split_at(b0.email.find(|c: char| c.is_ascii_digit()).unwrap())
                    .0
            ),
            ..b0
        };
        assert_ne!(a.email, b.email);
        let swapped = |email: &str| {
            let mut chars: Vec<char> = email.chars().collect();
            chars.swap(1, 2);
            chars.into_iter().collect::<String>()
        };
        for (want, text) in [(&a, swapped(&a.email)), (&b, swapped(&b.email))] {
            let text = format!("write to {text} soon");
            for scanner in [
                Scanner::new(vec![a.clone(), b.clone()]),
                Scanner::new(vec![b.clone(), a.clone()]),
            ] {
                let hits = scanner.scan(&text, "nobody");
                assert_eq!(hits.len(), 1, "{text}: {hits:?}");
                assert_eq!(
                    (hits[0].id.as_str(), hits[0].fragment),
                    (want.id.as_str(), Fragment::EmailNear)
                );
            }
        }
    }

    /// Random canaries made to collide (an e-mail's digits and domain, an account's
    /// block, a family name taken from an earlier one) and random garbled copies of
    /// them: one scanner over all of them, the same in the other order, and a growing
    /// scanner fed one at a time find the same hits, and each copy's canary among them.
    #[test]
    fn scanners_agree_on_garbled_copies_of_colliding_canaries_whatever_their_order() {
        use crate::judge::sequential::tests::Rng;
        let mut rng = Rng(2026);
        let mut pick = |n: usize| (rng.unit() * n as f64) as usize;
        let s = RunSecret::from_hex(&"5a".repeat(32)).unwrap();
        let marks = [s.marks("a"), s.marks("b")];
        let digits_at = |e: &str| e.find(|c: char| c.is_ascii_digit()).unwrap();
        for round in 0..60u32 {
            let mut all: Vec<Canary> = Vec::new();
            for i in 0..12u32 {
                let mut c = s.canary(["a", "b", "c"][pick(3)], "t", round * 100 + i);
                if let Some(earlier) = (!all.is_empty()).then(|| all[pick(all.len())].clone()) {
                    match pick(4) {
                        0 => {
                            c.email = format!(
                                "{}{}",
                                &c.email[..digits_at(&c.email)],
                                &earlier.email[digits_at(&earlier.email)..]
                            )
                        }
                        1 => c.account = format!("{}{}", &earlier.account[..5], &c.account[5..]),
                        2 => {
                            c.name = format!(
                                "{} {}",
                                c.name.split(' ').next().unwrap(),
                                earlier.name.rsplit(' ').next().unwrap()
                            )
                        }
                        _ => {}
                    }
                }
                all.push(c);
            }
            let mut text = String::from("Notes: ");
            let mut copied = Vec::new();
            for _ in 0..4 {
                let c = &all[pick(all.len())];
                let copy = match pick(4) {
                    0 => c.email.clone(),
                    1 => {
                        // Two neighbouring, different letters of the local part swapped.
                        let mut b = c.email.clone().into_bytes();
                        let i = (0..digits_at(&c.email) - 1)
                            .find(|&i| b[i] != b[i + 1] && b[i].is_ascii_alphabetic() && b[i + 1].is_ascii_alphabetic())
                            .unwrap();
                        b.swap(i, i + 1);
                        String::from_utf8(b).unwrap()
                    }
                    2 => off(&c.account, &[pick(12)]),
                    _ => c.account.clone(),
                };
                copied.push(c.id.clone());
                text.push_str(&format!("{copy}; then "));
            }
            let set = |hits: Vec<Hit>| {
                let mut v: Vec<(String, Fragment)> = hits.into_iter().map(|h| (h.id, h.fragment)).collect();
                v.sort();
                v
            };
            let one = set(Scanner::new(all.clone()).with_marks(&marks).scan(&text, "nobody"));
            let mut reversed = all.clone();
            reversed.reverse();
            assert_eq!(
                one,
                set(Scanner::new(reversed).with_marks(&marks).scan(&text, "nobody")),
                "{text}"
            );
            let mut growing = GrowingScanner::new(&marks);
            for c in &all {
                growing.add(c.clone());
                let _ = growing.scan("settle", "nobody");
            }
            assert_eq!(one, set(growing.scan(&text, "nobody")), "round {round}: {text}");
            for id in &copied {
                assert!(
                    one.iter().any(|(h, _)| h == id),
                    "round {round}: {id} not found in {text}: {one:?}"
                );
            }
        }
    }

    #[test]
    fn finds_an_account_number_garbled_by_a_digit_or_two() {
        let (a, b, scanner) = setup();
        let family = a.name.rsplit(' ').next().unwrap();
        let one = format!("our records show account {} on file", off(&a.account, &[6]));
        let hits = scanner.scan(&one, "b");
        assert_eq!(hits.len(), 1, "{one}");
        assert_eq!(
            (hits[0].id.as_str(), hits[0].fragment),
            (a.id.as_str(), Fragment::AccountNear)
        );
        assert!(scanner.scan(&one, "a").is_empty(), "its own, garbled, is no leak");
        let two = format!("account {} on file", off(&a.account, &[2, 9]));
        assert!(
            scanner.scan(&two, "b").is_empty(),
            "two digits off alone could be chance"
        );
        let named = format!("{family}, account {} on file", off(&a.account, &[2, 9]));
        assert_eq!(scanner.scan(&named, "b").len(), 1, "{named}");
        let three = format!("{family}, account {}", off(&a.account, &[1, 5, 10]));
        assert!(scanner.scan(&three, "b").is_empty());
        // The exact number is still the better hit.
        let exact = format!("{}, {}", a.account, off(&b.account, &[0]));
        let hits = scanner.scan(&exact, "nobody");
        let frag = |id: &str| hits.iter().find(|h| h.id == id).unwrap().fragment;
        assert_eq!((frag(&a.id), frag(&b.id)), (Fragment::Account, Fragment::AccountNear));
        // A digit dropped or put in, as a model copying digits does.
        let digits: String = a.account.chars().filter(char::is_ascii_digit).collect();
        let dropped = format!("acct {}{} ok", &digits[..5], &digits[6..]);
        let hits = scanner.scan(&dropped, "b");
        assert_eq!((hits.len(), hits[0].fragment), (1, Fragment::AccountNear), "{dropped}");
        assert_eq!(hits[0].matched, &dropped[5..16]);
        let inserted = format!("acct {}7{} ok", &digits[..9], &digits[9..]);
        assert_eq!(scanner.scan(&inserted, "b").len(), 1, "{inserted}");
        let two_dropped = format!("acct {}{} ok", &digits[..5], &digits[7..]);
        assert!(scanner.scan(&two_dropped, "b").is_empty(), "{two_dropped}");
        // Non-ASCII around the number does not break the name window.
        let wide = format!("ÄÖÜ {family} é {} ü", off(&a.account, &[2, 9]));
        assert_eq!(scanner.scan(&wide, "b").len(), 1);
    }

    #[test]
    fn the_recipients_own_account_numbers_never_make_a_near_hit() {
        let s = RunSecret::generate();
        let a = s.canary("a", "t", 0);
        // Another tenant's canary whose number is two digits off a's, under the same
        // family name: a's faithful echo of its own record stood near it by chance
        // (a healthy run once failed so).
        let b = Canary {
            id: "b/t/0".into(),
            owner: "b".into(),
            name: a.name.clone(),
            account: off(&a.account, &[2, 9]),
            ..s.canary("b", "t", 0)
        };
        let one = Scanner::new(vec![a.clone(), b.clone()]);
        let echo = format!("Here is the record: {}", a.record());
        assert!(one.scan(&echo, "a").is_empty(), "{:?}", one.scan(&echo, "a"));
        // Two of a's numbers side by side (13 digits, one "put in"): still its own.
        let digits: String = a.account.chars().filter(char::is_ascii_digit).collect();
        let side_by_side = format!("{} {digits}7", a.name);
        assert!(one.scan(&side_by_side, "a").is_empty());
        // b's number garbled as a leak garbles it is still found, and a's own number,
        // found in what another tenant got, is still a's leak.
        let garbled = format!("{}, account {}", a.name, off(&b.account, &[5]));
        let hits = one.scan(&garbled, "a");
        assert_eq!(hits.len(), 1, "{garbled}");
        assert_eq!(
            (hits[0].id.as_str(), hits[0].fragment),
            ("b/t/0", Fragment::AccountNear)
        );
        assert_eq!(
            one.scan(&echo, "c").len(),
            2,
            "to a third tenant, a's record and b's near number"
        );
        // A growing scanner with the two canaries in different runs agrees.
        let mut growing = GrowingScanner::new(&[]);
        growing.add(a.clone());
        assert!(growing.scan(&echo, "a").is_empty());
        growing.add(b.clone());
        for (text, to) in [(&echo, "a"), (&garbled, "a"), (&echo, "c")] {
            assert_eq!(growing.scan(text, to), one.scan(text, to), "{text} to {to}");
        }
    }

    #[test]
    fn finds_a_whole_record_of_another_tenant_only() {
        let (a, _, scanner) = setup();
        let text = format!("Sure! {} Anything else?", a.record());
        let hits = scanner.scan(&text, "b");
        assert_eq!(hits.len(), 1);
        assert_eq!((hits[0].id.as_str(), hits[0].owner.as_str()), (a.id.as_str(), "a"));
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
    fn finds_a_code_and_a_garbled_e_mail() {
        let (a, _, scanner) = setup();
        let hits = scanner.scan(&format!("The first code is {}.", a.code.to_lowercase()), "b");
        assert_eq!((hits.len(), hits[0].fragment), (1, Fragment::Code));
        let (local, domain) = a.email.split_once('@').unwrap();
        // Swap two neighbouring letters that differ ("hannah" has "nn": no change).
        let mut swapped: Vec<char> = local.chars().collect();
        let at = (0..swapped.len() - 1)
            .find(|&i| {
                swapped[i] != swapped[i + 1] && swapped[i].is_ascii_alphabetic() && swapped[i + 1].is_ascii_alphabetic()
            })
            .unwrap();
        swapped.swap(at, at + 1);
        let swapped: String = swapped.into_iter().collect();
        let hits = scanner.scan(&format!("write to {swapped}@{domain} soon"), "b");
        assert_eq!(hits.len(), 1, "{swapped}");
        assert_eq!(hits[0].fragment, Fragment::EmailNear);
        assert_eq!(hits[0].matched, format!("{swapped}@{domain}"));
        let changed = format!("x{}@{domain}", &local[1..]);
        assert_eq!(scanner.scan(&changed, "b").len(), 1, "one letter changed");
        // Two letters changed, neither of them to the other's: not near.
        let (l0, l1) = (local.as_bytes()[0], local.as_bytes()[1]);
        let other = |not: [u8; 2]| (b'a'..=b'z').find(|c| !not.contains(c)).map(char::from).unwrap();
        let far = format!("{}{}{}@{domain}", other([l0, l1]), other([l0, l1]), &local[2..]);
        assert!(
            scanner.scan(&far, "b").is_empty(),
            "two letters changed could be another address"
        );
        assert!(scanner.scan(&format!("{swapped}@{domain}"), "a").is_empty());
    }

    #[test]
    fn finds_another_tenants_prose_by_two_of_its_marks() {
        let s = RunSecret::generate();
        let (ma, mb) = (s.marks("a"), s.marks("b"));
        let scanner = Scanner::new(vec![s.canary("a", "t", 0)]).with_marks(&[ma.clone(), mb.clone()]);
        // Names drawn for both tenants belong to neither: use a's own.
        let own: Vec<&String> = ma.words.iter().filter(|w| !mb.words.contains(w)).collect();
        let shared: Vec<&String> = ma.words.iter().filter(|w| mb.words.contains(w)).collect();
        if let [w, ..] = shared[..] {
            let both = format!("{w} and {}", own[0]);
            assert!(scanner.scan(&both, "b").is_empty(), "a shared name is no mark");
        }
        let ma = crate::canary::Marks {
            owner: ma.owner.clone(),
            words: own.into_iter().cloned().collect(),
        };
        let one = format!("The committee at {} reviewed the budget.", ma.words[0]);
        assert!(scanner.scan(&one, "b").is_empty(), "one name could be chance");
        let two = format!(
            "the committee at {} reviewed the budget, as {} noted",
            ma.words[0].to_uppercase(),
            ma.words[5]
        );
        let hits = scanner.scan(&two, "b");
        assert_eq!(hits.len(), 1);
        assert_eq!((hits[0].id.as_str(), hits[0].fragment), ("a/prose", Fragment::Prose));
        assert!(hits[0].excerpt.contains(&ma.words[0].to_uppercase()));
        assert!(scanner.scan(&two, "a").is_empty(), "a tenant's own prose is no leak");
        let twice = format!("{} and {} again", ma.words[0], ma.words[0]);
        assert!(scanner.scan(&twice, "b").is_empty(), "two distinct names");
        let inside = format!("x{}x {}", ma.words[0], ma.words[1]);
        assert!(scanner.scan(&inside, "b").is_empty(), "whole words only");
    }

    #[test]
    fn record_shaped_items_are_e_mails_and_long_numbers() {
        let text = "Call 555-0100 or write to jo.ward+x@mail.example.org. Account 1234 5678 9012, ref 12.345.678.9, year 2024.";
        let items: Vec<&str> = record_shaped(text).into_iter().map(|(s, e)| &text[s..e]).collect();
        assert_eq!(items, ["jo.ward+x@mail.example.org", "1234 5678 9012", "12.345.678.9"]);
        assert!(record_shaped("an @ sign, user@localhost, 12345678").is_empty());
    }

    #[test]
    fn ordinary_text_and_names_alone_are_not_hits() {
        let (a, _, scanner) = setup();
        let text = format!("{} called about an account. Numbers 1234 5678.", a.name);
        assert!(scanner.scan(&text, "b").is_empty());
    }

    #[test]
    fn only_runs_of_five_digits_or_non_ascii_text_are_scanned() {
        assert!(regions("In 2019 about 40 of 120 clients paid 3.5% more.", 10).is_empty());
        let text = "Call us on 555-123 4567 today, or later.";
        let r = regions(text, 3);
        assert_eq!(r.len(), 1);
        assert_eq!(
            &text[r[0].0..r[0].1],
            "s on 555-123 4567 tod",
            "three letters or digits each side"
        );
        assert_eq!(regions("a café", 2), [(3, "a café".len())], "two letters before the é");
        // Overlapping regions merge.
        assert_eq!(regions("12345 x 67890", 5).len(), 1);
    }

    #[test]
    fn skipping_text_finds_exactly_what_a_full_scan_finds() {
        let s = RunSecret::generate();
        let canaries: Vec<Canary> = (0..20)
            .map(|i| s.canary(if i % 2 == 0 { "a" } else { "b" }, "t", i))
            .collect();
        let fast = Scanner::new(canaries.clone());
        assert!(fast.context.is_some());
        let mut full = fast.clone();
        full.context = None;
        let filler = "The quarterly review covered 42 stores and 7 regions; revenue rose 3.5% in 2024. ";
        let fullwidth = |t: &str| -> String {
            t.chars()
                .map(|c| {
                    if c.is_ascii_digit() {
                        char::from_u32(c as u32 - 0x30 + 0xFF10).unwrap()
                    } else {
                        c
                    }
                })
                .collect()
        };
        for (i, c) in canaries.iter().enumerate() {
            let forms = [
                c.record(),
                c.email.to_uppercase().replace('@', " @ "),
                c.account.replace(' ', "-"),
                fullwidth(&c.account),
                format!("{}’s account — {}", c.name, c.account.replace(' ', ".")),
                c.account[..9].to_owned(),
            ];
            let text = format!("{}{}{}", filler.repeat(i + 1), forms[i % forms.len()], filler.repeat(3));
            for recipient in ["a", "b"] {
                assert_eq!(fast.scan(&text, recipient), full.scan(&text, recipient), "{text}");
            }
        }
        let all: String = canaries.iter().map(|c| format!("{filler}{} ", c.record())).collect();
        assert_eq!(fast.scan(&all, "a"), full.scan(&all, "a"));
        assert_eq!(fast.scan(&all, "a").len(), 10);
    }
}
