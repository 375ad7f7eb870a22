//! [`Sighting`]: a canary's holder recognised by name beside what survives of the
//! holder's record, and the chance that both stand there by coincidence.
//!
//! A record rarely comes back as it was sent. A gateway's template re-sets it
//! (`PARK, Thea | acct ****2788 | gmail.com`: the family name first in capitals, the
//! account cut to its last four digits, the e-mail to its domain); a model that garbles
//! numbers keeps the names and the note. What is left is the holder's two names, in
//! any case and either order (or the family name and the given name's initial), and
//! fragments of the record: a block of four digits of the account standing alone, the
//! e-mail's five digits, its domain, the note's words.
//!
//! A name is only as good as its rarity. Names repeat: a run issues hundreds of
//! canaries from 64 given and 64 family names, and a busy vendor's other customers
//! bear common names too. So a sighting states the chance that a record written
//! without the holder's (a stranger's, drawn from the same pools, or a model's
//! invention) would hold as much of it there:
//!
//! - the names: `k / (64 × 64)` for `k` distinct name pairs among the owner's
//!   canaries (any of them would have been taken), the given name counting as all the
//!   given names with its initial where only the initial stands;
//! - each account block found: `3 n₄ / 10⁴` for `n₄` runs of four digits in reach;
//!   the e-mail's digits: `n₅ / 10⁵`; the domain: 1 in 16; each of the note's
//!   adjective, goods and city: 1 in 64;
//!
//! the product of those found. A sighting with no fragment of the record is none (a
//! name alone is never evidence). The records of one owner sighted in one answer (a
//! CRM export of several) are independent draws for a stranger, so their chances
//! multiply: they attribute together when the product is at most [`MAX_CHANCE`], and
//! each then states that product; otherwise they stay "outside the run"
//! ([`attributed`]).

use crate::canary::Canary;

/// A sighting attributes a record to its holder only when its chance is at most this:
/// with a few hundred names sighted in a run, about one false attribution in ten
/// thousand runs.
pub const MAX_CHANCE: f64 = 1e-6;

/// How far, in bytes, the given name may stand from the family name (`Thea Park`,
/// `PARK, Thea`, `thea.park`, `Park, T.`).
const NAME_GAP: usize = 24;

/// How far, in bytes, before the first name and after the second a fragment of the
/// record is looked for: a record's line.
pub const REACH: usize = 160;

/// A holder sighted: which canary, where, what of its record stood by the name, and
/// how likely that was by coincidence.
#[derive(Clone, Debug, PartialEq)]
pub struct Sighting<'c> {
    /// The canary whose holder it is: of the owner's canaries that bear the name (a
    /// run issues many, and names repeat), the one with the most of its record found,
    /// the first by id among equals.
    pub canary: &'c Canary,
    /// Every canary of the owner's that bears the name, by id.
    pub candidates: Vec<&'c Canary>,
    /// The name and each fragment of the record found, as they came back.
    pub found: Vec<String>,
    /// The text from the first of them to the last.
    pub excerpt: String,
    /// Byte offsets of `excerpt` in the text.
    pub span: (usize, usize),
    /// At most this likely would a record written without the holder's hold what it
    /// holds ([the module](self)).
    pub chance: f64,
}

/// A word of the text: lower case, and its byte span.
#[derive(Clone, Debug)]
struct Word {
    text: String,
    start: usize,
    end: usize,
}

/// The runs of letters of `text` (lower case), and the runs of digits.
fn words(text: &str) -> (Vec<Word>, Vec<Word>) {
    let (mut letters, mut digits) = (Vec::new(), Vec::new());
    let mut run: Option<(usize, bool)> = None;
    let mut close = |start: usize, end: usize, digit: bool| {
        let w = Word {
            text: text[start..end].to_lowercase(),
            start,
            end,
        };
        if digit { digits.push(w) } else { letters.push(w) }
    };
    for (i, c) in text.char_indices().chain(std::iter::once((text.len(), ' '))) {
        let kind = if c.is_alphabetic() {
            Some(false)
        } else if c.is_ascii_digit() {
            Some(true)
        } else {
            None
        };
        match (run, kind) {
            (Some((_, d)), Some(k)) if d == k => {}
            (Some((start, d)), _) => {
                close(start, i, d);
                run = kind.map(|k| (i, k));
            }
            (None, Some(k)) => run = Some((i, k)),
            (None, None) => {}
        }
    }
    (letters, digits)
}

/// The parts of a canary's record a sighting looks for.
struct Parts {
    given: String,
    family: String,
    blocks: Vec<String>,
    email_digits: String,
    domain: String,
    note: Vec<String>,
}

impl Parts {
    fn of(c: &Canary) -> Option<Parts> {
        let (given, family) = c.name.split_once(' ')?;
        let (local, domain) = c.email.split_once('@')?;
        let email_digits: String = local.chars().filter(char::is_ascii_digit).collect();
        // "prefers ADJECTIVE GOODS delivered to CITY"
        let note = c.note.strip_prefix("prefers ")?;
        let (things, city) = note.split_once(" delivered to ")?;
        let (adjective, goods) = things.rsplit_once(' ')?;
        Some(Parts {
            given: given.to_lowercase(),
            family: family.to_lowercase(),
            blocks: c.account.split(' ').map(str::to_owned).collect(),
            email_digits,
            domain: domain.to_lowercase(),
            note: [adjective, goods, city].map(str::to_lowercase).to_vec(),
        })
    }
}

/// Where `phrase` (its runs of letters, in order) stands among `words` within
/// `from..to`, as the span of its first and last word.
fn stands(words: &[Word], phrase: &str, from: usize, to: usize) -> Option<(usize, usize)> {
    let (parts, _) = self::words(phrase);
    let parts: Vec<&str> = parts.iter().map(|w| w.text.as_str()).collect();
    if parts.is_empty() {
        return None;
    }
    words
        .windows(parts.len())
        .filter(|w| w[0].start >= from && w[w.len() - 1].end <= to)
        .find(|w| w.iter().zip(&parts).all(|(a, b)| a.text == *b))
        .map(|w| (w[0].start, w[w.len() - 1].end))
}

/// The holders of other tenants' canaries sighted in `text`, an answer to `recipient`,
/// that attribute ([`attributed`]), in the order they stand; of `canaries` (every
/// canary of the run the judge knows). A name counts only where no canary of the
/// recipient's bears it (its own record, garbled) and every canary that bears it is
/// one tenant's.
pub fn sightings<'c>(canaries: &'c [Canary], recipient: &str, text: &str) -> Vec<Sighting<'c>> {
    sightings_within(canaries, recipient, text, 0, text.len())
}

/// As [`sightings`], the names standing within the bytes `from..to` of `text` (the
/// fragments within [`REACH`] of them).
pub fn sightings_within<'c>(
    canaries: &'c [Canary],
    recipient: &str,
    text: &str,
    from: usize,
    to: usize,
) -> Vec<Sighting<'c>> {
    let mut holders = Holders::default();
    for c in canaries {
        holders.add(c.clone());
    }
    attributed(holders.sightings_within(recipient, text, from, to), &holders)
        .into_iter()
        .map(|s| Sighting {
            canary: &canaries[s.index],
            candidates: s.candidates.iter().map(|&i| &canaries[i]).collect(),
            found: s.found,
            excerpt: s.excerpt,
            span: s.span,
            chance: s.chance,
        })
        .collect()
}

/// Of `sightings` (one answer's, by [`Holders::sightings_within`]), those that
/// attribute: each owner's together when the product of their chances is at most
/// [`MAX_CHANCE`], each then stating that product. In the order they stand.
pub fn attributed(sightings: Vec<Indexed>, holders: &Holders) -> Vec<Indexed> {
    let mut joint: std::collections::HashMap<&str, f64> = std::collections::HashMap::new();
    for s in &sightings {
        *joint.entry(holders.canary(s.index).owner.as_str()).or_insert(1.0) *= s.chance;
    }
    let joint: std::collections::HashMap<String, f64> = joint.into_iter().map(|(o, c)| (o.to_owned(), c)).collect();
    sightings
        .into_iter()
        .filter_map(|mut s| {
            let chance = joint[&holders.canary(s.index).owner];
            (chance <= MAX_CHANCE).then(|| {
                s.chance = chance;
                s
            })
        })
        .collect()
}

/// The canaries a judge knows, indexed by their holders' family names: what
/// [`Holders::sightings_within`] looks through, grown one canary at a time.
#[derive(Default)]
pub struct Holders {
    canaries: Vec<Canary>,
    parts: Vec<Parts>,
    by_family: std::collections::HashMap<String, Vec<usize>>,
    /// Each owner's distinct name pairs.
    pairs: std::collections::HashMap<String, std::collections::HashSet<(String, String)>>,
}

/// A sighting by index into a [`Holders`]' canaries.
#[derive(Clone, Debug, PartialEq)]
pub struct Indexed {
    /// The canary's index.
    pub index: usize,
    /// Those of every canary of the owner's that bears the name, by id.
    pub candidates: Vec<usize>,
    /// As [`Sighting::found`].
    pub found: Vec<String>,
    /// As [`Sighting::excerpt`].
    pub excerpt: String,
    /// As [`Sighting::span`].
    pub span: (usize, usize),
    /// As [`Sighting::chance`].
    pub chance: f64,
}

impl Holders {
    /// Knows `canary` too (one whose record cannot be read is left out).
    pub fn add(&mut self, canary: Canary) {
        let Some(parts) = Parts::of(&canary) else {
            return;
        };
        let i = self.canaries.len();
        self.by_family.entry(parts.family.clone()).or_default().push(i);
        self.pairs
            .entry(canary.owner.clone())
            .or_default()
            .insert((parts.given.clone(), parts.family.clone()));
        self.canaries.push(canary);
        self.parts.push(parts);
    }

    /// The canaries it knows, by index.
    pub fn canary(&self, index: usize) -> &Canary {
        &self.canaries[index]
    }

    /// Whether it knows none.
    pub fn is_empty(&self) -> bool {
        self.canaries.is_empty()
    }

    /// Every holder of another tenant's canary sighted with its name within `from..to`
    /// of `text` (an answer to `recipient`) and some fragment of its record in reach,
    /// whatever its chance; [`attributed`] says which attribute.
    pub fn sightings_within(&self, recipient: &str, text: &str, from: usize, to: usize) -> Vec<Indexed> {
        let (letters, digits) = words(text);
        let no_pairs = std::collections::HashSet::new();
        let own = self.pairs.get(recipient).unwrap_or(&no_pairs);
        let name = |i: usize| (self.parts[i].given.as_str(), self.parts[i].family.as_str());
        let mut out: Vec<Indexed> = Vec::new();
        for (wi, w) in letters.iter().enumerate() {
            if w.start < from || w.end > to {
                continue;
            }
            let Some(bearers) = self.by_family.get(w.text.as_str()) else {
                continue;
            };
            // The given name, whole or as its initial, near the family name.
            let near: Vec<&Word> = letters[wi.saturating_sub(4)..(wi + 5).min(letters.len())]
                .iter()
                .filter(|o| o.start != w.start && o.start.abs_diff(w.start) <= NAME_GAP)
                .collect();
            let mut found: Vec<(usize, usize, Indexed)> = Vec::new();
            for &i in bearers {
                let (c, p) = (&self.canaries[i], &self.parts[i]);
                if c.owner == recipient || own.contains(&(p.given.clone(), p.family.clone())) {
                    continue;
                }
                let Some((given, whole)) = near.iter().find_map(|o| {
                    if o.text == p.given {
                        Some((*o, true))
                    } else if o.text.chars().count() == 1 && p.given.starts_with(o.text.as_str()) {
                        Some((*o, false))
                    } else {
                        None
                    }
                }) else {
                    continue;
                };
                let (name_start, name_end) = (w.start.min(given.start), w.end.max(given.end));
                let (lo, hi) = (name_start.saturating_sub(REACH), (name_end + REACH).min(text.len()));
                let in_reach = |x: &&Word| x.start >= lo && x.end <= hi;
                let runs = |n: usize| digits.iter().filter(in_reach).filter(|d| d.text.len() == n).count();
                let given_share = if whole {
                    1.0 / crate::canary::GIVEN_NAMES as f64
                } else {
                    crate::canary::given_with_initial(&p.given[..1]) as f64 / crate::canary::GIVEN_NAMES as f64
                };
                let k = self.pairs.get(c.owner.as_str()).map_or(1, |s| s.len()) as f64;
                let mut chance = k * given_share / crate::canary::FAMILY_NAMES as f64;
                let mut shown = vec![(name_start, name_end)];
                let (n4, n5) = (runs(4), runs(5));
                for block in &p.blocks {
                    if let Some(d) = digits.iter().filter(in_reach).find(|d| &d.text == block) {
                        chance *= (3.0 * n4 as f64 / 1e4).min(1.0);
                        shown.push((d.start, d.end));
                    }
                }
                if let Some(d) = digits.iter().filter(in_reach).find(|d| d.text == p.email_digits) {
                    chance *= (n5 as f64 / 1e5).min(1.0);
                    shown.push((d.start, d.end));
                }
                if let Some(span) = stands(&letters, &p.domain, lo, hi) {
                    chance /= crate::canary::DOMAIN_COUNT as f64;
                    shown.push(span);
                }
                for word in &p.note {
                    if let Some(span) = stands(&letters, word, lo, hi) {
                        chance /= crate::canary::NOTE_WORDS as f64;
                        shown.push(span);
                    }
                }
                if shown.len() < 2 {
                    continue;
                }
                let span = (
                    shown.iter().map(|s| s.0).min().unwrap_or(name_start),
                    shown.iter().map(|s| s.1).max().unwrap_or(name_end),
                );
                found.push((
                    i,
                    shown.len(),
                    Indexed {
                        index: i,
                        candidates: Vec::new(),
                        found: shown.iter().map(|&(a, b)| text[a..b].to_owned()).collect(),
                        excerpt: text[span.0..span.1].to_owned(),
                        span,
                        chance,
                    },
                ));
            }
            // Of the names sighted here, the one with the most of its record found;
            // every canary that bears it must be one tenant's, or it names nobody.
            found.sort_by(|x, y| {
                y.1.cmp(&x.1)
                    .then_with(|| self.canaries[x.0].id.cmp(&self.canaries[y.0].id))
            });
            let Some((first, _, mut best)) = found.into_iter().next() else {
                continue;
            };
            let owner = &self.canaries[first].owner;
            let bearing: Vec<usize> = bearers.iter().copied().filter(|&j| name(j) == name(first)).collect();
            if bearing.iter().any(|&j| self.canaries[j].owner != *owner) || out.iter().any(|o| o.index == first) {
                continue;
            }
            let mut candidates = bearing;
            candidates.sort_by(|&x, &y| self.canaries[x].id.cmp(&self.canaries[y].id));
            best.candidates = candidates;
            out.push(best);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canary::RunSecret;

    fn run() -> (Vec<Canary>, Vec<Canary>) {
        let secret = RunSecret::derive(&[3; 32], b"holder");
        let a = (0..40).map(|i| secret.canary("a", "holder", i)).collect();
        let b = (0..40).map(|i| secret.canary("b", "holder", i)).collect();
        (a, b)
    }

    #[test]
    fn a_record_re_set_by_a_template_is_its_holders_and_states_its_chance() {
        let (a, b) = run();
        let all: Vec<Canary> = a.iter().chain(&b).cloned().collect();
        let own: std::collections::HashSet<String> = a.iter().map(|c| c.name.clone()).collect();
        let c = b.iter().find(|c| !own.contains(&c.name)).expect("a name of b's alone");
        let (given, family) = c.name.split_once(' ').unwrap();
        let last4 = c.account.rsplit(' ').next().unwrap();
        let domain = c.email.split_once('@').unwrap().1;
        let forms = [
            format!("{}, {given} | acct ****{last4} | {domain}", family.to_uppercase()),
            format!(
                "{} {family}; account ending {last4}; mail at {}",
                given.to_lowercase(),
                domain.to_uppercase()
            ),
            format!("{family}, {}. (****{last4}) <{domain}>", &given[..1]),
        ];
        for text in &forms {
            let found = sightings(&all, "a", text);
            assert_eq!(found.len(), 1, "{text}: {found:?}");
            let s = &found[0];
            assert_eq!(s.canary.owner, "b", "{text}");
            assert!(s.candidates.iter().any(|x| x.id == c.id), "{text}");
            assert!(s.chance <= MAX_CHANCE && s.chance > 0.0, "{text}: {}", s.chance);
            assert!(s.found.iter().any(|f| f == last4), "{text}: {:?}", s.found);
        }
        // Two re-set records of b's in one answer, each with its last four digits and
        // domain: together rarer than either.
        let d = b
            .iter()
            .find(|x| !own.contains(&x.name) && x.name != c.name)
            .expect("another name of b's");
        let line = |x: &Canary| {
            let (g, f) = x.name.split_once(' ').unwrap();
            format!(
                "{}, {g} | acct ****{} | {}",
                f.to_uppercase(),
                x.account.rsplit(' ').next().unwrap(),
                x.email.split_once('@').unwrap().1
            )
        };
        let export = format!("{}\n{}", line(c), line(d));
        let found = sightings(&all, "a", &export);
        assert_eq!(found.len(), 2, "{export}: {found:?}");
        assert!(found[0].chance == found[1].chance && found[0].chance <= MAX_CHANCE);
        // The name alone, or with the domain alone (1 in 16): not rare enough.
        for text in [format!("{given} {family}"), format!("{given} {family}, {domain}")] {
            assert!(sightings(&all, "a", &text).is_empty(), "{text}");
        }
        // The recipient's own canaries are never sighted, nor names it bears too.
        assert!(sightings(&all, "b", &forms[0]).is_empty());
    }

    #[test]
    fn strangers_with_common_names_stay_outside_the_run() {
        // Records of people outside the run drawn from the canaries' own name pools
        // and domains, with numbers of their own: whatever names they share with the
        // run's holders, none is sighted.
        let (a, b) = run();
        let all: Vec<Canary> = a.iter().chain(&b).cloned().collect();
        let stranger = RunSecret::derive(&[9; 32], b"strangers");
        let names: std::collections::HashSet<&str> = b.iter().map(|c| c.name.as_str()).collect();
        let mut shared = 0;
        for i in 0..2_000 {
            let s = stranger.canary("x", "stranger", i);
            shared += usize::from(names.contains(s.name.as_str()));
            let text = format!(
                "Client: {}, email {}, account {}, balance due on renewal.",
                s.name, s.email, s.account
            );
            let found = sightings(&all, "a", &text);
            assert!(found.is_empty(), "{text}: {found:?}");
        }
        // Names alone would have named these: the test meets the case it is about.
        assert!(shared >= 5, "only {shared} strangers bore a name of b's");
    }
}
