//! [`PromptBuilder`]: prompts of a target token count for a tokenizer the suite does not
//! know, with texts (needles, canary records) placed at chosen depths in natural filler.
//!
//! Lengths are set in characters from a characters-per-token ratio learnt from the
//! vendor: [`PromptBuilder::learn`] takes a prompt's length and the vendor's
//! `usage.prompt_tokens` for it (or a local tokenizer's count, where the profile names
//! one), keeping the ratio within what real tokenizers give, so that a vendor that
//! misreports usage cannot blow prompts up.
//!
//! The filler is English prose drawn from sentence templates by a PRNG seeded per
//! prompt (no fixed marker a vendor could filter, no single repeated word). Every
//! sentence names two people, and no six words in a row go without a name
//! ([`MAX_UNNAMED`]): a vendor that learns the phrases of earlier runs meets none of
//! them again. A tenant's filler is *marked* ([`Filler`]): its names are the tenant's
//! invented names ([`crate::canary::Marks`]), drawn per run, so any 200 characters of it
//! hold at least two, and a stretch of it returned to another tenant is recognised as
//! that tenant's prose; unmarked prose names people drawn per prompt. A prompt is
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

/// English sentences from templates, driven by splitmix64.
///
/// Every sentence names two people: the tenant's invented names
/// ([`crate::canary::Marks`]) where the filler is a tenant's, else names drawn for the
/// prompt from [`PLAIN_FIRST`] and [`PLAIN_SECOND`]. The templates are built so that
/// no more than [`MAX_UNNAMED`] words ever stand between two names, across sentences
/// too: every six words of the filler hold a name. A vendor that learns phrases from
/// earlier runs therefore learns none it meets again (a tenant's names are drawn per
/// run, a plain prompt's per prompt), and a stretch of a tenant's prose returned to
/// another holds the owner's names.
struct Prose<'a> {
    state: u64,
    marks: &'a [String],
    /// The names of unmarked prose, drawn for this prompt.
    plain: Vec<String>,
}

/// The most words the filler puts between two names (counted as a
/// vendor splits words: at every character that is not a letter or a digit).
pub const MAX_UNNAMED: usize = 5;

/// Names of unmarked prose drawn for one prompt.
const PLAIN_NAMES: usize = 24;

impl<'a> Prose<'a> {
    fn new(filler: &'a Filler) -> Self {
        let mut prose = Prose {
            state: filler.seed,
            marks: &filler.marks,
            plain: Vec::new(),
        };
        if filler.marks.is_empty() {
            while prose.plain.len() < PLAIN_NAMES {
                let name = plain_name(|| prose.next());
                if !prose.plain.contains(&name) {
                    prose.plain.push(name);
                }
            }
        }
        prose
    }

    fn next(&mut self) -> u64 {
        splitmix(&mut self.state)
    }

    fn pick<'l>(&mut self, list: &[&'l str]) -> &'l str {
        list[(self.next() % list.len() as u64) as usize]
    }

    /// Two distinct names.
    fn names(&mut self) -> (String, String) {
        let len = if self.marks.is_empty() {
            self.plain.len()
        } else {
            self.marks.len()
        } as u64;
        let first = (self.next() % len) as usize;
        let step = 1 + (self.next() % (len - 1).max(1)) as usize;
        let second = (first + step) % len as usize;
        let names: &[String] = if self.marks.is_empty() { &self.plain } else { self.marks };
        (names[first].clone(), names[second].clone())
    }

    /// What a template's slot stands for.
    fn slot(&mut self, slot: char, out: &mut String) {
        match slot {
            'V' => out.push_str(self.pick(VERBS)),
            'O' => {
                out.push_str(self.pick(DETERMINERS));
                out.push(' ');
                out.push_str(self.pick(NOUNS));
            }
            'P' => {
                out.push_str(self.pick(QUANTITIES));
                out.push(' ');
                out.push_str(self.pick(PLURALS));
            }
            'W' => out.push_str(self.pick(WHEN)),
            'G' => out.push_str(self.pick(GROUPS)),
            'R' => out.push_str(self.pick(REPORTING)),
            other => unreachable!("a template slot {other}"),
        }
    }

    fn sentence(&mut self, out: &mut String) {
        let template = self.pick(TEMPLATES);
        let (first, second) = self.names();
        let mut names = [first, second].into_iter();
        let mut chars = template.chars().peekable();
        let mut at_start = true;
        while let Some(c) = chars.next() {
            if c == '{' {
                let slot = chars.next().expect("a slot");
                assert_eq!(chars.next(), Some('}'), "a slot is one letter");
                let start = out.len();
                if slot == 'N' {
                    out.push_str(&names.next().expect("two names a template"));
                } else {
                    self.slot(slot, out);
                }
                if at_start {
                    // A sentence opens with a capital.
                    let first = out[start..].chars().next().map(|c| c.to_ascii_uppercase());
                    if let Some(upper) = first {
                        out.replace_range(start..start + 1, &upper.to_string());
                    }
                }
            } else {
                out.push(c);
            }
            at_start = false;
        }
        out.push(' ');
    }
}

/// The words every filler shares: the templates and the lists their slots are drawn
/// from, without the names. A stretch of them alone is nobody's
/// ([`crate::provenance`]).
pub fn shared_wording() -> impl Iterator<Item = &'static str> {
    [
        TEMPLATES,
        VERBS,
        DETERMINERS,
        NOUNS,
        QUANTITIES,
        PLURALS,
        WHEN,
        GROUPS,
        REPORTING,
    ]
    .into_iter()
    .flatten()
    .copied()
}

/// The sentences: `{N}` a name (two each), `{V}` a verb in the past, `{O}` a
/// determiner and a noun, `{P}` a quantity and a plural, `{W}` when (at most two
/// words), `{G}` a group, `{R}` a verb of saying. No template puts more than
/// [`MAX_UNNAMED`] words between its names, more than three after its second or more
/// than two before its first, so that none stand more than five apart across
/// sentences either (a test holds every template to it).
const TEMPLATES: &[&str] = &[
    "{N} {V} {O} for {N} {W}.",
    "{W}, {N} {V} {N} {O}.",
    "{N} and {N} {V} {P}.",
    "{N}'s {G} {V} {O}, {N} {R}.",
    "At {N}, {N} {V} {O}.",
    "{N} {R} that {N} {V} {O}.",
    "{N} {V} {O} with {N}.",
    "{N} asked {N} about {O}.",
    "{W} {N} {V} {P} from {N}.",
    "{N} {V} {O} before {N} {R}.",
    "According to {N}, {N} {V} {O}.",
    "{N} {V} {P} and told {N}.",
    "{N} {V} {O} near {N} {W}.",
    "Then {N} {V} {N} {P}.",
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
    "signed",
    "checked",
    "returned",
    "moved",
    "stored",
    "counted",
    "labelled",
    "cleaned",
    "replaced",
    "tested",
    "booked",
    "printed",
    "packed",
    "copied",
    "drafted",
    "filed",
    "posted",
    "mended",
    "weighed",
    "tidied",
    "unloaded",
    "scanned",
    "renewed",
    "audited",
    "updated",
    "borrowed",
    "lent",
    "sold",
    "bought",
    "found",
    "lost",
    "opened",
    "closed",
    "locked",
    "varnished",
    "rebuilt",
    "planned",
    "costed",
    "wrapped",
    "fetched",
];

const DETERMINERS: &[&str] = &[
    "the", "a", "our", "their", "his", "her", "one", "that", "this", "every", "another", "each",
];

const NOUNS: &[&str] = &[
    "budget",
    "bench",
    "lamp",
    "timetable",
    "catalogue",
    "form",
    "rack",
    "permit",
    "invoice",
    "menu",
    "survey",
    "manual",
    "crate",
    "agreement",
    "rota",
    "label",
    "boiler",
    "ticket",
    "trip",
    "sign",
    "dock",
    "ledger",
    "schedule",
    "report",
    "contract",
    "parcel",
    "pallet",
    "printer",
    "van",
    "ladder",
    "kettle",
    "fridge",
    "projector",
    "laptop",
    "desk",
    "chair",
    "cabinet",
    "window",
    "door",
    "roof",
    "fence",
    "gate",
    "shed",
    "garden",
    "hedge",
    "pond",
    "bridge",
    "road",
    "map",
    "plan",
    "drawing",
    "photo",
    "poster",
    "banner",
    "letter",
    "memo",
    "minute",
    "agenda",
    "proposal",
    "quote",
    "order",
    "receipt",
    "statement",
    "claim",
    "licence",
    "key",
    "badge",
    "uniform",
    "toolbox",
    "drill",
    "heater",
    "radiator",
    "pump",
    "valve",
    "meter",
    "clock",
    "bell",
    "piano",
    "stage",
    "tent",
    "trailer",
    "boat",
    "mooring",
    "bicycle",
    "scooter",
    "bus",
];

const QUANTITIES: &[&str] = &[
    "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "twenty", "thirty",
    "forty", "fifty", "several", "some", "many", "few",
];

const PLURALS: &[&str] = &[
    "boxes",
    "lamps",
    "chairs",
    "invoices",
    "oranges",
    "tickets",
    "forms",
    "benches",
    "crates",
    "keys",
    "folders",
    "parcels",
    "pallets",
    "posters",
    "letters",
    "samples",
    "tiles",
    "bricks",
    "planks",
    "cables",
    "batteries",
    "bulbs",
    "tables",
    "curtains",
    "blankets",
    "plates",
    "cups",
    "kettles",
    "maps",
    "books",
    "files",
    "receipts",
    "badges",
    "uniforms",
    "tools",
    "ladders",
    "buckets",
    "brushes",
    "tins",
    "sacks",
    "bottles",
    "jars",
    "trays",
    "baskets",
    "pots",
    "seeds",
    "plants",
    "trees",
    "fences",
    "gates",
];

const WHEN: &[&str] = &[
    "on Monday",
    "on Tuesday",
    "on Wednesday",
    "on Thursday",
    "on Friday",
    "on Saturday",
    "on Sunday",
    "last week",
    "last month",
    "last year",
    "this morning",
    "this evening",
    "before noon",
    "after lunch",
    "at dawn",
    "at dusk",
    "by Friday",
    "next month",
    "in spring",
    "in summer",
    "in autumn",
    "in winter",
    "in January",
    "in March",
    "in May",
    "in July",
    "in September",
    "in November",
    "yesterday",
    "today",
    "overnight",
    "again",
    "twice",
    "early",
    "late",
    "recently",
    "eventually",
    "quickly",
    "carefully",
    "quietly",
];

const GROUPS: &[&str] = &[
    "team",
    "office",
    "crew",
    "desk",
    "group",
    "studio",
    "shop",
    "family",
    "kitchen",
    "workshop",
    "company",
    "clinic",
    "school",
    "farm",
    "library",
    "garage",
    "bakery",
    "choir",
    "council",
    "committee",
    "landlord",
    "accountant",
    "neighbour",
    "supplier",
    "auditor",
    "driver",
    "curator",
    "tenant",
    "intern",
    "engineer",
];

const REPORTING: &[&str] = &[
    "noted",
    "said",
    "confirmed",
    "reported",
    "explained",
    "agreed",
    "mentioned",
    "recalled",
    "insisted",
    "complained",
    "wrote",
    "suggested",
    "claimed",
    "admitted",
    "warned",
    "added",
];

/// The next number of the splitmix64 sequence at `state`: what the filler and the
/// wordings ([`crate::wording`]) draw from.
pub(crate) fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A name of unmarked prose (a surname or a place: `Harwick`) drawn by `draw`.
pub(crate) fn plain_name(mut draw: impl FnMut() -> u64) -> String {
    let first = PLAIN_FIRST[(draw() % PLAIN_FIRST.len() as u64) as usize];
    let second = PLAIN_SECOND[(draw() % PLAIN_SECOND.len() as u64) as usize];
    format!("{first}{second}")
}

/// The first halves of the names of unmarked prose (none of them a syllable of a
/// tenant's invented names, so that no such name is ever a mark).
const PLAIN_FIRST: &[&str] = &[
    "Ab", "Ash", "Bel", "Brook", "Cal", "Carr", "Dun", "Dal", "El", "Fair", "Glen", "Grey", "Har", "Hazel", "Ing",
    "Ivy", "Kel", "Kings", "Lin", "Long", "Mor", "Mill", "Nor", "New", "Ost", "Oak", "Pen", "Pine", "Ros", "Red",
    "Stan", "Thorn",
];

/// The second halves of those names.
const PLAIN_SECOND: &[&str] = &[
    "ford", "ley", "wick", "by", "ton", "more", "ham", "dale", "stead", "well", "mouth", "bury", "field", "cliffe",
    "worth", "gate", "wood", "brook", "hill", "combe", "shaw", "thorpe", "hurst", "den", "holt", "mere", "croft",
    "lands", "ridge", "bourne", "wyn", "ock",
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

    /// Whether `word` is a name of unmarked prose.
    fn plain_name(word: &str) -> bool {
        PLAIN_FIRST
            .iter()
            .any(|f| word.strip_prefix(f).is_some_and(|rest| PLAIN_SECOND.contains(&rest)))
    }

    #[test]
    fn no_six_words_of_filler_go_without_a_name() {
        // As a vendor learning phrases splits words: at anything but a letter or a digit.
        for seed in 0..40u8 {
            let marks = crate::canary::RunSecret::derive(&[seed; 32], b"").marks("a").words;
            for filler in [
                Filler {
                    seed: u64::from(seed),
                    marks: marks.clone(),
                },
                Filler::plain(u64::from(seed)),
            ] {
                let text = PromptBuilder::default().build(4_000, &filler, "", &[], "");
                let mut unnamed = 0;
                let mut names = 0;
                for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
                    if marks.iter().any(|m| m == word) || plain_name(word) {
                        names += 1;
                        unnamed = 0;
                    } else {
                        unnamed += 1;
                        assert!(
                            unnamed <= MAX_UNNAMED,
                            "seed {seed}: {word:?} is the sixth word in a row without a name in {text:?}"
                        );
                    }
                }
                assert!(names > 400, "{names} names");
            }
        }
    }

    #[test]
    fn every_template_holds_two_names_and_keeps_to_the_limits() {
        // Words each slot writes at most.
        let width = |slot: &str| match slot {
            "{O}" | "{P}" | "{W}" => 2,
            _ => 1,
        };
        for t in TEMPLATES {
            let mut runs = vec![0usize];
            for token in t.split(|c: char| c.is_whitespace() || c == ',' || c == '.' || c == '\'') {
                match token {
                    "" => {}
                    "{N}" => runs.push(0),
                    slot if slot.starts_with('{') => *runs.last_mut().unwrap() += width(slot),
                    _ => *runs.last_mut().unwrap() += 1,
                }
            }
            assert_eq!(runs.len(), 3, "two names: {t}");
            assert!(runs[0] <= 2 && runs[1] <= MAX_UNNAMED && runs[2] <= 3, "{t}: {runs:?}");
        }
        for list in [WHEN, VERBS, NOUNS, PLURALS, QUANTITIES, DETERMINERS, GROUPS, REPORTING] {
            for entry in list {
                let words = entry
                    .split(|c: char| !c.is_alphanumeric())
                    .filter(|w| !w.is_empty())
                    .count();
                let most = if std::ptr::eq(list, WHEN) { 2 } else { 1 };
                assert!(words <= most, "{entry:?}");
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for first in PLAIN_FIRST {
            for second in PLAIN_SECOND {
                assert!(!crate::canary::mark_shaped(&format!("{first}{second}").to_lowercase()));
                names.insert(format!("{first}{second}"));
            }
        }
        assert_eq!(
            names.len() as u64,
            crate::wording::NAMES,
            "the names a wording draws from, all distinct"
        );
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
