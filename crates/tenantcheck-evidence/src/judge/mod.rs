//! The pure rules `verify` re-applies to a transcript, shared with the probes that
//! apply them during a run: whether an answer read back its own canary ([`echoed`]),
//! holds content no prompt of the run accounts for ([`foreign`]), shows a degenerate
//! decode ([`degenerate`]), refused as it must ([`improper_refusal`]), reports usage
//! that fits ([`usage`]), whether a stream keeps its API's grammar and finishes
//! ([`stream`]), and whether a timing level's pairs give its decision ([`timing`]). Nothing here sends a request or knows a session: the evidence a
//! report carries is judged by code that does not depend on the code that produced it.

pub mod context;
pub mod extraction;
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
}
