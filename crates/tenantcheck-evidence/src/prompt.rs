//! [`PromptBuilder`]: prompts of a target token count for a tokenizer the suite does not
//! know, with texts (needles, canary records) placed at chosen depths in natural filler.
//!
//! Lengths are set in characters from a characters-per-token ratio learnt from the
//! vendor: [`PromptBuilder::learn`] takes a prompt's length and the vendor's
//! `usage.prompt_tokens` for it (or a local tokenizer's count, where the profile names
//! one), keeping the ratio within what real tokenizers give, so that a vendor that
//! misreports usage cannot blow prompts up.
//!
//! The filler is English prose drawn from sentence patterns by a PRNG seeded per
//! prompt (no fixed marker a vendor could filter, no single repeated word). A tenant's
//! filler is *marked* ([`Filler`]): every sentence names two of the tenant's invented
//! names ([`crate::canary::Marks`]), so any 200 characters of it hold at least two, and
//! a stretch of it returned to another tenant is recognised as that tenant's prose. A prompt is
//! written once into one `String` of the right capacity; a 1,048,576-token prompt takes
//! a few tens of milliseconds (see `benches/prompt.rs`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

/// The range of characters per token believed (real tokenizers give about 2 to 6 for
/// English prose).
pub const MIN_CHARS_PER_TOKEN: f64 = 1.0;
/// See [`MIN_CHARS_PER_TOKEN`].
pub const MAX_CHARS_PER_TOKEN: f64 = 12.0;

/// Builds prompts of a target token count.
#[derive(Clone, Debug)]
pub struct PromptBuilder {
    chars_per_token: f64,
}

/// A text placed at a depth of the prompt: 0.0 at the start, 1.0 at the end.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Placed {
    /// Where, as a fraction of the filler.
    pub depth: f64,
    /// What.
    pub text: String,
}

/// What a prompt's filler is drawn from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filler {
    /// Varies the prose from prompt to prompt.
    pub seed: u64,
    /// The names of the tenant whose prose it is, two in every sentence; none for
    /// prose that is nobody's (a text several tenants send).
    pub marks: Vec<String>,
}

impl Filler {
    /// Unmarked prose.
    pub fn plain(seed: u64) -> Filler {
        Filler {
            seed,
            marks: Vec::new(),
        }
    }
}

impl Default for PromptBuilder {
    fn default() -> Self {
        PromptBuilder { chars_per_token: 4.0 }
    }
}

impl PromptBuilder {
    /// The ratio it uses now.
    pub fn chars_per_token(&self) -> f64 {
        self.chars_per_token
    }

    /// Learns the ratio from a prompt of `chars` characters counted as `tokens` tokens.
    /// Returns `false`, and keeps the ratio it had, when the count is implausible (a
    /// 1-token placeholder, a constant).
    pub fn learn(&mut self, chars: usize, tokens: u64) -> bool {
        if tokens == 0 {
            return false;
        }
        let ratio = chars as f64 / tokens as f64;
        let plausible = (MIN_CHARS_PER_TOKEN..=MAX_CHARS_PER_TOKEN).contains(&ratio);
        if plausible {
            self.chars_per_token = ratio;
        }
        plausible
    }

    /// Characters for about `tokens` tokens.
    pub fn chars_for(&self, tokens: u64) -> usize {
        (tokens as f64 * self.chars_per_token) as usize
    }

    /// Tokens estimated for `chars` characters.
    pub fn tokens_for(&self, chars: usize) -> u64 {
        (chars as f64 / self.chars_per_token).round() as u64
    }

    /// A prompt of about `tokens` tokens: `head`, then filler with each of `placed` at
    /// its depth (on a sentence boundary), then `tail`; the filler drawn from `filler`.
    ///
    /// A long prompt's generator inputs are remembered ([`remember`]), so that the
    /// transcript can record it by reference ([`crate::recipe`]).
    pub fn build(&self, tokens: u64, filler: &Filler, head: &str, placed: &[Placed], tail: &str) -> String {
        let chars = self.chars_for(tokens);
        let text = write(chars, filler, head, placed, tail);
        if text.len() >= MIN_CHARS {
            remember(
                &text,
                Recipe {
                    chars,
                    seed: filler.seed,
                    marks: filler.marks.clone(),
                    head: head.to_owned(),
                    placed: placed.to_vec(),
                    tail: tail.to_owned(),
                },
            );
        }
        text
    }
}

/// [`PromptBuilder::build`]'s text of about `total` characters, not remembered: the
/// generator itself, which a [`Recipe`] runs again.
pub(crate) fn write(total: usize, filler: &Filler, head: &str, placed: &[Placed], tail: &str) -> String {
    let fixed = head.len() + tail.len() + placed.iter().map(|p| p.text.len() + 2).sum::<usize>();
    let room = total.saturating_sub(fixed);
    let mut order: Vec<&Placed> = placed.iter().collect();
    order.sort_by(|a, b| a.depth.total_cmp(&b.depth));
    let mut out = String::with_capacity(total.max(fixed) + 128);
    out.push_str(head);
    let mut prose = Prose::new(filler);
    let start = out.len();
    for p in order {
        let at = start + (p.depth.clamp(0.0, 1.0) * room as f64) as usize;
        while out.len() < at {
            prose.sentence(&mut out);
        }
        out.push_str(&p.text);
        out.push(' ');
    }
    let end = start + room + fixed - head.len() - tail.len();
    while out.len() < end {
        prose.sentence(&mut out);
    }
    out.push_str(tail);
    out
}

/// English sentences from patterns, driven by splitmix64.
struct Prose<'a> {
    state: u64,
    marks: &'a [String],
}

impl<'a> Prose<'a> {
    fn new(filler: &'a Filler) -> Self {
        Prose {
            state: filler.seed,
            marks: &filler.marks,
        }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn pick<'l>(&mut self, list: &[&'l str]) -> &'l str {
        list[(self.next() % list.len() as u64) as usize]
    }

    fn sentence(&mut self, out: &mut String) {
        let subject = self.pick(SUBJECTS);
        let verb = self.pick(VERBS);
        let object = self.pick(OBJECTS);
        let tail = self.pick(ADVERBIALS);
        out.push_str(subject);
        out.push(' ');
        if !self.marks.is_empty() {
            // Two distinct names: one where the subject works, one who reported it.
            let first = (self.next() % self.marks.len() as u64) as usize;
            let step = 1 + (self.next() % (self.marks.len() as u64 - 1).max(1)) as usize;
            let second = (first + step) % self.marks.len();
            let place = self.pick(PLACES);
            out.push_str(place);
            out.push(' ');
            out.push_str(&self.marks[first]);
            out.push(' ');
            let (before, after) = self.pick(REPORTED).split_once('@').expect("one @");
            out.push_str(verb);
            out.push(' ');
            out.push_str(object);
            out.push(' ');
            out.push_str(tail);
            out.push_str(before);
            out.push_str(&self.marks[second]);
            out.push_str(after);
            out.push_str(". ");
            return;
        }
        out.push_str(verb);
        out.push(' ');
        out.push_str(object);
        out.push(' ');
        out.push_str(tail);
        out.push_str(". ");
    }
}

/// The words every tenant's filler shares: the sentence patterns, without the names
/// that mark a tenant's prose. A stretch of them alone is nobody's
/// ([`crate::provenance`]).
pub fn shared_wording() -> impl Iterator<Item = &'static str> {
    [PLACES, REPORTED, SUBJECTS, VERBS, OBJECTS, ADVERBIALS]
        .into_iter()
        .flatten()
        .copied()
}

/// How a marked sentence says where its subject is.
const PLACES: &[&str] = &["at", "in", "of", "from"];

/// How a marked sentence names who reported it (`@` stands for the name).
const REPORTED: &[&str] = &[
    ", as @ noted",
    ", according to @",
    ", @ said",
    " with help from @",
    " for @",
];

const SUBJECTS: &[&str] = &[
    "The committee",
    "Our supplier",
    "The night shift",
    "A new intern",
    "The regional office",
    "The auditor",
    "My neighbour",
    "The warehouse team",
    "The finance group",
    "A visiting engineer",
    "The support desk",
    "The harbour master",
    "The school board",
    "Their landlord",
    "The project lead",
    "The bakery on the corner",
    "The city council",
    "A delivery driver",
    "The research group",
    "The tenants' association",
    "The museum curator",
    "Our accountant",
    "The maintenance crew",
    "The library",
];

const VERBS: &[&str] = &[
    "reviewed",
    "postponed",
    "approved",
    "reorganised",
    "questioned",
    "delivered",
    "painted",
    "measured",
    "repaired",
    "announced",
    "cancelled",
    "rescheduled",
    "catalogued",
    "inspected",
    "ordered",
    "shipped",
    "summarised",
    "archived",
    "translated",
    "priced",
    "photographed",
    "collected",
    "sorted",
    "discussed",
];

const OBJECTS: &[&str] = &[
    "the quarterly budget",
    "the garden benches",
    "a shipment of lamps",
    "the old timetable",
    "the spring catalogue",
    "the insurance forms",
    "the bicycle racks",
    "the parking permits",
    "a stack of invoices",
    "the winter menu",
    "the river survey",
    "the meeting notes",
    "the safety manual",
    "a crate of oranges",
    "the rental agreement",
    "the staff rota",
    "the exhibition labels",
    "the boiler",
    "the ferry tickets",
    "the school trip",
    "the new signage",
    "the loading dock",
    "the visitor book",
    "the tram schedule",
];

const ADVERBIALS: &[&str] = &[
    "before the long weekend",
    "after a short delay",
    "on Tuesday morning",
    "without much fuss",
    "at the end of the month",
    "despite the rain",
    "for the third time this year",
    "in the east wing",
    "ahead of the inspection",
    "with some reluctance",
    "by the old station",
    "during the lunch break",
    "as the season changed",
    "once the paperwork arrived",
    "near the main entrance",
    "under a tight deadline",
    "over the holidays",
    "in good time",
    "at the request of the board",
    "while the lift was out of order",
    "on the second floor",
    "before anyone noticed",
    "after the storm passed",
    "in the usual way",
];

// What the builder remembers of its long prompts: each one's recipe, by the digest
// of its text, so that the transcript can record it by reference
// ([`crate::recipe`]).

/// Prompts at least this long (in bytes) are recorded by reference.
pub const MIN_CHARS: usize = 8 * 1024;

/// Recipes remembered at most; the oldest are forgotten first. A prompt is recorded
/// right after it is built, so a few hundred is far more than any case holds at once.
const BOOK_SIZE: usize = 1024;

/// A generated prompt's inputs: [`PromptBuilder::build`] with them
/// writes the same text again.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// The length aimed for, in characters (the token target times the ratio the
    /// builder had learnt).
    pub chars: usize,
    /// The filler's seed.
    pub seed: u64,
    /// The names that mark the filler as one tenant's; none for unmarked prose.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<String>,
    /// The text before the filler.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub head: String,
    /// Texts placed at depths of the filler.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placed: Vec<Placed>,
    /// The text after the filler.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tail: String,
}

impl Recipe {
    /// The text these inputs generate.
    pub fn text(&self) -> String {
        let filler = Filler {
            seed: self.seed,
            marks: self.marks.clone(),
        };
        write(self.chars, &filler, &self.head, &self.placed, &self.tail)
    }
}

struct Book {
    /// Each recipe and the length of its text, by the text's digest.
    by_digest: BTreeMap<String, (Recipe, usize)>,
    order: VecDeque<String>,
}

static BOOK: Mutex<Book> = Mutex::new(Book {
    by_digest: BTreeMap::new(),
    order: VecDeque::new(),
});

/// Remembers that `recipe` generates `text`.
pub fn remember(text: &str, recipe: Recipe) {
    let digest = crate::sha256_hex(text.as_bytes());
    let mut book = BOOK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if book.by_digest.insert(digest.clone(), (recipe, text.len())).is_none() {
        book.order.push_back(digest);
        while book.order.len() > BOOK_SIZE {
            if let Some(old) = book.order.pop_front() {
                book.by_digest.remove(&old);
            }
        }
    }
}

/// The recipe of `text`, or of all of it but the last `max_after` bytes at most, where
/// the builder remembers one; with the length of the text it generates.
pub fn recall(text: &str, max_after: usize) -> Option<(Recipe, usize)> {
    let book = BOOK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let whole = book
        .by_digest
        .get(&crate::sha256_hex(text.as_bytes()))
        .map(|(recipe, _)| (recipe.clone(), text.len()));
    whole.or_else(|| {
        // The lengths of known texts that could open this one, longest first.
        let mut lengths: Vec<usize> = book
            .by_digest
            .values()
            .map(|&(_, len)| len)
            .filter(|&len| len < text.len() && text.len() - len <= max_after && text.is_char_boundary(len))
            .collect();
        lengths.sort_unstable_by(|a, b| b.cmp(a));
        lengths.dedup();
        lengths.into_iter().find_map(|len| {
            let (recipe, _) = book.by_digest.get(&crate::sha256_hex(&text.as_bytes()[..len]))?;
            Some((recipe.clone(), len))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_200_characters_of_marked_filler_hold_two_of_its_names() {
        for seed in 0..20u8 {
            let marks = crate::canary::RunSecret::derive(&[seed; 32], b"").marks("a").words;
            let filler = Filler {
                seed: u64::from(seed),
                marks: marks.clone(),
            };
            let text = PromptBuilder::default().build(3_000, &filler, "", &[], "");
            let mut at: Vec<(usize, usize)> = marks
                .iter()
                .flat_map(|m| text.match_indices(m.as_str()).map(|(i, w)| (i, i + w.len())))
                .collect();
            at.sort();
            for start in (0..text.len().saturating_sub(200)).step_by(7) {
                let whole = at.iter().filter(|&&(s, e)| s >= start && e <= start + 200).count();
                assert!(whole >= 2, "seed {seed}: {:?}", &text[start..start + 200]);
            }
        }
    }

    #[test]
    fn reaches_the_target_and_places_texts_in_order_at_their_depths() {
        let b = PromptBuilder::default();
        let placed = vec![
            Placed {
                depth: 0.5,
                text: "NEEDLE-MIDDLE".into(),
            },
            Placed {
                depth: 0.0,
                text: "NEEDLE-START".into(),
            },
            Placed {
                depth: 1.0,
                text: "NEEDLE-END".into(),
            },
        ];
        let p = b.build(10_000, &Filler::plain(7), "HEAD ", &placed, " TAIL");
        let chars = b.chars_for(10_000) as f64;
        assert!((p.len() as f64 - chars).abs() / chars < 0.01, "{} vs {chars}", p.len());
        assert!(p.starts_with("HEAD NEEDLE-START") && p.ends_with(" TAIL"));
        let (s, m, e) = (
            p.find("NEEDLE-START").unwrap(),
            p.find("NEEDLE-MIDDLE").unwrap(),
            p.find("NEEDLE-END").unwrap(),
        );
        assert!(s < m && m < e);
        let depth = m as f64 / p.len() as f64;
        assert!((0.45..0.55).contains(&depth), "{depth}");
    }

    #[test]
    fn filler_is_varied_prose_that_depends_on_the_seed() {
        let b = PromptBuilder::default();
        let a = b.build(2_000, &Filler::plain(1), "", &[], "");
        let words: std::collections::BTreeSet<&str> = a.split_whitespace().collect();
        assert!(words.len() > 100, "{} distinct words", words.len());
        assert_ne!(a, b.build(2_000, &Filler::plain(2), "", &[], ""));
        assert_eq!(a, b.build(2_000, &Filler::plain(1), "", &[], ""));
    }

    #[test]
    fn learning_keeps_the_ratio_plausible() {
        let mut b = PromptBuilder::default();
        assert!(b.learn(4_500, 1_000));
        assert!((b.chars_per_token() - 4.5).abs() < 1e-9);
        assert!(
            !b.learn(1_000_000, 1),
            "a 1-token usage for a long prompt is implausible"
        );
        assert!((b.chars_per_token() - 4.5).abs() < 1e-9, "and does not move the ratio");
        assert!(!b.learn(10, 0));
    }
}
