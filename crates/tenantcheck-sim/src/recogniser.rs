//! [`Recogniser`]: the vendor that tries to tell the suite's requests from its
//! customers' traffic, so that it can serve the test honestly and everything else as it
//! likes (a defeat device).
//!
//! It learns from the requests of earlier runs made with other secrets, as a vendor
//! that kept its logs would, and from its own customers' traffic, so that it flags as
//! few of them as it can. What it sees of a request is what any vendor sees: the path,
//! the body (text and parameters) and the prompt's length. Each [`Feature`] is one
//! rule a vendor could write in a few lines:
//!
//! - [`Feature::Phrase`]: a six-word phrase (words lower-cased, every digit read as
//!   `0`, so that a record layout is a phrase too: `account 0000 0000 0000 note
//!   prefers`) that stood in at least [`MIN_REQUESTS`] requests of one earlier run and
//!   in none of the traffic;
//! - [`Feature::Parameters`]: the request's shape (path, the parameters and their
//!   values, the roles of its messages) seen in at least [`MIN_REQUESTS`] requests of
//!   one earlier run and never in the traffic;
//! - [`Feature::Length`]: the prompt's length, to 1%, where at least [`MIN_REQUESTS`]
//!   long prompts of one earlier run had it and no request of the traffic did (a
//!   ladder's rungs sit at fixed fractions of the context).
//!
//! [`Recogniser::learn_from`] lowers the bar to one request: a vendor that keeps every
//! phrase of its logs.
//!
//! What it does not see yet, and a vendor could: pacing (a run's requests come in
//! bursts), the HTTP client's own headers, and the accounts the requests come from.
//! `benches/recognise.rs` scores it; `docs/benchmarks.md` has the figures.

use std::collections::{HashMap, HashSet};

/// A phrase, a shape or a length must stand in this many requests of one earlier run
/// to be learnt.
pub const MIN_REQUESTS: usize = 3;

/// Words in a phrase.
pub const PHRASE_WORDS: usize = 6;

/// What a vendor sees of one request.
#[derive(Clone, Debug)]
pub struct Request {
    /// The URL's path (`/v1/chat/completions`).
    pub path: String,
    /// The JSON body; `Null` for a request without one.
    pub body: serde_json::Value,
}

impl Request {
    /// Every string of the body, joined by line breaks: the text the vendor's model
    /// reads, and a little more (the model's name, a user id).
    pub fn text(&self) -> String {
        tenantcheck_evidence::exchange::request_text(&self.body)
    }
}

/// One rule of the [`Recogniser`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Feature {
    /// A six-word phrase of earlier runs.
    Phrase,
    /// The request's parameters and message roles.
    Parameters,
    /// The prompt's length.
    Length,
}

impl Feature {
    /// Every feature, in the order reports list them.
    pub const ALL: [Feature; 3] = [Feature::Phrase, Feature::Parameters, Feature::Length];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Phrase => "phrase",
            Feature::Parameters => "parameters",
            Feature::Length => "length",
        }
    }
}

/// What was learnt.
#[derive(Clone, Debug, Default)]
pub struct Recogniser {
    phrases: HashSet<u64>,
    shapes: HashSet<String>,
    lengths: HashSet<i64>,
    /// Prompts shorter than this many characters are not told apart by length.
    min_length_chars: usize,
}

impl Recogniser {
    /// Learns from `runs` (each the requests of one earlier run) what recurs in them
    /// and never in `traffic` (the vendor's customers' requests). Lengths are learnt
    /// for prompts of at least `long_chars` characters only (the ladder's).
    pub fn learn(runs: &[Vec<Request>], traffic: &[Request], long_chars: usize) -> Recogniser {
        Recogniser::learn_from(runs, traffic, long_chars, MIN_REQUESTS)
    }

    /// [`Recogniser::learn`], learning what stood in `min_requests` requests of one run
    /// (1: everything an earlier run sent, the most a vendor can learn from its logs).
    pub fn learn_from(
        runs: &[Vec<Request>],
        traffic: &[Request],
        long_chars: usize,
        min_requests: usize,
    ) -> Recogniser {
        let mut r = Recogniser {
            min_length_chars: long_chars,
            ..Recogniser::default()
        };
        for run in runs {
            let mut phrases: HashMap<u64, usize> = HashMap::new();
            let mut shapes: HashMap<String, usize> = HashMap::new();
            let mut lengths: HashMap<i64, usize> = HashMap::new();
            for request in run {
                let text = request.text();
                for p in phrase_set(&text) {
                    *phrases.entry(p).or_default() += 1;
                }
                *shapes.entry(shape(request)).or_default() += 1;
                if text.len() >= long_chars {
                    *lengths.entry(length_bucket(text.len())).or_default() += 1;
                }
            }
            r.phrases.extend(recurring_keys(phrases, min_requests));
            r.shapes.extend(recurring_keys(shapes, min_requests));
            r.lengths.extend(recurring_keys(lengths, min_requests));
        }
        for request in traffic {
            let text = request.text();
            for p in phrase_set(&text) {
                r.phrases.remove(&p);
            }
            r.shapes.remove(&shape(request));
            r.lengths.remove(&length_bucket(text.len()));
        }
        r
    }

    /// How many phrases, shapes and lengths it holds.
    pub fn learnt(&self, feature: Feature) -> usize {
        match feature {
            Feature::Phrase => self.phrases.len(),
            Feature::Parameters => self.shapes.len(),
            Feature::Length => self.lengths.len(),
        }
    }

    /// The features by which it recognises `request` as the suite's; empty when it
    /// takes it for a customer's.
    pub fn recognise(&self, request: &Request) -> Vec<Feature> {
        let text = request.text();
        let mut found = Vec::new();
        if phrases(&text, |p| self.phrases.contains(&p)) {
            found.push(Feature::Phrase);
        }
        if self.shapes.contains(&shape(request)) {
            found.push(Feature::Parameters);
        }
        if text.len() >= self.min_length_chars && self.lengths.contains(&length_bucket(text.len())) {
            found.push(Feature::Length);
        }
        found
    }
}

/// The keys of `counts` that stand in at least `min_requests` requests.
fn recurring_keys<K>(counts: HashMap<K, usize>, min_requests: usize) -> impl Iterator<Item = K> {
    counts
        .into_iter()
        .filter(move |&(_, n)| n >= min_requests.max(1))
        .map(|(k, _)| k)
}

/// The distinct phrases of `text`, hashed.
fn phrase_set(text: &str) -> HashSet<u64> {
    let mut set = HashSet::new();
    phrases(text, |p| {
        set.insert(p);
        false
    });
    set
}

/// Calls `each` with the hash of every phrase of `text` in turn, until it returns true;
/// returns whether one did.
fn phrases(text: &str, mut each: impl FnMut(u64) -> bool) -> bool {
    let mut window: [u64; PHRASE_WORDS] = [0; PHRASE_WORDS];
    let mut seen = 0usize;
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        window[seen % PHRASE_WORDS] = word_hash(word);
        seen += 1;
        if seen >= PHRASE_WORDS {
            let mut h = FNV_OFFSET;
            for i in 0..PHRASE_WORDS {
                h = fnv(h, &window[(seen + i) % PHRASE_WORDS].to_le_bytes());
            }
            if each(h) {
                return true;
            }
        }
    }
    false
}

/// A word's hash: lower-cased, every digit read as `0`.
fn word_hash(word: &str) -> u64 {
    let mut h = FNV_OFFSET;
    for c in word.chars() {
        let c = if c.is_numeric() { '0' } else { c };
        for l in c.to_lowercase() {
            let mut buf = [0u8; 4];
            h = fnv(h, l.encode_utf8(&mut buf).as_bytes());
        }
    }
    h
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A request's shape: its path, every parameter but the texts (numbers and booleans
/// with their values, other strings as `s`, lists and objects by their keys), and the
/// roles of its messages.
fn shape(request: &Request) -> String {
    use serde_json::Value;
    const TEXTS: &[&str] = &["messages", "input", "prompt", "contents", "system", "model", "user"];
    let mut out = request.path.clone();
    if let Value::Object(map) = &request.body {
        let mut keys: Vec<&String> = map.keys().collect();
        keys.sort();
        for k in keys {
            let v = &map[k];
            out.push(' ');
            out.push_str(k);
            if TEXTS.contains(&k.as_str()) {
                continue;
            }
            out.push('=');
            match v {
                Value::Number(n) => out.push_str(&n.to_string()),
                Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                Value::String(_) => out.push('s'),
                Value::Null => out.push_str("null"),
                Value::Object(o) => {
                    let mut inner: Vec<&String> = o.keys().collect();
                    inner.sort();
                    out.push_str(&format!("{inner:?}"));
                }
                Value::Array(a) => out.push_str(&format!("[{}]", a.len())),
            }
        }
        if let Some(Value::Array(messages)) = map.get("messages") {
            out.push_str(" roles=");
            for m in messages {
                out.push_str(m.get("role").and_then(Value::as_str).unwrap_or("?"));
                out.push(',');
            }
        }
    }
    out
}

/// A length to within 1%.
fn length_bucket(chars: usize) -> i64 {
    ((chars.max(1) as f64).ln() / 1.01f64.ln()).round() as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chat(text: &str, max_tokens: u32) -> Request {
        Request {
            path: "/v1/chat/completions".into(),
            body: json!({"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "temperature": 0}),
        }
    }

    #[test]
    fn a_phrase_recurring_in_a_run_and_absent_from_traffic_recognises_a_request() {
        let marker = "please read back the first record exactly";
        let run: Vec<Request> = (0..3).map(|i| chat(&format!("{marker} number {i}"), 64)).collect();
        let traffic = vec![chat("please read back the first line of the poem", 64)];
        let r = Recogniser::learn(&[run], &traffic, 1000);
        let fresh = chat(&format!("Hello. {marker}: 1234"), 64);
        assert_eq!(r.recognise(&fresh), vec![Feature::Phrase]);
        // The traffic's own request has the same shape and was pruned from it, and no
        // phrase of the run.
        assert!(r.recognise(&traffic[0]).is_empty(), "{:?}", r.recognise(&traffic[0]));
        assert!(r.recognise(&chat("read back the first record", 64)).is_empty());
    }

    #[test]
    fn digits_and_case_do_not_hide_a_layout() {
        let run: Vec<Request> = (0..3)
            .map(|i| chat(&format!("Account {i}{i}{i}{i} 1234 5678, note: prefers tea"), 9))
            .collect();
        let r = Recogniser::learn(&[run], &[], 1000);
        assert!(
            r.recognise(&chat("ACCOUNT 9876 5432 1098, NOTE: PREFERS coffee", 7))
                .contains(&Feature::Phrase)
        );
    }

    #[test]
    fn a_shape_seen_in_traffic_is_never_learnt() {
        let run: Vec<Request> = (0..3).map(|i| chat(&format!("question {i}"), 64)).collect();
        let odd: Vec<Request> = (0..3).map(|i| chat(&format!("other {i}"), 65)).collect();
        let r = Recogniser::learn(&[run, odd], &[chat("anything", 64)], 1000);
        assert!(r.recognise(&chat("a customer's", 64)).is_empty());
        assert_eq!(r.recognise(&chat("a customer's", 65)), vec![Feature::Parameters]);
    }

    #[test]
    fn lengths_are_learnt_for_long_prompts_only() {
        let long = "x ".repeat(5_000);
        let run: Vec<Request> = (0..3).map(|_| chat(&long, 1)).collect();
        let r = Recogniser::learn(std::slice::from_ref(&run), &[], 8_000);
        assert!(r.recognise(&chat(&"y ".repeat(5_010), 2)).contains(&Feature::Length));
        assert!(!r.recognise(&chat(&"y ".repeat(5_400), 2)).contains(&Feature::Length));
        let r = Recogniser::learn(&[run], &[], 20_000);
        assert_eq!(r.learnt(Feature::Length), 0);
    }
}
