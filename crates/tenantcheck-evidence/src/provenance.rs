//! [`Provenance`]: where a stretch of an answer's text came from. A leak is text whose
//! provenance is another tenant's request, however it was cut, cased, spaced, spelled
//! or placed: this index keeps every request's words as it was sent, and finds in any
//! output field of an answer a stretch of another tenant's words that the asking
//! tenant never sent, naming the tenant and the request it came from.
//!
//! ## Words
//!
//! Text is read as a sequence of *words* after folding ([`words`]): Unicode
//! compatibility decomposition, accents dropped, lower case; punctuation and
//! whitespace (line breaks too) separate words and are otherwise dropped. Numbers are
//! canonical whatever their spelling: every digit is a word of its own, so
//! `3391-0048-2215`, `3391 0048 2215` and `339100482215` are the same twelve words, and
//! so are digit words ("three three nine one ...", "thirty-three ninety-one ...").
//! Addresses read in their spelled form: `@` is the word `at`, and a `.` between two
//! letters or digits is the word `dot`, so `maria.keller48@posteo.de` and "maria dot
//! keller four eight at posteo dot de" are the same words.
//!
//! ## Shingles and what is kept
//!
//! A *shingle* is [`SHINGLE`] words in a row, hashed to 64 bits. A shingle made only of
//! the run's shared wording is nobody's evidence and is not kept. Of the others in
//! each request string, the index keeps every one that holds a digit (so that a
//! record's digits are matched in full) and those that winnowing selects among the
//! rest (the smallest hash of every [`WINDOW`] in a row, Schleimer, Wilkerson and
//! Aiken 2003), with the tenants whose requests held each and the transcript line of
//! the first. An answer's shingles are all looked up. So a stretch an answer shares
//! with an earlier request is always found when it spans [`WINDOW`] informative
//! shingles in a row ([`GUARANTEED`] words of text with no shared wording), and
//! otherwise when one of its shingles was kept (about 2 in `WINDOW + 1`). About a fifth
//! of a request's shingles are kept, at 16 bytes each in the index (see
//! `docs/benchmarks.md` for a run at a million tokens of context).
//!
//! ## When a match names an owner
//!
//! A stretch of an answer is tenant X's data when
//!
//! 1. each of its shingles was sent by X and by no request of the asking tenant (not
//!    the request this answer answers, not any earlier one), and
//! 2. it holds at least one *distinctive* word of X's: a word (not a digit) that X's
//!    requests held, the asking tenant never sent, and that is not the run's shared
//!    wording ([`crate::prompt::shared_wording`]); or at least [`MIN_DIGITS`] digits
//!    in X's order (a record's account number and e-mail digits, however spelled).
//!
//! The second rule is what keeps chance out. A model writing ordinary English, or
//! prose in the style of its own prompt, can hit six common words that another
//! tenant also sent; it cannot, without the other tenant's text, write six of that
//! tenant's words in that tenant's order *and* one of the words only that tenant used
//! (its invented names, its customers' names and addresses). Every tenant's filler
//! names two of its own invented names in each sentence ([`crate::canary::Marks`]), so
//! no more than five words of it stand between two distinctive ones
//! ([`crate::prompt::MAX_UNNAMED`]).
//!
//! Text the asking tenant sent too (a shared prefix, its own earlier prompt) is never
//! another tenant's: [`crate::passage`] judges answers that hold it.
//!
//! ## The chance of a coincidence
//!
//! Each hit states how likely an answer written *without* the owner's requests would
//! be to hold what the hit holds ([`TextHit::chance`], an upper bound). Only what the
//! run secret draws for the owner is counted, since only that is random to someone who
//! never saw the owner's text:
//!
//! - the owner's invented names ([`crate::canary::Marks`]) anywhere in the field, that
//!   the asking tenant never sent: 24 of the 32,768 words three syllables of their
//!   alphabet make, so `m` distinct ones among the `n` distinct words of the field
//!   that such a name could be ([`crate::canary::mark_shaped`]) come by chance with a
//!   probability of at most `C(n, m) (24/32,768)^m`;
//! - the owner's digits, where they stand in runs of at least [`RANDOM_DIGIT_RUN`]
//!   (account numbers, codes, needles: a number word of prose is no run): `g` of them
//!   in the owner's order at most `d_field d_owner 10^-g` (each digit of the field
//!   against each digit the owner sent as the first of the alignment).
//!
//! A stretch is taken as one piece of the owner's text (its shingles were matched in
//! the owner's order, no more than a window apart). The two draws are independent, so
//! the bound is their product. Every other word counts for nothing: a hit whose words
//! are all ordinary ones (a customer's name that both tenants' pools hold) states a
//! chance of 1, no bound, and rests on rule 2 alone.

use std::collections::{HashMap, HashSet};
use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

/// Words in a shingle.
pub const SHINGLE: usize = 6;

/// Shingles in a winnowing window: one of every `WINDOW` in a row is kept.
pub const WINDOW: usize = 8;

/// The fewest words in a row, none of them shared wording, an answer must share with a
/// request to be found in every case: `SHINGLE + WINDOW - 1`.
pub const GUARANTEED: usize = SHINGLE + WINDOW - 1;

/// The fewest digits of matched shingles that name an owner without a distinctive
/// word: eight digits in another tenant's order come by chance about once in 10^8.
pub const MIN_DIGITS: usize = 8;

/// The fewest digits in a row (canonical words) counted as drawn by the run secret in
/// a hit's [chance](self#the-chance-of-a-coincidence): a record's number, a code, a
/// needle; never a number word of prose ("one of the").
pub const RANDOM_DIGIT_RUN: usize = 4;

/// The longest excerpt a hit keeps, in characters.
const KEEP_CHARS: usize = 300;

/// The most distinctive words a hit names.
const KEEP_DISTINCTIVE: usize = 6;

/// Tenants past the 16th share the last bit.
const ALL_TENANTS: u16 = u16::MAX;

/// Every kept shingle of the requests recorded so far, and every word they held.
#[derive(Debug, Default)]
pub struct Provenance {
    /// The tenants, by the bit that stands for each.
    tenants: Vec<String>,
    shingles: HashMap<u64, Source>,
    /// Each word (not digits) and the tenants whose requests held it; the run's shared
    /// wording is everyone's from the start.
    vocabulary: HashMap<u64, u16>,
    /// Each tenant's invented names ([`crate::canary::Marks`]), by word, as
    /// [`Provenance::with_marks`] gave them.
    marks: HashMap<u64, u16>,
    /// Digits each tenant's requests held, by tenant index.
    digits: [u64; 16],
}

/// Where a shingle was first sent, and by whom at all: eight bytes.
#[derive(Clone, Copy, Debug)]
struct Source {
    /// The transcript line of the first request that held it.
    seq: u32,
    /// The tenant that sent that request (its index).
    first: u16,
    /// Every tenant whose requests held it, one bit each.
    tenants: u16,
}

/// Which of an answer's candidate shingles and words the request it answers held.
struct Own {
    shingles: HashSet<u64>,
    words: HashSet<u64>,
}

impl Own {
    /// Reads `request` once for the `shingles` and `words` asked about (a long
    /// prompt's own shingles are never all held at once).
    fn among(request: &[&str], shingles: HashSet<u64>, words: HashSet<u64>) -> Own {
        let mut own = Own {
            shingles: HashSet::new(),
            words: HashSet::new(),
        };
        for s in request {
            let mut last = Shingler::default();
            self::words(s, |w| {
                if words.contains(&w.hash) {
                    own.words.insert(w.hash);
                }
                if let Some(shingle) = last.push(w.hash, w.digit, false)
                    && shingles.contains(&shingle.key)
                {
                    own.shingles.insert(shingle.key);
                }
            });
        }
        own
    }
}

/// A shingle as read: its key, whether it holds a digit, whether all its words are
/// the shared wording.
struct Shingle {
    key: u64,
    digit: bool,
    shared: bool,
}

/// The last [`SHINGLE`] words read, as a ring.
#[derive(Default)]
struct Shingler {
    words: [(u64, bool, bool); SHINGLE],
    read: usize,
}

impl Shingler {
    /// Reads one more word; the shingle that ends with it, once there are enough.
    fn push(&mut self, hash: u64, digit: bool, shared: bool) -> Option<Shingle> {
        self.words[self.read % SHINGLE] = (hash, digit, shared);
        self.read += 1;
        if self.read < SHINGLE {
            return None;
        }
        let in_order = (0..SHINGLE).map(|i| self.words[(self.read + i) % SHINGLE]);
        let (mut hashes, mut digit, mut shared) = ([0u64; SHINGLE], false, true);
        for (i, (h, d, s)) in in_order.enumerate() {
            hashes[i] = h;
            digit |= d;
            shared &= s;
        }
        Some(Shingle {
            key: shingle_key(&hashes),
            digit,
            shared,
        })
    }
}

/// Winnowing as keys arrive: in every [`WINDOW`] keys in a row the smallest (the
/// rightmost of equals) is kept, each once; of fewer keys than a window, the smallest.
#[derive(Default)]
struct Winnower {
    /// Candidates for the smallest of the window, as (position, key), keys rising.
    rising: std::collections::VecDeque<(usize, u64)>,
    read: usize,
    last: Option<usize>,
}

impl Winnower {
    /// Reads one more key; the key kept for the window it completes, if a new one.
    fn push(&mut self, key: u64) -> Option<u64> {
        while self.rising.back().is_some_and(|&(_, k)| k >= key) {
            self.rising.pop_back();
        }
        self.rising.push_back((self.read, key));
        self.read += 1;
        if self.read < WINDOW {
            return None;
        }
        while self.rising.front().is_some_and(|&(at, _)| at + WINDOW < self.read) {
            self.rising.pop_front();
        }
        self.take_front()
    }

    /// After the last key: the smallest, where there were fewer keys than a window.
    fn finish(&mut self) -> Option<u64> {
        match self.read {
            1.. if self.read < WINDOW => self.take_front(),
            _ => None,
        }
    }

    fn take_front(&mut self) -> Option<u64> {
        let &(at, key) = self.rising.front()?;
        (self.last != Some(at)).then(|| {
            self.last = Some(at);
            key
        })
    }
}

/// Runs of matched shingles of one owner no further apart than a winnowing window (a
/// stretch shared in full has one kept in every window).
fn stretches(matched: &[(usize, Source)]) -> impl Iterator<Item = &[(usize, Source)]> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= matched.len() {
            return None;
        }
        let owner = matched[at].1.first;
        let mut end = at + 1;
        while end < matched.len() && matched[end].0 <= matched[end - 1].0 + WINDOW && matched[end].1.first == owner {
            end += 1;
        }
        let stretch = &matched[at..end];
        at = end;
        Some(stretch)
    })
}

/// A stretch of another tenant's request text in an answer.
#[derive(Clone, Debug, PartialEq)]
pub struct TextHit {
    /// The tenant whose request held it.
    pub owner: String,
    /// The transcript line of that request (the first that held the stretch's first
    /// matched shingle).
    pub source: u64,
    /// The output field it came back in (`content`, `choices.0.message.reasoning_content`,
    /// `error.message`, ...).
    pub field: String,
    /// The stretch as it came back (at most 300 characters).
    pub text: String,
    /// Words of the answer covered by matched shingles.
    pub words: usize,
    /// Shingles matched.
    pub shingles: usize,
    /// The owner's distinctive words in it, as they came back (at most six).
    pub distinctive: Vec<String>,
    /// At most this likely would an answer written without the owner's requests hold
    /// what this stretch holds of the run secret's draws for the owner: its invented
    /// names and its digits ([the bound](self#the-chance-of-a-coincidence)); 1 where
    /// it holds none.
    pub chance: f64,
}

impl TextHit {
    /// The hit's id, as a leak's `canary_id`: `owner/text/source`.
    pub fn id(&self) -> String {
        format!("{}/text/{}", self.owner, self.source)
    }
}

impl Provenance {
    /// An empty index for a run of these tenants.
    pub fn new(tenants: &[String]) -> Self {
        let mut vocabulary = HashMap::new();
        for phrase in crate::prompt::shared_wording() {
            words(phrase, |w| {
                if !w.digit {
                    vocabulary.insert(w.hash, ALL_TENANTS);
                }
            });
        }
        Provenance {
            tenants: tenants.to_vec(),
            shingles: HashMap::new(),
            vocabulary,
            marks: HashMap::new(),
            digits: [0; 16],
        }
    }

    /// The same index, knowing each tenant's invented names, so that a hit's
    /// [chance](self#the-chance-of-a-coincidence) counts them.
    pub fn with_marks(mut self, marks: &[crate::canary::Marks]) -> Self {
        for m in marks {
            let bit = self.bit(&m.owner);
            for word in &m.words {
                words(word, |w| *self.marks.entry(w.hash).or_default() |= bit);
            }
        }
        self
    }

    /// The tenant's index (tenants past the 16th share the last) and bit.
    fn index(&self, tenant: &str) -> (u16, u16) {
        let i = self
            .tenants
            .iter()
            .position(|t| t == tenant)
            .unwrap_or(self.tenants.len())
            .min(15);
        (i as u16, 1u16 << i)
    }

    fn bit(&self, tenant: &str) -> u16 {
        self.index(tenant).1
    }

    /// Adds the strings of a request `tenant` sent, written at transcript line `seq`.
    /// Reads each string once, keeping only the last [`SHINGLE`] words and a
    /// winnowing window: a prompt of megabytes costs no more memory than a short one.
    pub fn add(&mut self, seq: u64, tenant: &str, strings: &[&str]) {
        let (first, bit) = self.index(tenant);
        let seq = u32::try_from(seq).unwrap_or(u32::MAX);
        let Provenance {
            shingles,
            vocabulary,
            digits,
            ..
        } = self;
        let mut keep = |key: u64| {
            shingles.entry(key).or_insert(Source { seq, first, tenants: 0 }).tenants |= bit;
        };
        for s in strings {
            let mut last = Shingler::default();
            let mut winnower = Winnower::default();
            words(s, |w| {
                let shared = !w.digit && vocabulary.get(&w.hash) == Some(&ALL_TENANTS);
                if w.digit {
                    digits[usize::from(first)] += 1;
                } else {
                    *vocabulary.entry(w.hash).or_default() |= bit;
                }
                // Shingles of the run's shared wording alone are nobody's evidence:
                // not kept. Of the others, every one that holds a digit (records are a
                // small part of the text, and their digits name their owner only when
                // matched in full), and those winnowing keeps of the rest.
                let Some(shingle) = last.push(w.hash, w.digit, shared) else {
                    return;
                };
                if shingle.shared {
                    return;
                }
                if shingle.digit {
                    keep(shingle.key);
                }
                if let Some(key) = winnower.push(shingle.key) {
                    keep(key);
                }
            });
            if let Some(key) = winnower.finish() {
                keep(key);
            }
        }
    }

    /// Looks through `outputs` (each an output field's name and text) of the answer to
    /// a request of `tenant` that held `request` (its strings) for a stretch of another
    /// tenant's request text ([the rules](self)). Returns the first.
    pub fn find(&self, tenant: &str, request: &[&str], outputs: &[(String, String)]) -> Option<TextHit> {
        let asker = self.bit(tenant);
        for (field, text) in outputs {
            let said = spans(text);
            let keys = shingle_keys(&said.iter().map(|w| w.hash).collect::<Vec<_>>());
            // Kept shingles no request of the asking tenant held, by where they start.
            let mut matched: Vec<(usize, Source)> = keys
                .iter()
                .enumerate()
                .filter_map(|(at, k)| self.shingles.get(k).map(|s| (at, *s)))
                .filter(|(_, s)| s.tenants & asker == 0)
                .collect();
            if matched.is_empty() {
                continue;
            }
            // What of them, and of the words they cover, the request itself held.
            let own = Own::among(
                request,
                matched.iter().map(|(at, _)| keys[*at]).collect(),
                matched
                    .iter()
                    .flat_map(|(at, _)| &said[*at..*at + SHINGLE])
                    .chain(said.iter().filter(|w| self.marks.contains_key(&w.hash)))
                    .map(|w| w.hash)
                    .collect(),
            );
            matched.retain(|(at, _)| !own.shingles.contains(&keys[*at]));
            let by_digits = !is_metadata(field);
            for stretch in stretches(&matched) {
                if let Some(hit) = self.attribute(stretch, &said, text, asker, &own, by_digits) {
                    return Some(TextHit {
                        field: field.clone(),
                        ..hit
                    });
                }
            }
        }
        None
    }

    /// The hit a stretch of matched shingles makes, when it names its owner: it holds a
    /// distinctive word of the owner's or, where `by_digits`, [`MIN_DIGITS`] digits in
    /// the owner's order.
    fn attribute(
        &self,
        stretch: &[(usize, Source)],
        said: &[Span],
        text: &str,
        asker: u16,
        own: &Own,
        by_digits: bool,
    ) -> Option<TextHit> {
        let first = stretch[0].1;
        let owner = 1u16 << first.first.min(15);
        let covered: std::collections::BTreeSet<usize> = stretch.iter().flat_map(|(p, _)| *p..*p + SHINGLE).collect();
        let distinctive: Vec<&Span> = covered
            .iter()
            .map(|&i| &said[i])
            .filter(|w| !w.digit && !own.words.contains(&w.hash))
            .filter(|w| {
                self.vocabulary
                    .get(&w.hash)
                    .is_some_and(|m| *m != ALL_TENANTS && m & owner != 0 && m & asker == 0)
            })
            .collect();
        let digits = covered.iter().filter(|&&i| said[i].digit).count();
        if distinctive.is_empty() && (digits < MIN_DIGITS || !by_digits) {
            return None;
        }
        let (from, to) = (stretch[0].0, stretch[stretch.len() - 1].0 + SHINGLE - 1);
        let mut excerpt = text[said[from].start..said[to].end].to_owned();
        if let Some((cut, _)) = excerpt.char_indices().nth(KEEP_CHARS) {
            excerpt.truncate(cut);
        }
        let mut named = HashSet::new();
        let distinct: Vec<&Span> = distinctive.into_iter().filter(|w| named.insert(w.hash)).collect();
        let chance = self.chance(first.first, asker, said, text, &covered, own);
        let names: Vec<String> = distinct
            .into_iter()
            .take(KEEP_DISTINCTIVE)
            .map(|w| text[w.start..w.end].to_owned())
            .collect();
        Some(TextHit {
            owner: self
                .tenants
                .get(usize::from(first.first))
                .cloned()
                .unwrap_or_else(|| "?".into()),
            source: u64::from(first.seq),
            field: String::new(),
            text: excerpt,
            words: covered.len(),
            shingles: stretch.len(),
            distinctive: names,
            chance,
        })
    }

    /// The [chance of a coincidence](self#the-chance-of-a-coincidence) of a stretch of
    /// `owner`'s (by index) words covering `covered` of the words `said` of the field
    /// `text`, in an answer to `asker` (its bit) whose request held `own`.
    fn chance(
        &self,
        owner: u16,
        asker: u16,
        said: &[Span],
        text: &str,
        covered: &std::collections::BTreeSet<usize>,
        own: &Own,
    ) -> f64 {
        let bit = 1u16 << owner.min(15);
        // The owner's invented names anywhere in the field that the asker never sent.
        let marks = said
            .iter()
            .filter(|w| self.marks.get(&w.hash).is_some_and(|m| m & bit != 0))
            .filter(|w| !own.words.contains(&w.hash))
            .filter(|w| self.vocabulary.get(&w.hash).is_none_or(|v| v & asker == 0))
            .map(|w| w.hash)
            .collect::<HashSet<_>>()
            .len();
        let distinct_words = said
            .iter()
            .filter(|w| {
                !w.digit
                    && (self.marks.contains_key(&w.hash)
                        || crate::canary::mark_shaped(&text[w.start..w.end].to_ascii_lowercase()))
            })
            .map(|w| w.hash)
            .collect::<HashSet<_>>()
            .len();
        let field_digits = said.iter().filter(|w| w.digit).count();
        chance_of(
            distinct_words,
            marks,
            field_digits,
            self.digits[usize::from(owner.min(15))],
            random_digits(said, covered),
        )
    }

    /// How many shingles the index keeps.
    pub fn len(&self) -> usize {
        self.shingles.len()
    }

    /// Whether it keeps none.
    pub fn is_empty(&self) -> bool {
        self.shingles.is_empty()
    }
}

/// The covered digits of the field that stand in a run of at least
/// [`RANDOM_DIGIT_RUN`] digits in a row (a run covered in part counts its covered
/// digits only).
fn random_digits(said: &[Span], covered: &std::collections::BTreeSet<usize>) -> usize {
    let mut counted = 0;
    let mut at = 0;
    while at < said.len() {
        if !said[at].digit {
            at += 1;
            continue;
        }
        let end = (at..said.len()).find(|&i| !said[i].digit).unwrap_or(said.len());
        if end - at >= RANDOM_DIGIT_RUN {
            counted += (at..end).filter(|i| covered.contains(i)).count();
        }
        at = end;
    }
    counted
}

/// The bound of [the rules](self#the-chance-of-a-coincidence): `marks` of the owner's
/// invented names among `words` distinct words a mark could be, and `digits` of the
/// owner's random digits in its order, with `field_digits` digits in the field and
/// `owner_digits` sent.
pub fn chance_of(words: usize, marks: usize, field_digits: usize, owner_digits: u64, digits: usize) -> f64 {
    let p = crate::canary::MARKS_PER_TENANT as f64 / crate::canary::MARK_WORDS as f64;
    // ln C(n, m) + m ln p, in logarithms: n may be thousands.
    let names = (0..marks.min(words))
        .map(|i| ((words - i) as f64).ln() - ((i + 1) as f64).ln() + p.ln())
        .sum::<f64>();
    let names = if marks == 0 { 0.0 } else { names.min(0.0) };
    let digits = if digits == 0 {
        0.0
    } else {
        ((field_digits.max(1) as f64).ln() + (owner_digits.max(1) as f64).ln() - digits as f64 * 10f64.ln()).min(0.0)
    };
    (names + digits).exp().min(1.0)
}

/// The field of [`outputs`] that holds a stream's lines other than its frames
/// (comments, `id:` fields: [`crate::exchange::Exchange::stream_extra`]).
pub const STREAM_EXTRA: &str = "stream lines";

/// The field of [`outputs`] that holds the names of the response headers, a line each.
pub const HEADER_NAMES: &str = "headers";

/// How a field of [`outputs`] that holds one response header's value is named: this,
/// then the header's lowercase name (`header x-debug-batch`).
pub const HEADER_FIELD: &str = "header ";

/// Whether `field` (of [`outputs`]) is one the vendor's machinery writes rather than
/// its model: a response header, a header's name, a stream's comments and ids. Ids,
/// counters and clocks stand there in long runs of digits, so a stretch there names
/// its owner by a distinctive word alone, never by digits alone (another tenant's
/// record numbers there are the canary scan's to find, whole or near).
pub fn is_metadata(field: &str) -> bool {
    [HEADER_FIELD, HEADER_NAMES, STREAM_EXTRA]
        .iter()
        .any(|m| field.starts_with(m))
}

/// Every output field of an exchange that carries text, by name, each field's pieces
/// joined in order: the assembled content; every string of the response body (the
/// message's content, reasoning fields, thinking blocks, tool-call names and
/// arguments, refusals, logprob tokens); every string of every stream frame, joined
/// per field and choice across frames (a stream's deltas); the error message; a body
/// that is not JSON, whole; the stream's other lines ([`STREAM_EXTRA`]); the response
/// headers' names ([`HEADER_NAMES`]) and each header's value
/// ([`HEADER_FIELD`]` NAME`).
pub fn outputs(exchange: &crate::exchange::Exchange) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut push = |name: String, piece: &str| match fields.iter_mut().find(|(n, _)| *n == name) {
        Some((_, text)) => text.push_str(piece),
        None => fields.push((name, piece.to_owned())),
    };
    if !exchange.content.is_empty() {
        push("content".into(), &exchange.content);
    }
    let documents = exchange
        .body
        .iter()
        .map(|b| (b.as_str(), "body"))
        .chain(exchange.frames.iter().map(|f| (f.data.as_str(), "stream")));
    for (text, place) in documents {
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(value) => walk(&value, place.to_owned(), &mut push),
            Err(_) if text.trim() == "[DONE]" => {}
            Err(_) => push(place.into(), text),
        }
    }
    if let Some(e) = &exchange.api_error {
        push("error.message".into(), &e.message);
    }
    for line in &exchange.stream_extra {
        push(STREAM_EXTRA.into(), line);
        push(STREAM_EXTRA.into(), "\n");
    }
    for name in exchange.headers.keys() {
        push(HEADER_NAMES.into(), name);
        push(HEADER_NAMES.into(), "\n");
    }
    for (name, value) in &exchange.headers {
        push(format!("{HEADER_FIELD}{name}"), value);
    }
    // A field that is JSON itself (a tool call's arguments, joined across a stream's
    // deltas) is read decoded too: its escapes would join words.
    let mut decoded = Vec::new();
    for (name, text) in &fields {
        if let Ok(value @ (serde_json::Value::Object(_) | serde_json::Value::Array(_))) =
            serde_json::from_str::<serde_json::Value>(text)
        {
            let mut strings: Vec<(String, String)> = Vec::new();
            walk(&value, format!("{name}.json"), &mut |n, s| {
                strings.push((n, s.to_owned()))
            });
            decoded.extend(strings);
        }
    }
    fields.extend(decoded);
    fields
}

/// Keys whose strings are the API's own (ids, roles, names of objects), not text.
const STRUCTURAL: &[&str] = &[
    "id",
    "object",
    "model",
    "role",
    "type",
    "finish_reason",
    "system_fingerprint",
];

/// Pushes every string of `value` under its path; array positions are left out of the
/// path (so that a stream's deltas and logprob tokens join), except a choice's index.
fn walk(value: &serde_json::Value, path: String, push: &mut impl FnMut(String, &str)) {
    match value {
        serde_json::Value::String(s) => push(path, s),
        serde_json::Value::Array(items) => {
            for item in items {
                let path = match item.get("index").and_then(serde_json::Value::as_u64) {
                    Some(i) if path.ends_with("choices") => format!("{path}.{i}"),
                    _ => path.clone(),
                };
                walk(item, path, push);
            }
        }
        serde_json::Value::Object(map) => {
            for (key, item) in map {
                if !STRUCTURAL.contains(&key.as_str()) {
                    walk(item, format!("{path}.{key}"), push);
                }
            }
        }
        _ => {}
    }
}

/// One word as read: its hash and whether it is a digit.
#[derive(Clone, Copy, Debug)]
pub struct Word {
    /// The hash of its canonical form.
    pub hash: u64,
    /// Whether it is a digit (everyone's).
    pub digit: bool,
}

/// A word and where it stands in the text (byte offsets).
#[derive(Clone, Copy, Debug)]
struct Span {
    hash: u64,
    digit: bool,
    start: usize,
    end: usize,
}

fn spans(text: &str) -> Vec<Span> {
    let mut out = Vec::new();
    read(text, |canonical, start, end| {
        out.push(Span {
            hash: hash(canonical),
            digit: is_digit(canonical),
            start,
            end,
        })
    });
    out
}

/// The words of `text`, in their canonical form ([the rules](self)), each handed to
/// `each` as it is read.
pub fn words(text: &str, mut each: impl FnMut(Word)) {
    read(text, |canonical, _, _| {
        each(Word {
            hash: hash(canonical),
            digit: is_digit(canonical),
        })
    });
}

/// The canonical words of `text`, as strings (for tests and figures).
pub fn canonical(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    read(text, |w, _, _| out.push(w.to_owned()));
    out
}

fn is_digit(w: &str) -> bool {
    w.len() == 1 && w.as_bytes()[0].is_ascii_digit()
}

const UNITS: &[&str] = &[
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
];
const TEENS: &[&str] = &[
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];
const TENS: &[&str] = &[
    "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
];
const DIGITS: &[&str] = &["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];

/// Reads `text` word by word, handing each canonical word and its byte span to `emit`:
/// letters folded, digits one by one, number words as digits, `@` and an inner `.` as
/// `at` and `dot`.
fn read(text: &str, mut emit: impl FnMut(&str, usize, usize)) {
    // A tens word waits for the unit that may follow it ("forty two").
    let mut tens: Option<(usize, usize, usize)> = None;
    let mut number = |word: &str, start: usize, end: usize| {
        // Number words are 3 to 9 letters and start with one of these.
        let maybe = (3..=9).contains(&word.len())
            && matches!(word.as_bytes()[0], b'z' | b'o' | b't' | b'f' | b's' | b'e' | b'n');
        let unit = maybe.then(|| UNITS.iter().position(|u| *u == word)).flatten();
        if let Some((t, s, e)) = tens.take() {
            emit(DIGITS[t], s, e);
            match unit {
                Some(u) if u > 0 => {
                    emit(DIGITS[u], start, end);
                    return;
                }
                _ => emit("0", s, e),
            }
        }
        let teen = || maybe.then(|| TEENS.iter().position(|x| *x == word)).flatten();
        let ten = || maybe.then(|| TENS.iter().position(|x| *x == word)).flatten();
        if let Some(u) = unit {
            emit(DIGITS[u], start, end);
        } else if let Some(t) = teen() {
            emit("1", start, end);
            emit(DIGITS[t], start, end);
        } else if let Some(t) = ten() {
            tens = Some((t + 2, start, end));
        } else if !word.is_empty() {
            emit(word, start, end);
        }
    };
    let mut run = String::new();
    let mut run_start = 0;
    let mut prev_alnum = false;
    // One folded character `f` of the text's character at `at..end`: a digit is a
    // word, a letter joins the word being read, anything else ends it.
    let mut step = |f: char, at: usize, end: usize, next_alnum: bool, prev_alnum: bool| -> bool {
        if f.is_ascii_digit() {
            if !run.is_empty() {
                number(&run, run_start, at);
                run.clear();
            }
            number(DIGITS[(f as u8 - b'0') as usize], at, end);
            true
        } else if f.is_alphanumeric() {
            if run.is_empty() {
                run_start = at;
            }
            run.push(f);
            true
        } else {
            if !run.is_empty() {
                number(&run, run_start, at);
                run.clear();
            }
            if f == '@' {
                number("at", at, end);
            } else if f == '.' && prev_alnum && next_alnum {
                number("dot", at, end);
            }
            false
        }
    };
    let mut folded = String::new();
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let end = at + c.len_utf8();
        let next_alnum = chars.peek().is_some_and(|(_, n)| n.is_alphanumeric());
        if c.is_ascii() {
            prev_alnum = step(c.to_ascii_lowercase(), at, end, next_alnum, prev_alnum);
            continue;
        }
        folded.clear();
        for d in std::iter::once(c).nfkd().filter(|d| !is_combining_mark(*d)) {
            folded.extend(d.to_lowercase());
        }
        let mut alnum = false;
        for f in folded.chars() {
            alnum |= step(f, at, end, next_alnum, prev_alnum);
        }
        prev_alnum = alnum;
    }
    // The last word, then a tens word at the very end ("... forty").
    step(' ', text.len(), text.len(), false, prev_alnum);
    number("", text.len(), text.len());
}

/// A word's hash: FNV-1a, finished as SplitMix64 does (FNV's high bits mix poorly).
fn hash(word: &str) -> u64 {
    let h = word.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    mix(h)
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A shingle's key: its words' hashes, mixed in order.
fn shingle_key(hashes: &[u64]) -> u64 {
    hashes.iter().fold(0x9e37_79b9_7f4a_7c15_u64, |h, x| {
        mix((h ^ x).wrapping_add(0x9e37_79b9_7f4a_7c15))
    })
}

/// The key of every shingle of a word sequence, in order.
fn shingle_keys(hashes: &[u64]) -> Vec<u64> {
    hashes.windows(SHINGLE).map(shingle_key).collect()
}

/// The keys winnowing keeps of `keys` ([`Winnower`]).
#[cfg(test)]
fn winnow(keys: &[u64]) -> Vec<u64> {
    let mut w = Winnower::default();
    let mut kept: Vec<u64> = keys.iter().filter_map(|k| w.push(*k)).collect();
    kept.extend(w.finish());
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(seq: u64, tenant: &str, text: &str) -> Provenance {
        let mut p = Provenance::new(&["a".into(), "b".into()]);
        p.add(seq, tenant, &[text]);
        p
    }

    fn content(text: &str) -> Vec<(String, String)> {
        vec![("content".into(), text.into())]
    }

    const B_TEXT: &str = "The committee at Velkaro reviewed the quarterly budget before the long weekend, as Dunmoreth noted. \
        Client file: Maria Keller, email maria.keller48213@posteo.de, account 3391-0048-2215, note: the blue gate by the orchard. \
        Our accountant from Ostravane measured the river survey after the storm passed, according to Velkaro.";

    #[test]
    fn numbers_and_addresses_read_the_same_however_written() {
        let canon = |s: &str| canonical(s).join(" ");
        assert_eq!(
            canon("3391-0048-2215"),
            canon("three three nine one zero zero four eight two two one five")
        );
        assert_eq!(canon("3391 0048 2215"), canon("339100482215"));
        assert_eq!(canon("thirty-three ninety-one"), canon("3391"));
        assert_eq!(canon("forty"), canon("40"));
        assert_eq!(canon("Eleven"), canon("11"));
        assert_eq!(
            canon("maria.keller48@posteo.de"),
            canon("Maria dot Keller four eight at posteo dot de")
        );
        assert_eq!(canon("ＭＡＲＩＡ  Kéller\n\tthe END."), "maria keller the end");
        // A full stop between sentences is no `dot`.
        assert_eq!(canon("It ended. Then"), "it ended then");
    }

    #[test]
    fn another_tenants_text_cut_and_respelled_is_found_and_named() {
        let p = index(7, "b", B_TEXT);
        let leaked = "okay so client FILE maria keller, email maria dot keller four eight two one three at posteo dot de, account three three nine one zero zero four eight two two one five and more";
        let hit = p
            .find("a", &["Read back what you were given."], &content(leaked))
            .expect("b's record, spelled out, in a's answer");
        assert_eq!(
            (hit.owner.as_str(), hit.source, hit.field.as_str()),
            ("b", 7, "content")
        );
        assert_eq!(hit.id(), "b/text/7");
        assert!(hit.distinctive.iter().any(|w| w == "keller" || w == "maria"), "{hit:?}");
        assert!(hit.words >= GUARANTEED, "{hit:?}");
    }

    #[test]
    fn a_record_whose_words_both_tenants_sent_is_named_by_its_digits() {
        let mut p = index(7, "b", B_TEXT);
        // a sent the same names, domain and note words in records of its own.
        p.add(8, "a", &["Client file: Maria Keller, email maria.keller11111@posteo.de, account 9999-0000-1111, note: the blue gate by the orchard."]);
        let leaked =
            "maria keller email maria dot keller four eight two one three at posteo dot de account three three nine";
        let hit = p
            .find("a", &["Hi."], &content(leaked))
            .expect("b's digits, in b's order");
        assert_eq!(hit.owner, "b");
        assert!(hit.distinctive.is_empty(), "{hit:?}");
        // Seven of them are not enough.
        assert_eq!(
            p.find("a", &["Hi."], &content("at posteo dot de account three three nine one")),
            None
        );
    }

    #[test]
    fn a_hits_chance_counts_the_owners_invented_names_and_random_digits_alone() {
        let marks = |owner: &str, words: &[&str]| crate::canary::Marks {
            owner: owner.into(),
            words: words.iter().map(|w| (*w).to_owned()).collect(),
        };
        let index = |marked: bool| {
            let mut p = Provenance::new(&["a".into(), "b".into()]);
            if marked {
                p = p.with_marks(&[
                    marks("b", &["Velkaro", "Dunmoreth", "Ostravane"]),
                    marks("a", &["Quinlomar"]),
                ]);
            }
            p.add(7, "b", &[B_TEXT]);
            p
        };
        let prose = "the committee at velkaro reviewed the quarterly budget before the long weekend as dunmoreth noted";
        // Two of b's invented names, and no other word of the field a name could be:
        // (24/32,768)^2.
        let p = 24.0 / 32_768.0;
        let hit = index(true).find("a", &["Hi."], &content(prose)).expect("b's prose");
        let want = p * p;
        assert!((hit.chance - want).abs() < want * 1e-9, "{} != {want}", hit.chance);
        // A word of the field that could be a name (three syllables), and is nobody's,
        // is one more place a name could have come by chance: C(3, 2) (24/32,768)^2.
        let hit = index(true)
            .find("a", &["Hi."], &content(&format!("Kaloix said: {prose}")))
            .expect("b's prose");
        let want = 3.0 * p * p;
        assert!((hit.chance - want).abs() < want * 1e-9, "{} != {want}", hit.chance);
        // Not knowing the names, the same words state no chance.
        let hit = index(false).find("a", &["Hi."], &content(prose)).expect("b's prose");
        assert_eq!(hit.chance, 1.0);
        // Twelve digits in b's order, in runs of four: 12 digits in the field, 12 sent
        // by b (its e-mail's five digits are a run too), 10^-12 each alignment.
        let record = "account three three nine one zero zero four eight two two one five";
        let hit = index(true).find("a", &["Hi."], &content(record)).expect("b's account");
        let want = 12.0 * 17.0 * 1e-12;
        assert!((hit.chance - want).abs() < want * 1e-9, "{} != {want}", hit.chance);
        // Another tenant's names say nothing of b's text; a name more makes it rarer.
        assert_eq!(chance_of(20, 0, 0, 100, 0), 1.0);
        assert!(chance_of(20, 3, 0, 0, 0) < chance_of(20, 2, 0, 0, 0));
        assert!(chance_of(2_000, 2, 0, 0, 0) > chance_of(20, 2, 0, 0, 0));
        // Number words of prose are no run: "one of the two" counts no digit.
        let said = spans("one of the two and 4 5 6 7");
        let all: std::collections::BTreeSet<usize> = (0..said.len()).collect();
        assert_eq!(random_digits(&said, &all), 4);
        // Never above 1, however many words the field holds.
        assert_eq!(chance_of(10_000_000, 1, 0, 0, 0), 1.0);
    }

    #[test]
    fn a_prose_fragment_cut_mid_sentence_is_found() {
        let p = index(3, "b", B_TEXT);
        let leaked = "ountant from ostravane measured the river survey after the storm passed, according to Velk";
        let hit = p
            .find("a", &["Hello."], &content(leaked))
            .expect("thirteen words of b's prose");
        assert_eq!(hit.owner, "b");
        assert!(hit.distinctive.contains(&"ostravane".to_owned()), "{hit:?}");
    }

    #[test]
    fn the_askers_own_text_and_shared_wording_are_nobodys_leak() {
        let mut p = index(1, "b", B_TEXT);
        // a sent the same text before: not b's alone.
        p.add(2, "a", &[B_TEXT]);
        assert_eq!(p.find("a", &["Hi."], &content(B_TEXT)), None);
        // The request it answers held it.
        let p = index(1, "b", B_TEXT);
        assert_eq!(p.find("a", &[B_TEXT], &content(B_TEXT)), None);
        // Nine words of the shared grammar b sent, no word of b's own among them.
        let p = index(1, "b", B_TEXT);
        assert_eq!(
            p.find(
                "a",
                &["Hi."],
                &content("reviewed the quarterly budget before the long weekend as")
            ),
            None
        );
        // Five words of b's: under a shingle.
        assert_eq!(
            p.find("a", &["Hi."], &content("from Ostravane measured the river")),
            None
        );
    }

    #[test]
    fn every_output_field_is_read() {
        use crate::exchange::{Exchange, SseFrame};
        let leaked =
            "the committee at velkaro reviewed the quarterly budget before the long weekend as dunmoreth noted";
        let body = serde_json::json!({"id": "x", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Fine.", "reasoning_content": leaked}}]});
        let ex = Exchange {
            body: Some(body.to_string()),
            ..Default::default()
        };
        let fields = outputs(&ex);
        assert!(
            fields
                .iter()
                .any(|(n, t)| n == "body.choices.0.message.reasoning_content" && t == leaked),
            "{fields:?}"
        );
        // A stream's deltas joined per field, logprob tokens joined.
        let frame = |delta: &str| {
            SseFrame {
            event: None,
            data: serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": delta}}]}, "logprobs": {"content": [{"token": delta}]}}]}).to_string(),
            at_ms: 0.0,
        }
        };
        let (head, tail) = leaked.split_at(37);
        let ex = Exchange {
            frames: vec![
                frame(head),
                frame(tail),
                SseFrame {
                    event: None,
                    data: "[DONE]".into(),
                    at_ms: 0.0,
                },
            ],
            ..Default::default()
        };
        let fields = outputs(&ex);
        assert!(
            fields
                .iter()
                .any(|(n, t)| n == "stream.choices.0.delta.tool_calls.function.arguments" && t == leaked),
            "{fields:?}"
        );
        assert!(
            fields
                .iter()
                .any(|(n, t)| n == "stream.choices.0.logprobs.content.token" && t == leaked),
            "{fields:?}"
        );
        let p = index(4, "b", B_TEXT);
        let hit = p.find("a", &["Hi."], &fields).expect("in the tool call's arguments");
        assert_eq!(hit.field, "stream.choices.0.delta.tool_calls.function.arguments");
    }

    #[test]
    fn headers_and_a_streams_other_lines_are_outputs_that_name_by_words_not_by_digits_alone() {
        use crate::exchange::Exchange;
        let p = index(4, "b", B_TEXT);
        let leaked = "the committee at Velkaro reviewed the quarterly budget before the long weekend";
        // A debugging header, a header's name, a stream's comment: each found, named.
        let header = Exchange {
            headers: [
                ("content-type".to_owned(), "application/json".to_owned()),
                ("x-debug-batch".to_owned(), format!("...{leaked}...")),
            ]
            .into(),
            ..Default::default()
        };
        let hit = p.find("a", &["Hi."], &outputs(&header)).expect("in the header");
        assert_eq!(
            (hit.field.as_str(), hit.owner.as_str(), hit.source),
            ("header x-debug-batch", "b", 4)
        );
        let name = Exchange {
            headers: [(leaked.replace(' ', "-").to_lowercase(), "1".to_owned())].into(),
            ..Default::default()
        };
        let hit = p.find("a", &["Hi."], &outputs(&name)).expect("in a header's name");
        assert_eq!(hit.field, HEADER_NAMES);
        let comment = Exchange {
            stream_extra: vec![format!(": {leaked}"), "id: 7".into()],
            ..Default::default()
        };
        let hit = p.find("a", &["Hi."], &outputs(&comment)).expect("in a comment");
        assert_eq!(hit.field, STREAM_EXTRA);
        assert!(header.returned_text().contains(leaked) && comment.returned_text().contains(leaked));
        // The digits of b's record alone, as an id or a counter would hold them: named
        // in an answer's content, never in a header or a stream's id.
        let digits = "3391 0048 2215";
        assert!(p.find("a", &["Hi."], &content(digits)).is_some());
        for place in [
            Exchange {
                headers: [("x-request-id".to_owned(), digits.to_owned())].into(),
                ..Default::default()
            },
            Exchange {
                stream_extra: vec![format!("id: {digits}")],
                ..Default::default()
            },
        ] {
            assert_eq!(p.find("a", &["Hi."], &outputs(&place)), None, "{place:?}");
        }
        assert!(is_metadata("header x-request-id") && is_metadata(STREAM_EXTRA) && is_metadata(HEADER_NAMES));
        assert!(!is_metadata("stream.choices.0.delta.content") && !is_metadata("content"));
    }

    #[test]
    fn winnowing_keeps_one_in_every_window() {
        let keys: Vec<u64> = (0..500u64).map(mix).collect();
        let kept: HashSet<u64> = winnow(&keys).into_iter().collect();
        for w in keys.windows(WINDOW) {
            assert!(w.iter().any(|k| kept.contains(k)));
        }
        assert!(kept.len() < keys.len() / 4, "{} of {}", kept.len(), keys.len());
        assert_eq!(winnow(&keys[..3]).len(), 1);
        // As defined: the rightmost smallest of every window, each once; ties and
        // repeats too.
        let small: Vec<u64> = (0..300u64).map(|i| mix(i) % 7).collect();
        let mut want: Vec<usize> = Vec::new();
        for start in 0..=small.len() - WINDOW {
            let w = &small[start..start + WINDOW];
            let min = *w.iter().min().unwrap();
            let at = start + w.iter().rposition(|k| *k == min).unwrap();
            if want.last() != Some(&at) {
                want.push(at);
            }
        }
        let want: Vec<u64> = want.into_iter().map(|i| small[i]).collect();
        assert_eq!(winnow(&small), want);
    }
}
