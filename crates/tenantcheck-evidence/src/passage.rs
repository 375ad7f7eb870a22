//! [`Passages`]: the text of every request a run sent, by runs of sentences, so that a
//! stretch of one request's text that comes back in the answer to another request,
//! which did not hold it, is found: whoever sent it, and whether or not it carried a
//! canary or a tenant's marks.
//!
//! Stale KV pages, an answer crossed between two requests, a cache that serves one
//! prompt's state to another: each returns text of another request. The canary scanner
//! ([`crate::scan`]) finds it when it holds another tenant's records or marked prose.
//! This finds the rest: text several tenants send (a cache probe's shared prefix), and
//! the asking tenant's own earlier prompt, which a vendor tested with one account
//! returns where the same fault returns another customer's to a shared engine's next
//! caller. Either is an answer that is not its request's (T6).
//!
//! The unit is [`RUN`] sentences in a row, each of at least [`MIN_WORDS`] words, with
//! runs of whitespace folded to one space. The run's filler draws each sentence from
//! at least a thousand patterns beside a pair of names (of 552 a tenant's), so three of
//! them in a row recur by chance less than once in 1e20: a
//! model that writes prose in the style of its prompt does not hit another prompt's
//! three in a row, and one that copies its own prompt is excused by the rule that the
//! passage is in no text of the request it answers.
//!
//! What is compared: every string of a request's JSON body (messages, system prompt,
//! input), each ending its last sentence, with the answer's assistant text. A request that
//! continues state the vendor stores (`previous_response_id`, `conversation`) is read
//! like any other, but its answer is not judged: the model rightly sees text its body
//! does not hold; nor is the answer to a request without a body (a stored object
//! fetched, an engine's own endpoint), which returns stored text by design. [`Passages::record`] judges each answer against the requests recorded
//! before it and then records its own; the run calls it in transcript order as each
//! exchange is written, and `verify` walking the transcript, so both find the same.

use std::collections::{HashMap, HashSet};

/// Sentences in a row that make a passage.
pub const RUN: usize = 3;

/// The fewest words a sentence counts with; shorter ones ("OK.", "Hello there.") are
/// skipped on both sides.
pub const MIN_WORDS: usize = 4;

/// The longest passage text a hit keeps, in characters.
const KEEP_CHARS: usize = 300;

/// The body keys through which a request continues state the vendor stores.
const STATEFUL: &[&str] = &["previous_response_id", "conversation"];

/// Every passage of the requests recorded so far.
#[derive(Debug, Default)]
pub struct Passages {
    /// The tenants, by the bit that stands for each in [`Source::tenants`].
    tenants: Vec<String>,
    sources: HashMap<u64, Source>,
    /// The same requests by words, for stretches of another tenant's text in any
    /// output field ([`crate::provenance`]).
    provenance: crate::provenance::Provenance,
}

/// What an answer held of earlier requests' text.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Judged {
    /// Sentences of another request in a row, in its content.
    pub passage: Option<PassageHit>,
    /// A stretch of another tenant's words, in any output field.
    pub text: Option<crate::provenance::TextHit>,
}

/// Where a passage was first sent, and by whom at all: eight bytes, as a run at a
/// million tokens of context holds about a million passages.
#[derive(Clone, Copy, Debug)]
struct Source {
    /// The transcript line of the first request that held it.
    seq: u32,
    /// Which tenant sent that request.
    first: u16,
    /// Every tenant whose requests held it, one bit each (tenants past the 16th share
    /// the last bit).
    tenants: u16,
}

/// A passage of an earlier request in an answer to a request that did not hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassageHit {
    /// The transcript line of the first request that held it.
    pub source: u64,
    /// The tenant that sent that request.
    pub owner: String,
    /// Whether the asking tenant had sent it too, in another request (text several
    /// tenants send, or its own).
    pub own: bool,
    /// The passage, as it came back (at most 300 characters).
    pub passage: String,
}

impl PassageHit {
    /// The hit's id, as a leak's `canary_id`: `owner/passage/source`.
    pub fn id(&self) -> String {
        format!("{}/passage/{}", self.owner, self.source)
    }
}

impl Passages {
    /// An empty index for a run of these tenants.
    pub fn new(tenants: &[String]) -> Self {
        Passages {
            tenants: tenants.to_vec(),
            sources: HashMap::new(),
            provenance: crate::provenance::Provenance::new(tenants),
        }
    }

    /// The same index, knowing each tenant's invented names, which a hit's chance of a
    /// coincidence counts ([`crate::provenance::Provenance::with_marks`]). The run and
    /// `verify` both give them.
    pub fn with_marks(mut self, marks: &[crate::canary::Marks]) -> Self {
        self.provenance = self.provenance.with_marks(marks);
        self
    }

    /// Judges the exchange `tenant` sent, written at transcript line `seq`, against
    /// every request recorded before, and then records its request's text: the one
    /// judgement of an answer's provenance, which the run makes as it writes the line
    /// and `verify` as it reads it. The content of a 2xx answer is read for sentences of
    /// another request; every output field ([`crate::provenance::outputs`]), error
    /// messages too, for another tenant's words.
    pub fn judge(&mut self, seq: u64, tenant: &str, exchange: &crate::exchange::Exchange) -> Judged {
        let answer = exchange.is_success().then_some(exchange.content.as_str());
        let outputs = crate::provenance::outputs(exchange);
        self.judge_outputs(seq, tenant, exchange.request.body.as_ref(), answer, &outputs)
    }

    /// Judges the answer (`answer`, when the vendor answered) to the request `body` that
    /// `tenant` sent, written at transcript line `seq`, against every request recorded
    /// before, and then records this request's own passages. Returns the first passage
    /// of another request the answer holds that its own request does not.
    pub fn record(
        &mut self,
        seq: u64,
        tenant: &str,
        body: Option<&serde_json::Value>,
        answer: Option<&str>,
    ) -> Option<PassageHit> {
        let outputs: Vec<(String, String)> = answer.map(|a| ("content".into(), a.into())).into_iter().collect();
        self.judge_outputs(seq, tenant, body, answer, &outputs).passage
    }

    fn judge_outputs(
        &mut self,
        seq: u64,
        tenant: &str,
        body: Option<&serde_json::Value>,
        answer: Option<&str>,
        outputs: &[(String, String)],
    ) -> Judged {
        let strings = body.map(crate::exchange::strings).unwrap_or_default();
        let text: Vec<Sentence> = strings.iter().flat_map(|s| sentences(s, false)).collect();
        // A request without a body (a GET of a stored object, an engine's own
        // endpoint) is answered from state by design: only prompts are judged.
        let judged = body.is_some_and(|b| !continues_state(b));
        let passage = match answer {
            Some(answer) if judged && !answer.is_empty() => self.find(tenant, &text, answer),
            _ => None,
        };
        let text_hit = match judged {
            true => self.provenance.find(tenant, &strings, outputs),
            false => None,
        };
        self.add(seq, tenant, &text);
        self.provenance.add(seq, tenant, &strings);
        Judged {
            passage,
            text: text_hit,
        }
    }

    fn bit(&self, tenant: &str) -> (u16, u16) {
        let i = self
            .tenants
            .iter()
            .position(|t| t == tenant)
            .unwrap_or(self.tenants.len());
        (i.min(usize::from(u16::MAX)) as u16, 1u16 << i.min(15))
    }

    fn add(&mut self, seq: u64, tenant: &str, sentences: &[Sentence]) {
        let (first, bit) = self.bit(tenant);
        for window in sentences.windows(RUN) {
            let source = self.sources.entry(key(window)).or_insert(Source {
                seq: u32::try_from(seq).unwrap_or(u32::MAX),
                first,
                tenants: 0,
            });
            source.tenants |= bit;
        }
    }

    fn find(&self, tenant: &str, request: &[Sentence], answer: &str) -> Option<PassageHit> {
        let said = sentences(answer, true);
        let mut own: Option<HashSet<u64>> = None;
        for (at, window) in said.windows(RUN).enumerate() {
            let Some(source) = self.sources.get(&key(window)) else {
                continue;
            };
            // A passage the request itself holds is the model copying its prompt.
            let own = own.get_or_insert_with(|| request.windows(RUN).map(key).collect());
            if own.contains(&key(window)) {
                continue;
            }
            let (_, bit) = self.bit(tenant);
            let mut passage = said[at..at + RUN]
                .iter()
                .map(|s| s.text.as_str())
                .collect::<Vec<_>>()
                .join(" ");
            if let Some((cut, _)) = passage.char_indices().nth(KEEP_CHARS) {
                passage.truncate(cut);
            }
            return Some(PassageHit {
                source: u64::from(source.seq),
                owner: self
                    .tenants
                    .get(usize::from(source.first))
                    .cloned()
                    .unwrap_or_else(|| "?".into()),
                own: source.tenants & bit != 0,
                passage,
            });
        }
        None
    }
}

pub use crate::exchange::request_text;

/// Whether a request body continues state the vendor stores.
fn continues_state(body: &serde_json::Value) -> bool {
    STATEFUL.iter().any(|k| body.get(k).is_some_and(|v| !v.is_null()))
}

/// One sentence: its hash, and (for answers, which are short) its text.
struct Sentence {
    hash: u64,
    text: String,
}

/// The sentences of `text` of at least [`MIN_WORDS`] words, whitespace folded (line
/// breaks too: a model may wrap lines): each ends at `.`, `!` or `?` before whitespace
/// or the end. Each is hashed as it is read; its text is kept only when `keep` (an
/// answer's; a prompt's, up to megabytes, are only hashed).
fn sentences(text: &str, keep: bool) -> Vec<Sentence> {
    const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;
    let mut out = Vec::new();
    let mut hash = FNV_START;
    let mut kept = String::new();
    let (mut words, mut gap) = (0, false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_whitespace() {
            // A run of whitespace is one space, and only between words.
            gap = words > 0;
            continue;
        }
        if gap || words == 0 {
            words += 1;
        }
        let mut buf = [0u8; 4];
        if gap {
            hash = fnv(hash, b" ");
            if keep {
                kept.push(' ');
            }
            gap = false;
        }
        hash = fnv(hash, c.encode_utf8(&mut buf).as_bytes());
        if keep {
            kept.push(c);
        }
        if matches!(c, '.' | '!' | '?') && chars.peek().is_none_or(|n| n.is_whitespace()) {
            if words >= MIN_WORDS {
                out.push(Sentence {
                    hash,
                    text: std::mem::take(&mut kept),
                });
            }
            (hash, words, gap) = (FNV_START, 0, false);
            kept.clear();
        }
    }
    if words >= MIN_WORDS {
        out.push(Sentence { hash, text: kept });
    }
    out
}

/// A window's key: its sentences' hashes, mixed in order.
fn key(window: &[Sentence]) -> u64 {
    window.iter().fold(0x9e37_79b9_7f4a_7c15_u64, |h, s| {
        let mut z = (h ^ s.hash).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// FNV-1a, 64 bits, continued from `hash` over `bytes`.
fn fnv(hash: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(hash, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chat(text: &str) -> serde_json::Value {
        json!({"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 64})
    }

    const EARLIER: &str = "Below is our plan for the year. The night shift shipped a stack of invoices after a short delay. \
        My neighbour catalogued the tram schedule on Tuesday morning. Our accountant measured the quarterly budget once the paperwork arrived. \
        The regional office cancelled the new signage on the second floor.";

    fn index() -> Passages {
        let mut p = Passages::new(&["a".into(), "b".into()]);
        assert_eq!(
            p.record(1, "b", Some(&chat(EARLIER)), Some("Noted, thank you very much.")),
            None
        );
        p
    }

    #[test]
    fn another_requests_text_in_an_answer_is_found_with_its_source() {
        let mut p = index();
        let answer = "Sure. My neighbour catalogued the tram schedule on Tuesday morning.  Our accountant measured the quarterly budget\n once the paperwork arrived. The regional office cancelled the new signage on the second floor. And more.";
        let hit = p
            .record(
                2,
                "a",
                Some(&chat("Read back the first record exactly as it is written.")),
                Some(answer),
            )
            .expect("three sentences of #1 came back to a request that did not hold them");
        assert_eq!((hit.source, hit.owner.as_str(), hit.own), (1, "b", false));
        assert_eq!(hit.id(), "b/passage/1");
        assert!(hit.passage.starts_with("My neighbour catalogued"), "{}", hit.passage);
        // Tenant b's own later request holding it: still another request's text.
        let hit = p
            .record(3, "b", Some(&chat("Something else to say today.")), Some(answer))
            .expect("b's own earlier text, in an answer to a request without it");
        assert!(hit.own);
    }

    #[test]
    fn a_model_copying_its_own_request_is_no_hit() {
        let mut p = index();
        // The same text, sent again by tenant a and read back: its own prompt's.
        assert_eq!(p.record(2, "a", Some(&chat(EARLIER)), Some(EARLIER)), None);
        // In a system message rather than the user's: still the request's own text.
        let body = json!({"messages": [{"role": "system", "content": EARLIER}, {"role": "user", "content": "Go on."}]});
        assert_eq!(p.record(3, "a", Some(&body), Some(EARLIER)), None);
    }

    #[test]
    fn text_at_the_head_of_a_message_is_the_same_text_as_in_the_middle_of_another() {
        let mut p = Passages::new(&["a".into(), "b".into()]);
        // Tenant b sends the passage in the middle of its message; tenant a later sends
        // it at the head of its own (where the role and other fields stand before it in
        // the body) and its model copies it: a's own text, no hit.
        let middle = format!("We wrote this today for the record. {EARLIER}");
        assert_eq!(
            p.record(1, "b", Some(&chat(&middle)), Some("Noted, thank you very much.")),
            None
        );
        let body = json!({"messages": [
            {"role": "system", "content": "Be brief with me please today."},
            {"role": "user", "content": EARLIER},
        ]});
        assert_eq!(p.record(2, "a", Some(&body), Some(EARLIER)), None);
    }

    #[test]
    fn two_sentences_prose_in_the_style_or_short_sentences_are_no_hit() {
        let mut p = index();
        let two = "The night shift shipped a stack of invoices after a short delay. My neighbour catalogued the tram schedule on Tuesday morning.";
        assert_eq!(
            p.record(2, "a", Some(&chat("Hello there friend, what now?")), Some(two)),
            None
        );
        let styled = "The night shift shipped a stack of invoices after a short delay. My neighbour catalogued the old timetable on Tuesday morning. Our accountant measured the quarterly budget once the paperwork arrived.";
        assert_eq!(
            p.record(3, "a", Some(&chat("Hello there friend, what now?")), Some(styled)),
            None
        );
    }

    #[test]
    fn answers_to_requests_that_continue_stored_state_are_not_judged() {
        let mut p = index();
        let body = json!({"input": "Go on with it please now.", "previous_response_id": "resp_1"});
        assert_eq!(p.record(2, "b", Some(&body), Some(EARLIER)), None);
        // Nor are refusals (no answer), nor answers to requests without a body (a GET
        // of a stored object returns what was stored).
        assert_eq!(p.record(3, "a", Some(&chat("Hi.")), None), None);
        assert_eq!(p.record(4, "b", None, Some(EARLIER)), None);
    }

    #[test]
    fn only_earlier_requests_count() {
        let mut p = Passages::new(&["a".into(), "b".into()]);
        // An answer holding text that a later request sends is judged before that
        // request is recorded: no hit, in the run as in `verify`.
        assert_eq!(
            p.record(1, "a", Some(&chat("Hi there, how are you?")), Some(EARLIER)),
            None
        );
        assert_eq!(
            p.record(2, "b", Some(&chat(EARLIER)), Some("Fine, thank you very much.")),
            None
        );
    }
}
