//! The reference vendor's toy model: it answers only from the tokens it reads out of
//! the request's KV pages.
//!
//! The model never sees the HTTP request. It gets the token strings the engine read
//! back from the pages the request holds: when the pages hold the request's own
//! prompt, it answers that prompt; when they hold residue of earlier requests (a
//! fault skipped the writes), it answers from the residue, as a real model decoding
//! from stale KV would.
//!
//! What it does with what it reads, in order:
//!
//! 1. If what it read is a well-formed prompt (it ends with the `<|assistant|>`
//!    marker the chat template appends), it takes the last user turn: the tokens after
//!    the last `<|user|>` marker, up to the next marker. Otherwise the pages hold no
//!    prompt of this request (they were not written, or only in part) and it takes
//!    everything it read, from the start, markers left out.
//! 2. In a well-formed prompt, for each "what is the value of KEY" the turn asks, in
//!    order, it looks through everything it read for `KEY is VALUE`, `KEY: VALUE` or
//!    `KEY = VALUE` and answers `The value of KEY is VALUE.`, or says it cannot find it.
//! 3. Otherwise it repeats the turn from its first token: decoding from pages that
//!    hold no prompt of its own, it continues whatever they hold.
//!
//! The answer is cut at `max_tokens` tokens (finish reason `length`). A *garbling*
//! model (`--garbling-model`) changes what it copies as small real models do: one
//! digit of every 12-digit number, and two letters of every e-mail address swapped. A
//! *fragmenting* model (`--fragmenting-model`), decoding from pages that hold no prompt
//! of its own, starts in the middle of what it read and drops every sentence that
//! holds a digit or an `@`: what comes back is a stretch of another request's prose,
//! with no record in it. A *forgetful* model (`--forgetful-model`), asked to repeat what
//! it was given, answers as the weak model does about one time in four (which, by a
//! hash of the prompt); it still answers every question: an honest model whose echo
//! the suite's controls must measure, not assume.

use super::tokenizer;

/// The model's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The generated text.
    pub text: String,
    /// How many tokens it is.
    pub tokens: usize,
    /// Whether it was cut at `max_tokens`.
    pub truncated: bool,
    /// Whether it was decoded from pages that held no prompt of the request's own
    /// (another request's residue, or nothing).
    pub residue: bool,
}

const QUESTION: &str = "what is the value of ";

/// What the weak model (`tenantcheck sim --weak-model`) says to a well-formed prompt.
pub const WEAK_ANSWER: &str = "I am not sure what you mean.";

/// How the model departs from a faithful copier (the sim's `--*-model` flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traits {
    /// Answers every well-formed prompt with [`WEAK_ANSWER`].
    pub weak: bool,
    /// Garbles numbers and e-mail addresses it copies.
    pub garbling: bool,
    /// From residue, returns prose from its middle, records left out.
    pub fragmenting: bool,
    /// Asked to repeat what it was given, answers [`WEAK_ANSWER`] instead about one
    /// time in four (by a hash of the prompt, so a run is reproducible).
    pub forgetful: bool,
    /// Decoding from pages that hold no prompt of its own, transforms what it
    /// returns ([`crate::transform`]).
    pub leak: Option<crate::transform::LeakTransform>,
}

/// Answers from `view`, the token strings read from the request's pages. A `weak`
/// model answers every well-formed prompt with [`WEAK_ANSWER`]; from residue it still
/// continues what the pages hold.
pub fn respond(view: &[&str], max_tokens: usize, traits: Traits) -> Answer {
    let (turn, well_formed) = turn(view);
    Answer {
        residue: !well_formed,
        ..answer(view, turn, well_formed, max_tokens, traits)
    }
}

/// What the model says to `turn`, the part of `view` it answers (see [`respond`]).
fn answer(view: &[&str], turn: &[&str], well_formed: bool, max_tokens: usize, traits: Traits) -> Answer {
    let Traits {
        weak,
        garbling,
        fragmenting,
        forgetful,
        leak,
    } = traits;
    if weak && well_formed {
        return cut(WEAK_ANSWER, max_tokens);
    }
    let turn: String = turn.iter().filter(|t| !is_marker(t)).copied().collect();
    // From residue: what it reads, in the form the leak transform draws.
    let leaked = |text: &str| match (leak, well_formed) {
        (Some(t), false) => t.apply(text).0,
        _ => text.to_owned(),
    };
    if fragmenting && !well_formed {
        return cut(&leaked(&fragment(&turn)), max_tokens);
    }
    let keys = if well_formed { question_keys(&turn) } else { Vec::new() };
    if forgetful && well_formed && keys.is_empty() && forgets(&turn) {
        return cut(WEAK_ANSWER, max_tokens);
    }
    let full = if keys.is_empty() {
        turn.trim_start().to_owned()
    } else {
        let context: String = view.concat();
        let answers: Vec<String> = keys
            .iter()
            .map(|key| match lookup(&context, key) {
                Some(value) => format!("The value of {key} is {value}."),
                None => format!("I cannot find the value of {key} in the context."),
            })
            .collect();
        answers.join(" ")
    };
    let full = leaked(&full);
    match garbling {
        true => cut(&garble(&full), max_tokens),
        false => cut(&full, max_tokens),
    }
}

/// Whether the forgetful model forgets this prompt: about one in four, by a hash of
/// the text.
fn forgets(turn: &str) -> bool {
    let hash = turn.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    // FNV's high bits mix poorly over similar texts: finish as SplitMix64 does.
    let mut z = hash;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) % 4 == 0
}

/// `text` as a garbling model copies it: in every number of 12 digits (groups joined
/// by `-` or spaces count as one), the seventh digit is one higher (9 becomes 0); in
/// every e-mail address the first two letters are swapped.
pub fn garble(text: &str) -> String {
    let mut out: Vec<char> = text.chars().collect();
    // Numbers: runs of digits and the separators inside them.
    let mut i = 0;
    while i < out.len() {
        if !out[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let mut digits = Vec::new();
        let mut j = i;
        while j < out.len()
            && (out[j].is_ascii_digit()
                || (matches!(out[j], '-' | ' ') && out.get(j + 1).is_some_and(char::is_ascii_digit)))
        {
            if out[j].is_ascii_digit() {
                digits.push(j);
            }
            j += 1;
        }
        if digits.len() == 12 {
            let at = digits[6];
            out[at] = char::from(b'0' + (out[at] as u8 - b'0' + 1) % 10);
        }
        i = j;
    }
    // E-mail addresses: the local part's first two characters swapped.
    let text: String = out.into_iter().collect();
    text.split(' ')
        .map(|word| match word.find('@') {
            Some(at) if at >= 2 && word.is_char_boundary(2) => {
                let mut w: Vec<char> = word.chars().collect();
                w.swap(0, 1);
                w.into_iter().collect()
            }
            _ => word.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a fragmenting model makes of residue: from its middle on, the sentences that
/// hold neither a digit nor an `@`.
pub fn fragment(residue: &str) -> String {
    let mut middle = residue.len() / 2;
    while !residue.is_char_boundary(middle) {
        middle += 1;
    }
    residue[middle..]
        .split_inclusive(". ")
        .skip(1)
        .filter(|s| !s.contains(|c: char| c.is_ascii_digit() || c == '@'))
        .collect::<String>()
        .trim()
        .to_owned()
}

/// `full`, cut at `max_tokens` tokens.
fn cut(full: &str, max_tokens: usize) -> Answer {
    let mut text = String::new();
    let mut tokens = 0;
    let mut truncated = false;
    for t in tokenizer::tokens(full) {
        if tokens == max_tokens {
            truncated = true;
            break;
        }
        text.push_str(t);
        tokens += 1;
    }
    Answer {
        text,
        tokens,
        truncated,
        residue: false,
    }
}

fn is_marker(token: &str) -> bool {
    let t = token.trim_start();
    t.starts_with("<|") && t.ends_with("|>")
}

/// The part of `view` the model answers, and whether `view` is a well-formed prompt
/// (step 1 of the module documentation).
fn turn<'v, 'a>(view: &'v [&'a str]) -> (&'v [&'a str], bool) {
    // The template ends with the marker and a newline. Empty slots (never written)
    // are not white space: a view that ends in them is no prompt.
    let last = view.iter().rev().find(|t| t.is_empty() || !t.trim().is_empty());
    let well_formed = last.is_some_and(|t| t.trim_start() == "<|assistant|>");
    if !well_formed {
        return (view, false);
    }
    match view.iter().rposition(|t| t.trim_start() == "<|user|>") {
        Some(i) => {
            let rest = &view[i + 1..];
            let end = rest.iter().position(|t| is_marker(t)).unwrap_or(rest.len());
            (&rest[..end], true)
        }
        None => (view, true),
    }
}

fn question_keys(turn: &str) -> Vec<String> {
    let lower = turn.to_ascii_lowercase();
    lower
        .match_indices(QUESTION)
        .filter_map(|(at, _)| {
            let key: String = turn[at + QUESTION.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'))
                .collect();
            let key = key.trim_end_matches('.').to_owned();
            (!key.is_empty()).then_some(key)
        })
        .collect()
}

fn lookup(context: &str, key: &str) -> Option<String> {
    for sep in [" is ", ": ", " = "] {
        let pattern = format!("{key}{sep}");
        if let Some(at) = context.find(&pattern) {
            let value: String = context[at + pattern.len()..]
                .chars()
                .take_while(|c| !c.is_whitespace())
                .collect();
            let value = value.trim_end_matches(['.', ',', ';', ':', '!', '?', ')']);
            if !value.is_empty() {
                return Some(value.to_owned());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str, max: usize) -> Answer {
        let view: Vec<&str> = tokenizer::tokens(text).collect();
        respond(&view, max, Traits::default())
    }

    #[test]
    fn the_weak_model_neither_answers_nor_repeats_but_still_reads_residue() {
        let view: Vec<&str> =
            tokenizer::tokens("<|user|>\nkey-1 is blue. What is the value of key-1?\n<|assistant|>\n").collect();
        let weak = Traits {
            weak: true,
            ..Traits::default()
        };
        assert_eq!(respond(&view, 64, weak).text, WEAK_ANSWER);
        let residue: Vec<&str> = tokenizer::tokens("<|user|>\nold words of another request").collect();
        assert_eq!(respond(&residue, 64, weak).text, "old words of another request");
    }

    #[test]
    fn repeats_the_last_user_turn() {
        let a = answer(
            "<|system|>\nbe brief\n<|user|>\nfirst\n<|user|>\n hello there\n<|assistant|>\n",
            50,
        );
        assert_eq!(a.text, "hello there");
        assert!(!a.truncated);
    }

    #[test]
    fn reads_residue_from_the_start_when_the_pages_hold_no_prompt() {
        let a = answer(
            "<|user|>\nold record of someone\n<|assistant|>\nold answer <|user|>\n more",
            4,
        );
        assert_eq!(a.text, "old record of someone");
    }

    #[test]
    fn answers_every_question_in_order() {
        let a = answer(
            "<|user|>\nk1 is red. k2: blue. What is the value of k2? What is the value of k1? What is the value of k3?\n<|assistant|>\n",
            64,
        );
        assert_eq!(
            a.text,
            "The value of k2 is blue. The value of k1 is red. I cannot find the value of k3 in the context."
        );
    }

    #[test]
    fn answers_value_questions_from_what_it_read() {
        let a = answer(
            "<|user|>\nThe code word is kestrel-42. What is the value of code word?\n<|assistant|>\n",
            50,
        );
        assert_eq!(a.text, "I cannot find the value of code in the context.");
        let a = answer(
            "<|user|>\nalpha-7 is magenta. What is the value of alpha-7?\n<|assistant|>\n",
            50,
        );
        assert_eq!(a.text, "The value of alpha-7 is magenta.");
    }

    #[test]
    fn the_garbling_model_changes_a_digit_of_each_account_and_swaps_e_mail_letters() {
        let record =
            "Customer record: Maria Keller, email maria.keller48213@posteo.de, account 3391-0048-2215, note: x.";
        let g = garble(record);
        assert!(g.contains("account 3391-0058-2215"), "{g}");
        assert!(g.contains("email amria.keller48213@posteo.de"), "{g}");
        assert!(g.contains("Maria Keller"), "{g}");
        assert_eq!(garble("amber-0193 and 12345"), "amber-0193 and 12345");
    }

    #[test]
    fn the_fragmenting_model_returns_prose_of_residue_without_records() {
        let residue = "<|user|>\nRecords: Maria Keller, account 3391 0048 2215. First sentence here. \
                       Second one. A third with maria@x.de in it. The fourth sentence. Fifth and last. ";
        let view: Vec<&str> = tokenizer::tokens(residue).collect();
        let fragmenting = Traits {
            fragmenting: true,
            ..Traits::default()
        };
        let a = respond(&view, 64, fragmenting);
        assert!(!a.text.contains(|c: char| c.is_ascii_digit() || c == '@'), "{}", a.text);
        assert!(a.text.ends_with("Fifth and last."), "{}", a.text);
        // A prompt of its own is answered as before.
        let own: Vec<&str> = tokenizer::tokens("<|user|>\nhello\n<|assistant|>\n").collect();
        assert_eq!(respond(&own, 64, fragmenting).text, "hello");
    }

    #[test]
    fn the_forgetful_model_repeats_three_in_four_prompts_and_answers_every_question() {
        let forgetful = Traits {
            forgetful: true,
            ..Traits::default()
        };
        let repeated = (0..200)
            .filter(|i| {
                let prompt = format!("<|user|>\nRead back: code {i}\n<|assistant|>\n");
                let view: Vec<&str> = tokenizer::tokens(&prompt).collect();
                respond(&view, 64, forgetful).text != WEAK_ANSWER
            })
            .count();
        assert!((125..=175).contains(&repeated), "{repeated} of 200");
        for i in 0..20 {
            let prompt = format!("<|user|>\nkey{i} is v{i}. What is the value of key{i}?\n<|assistant|>\n");
            let view: Vec<&str> = tokenizer::tokens(&prompt).collect();
            let a = respond(&view, 64, forgetful).text;
            assert_eq!(a, format!("The value of key{i} is v{i}."));
        }
    }

    #[test]
    fn cuts_at_max_tokens() {
        let a = answer("<|user|>\none two three four\n<|assistant|>\n", 2);
        assert_eq!(a.text, "one two");
        assert_eq!(a.tokens, 2);
        assert!(a.truncated);
    }
}
