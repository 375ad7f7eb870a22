//! The pure rules `verify` re-applies to a transcript, shared with the probes that
//! apply them during a run: whether an answer read back its own canary ([`echoed`]),
//! holds content no prompt of the run accounts for ([`foreign`]) and whose records that
//! content is by the holders' names ([`named`], [`foreign_findings`]), shows a degenerate
//! decode ([`degenerate`]), refused as it must ([`improper_refusal`]), reports usage
//! that fits ([`usage`]), whether a stream keeps its API's grammar and finishes
//! ([`stream`]), and whether a timing level's pairs give its decision ([`timing`]). Nothing here sends a request or knows a session: the evidence a
//! report carries is judged by code that does not depend on the code that produced it.

pub mod context;
pub mod extraction;
pub mod kind;
pub mod metadata;
pub mod neighbour;
pub mod reuse;
pub mod sequential;
pub mod stream;
pub mod timing;
pub mod usage;

/// Whether a prompt the vendor must refuse (one past its context) was accepted: a
/// success, or content served before an error frame. `context.boundary` judges its
/// prompt past the context by it, and `verify` judges the same line.
pub fn accepted(ex: &crate::exchange::Exchange) -> bool {
    ex.is_success() && (ex.api_error.is_none() || !ex.content.is_empty())
}

/// Whether `answer` holds any of `own` canaries (the asking tenant's) that `prompt`
/// carried, by the scanner that finds other tenants' canaries: the positive control of
/// every case that looks for leaked content (see [`crate::outcome::Power`]). `verify`
/// re-judges the transcript with it.
pub fn echoed(own: &[crate::canary::Canary], prompt: &str, answer: &str) -> bool {
    Echo::new(own).echoed(prompt, answer)
}

/// [`echoed`] over one tenant's canaries, its scanner built once for every answer
/// judged: a scanner over thousands of canaries costs far more to build than to run.
pub struct Echo<'c> {
    own: &'c [crate::canary::Canary],
    scanner: crate::scan::Scanner,
}

impl<'c> Echo<'c> {
    /// The judge of answers to prompts that carried some of `own`.
    pub fn new(own: &'c [crate::canary::Canary]) -> Self {
        Echo {
            own,
            scanner: crate::scan::Scanner::new(own.to_vec()),
        }
    }

    /// Whether `answer` holds any of the canaries that `prompt` carried.
    pub fn echoed(&self, prompt: &str, answer: &str) -> bool {
        // The answer is short and the prompt may be a million tokens: scan the answer,
        // then look up only what it holds. No tenant is labelled with a NUL, so every
        // canary counts as "another's" here.
        let hits = self.scanner.scan(answer, "\u{0}");
        hits.iter()
            .any(|h| self.own.iter().any(|c| c.id == h.id && c.carried_by(prompt)))
    }
}

/// Record-shaped items in `answer` ([`crate::scan::record_shaped`]: e-mail addresses,
/// long numbers) that `prompt` does not hold as written and that are no canary of the
/// run, exact or near (`is_canary`: whether the scan of an item alone finds a canary
/// of the run in it). `prompt` is all the request carried
/// ([`crate::exchange::RecordedRequest::text`]), in the run as in `verify`. What a
/// decode from pages of customers the run does not control returns; `verify`
/// re-judges it.
pub fn foreign(prompt: &str, answer: &str, is_canary: impl Fn(&str) -> bool) -> Vec<String> {
    crate::scan::record_shaped(answer)
        .into_iter()
        .map(|(s, e)| &answer[s..e])
        .filter(|item| !prompt.contains(item) && !is_canary(item))
        .map(str::to_owned)
        .collect()
}

/// Characters before a foreign item within which a record's name is read as its own:
/// a record names its holder a few words before its address and its number.
pub const NAME_REACH: usize = 80;

/// A foreign item named by what survived of the record it came from: the canary whose
/// holder was sighted by it ([`crate::holder`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Named<'c> {
    /// The canary whose name it is: of the owner's canaries that bear the name (a run
    /// issues many, and names repeat), the one with the most of its record found.
    pub canary: &'c crate::canary::Canary,
    /// Every canary of the owner's that bears the name, by id: which of them the
    /// record was, the transcript alone may not tell (the one a request carried before
    /// the answer is the likeliest).
    pub candidates: Vec<&'c crate::canary::Canary>,
    /// The foreign item.
    pub item: String,
    /// The answer from the name's first letter to the item's end, or to the last
    /// fragment of the record found, whichever is later.
    pub excerpt: String,
    /// At most this likely would a stranger's record hold the name and what of the
    /// holder's record stands by it ([`crate::holder`]).
    pub chance: f64,
}

/// Whose record the first of `items` (foreign items of `answer`, as [`foreign`] gives
/// them) that names one is, and which canary's: a record whose numbers and address
/// came back changed keeps its holder's name, in the address's local part
/// (`ferreira.elena`) or just before the item, and often its domain and note. An item
/// is named by the holder of a canary of `canaries` (the case's, every tenant's)
/// sighted ([`crate::holder::sightings_within`]) with its name within the item or the
/// [`NAME_REACH`] characters before it: another tenant's than `recipient`'s, no canary
/// of `recipient`'s bearing the same name, the canaries of that name all one
/// tenant's, and the name with what of the record stands by it rare enough
/// ([`crate::holder::MAX_CHANCE`]): a common name beside an address that matches
/// nothing is a stranger's, not the holder's. A name alone is never a leak:
/// `isolation.canary-residue` uses this only to say whose data the foreign content of
/// a significant rise is, and `verify` re-derives it.
pub fn named<'c>(
    canaries: &'c [crate::canary::Canary],
    recipient: &str,
    answer: &str,
    items: &[String],
) -> Option<Named<'c>> {
    let mut at = 0;
    for item in items {
        let Some(found) = answer[at..].find(item.as_str()) else {
            continue;
        };
        let (start, end) = (at + found, at + found + item.len());
        at = end;
        let mut from = start.saturating_sub(NAME_REACH);
        while !answer.is_char_boundary(from) {
            from += 1;
        }
        let Some(s) = crate::holder::sightings_within(canaries, recipient, answer, from, end)
            .into_iter()
            .next()
        else {
            continue;
        };
        return Some(Named {
            canary: s.canary,
            candidates: s.candidates,
            item: item.clone(),
            excerpt: answer[s.span.0..s.span.1.max(end)].to_owned(),
            chance: s.chance,
        });
    }
    None
}

/// The most findings of foreign content a case itemises ([`foreign_findings`]).
pub const FOREIGN_FINDINGS: usize = 25;

/// One finding of foreign content ([`foreign_findings`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ForeignFinding<'a, 'c> {
    /// The answer's transcript line.
    pub seq: u64,
    /// Whose answer it was.
    pub recipient: &'a str,
    /// Its foreign items.
    pub items: Vec<String>,
    /// The record of the run's they are, where a holder's name stood by one.
    pub named: Option<Named<'c>>,
}

/// The findings a significant rise in foreign content makes, in the run and in
/// `verify` alike: of `answers` (transcript line, recipient, answer, its foreign items:
/// those at the long rungs), the first [`FOREIGN_FINDINGS`] by line, each [`named`] by
/// `canaries` (the case's) where it can be.
pub fn foreign_findings<'a, 'c>(
    canaries: &'c [crate::canary::Canary],
    answers: impl IntoIterator<Item = (u64, &'a str, &'a str, Vec<String>)>,
) -> Vec<ForeignFinding<'a, 'c>> {
    let mut answers: Vec<_> = answers.into_iter().collect();
    answers.sort_by_key(|(seq, ..)| *seq);
    answers
        .into_iter()
        .take(FOREIGN_FINDINGS)
        .map(|(seq, recipient, answer, items)| ForeignFinding {
            seq,
            recipient,
            named: named(canaries, recipient, answer, &items),
            items,
        })
        .collect()
}

/// Signs that an answer is degenerate, in words: a stretch repeated three or more
/// times back to back (a decode loop), a model's special tokens in the text (what a
/// decode over pages written for another template or another request shows), and,
/// where the task's answer is short (`short_task`), a stop at the token limit. Never
/// evidence of a leak alone (small models loop and ramble); recorded beside a lost
/// fact or foreign content as what upstream reports of wrong-cache decodes describe.
pub fn degenerate(content: &str, finish_reason: Option<&str>, short_task: bool) -> Vec<String> {
    let mut signs = Vec::new();
    if let Some(unit) = repeated_run(content) {
        signs.push(format!("a loop: {unit:?} three or more times in a row"));
    }
    let special = special_tokens(content);
    if !special.is_empty() {
        signs.push(format!("special tokens in the text: {}", special.join(" ")));
    }
    if short_task && finish_reason == Some("length") {
        signs.push("a stop at the token limit where the answer is a sentence".to_owned());
    }
    signs
}

/// The shortest stretch of 4 to 80 bytes that `text` holds three times back to back
/// (not all whitespace or one repeated character, as padding is).
fn repeated_run(text: &str) -> Option<String> {
    let b = text.as_bytes();
    for period in 4..=80.min(b.len() / 3) {
        let mut run = 0;
        for i in period..b.len() {
            run = if b[i] == b[i - period] { run + 1 } else { 0 };
            if run >= 2 * period {
                let start = i + 1 - 3 * period;
                let unit = &b[start..start + period];
                let varied = unit.iter().any(|&c| c != unit[0]);
                let blank = unit.iter().all(u8::is_ascii_whitespace);
                if varied && !blank {
                    return Some(String::from_utf8_lossy(unit).into_owned());
                }
            }
        }
    }
    None
}

/// Special tokens of common chat templates and tokenizers found in `text`
/// (`<|...|>`, `</s>`, `<s>`, `<unk>`, `<pad>`, `[INST]`, `[/INST]`), each once.
fn special_tokens(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut note = |t: &str| {
        if !found.iter().any(|f| f == t) && found.len() < 5 {
            found.push(t.to_owned());
        }
    };
    let mut rest = text;
    while let Some(at) = rest.find("<|") {
        let after = &rest[at + 2..];
        match after.find("|>") {
            Some(end) if end <= 40 && !after[..end].contains(char::is_whitespace) => {
                note(&rest[at..at + 2 + end + 2]);
                rest = &after[end + 2..];
            }
            _ => rest = after,
        }
    }
    for t in ["</s>", "<s>", "<unk>", "<pad>", "[INST]", "[/INST]"] {
        if text.contains(t) {
            note(t);
        }
    }
    found
}

/// What is wrong with the answer to a request that had to be refused, if anything: a
/// 2xx without an error, content beside an error frame, or a refusal that is not a 4xx
/// with an error body. `verify` re-judges the transcript with the same function.
pub fn improper_refusal(ex: &crate::exchange::Exchange) -> Option<String> {
    let status = ex.status?;
    let success = (200..300).contains(&status);
    if success && ex.api_error.is_none() {
        Some(format!(
            "answered HTTP {status} with {} characters of content and no error",
            ex.content.len()
        ))
    } else if success && !ex.content.is_empty() {
        Some("answered with content beside an error frame".into())
    } else if !success && !(400..500).contains(&status) {
        Some(format!("refused with HTTP {status}, not a client error"))
    } else if !success && ex.api_error.is_none() {
        Some(format!("refused with HTTP {status} without an error body"))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degenerate_answers_show_their_signs_and_ordinary_ones_none() {
        let loop_ = "The value is the value is the value is the value is";
        let signs = degenerate(loop_, Some("stop"), true);
        assert_eq!(signs.len(), 1, "{signs:?}");
        assert!(signs[0].contains("a loop"), "{signs:?}");
        let special = degenerate("Sure<|im_end|><|im_start|>assistant</s>", None, false);
        assert_eq!(special.len(), 1, "{special:?}");
        assert!(special[0].contains("<|im_end|> <|im_start|> </s>"), "{special:?}");
        assert!(degenerate("x", Some("length"), true)[0].contains("token limit"));
        assert!(degenerate("x", Some("length"), false).is_empty());
        // Ordinary answers, numbers and padding included, show nothing.
        for ordinary in [
            "The value of vivid-otter is 4417. The value of calm-heron is 9021.",
            "Account 1111-1111-1111 and 2222 2222",
            "Here it is:          done.",
            "a <| not a token |> b, x < y and y > z",
        ] {
            assert!(degenerate(ordinary, Some("stop"), true).is_empty(), "{ordinary}");
        }
    }

    #[test]
    fn foreign_content_is_what_neither_the_prompt_nor_a_canary_explains() {
        let s = crate::canary::RunSecret::generate();
        let own = s.canary("a", "t", 0);
        let scanner = crate::scan::Scanner::new(vec![own.clone()]);
        let prompt = format!("Read back: {} Also call 0044 2071 8388.", own.record());
        let mut garbled = own.account.clone().into_bytes();
        garbled[6] = if garbled[6] == b'9' { b'0' } else { garbled[6] + 1 };
        let garbled = String::from_utf8(garbled).unwrap();
        let answer = format!(
            "{} / account {garbled} / 0044 2071 8388 / edda.falk40211@postbox.example and 9981 0021 3345",
            own.record()
        );
        let items = foreign(&prompt, &answer, |item| !scanner.scan(item, "\u{0}").is_empty());
        assert_eq!(items, ["edda.falk40211@postbox.example", "9981 0021 3345"]);
    }

    /// A canary of `owner` named `name`.
    fn holder(owner: &str, index: u32, name: &str) -> crate::canary::Canary {
        crate::canary::Canary {
            name: name.into(),
            ..crate::canary::RunSecret::generate().canary(owner, "isolation.canary-residue", index)
        }
    }

    #[test]
    fn a_foreign_record_is_named_by_the_holder_it_kept() {
        let canaries = [
            holder("a", 0, "Jonas Brandt"),
            holder("b", 0, "Elena Ferreira"),
            holder("b", 1, "Maria Keller"),
            holder("a", 1, "Samir Chen"),
            holder("b", 2, "Samir Chen"),
            holder("b", 3, "Ana Lima"),
            holder("c", 0, "Ana Lima"),
            holder("b", 4, "Maria Keller"),
        ];
        let item = |s: &str| vec![s.to_owned()];
        let domain = |c: &crate::canary::Canary| c.email.split_once('@').unwrap().1.to_owned();
        // The address turned around keeps both names and its domain, and the note
        // follows; a number has the names just before it.
        let answer = format!(
            "Sure. Client file: Elena Ferreira, email ferreira09551.elena@{}, account 4779 4688 6768, note: {}.",
            domain(&canaries[1]),
            canaries[1].note
        );
        for found in [
            format!("ferreira09551.elena@{}", domain(&canaries[1])),
            "4779 4688 6768".into(),
        ] {
            let named = named(&canaries, "a", &answer, &item(&found)).expect(&found);
            assert_eq!(named.canary.id, canaries[1].id);
            assert!(
                named.excerpt.starts_with("Elena Ferreira") && named.chance <= crate::holder::MAX_CHANCE,
                "{named:?}"
            );
        }
        // The same names beside an address and a number of a stranger's, and nothing
        // else of the holder's record: a common name, not the holder.
        let stranger =
            "Sure. Client file: Elena Ferreira, email ferreira09551.elena@example.org, account 4779 4688 6768.";
        assert_eq!(named(&canaries, "a", stranger, &item("4779 4688 6768")), None);
        // Read from the first item that names anyone.
        let two = format!(
            "1234 5678 9012 and later Maria Keller, keller.maria7@{}, note: {}",
            domain(&canaries[2]),
            canaries[2].note
        );
        let named_two = named(
            &canaries,
            "a",
            &two,
            &[
                "1234 5678 9012".into(),
                format!("keller.maria7@{}", domain(&canaries[2])),
            ],
        );
        let named_two = named_two.expect("Maria Keller's");
        // Two of b's canaries bear the name: the one whose record stands there, and
        // both as candidates.
        assert_eq!(named_two.canary.id, canaries[2].id);
        assert_eq!(named_two.candidates, [&canaries[2], &canaries[7]]);
        // Never: a name alone or one name of two; a name far before the item; the
        // recipient's own name (a's Samir Chen, which b's record shares); a name two
        // other tenants bear; the recipient's own record.
        let far = format!("Elena Ferreira{} 4779 4688 6768", " and so on".repeat(9));
        for (text, found) in [
            ("Elena wrote from santos09551.x@zoho.com", "santos09551.x@zoho.com"),
            (far.as_str(), "4779 4688 6768"),
            ("Samir Chen, chen56907.samir@mailbox.org", "chen56907.samir@mailbox.org"),
            ("Ana Lima, lima.ana1@web.de", "lima.ana1@web.de"),
        ] {
            assert_eq!(named(&canaries, "a", text, &item(found)), None, "{text}");
        }
        assert_eq!(named(&canaries, "b", &answer, &item("4779 4688 6768")), None);
        assert_eq!(named(&canaries, "a", &answer, &[]), None);
    }
}
