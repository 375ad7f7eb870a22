//! [`LeakTransform`]: the forms a leak comes back in. A model decoding over another
//! request's KV, a crossed buffer or a gateway's bug rarely returns another customer's
//! text verbatim: it is cut at arbitrary offsets, words go missing or repeat, case and
//! spacing change, numbers are spelled out or regrouped, addresses are read aloud, and
//! the recipient's own words are mixed in. The reference vendor draws, per leak, from
//! these *families* (`tenantcheck sim --leak-transform random`), so that the suite is
//! tested against classes of leak, not against the one output a fault happens to make.
//!
//! Every draw is reproducible: its seed is the transform's seed mixed with the text it
//! transforms.

/// One kind of change a leak may undergo.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Family {
    /// A fragment of 6 to 60 words, cut at random character offsets (mid-word at both
    /// ends).
    Cut,
    /// Separators put inside numbers (`3391-0048` as `33-91 00,48`).
    Separators,
    /// Every digit spelled as a word (`48` as `four eight`).
    DigitWords,
    /// E-mail addresses read aloud (`a.b@c.de` as `a dot b at c dot de`).
    SpelledAddress,
    /// About one word in ten dropped.
    Drop,
    /// About one word in ten said twice.
    Repeat,
    /// Case changed, word by word or whole.
    Case,
    /// The recipient's own words put between pieces of 8 to 20 words.
    Interleave,
    /// Spaces turned into runs of spaces, tabs and line breaks.
    Whitespace,
    /// Every digit drawn anew and every e-mail address's local part turned around
    /// (`maria.keller48@posteo.de` as `keller.maria93@posteo.de`): a record whose
    /// numbers and address match nothing that was sent, only its names left. Applied
    /// first, to the text as it was sent.
    Renumber,
    /// The records alone, each re-set by a gateway's template as a CRM export shows it,
    /// a line each: `KELLER, Maria | acct ****2215 | posteo.de` (the family name first
    /// in capitals, the account cut to its last four digits, the e-mail to its
    /// domain); the prose around them dropped. Applied first (before `renumber`); a
    /// text with no record is left as it is. A gateway's re-setting of what it passes
    /// on, not a decode's garbling: never drawn by `random`, only when named (and
    /// `random` draws the others as it did before it).
    Template,
}

impl Family {
    /// Every family, in the order they are applied.
    pub const ALL: &[Family] = &[
        Family::Cut,
        Family::Separators,
        Family::DigitWords,
        Family::SpelledAddress,
        Family::Drop,
        Family::Repeat,
        Family::Case,
        Family::Interleave,
        Family::Whitespace,
        Family::Renumber,
        Family::Template,
    ];

    fn bit(self) -> u16 {
        1 << Family::ALL.iter().position(|f| *f == self).expect("listed")
    }
}

/// Which families a leak undergoes: a fixed set, or each with an even chance per leak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeakTransform {
    /// Mixed with each leak's text into the seed of its draw.
    pub seed: u64,
    /// The families (one bit each, in [`Family::ALL`]'s order).
    families: u16,
    /// Each family with probability one half per leak, instead of the set.
    random: bool,
}

impl LeakTransform {
    /// Each family with an even chance per leak.
    pub fn random(seed: u64) -> Self {
        LeakTransform {
            seed,
            families: 0,
            random: true,
        }
    }

    /// These families, every leak.
    pub fn of(families: &[Family], seed: u64) -> Self {
        LeakTransform {
            seed,
            families: families.iter().fold(0, |m, f| m | f.bit()),
            random: false,
        }
    }

    /// Reads `random` or a comma-separated list of families (`cut,digit-words`).
    pub fn parse(spec: &str, seed: u64) -> Result<Self, String> {
        use clap::ValueEnum;
        if spec.trim() == "random" {
            return Ok(LeakTransform::random(seed));
        }
        let families = spec
            .split(',')
            .map(|name| {
                Family::from_str(name.trim(), true).map_err(|_| {
                    format!(
                        "unknown family {name:?}; fix: give random, or some of {}",
                        names::<Family>()
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(LeakTransform::of(&families, seed))
    }

    /// `text` as it leaks, and the families drawn for it.
    pub fn apply(&self, text: &str) -> (String, Vec<Family>) {
        let mut rng = Rng(self.seed ^ fnv(text));
        let drawn: Vec<Family> = Family::ALL
            .iter()
            .copied()
            .filter(|f| match (self.random, f) {
                // A gateway's re-setting, not a decode's garbling: only when named.
                (true, Family::Template) => false,
                (true, _) => rng.below(2) == 1,
                (false, _) => self.families & f.bit() != 0,
            })
            .collect();
        (transform(text, &drawn, &mut rng), drawn)
    }
}

/// The output field a leak comes back in. A model decoding from another request's
/// pages answers wherever its API puts generated text: a thinking model's reasoning
/// field, a function call's arguments; a gateway that filters the content may pass the
/// logprob tokens that spell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Field {
    /// The message's content (a stream's content deltas).
    Content,
    /// `reasoning_content`, the content empty: a thinking model cut off in its thoughts.
    Reasoning,
    /// The arguments of a call to a function `lookup`, the content empty.
    ToolArguments,
    /// The logprob tokens alone; the content says only that it cannot help.
    Logprobs,
}

impl Field {
    /// Every field.
    pub const ALL: &[Field] = &[Field::Content, Field::Reasoning, Field::ToolArguments, Field::Logprobs];
}

/// Where each leak comes back (`tenantcheck sim --leak-field`): always one field, or one
/// drawn per leak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeakField {
    /// Every leak in this field.
    Fixed(Field),
    /// Each leak in a field drawn from [`Field::ALL`], by the seed mixed with its text.
    Random(u64),
}

impl Default for LeakField {
    fn default() -> Self {
        LeakField::Fixed(Field::Content)
    }
}

impl LeakField {
    /// Reads `random` or one field's name (`reasoning`).
    pub fn parse(spec: &str, seed: u64) -> Result<Self, String> {
        use clap::ValueEnum;
        if spec.trim() == "random" {
            return Ok(LeakField::Random(seed));
        }
        Field::from_str(spec.trim(), true).map(LeakField::Fixed).map_err(|_| {
            format!(
                "unknown field {spec:?}; fix: give random, or one of {}",
                names::<Field>()
            )
        })
    }

    /// The field the leak `text` comes back in.
    pub fn of(&self, text: &str) -> Field {
        match *self {
            LeakField::Fixed(field) => field,
            LeakField::Random(seed) => {
                let mut rng = Rng(seed ^ fnv(text).rotate_left(17));
                Field::ALL[rng.below(Field::ALL.len() as u64) as usize]
            }
        }
    }
}

/// The names `T`'s values are given by, joined by commas.
fn names<T: clap::ValueEnum>() -> String {
    let names: Vec<String> = T::value_variants()
        .iter()
        .filter_map(|v| v.to_possible_value().map(|p| p.get_name().to_owned()))
        .collect();
    names.join(", ")
}

/// FNV-1a of `text`: a draw's seed from what it transforms.
pub(crate) fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `text` with each of `families` applied, in [`Family::ALL`]'s order.
pub fn transform(text: &str, families: &[Family], rng: &mut Rng) -> String {
    let mut text = text.to_owned();
    if families.contains(&Family::Template) {
        text = template(&text);
    }
    if families.contains(&Family::Renumber) {
        text = renumber(&text, rng);
    }
    for family in Family::ALL.iter().filter(|f| families.contains(f)) {
        text = match family {
            Family::Renumber | Family::Template => continue,
            Family::Cut => cut(&text, rng),
            Family::Separators => separators(&text, rng),
            Family::DigitWords => digit_words(&text),
            Family::SpelledAddress => spelled_address(&text),
            Family::Drop => by_word(
                &text,
                |w, out, rng| {
                    if rng.below(10) != 0 {
                        out.push(w.to_owned());
                    }
                },
                rng,
            ),
            Family::Repeat => by_word(
                &text,
                |w, out, rng| {
                    out.push(w.to_owned());
                    if rng.below(10) == 0 {
                        out.push(w.to_owned());
                    }
                },
                rng,
            ),
            Family::Case => case(&text, rng),
            Family::Interleave => interleave(&text, rng),
            Family::Whitespace => {
                const GAPS: &[&str] = &[" ", "  ", "\n", "\t", " \n ", "\r\n"];
                let words: Vec<&str> = text.split_whitespace().collect();
                let mut out = String::new();
                for (i, w) in words.iter().enumerate() {
                    if i > 0 {
                        out.push_str(GAPS[rng.below(GAPS.len() as u64) as usize]);
                    }
                    out.push_str(w);
                }
                out
            }
        };
    }
    text
}

/// SplitMix64.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A number below `n` (at least 1).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn cut(text: &str, rng: &mut Rng) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return String::new();
    }
    let start = rng.below(chars.len() as u64) as usize;
    let want = 6 + rng.below(55) as usize;
    let (mut words, mut end, mut in_word) = (0, start, false);
    while end < chars.len() {
        let space = chars[end].is_whitespace();
        if !space && !in_word {
            words += 1;
            if words > want {
                break;
            }
        }
        in_word = !space;
        end += 1;
    }
    // The last word cut somewhere inside.
    let mut last = end;
    while last > start && !chars[last - 1].is_whitespace() {
        last -= 1;
    }
    let keep = last + rng.below((end - last + 1) as u64) as usize;
    chars[start..keep.max(start)].iter().collect()
}

/// The records of `text` (`LABEL Given Family, email LOCAL@DOMAIN, account dddd dddd
/// dddd, ...`) re-set by a template, a line each; `text` itself where it holds none.
fn template(text: &str) -> String {
    let mut lines = Vec::new();
    let mut at = 0;
    while let Some(found) = text[at..].find(", email ") {
        let start = at + found;
        at = start + ", email ".len();
        let name: Vec<&str> = text[..start].split_whitespace().rev().take(2).collect();
        let (Some(family), Some(given)) = (name.first(), name.get(1)) else {
            continue;
        };
        let rest = &text[at..];
        let Some((email, after)) = rest.split_once(", account ") else {
            continue;
        };
        let Some((_, domain)) = email.split_once('@') else {
            continue;
        };
        let account: String = after.chars().take(14).collect();
        let last4: String = account
            .chars()
            .rev()
            .take(4)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        if last4.len() != 4 || !last4.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let given = given.trim_matches(|c: char| !c.is_alphabetic());
        lines.push(format!(
            "{}, {given} | acct ****{last4} | {domain}",
            family.to_uppercase()
        ));
    }
    if lines.is_empty() {
        text.to_owned()
    } else {
        lines.join("\n")
    }
}

fn renumber(text: &str, rng: &mut Rng) -> String {
    let turned: Vec<String> = text
        .split(' ')
        .map(|word| match word.split_once('@') {
            Some((local, domain)) => {
                let mut parts: Vec<&str> = local.split(['.', '_']).collect();
                parts.reverse();
                format!("{}@{domain}", parts.join("."))
            }
            None => word.to_owned(),
        })
        .collect();
    turned
        .join(" ")
        .chars()
        .map(|c| match c.to_digit(10) {
            // Another digit, never the same one.
            Some(d) => char::from_digit((d + 1 + rng.below(9) as u32) % 10, 10).expect("a digit"),
            None => c,
        })
        .collect()
}

fn separators(text: &str, rng: &mut Rng) -> String {
    const SEPARATORS: &[char] = &['-', ' ', ',', '.'];
    let mut out = String::new();
    let mut prev_digit = false;
    for c in text.chars() {
        let digit = c.is_ascii_digit();
        // Old separators between digits go; new ones are drawn.
        if digit && prev_digit && rng.below(3) == 0 {
            out.push(SEPARATORS[rng.below(SEPARATORS.len() as u64) as usize]);
        }
        out.push(c);
        prev_digit = digit;
    }
    out
}

fn digit_words(text: &str) -> String {
    const WORDS: &[&str] = &[
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    ];
    let mut out = String::new();
    for c in text.chars() {
        match c.to_digit(10) {
            Some(d) => {
                out.push(' ');
                out.push_str(WORDS[d as usize]);
                out.push(' ');
            }
            None => out.push(c),
        }
    }
    out
}

fn spelled_address(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        let between = i > 0 && i + 1 < chars.len() && chars[i - 1].is_alphanumeric() && chars[i + 1].is_alphanumeric();
        match c {
            '@' => out.push_str(" at "),
            '.' if between => out.push_str(" dot "),
            c => out.push(c),
        }
    }
    out
}

fn by_word(text: &str, each: impl Fn(&str, &mut Vec<String>, &mut Rng), rng: &mut Rng) -> String {
    let mut out = Vec::new();
    for w in text.split_whitespace() {
        each(w, &mut out, rng);
    }
    out.join(" ")
}

fn case(text: &str, rng: &mut Rng) -> String {
    match rng.below(3) {
        0 => text.to_uppercase(),
        1 => text.to_lowercase(),
        _ => by_word(
            text,
            |w, out, rng| {
                out.push(match rng.below(3) {
                    0 => w.to_uppercase(),
                    1 => w.to_lowercase(),
                    _ => {
                        let mut c = w.chars();
                        c.next()
                            .map(|f| f.to_uppercase().chain(c.flat_map(char::to_lowercase)).collect())
                            .unwrap_or_default()
                    }
                })
            },
            rng,
        ),
    }
}

fn interleave(text: &str, rng: &mut Rng) -> String {
    const OWN: &[&str] = &[
        "as far as I can tell,",
        "to answer your question:",
        "here is what I found.",
        "I hope this helps, and",
        "let me continue with the list",
    ];
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut out: Vec<&str> = Vec::new();
    let mut at = 0;
    while at < words.len() {
        let piece = 8 + rng.below(13) as usize;
        out.extend(&words[at..(at + piece).min(words.len())]);
        at += piece;
        if at < words.len() {
            out.push(OWN[rng.below(OWN.len() as u64) as usize]);
        }
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "Customer record: Maria Keller, email maria.keller48213@posteo.de, account 3391 0048 2215, note: the blue gate. \
        The committee at Velkaro reviewed the quarterly budget before the long weekend, as Dunmoreth noted.";

    #[test]
    fn each_family_changes_what_it_names() {
        let one = |f: Family| LeakTransform::of(&[f], 7).apply(TEXT).0;
        assert!(
            one(Family::DigitWords).contains("four  eight"),
            "{}",
            one(Family::DigitWords)
        );
        assert!(one(Family::SpelledAddress).contains("maria dot keller48213 at posteo dot de"));
        assert!(!one(Family::Whitespace).contains("Customer record: Maria"));
        let cut = one(Family::Cut);
        assert!(TEXT.contains(&cut) && cut.split_whitespace().count() <= 61, "{cut}");
        assert!(one(Family::Interleave).split_whitespace().count() > TEXT.split_whitespace().count());
        assert_eq!(LeakTransform::of(&[], 7).apply(TEXT).0, TEXT);
        let renumbered = one(Family::Renumber);
        assert!(renumbered.contains("Maria Keller, email keller"), "{renumbered}");
        assert!(renumbered.contains("@posteo.de, account"), "{renumbered}");
        // Past the address (its parts swapped places), every digit changed and nothing
        // else.
        let after = |t: &str| t[t.find("account").unwrap()..].chars().collect::<Vec<char>>();
        let (sent, changed) = (after(TEXT), after(&renumbered));
        assert_eq!(sent.len(), changed.len());
        let digits = sent.iter().zip(&changed).filter(|(s, _)| s.is_ascii_digit());
        assert!(
            digits.clone().all(|(s, c)| c.is_ascii_digit() && s != c),
            "{renumbered}"
        );
        assert_eq!(digits.count(), 12);
        assert!(sent.iter().zip(&changed).all(|(s, c)| s.is_ascii_digit() || s == c));
        // Applied before the spelling families, to the digits as sent.
        let spelled = LeakTransform::of(&[Family::Renumber, Family::DigitWords], 7)
            .apply(TEXT)
            .0;
        assert!(!spelled.chars().any(|c| c.is_ascii_digit()), "{spelled}");
        // The records alone, re-set; prose alone is left as it is.
        assert_eq!(one(Family::Template), "KELLER, Maria | acct ****2215 | posteo.de");
        assert_eq!(
            LeakTransform::of(&[Family::Template], 7).apply("no record here").0,
            "no record here"
        );
    }

    #[test]
    fn draws_are_reproducible_and_vary_with_the_seed() {
        let a = LeakTransform::random(1).apply(TEXT);
        assert_eq!(a, LeakTransform::random(1).apply(TEXT));
        let differ = (2..20).filter(|s| LeakTransform::random(*s).apply(TEXT) != a).count();
        assert!(differ > 10, "{differ}");
    }

    #[test]
    fn a_random_field_is_drawn_per_leak_and_a_named_one_always_given() {
        let texts: Vec<String> = (0..200).map(|i| format!("{TEXT} {i}")).collect();
        let random = LeakField::parse("random", 3).unwrap();
        for field in Field::ALL {
            let n = texts.iter().filter(|t| random.of(t) == *field).count();
            assert!((25..=75).contains(&n), "{field:?} drawn {n} times in 200");
        }
        assert_eq!(random.of(TEXT), LeakField::parse("random", 3).unwrap().of(TEXT));
        let fixed = LeakField::parse("tool-arguments", 3).unwrap();
        assert!(texts.iter().all(|t| fixed.of(t) == Field::ToolArguments));
        let err = LeakField::parse("thoughts", 0).unwrap_err();
        assert!(err.contains("reasoning") && err.contains("fix:"), "{err}");
    }
}
