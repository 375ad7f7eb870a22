//! [`Secret`]: a tenant's credential, and the [`Redactor`] that keeps every secret out
//! of transcripts, reports, logs and error messages.
//!
//! A `Secret` never prints its value: `Debug` shows `Secret(<redacted>)` and it has no
//! `Display` or `Serialize`. The only way to its bytes is [`Secret::expose`], used by
//! adapters to build the authorization header. As a second line of defence, every
//! artifact the run writes passes through a `Redactor` built from all the run's
//! secrets, so a vendor that echoes a key back in an error body cannot put it into the
//! evidence either.

use aho_corasick::AhoCorasick;
use std::borrow::Cow;
use std::fmt;

pub use tenantcheck_evidence::exchange::REDACTED;

/// A credential value: an API key or token.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a credential value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// A fresh random key for the reference vendor (`sk-sim-` and 32 hex digits).
    pub fn random_sim_key() -> Self {
        Secret(format!("sk-sim-{}", crate::hex(&crate::random_bytes::<16>())))
    }

    /// The credential value, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Replaces every occurrence of any known secret with [`REDACTED`], in the forms a
/// vendor is known to echo a key back in, or can make of it cheaply: as it is, turned
/// around, in any letter case (upper, lower, swapped); each of those in hex, fully
/// percent-encoded or `\u`-escaped, inside base64 or base64url (with or without
/// padding, of the key alone or of anything holding it: `Bearer KEY`, `user:KEY`);
/// with whitespace or zero-width characters inserted between its characters; any
/// stretch of [`Redactor::MIN_FRAGMENT`] characters of it or of it turned around that
/// holds a digit or a symbol (a key split across fields, headers, or a masked echo
/// such as `sk-live-Ab3+…-ZZtop` showing its ends); and its SHA-256 in hex.
///
/// # Known limitations
/// A key partly escaped (some characters percent-encoded, others not), or split by
/// something other than whitespace, is not recognised; neither is one re-encoded
/// twice, nor a fragment shorter than [`Redactor::MIN_FRAGMENT`], nor a fragment
/// encoded. Encoded forms and fragments are looked for only for keys of at least
/// [`Redactor::MIN_ENCODED_LEN`] characters, where a chance match is impossible.
#[derive(Clone, Debug, Default)]
pub struct Redactor {
    /// Every form of every key, matched without regard to ASCII case.
    forms: Option<AhoCorasick>,
    /// The keys themselves, for the pass over text with its whitespace taken out.
    keys: Option<AhoCorasick>,
    /// Every stretch of [`Redactor::MIN_FRAGMENT`] characters of every key and of it
    /// turned around, matched overlapping, without regard to ASCII case.
    fragments: Option<AhoCorasick>,
    /// How many texts it changed, shared by its clones.
    redacted: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Redactor {
    /// Keys shorter than this are redacted as they are and split by whitespace, not in
    /// encoded forms (a short base64 fragment could match ordinary text).
    pub const MIN_ENCODED_LEN: usize = 12;

    /// The shortest stretch of a key (at least [`Redactor::MIN_ENCODED_LEN`] long)
    /// redacted where it stands alone: keys are random past a short fixed prefix
    /// (`sk-proj-`), so ten characters of one stand nowhere but in it, and a key of 20
    /// characters or more split in two leaves of each half at most the letters at its
    /// ends.
    pub const MIN_FRAGMENT: usize = 10;

    /// A redactor for these secrets. Empty secrets are ignored.
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a Secret>) -> Self {
        let keys: Vec<&str> = secrets
            .into_iter()
            .map(Secret::expose)
            .filter(|s| !s.is_empty())
            .collect();
        if keys.is_empty() {
            return Redactor::default();
        }
        let mut forms: Vec<String> = Vec::new();
        let mut fragments: Vec<String> = Vec::new();
        for key in &keys {
            forms.push((*key).to_owned());
            if key.len() >= Self::MIN_ENCODED_LEN {
                for variant in variants(key) {
                    forms.extend(encoded_forms(&variant));
                    forms.push(variant);
                }
                fragments.extend(stretches(key, Self::MIN_FRAGMENT));
                fragments.extend(stretches(&key.chars().rev().collect::<String>(), Self::MIN_FRAGMENT));
                // A gateway's identity of the key (LiteLLM's hashed token): what
                // `metadata.cross-tenant` finds an endpoint showing another tenant,
                // which `verify` can judge only as a redaction.
                forms.push(crate::sha256_hex(key.as_bytes()));
            }
        }
        let build = |patterns: &[String]| {
            AhoCorasick::builder()
                .match_kind(aho_corasick::MatchKind::LeftmostLongest)
                .ascii_case_insensitive(true)
                .build(patterns)
                .expect("secret patterns are plain strings")
        };
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        fragments.sort();
        fragments.dedup();
        let fragments = (!fragments.is_empty()).then(|| {
            AhoCorasick::builder()
                .match_kind(aho_corasick::MatchKind::Standard)
                .ascii_case_insensitive(true)
                .build(&fragments)
                .expect("fragments are plain strings")
        });
        Redactor {
            forms: Some(build(&forms)),
            keys: Some(build(&keys)),
            fragments,
            redacted: Default::default(),
        }
    }

    /// How many texts this redactor and its clones have changed: non-zero when the
    /// vendor sent a credential of the run back in some form (the keys are then best
    /// rotated, whatever else the run showed).
    pub fn redacted(&self) -> u64 {
        self.redacted.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `text` with every secret replaced.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let (Some(forms), Some(keys)) = (&self.forms, &self.keys) else {
            return Cow::Borrowed(text);
        };
        let text = match forms.is_match(text) {
            true => Cow::Owned(forms.replace_all(text, &vec![REDACTED; forms.patterns_len()])),
            false => Cow::Borrowed(text),
        };
        let text = match split_keys(&text, keys) {
            Some(ranges) => Cow::Owned(replace_ranges(&text, &ranges)),
            None => text,
        };
        let text = match self.fragments.as_ref().and_then(|f| fragment_ranges(&text, f)) {
            Some(ranges) => Cow::Owned(replace_ranges(&text, &ranges)),
            None => text,
        };
        if matches!(text, Cow::Owned(_)) {
            self.redacted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        text
    }

    /// Redacts every string in `value` (object keys too), in place: the JSON stays
    /// valid whatever a key holds, and a key split by a line break is found before
    /// serialisation turns the break into `\n`.
    pub fn redact_json(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        if self.forms.is_none() {
            return;
        }
        match value {
            Value::String(s) => {
                if let Cow::Owned(clean) = self.redact(s) {
                    *s = clean;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_json(v)),
            Value::Object(map) => {
                let old = std::mem::take(map);
                for (k, mut v) in old {
                    self.redact_json(&mut v);
                    map.insert(self.redact(&k).into_owned(), v);
                }
            }
            _ => {}
        }
    }
}

impl Redactor {
    /// `json`, a serialised JSON value, with every secret redacted. A key split by
    /// whitespace shows in JSON as escapes (`\n`, `\u00a0`): when the text without
    /// them holds a key, the strings are redacted one by one instead (see
    /// [`Redactor::redact_json`]; the object keys then come out sorted).
    pub fn redact_json_text<'t>(&self, json: &'t str) -> Cow<'t, str> {
        let Some(keys) = &self.keys else {
            return Cow::Borrowed(json);
        };
        let fast = self.redact(json);
        if !keys.is_match(&without_escapes(json)) {
            return fast;
        }
        // Read from the text as it was: the fast pass may have redacted a stretch of a
        // split key, leaving the rest of it no longer a key.
        match serde_json::from_str::<serde_json::Value>(json) {
            Ok(mut v) => {
                self.redact_json(&mut v);
                Cow::Owned(v.to_string())
            }
            Err(_) => fast,
        }
    }
}

/// `json` without fillers and without the escapes JSON writes for them.
fn without_escapes(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut chars = json.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('n' | 'r' | 't' | 'f' | 'b') => {
                    chars.next();
                    continue;
                }
                Some('u') => {
                    let hex: String = chars.clone().skip(1).take(4).collect();
                    if let Some(e) = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                        if is_filler(e) || e.is_control() {
                            chars.nth(4);
                            continue;
                        }
                    }
                }
                _ => {}
            }
        }
        if !is_filler(c) {
            out.push(c);
        }
    }
    out
}

/// Whether `c` is taken out before looking for a key split by it: whitespace and the
/// characters that show as nothing.
fn is_filler(c: char) -> bool {
    c.is_whitespace() || matches!(c, '\u{200b}'..='\u{200d}' | '\u{2060}' | '\u{feff}' | '\u{00ad}')
}

/// The byte ranges of `text` that hold a key once fillers are taken out, where at
/// least one filler was inside it; `None` when there are none.
fn split_keys(text: &str, keys: &AhoCorasick) -> Option<Vec<(usize, usize)>> {
    if !text.chars().any(is_filler) {
        return None;
    }
    // The text without fillers, and where each of its bytes came from.
    let mut packed = String::with_capacity(text.len());
    let mut from = Vec::with_capacity(text.len());
    for (at, c) in text.char_indices().filter(|(_, c)| !is_filler(*c)) {
        packed.push(c);
        from.extend((0..c.len_utf8()).map(|i| at + i));
    }
    let ranges: Vec<(usize, usize)> = keys
        .find_iter(&packed)
        .map(|m| (from[m.start()], from[m.end() - 1] + 1))
        .filter(|(start, end)| end - start > 1 && text[*start..*end].chars().any(is_filler))
        .collect();
    (!ranges.is_empty()).then_some(ranges)
}

/// The byte ranges of `text` that some stretch of a key covers, overlapping matches
/// joined; `None` when there are none.
fn fragment_ranges(text: &str, fragments: &AhoCorasick) -> Option<Vec<(usize, usize)>> {
    let mut found: Vec<(usize, usize)> = fragments
        .find_overlapping_iter(text)
        .map(|m| (m.start(), m.end()))
        .collect();
    found.sort_unstable();
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for m in found {
        match ranges.last_mut() {
            Some(last) if m.0 <= last.1 => last.1 = last.1.max(m.1),
            _ => ranges.push(m),
        }
    }
    (!ranges.is_empty()).then_some(ranges)
}

/// The forms of `key` a vendor can make without effort: the key, turned around, and
/// each of the two in upper, lower and swapped case.
fn variants(key: &str) -> Vec<String> {
    let swapped = |s: &str| -> String {
        s.chars()
            .map(|c| match c {
                'a'..='z' => c.to_ascii_uppercase(),
                'A'..='Z' => c.to_ascii_lowercase(),
                _ => c,
            })
            .collect()
    };
    let mut out = Vec::new();
    for k in [key.to_owned(), key.chars().rev().collect::<String>()] {
        out.push(k.to_uppercase());
        out.push(k.to_lowercase());
        out.push(swapped(&k));
        out.push(k);
    }
    out.sort();
    out.dedup();
    out
}

/// Every stretch of `len` characters of `key` that holds a digit or a symbol other
/// than `-` and `_`: letters and dashes alone may be ordinary words (a key named
/// `origin-test-openai-chat-...` holds the adapter's name); a random key's stretches
/// almost always hold one.
fn stretches(key: &str, len: usize) -> Vec<String> {
    let chars: Vec<char> = key.chars().collect();
    chars
        .windows(len)
        .filter(|w| w.iter().any(|c| !(c.is_alphabetic() || *c == '-' || *c == '_')))
        .map(|w| w.iter().collect())
        .collect()
}

/// `text` with each of the (ordered, disjoint) byte `ranges` replaced by [`REDACTED`].
fn replace_ranges(text: &str, ranges: &[(usize, usize)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for &(start, end) in ranges {
        out.push_str(&text[at..start]);
        out.push_str(REDACTED);
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// The forms of `key` other than itself that a vendor may echo: hex, every byte
/// percent-encoded, every character `\u`-escaped, and the part of its base64 and
/// base64url that is the same whatever came before it in the encoded bytes (one for
/// each of the three alignments) and whatever comes after.
fn encoded_forms(key: &str) -> Vec<String> {
    use base64::Engine;
    let bytes = key.as_bytes();
    let mut forms = vec![
        crate::hex(bytes),
        bytes.iter().map(|b| format!("%{b:02x}")).collect(),
        key.encode_utf16().map(|u| format!("\\u{u:04x}")).collect(),
    ];
    for offset in 0..3usize {
        let mut shifted = vec![0u8; offset];
        shifted.extend_from_slice(bytes);
        let encoded = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&shifted);
        // Characters carrying bits of the bytes before the key, and the last one when
        // it also carries bits of what follows.
        let skip = (offset * 8).div_ceil(6);
        let whole = shifted.len() * 8 / 6;
        let stable = &encoded[skip..whole];
        forms.push(stable.to_owned());
        forms.push(stable.replace('+', "-").replace('/', "_"));
    }
    forms.sort();
    forms.dedup();
    forms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value() {
        let s = Secret::new("sk-live-123");
        assert!(!format!("{s:?}").contains("sk-live-123"));
    }

    #[test]
    fn redacts_every_secret_everywhere() {
        let a = Secret::new("key-aaa");
        let b = Secret::new("key-bbb");
        let r = Redactor::new([&a, &b]);
        let out = r.redact("x key-aaa y key-bbb z key-aaa");
        assert_eq!(out, "x [REDACTED] y [REDACTED] z [REDACTED]");
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn redacts_the_forms_vendors_echo() {
        use base64::Engine;
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
        let key = "sk-live-Ab3+/9xQ_7kz-ZZtop";
        let r = Redactor::new([&Secret::new(key)]);
        let pct: String = key.bytes().map(|b| format!("%{b:02X}")).collect();
        let escaped: String = key.chars().map(|c| format!("\\u{:04X}", c as u32)).collect();
        let forms = [
            key.to_uppercase(),
            key.to_lowercase(),
            crate::hex(key.as_bytes()),
            crate::hex(key.as_bytes()).to_uppercase(),
            pct,
            escaped,
            STANDARD.encode(key),
            URL_SAFE_NO_PAD.encode(key),
            STANDARD.encode(format!("Bearer {key}")),
            URL_SAFE_NO_PAD.encode(format!("Bearer {key}")),
            STANDARD.encode(format!("user:{key}")),
            STANDARD.encode(format!("{{\"k\":\"{key}\",\"n\":1}}")),
            format!("{} {}", &key[..9], &key[9..]),
            key.chars().map(|c| format!("{c} ")).collect(),
            format!("{}\n\t{}\u{200b}{}", &key[..3], &key[3..15], &key[15..]),
        ];
        for form in forms {
            let text = format!("echo: <{form}> end");
            let out = r.redact(&text);
            assert!(out.contains(REDACTED), "{form} -> {out}");
            assert!(out.starts_with("echo: <") && out.ends_with("> end"), "{out}");
            let plain: String = out.chars().filter(|c| !is_filler(*c)).collect();
            assert!(!plain.to_lowercase().contains(&key.to_lowercase()), "{form} -> {out}");
        }
        assert_eq!(r.redact("a sentence with spaces only"), "a sentence with spaces only");
    }

    #[test]
    fn redacts_the_transforms_a_vendor_can_make_cheaply() {
        use base64::Engine;
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
        let key = "sk-live-Ab3+/9xQ_7kz-ZZtop";
        let r = Redactor::new([&Secret::new(key)]);
        let reversed: String = key.chars().rev().collect();
        let swapped: String = key
            .chars()
            .map(|c| match c.is_ascii_lowercase() {
                true => c.to_ascii_uppercase(),
                false => c.to_ascii_lowercase(),
            })
            .collect();
        let mut forms = Vec::new();
        for variant in [&reversed, &swapped, &key.to_uppercase(), &reversed.to_lowercase()] {
            forms.push(variant.clone());
            forms.push(crate::hex(variant.as_bytes()));
            forms.push(STANDARD.encode(variant));
            forms.push(URL_SAFE_NO_PAD.encode(format!("Bearer {variant}")));
        }
        for form in &forms {
            let text = format!("echo: <{form}> end");
            let out = r.redact(&text);
            assert!(
                out.contains(REDACTED) && !out.contains(form.as_str()),
                "{form} -> {out}"
            );
            assert!(out.starts_with("echo: <") && out.ends_with("> end"), "{out}");
        }
        // Split across two fields, each half alone; a masked echo showing both ends.
        let (head, tail) = key.split_at(key.len() / 2);
        for piece in [head, tail, &reversed[..10]] {
            // At most a few letters of its end stand beside the redaction.
            let out = r.redact(&format!("x-part: {piece};")).into_owned();
            assert!(
                out.contains(REDACTED) && out.len() <= "x-part: ;".len() + REDACTED.len() + 2,
                "{piece} -> {out}"
            );
        }
        let masked = format!(
            "Incorrect API key provided: {}****{}.",
            &key[..12],
            &key[key.len() - 12..]
        );
        let out = r.redact(&masked);
        assert_eq!(out.matches(REDACTED).count(), 2, "{out}");
        assert!(
            !out.contains(&key[1..12]) && !out.contains(&key[key.len() - 12..]),
            "{out}"
        );
        // Less than a stretch of it is ordinary text, and so is a stretch of letters
        // and dashes alone (a key may hold words).
        assert_eq!(r.redact("sk-live-A is a prefix"), "sk-live-A is a prefix");
        assert_eq!(r.redact("ZZtop and Ab3 are words"), "ZZtop and Ab3 are words");
        let worded = Redactor::new([&Secret::new("origin-test-openai-chat-secret-0-0123456789")]);
        assert_eq!(worded.redact("adapter openai-chat"), "adapter openai-chat");
        assert_eq!(worded.redact("x secret-0-0123 y"), format!("x {REDACTED} y"));
    }

    #[test]
    fn json_strings_are_redacted_before_serialisation() {
        let key = "sk-json-0123456789abcdef";
        let r = Redactor::new([&Secret::new(key)]);
        let mut v = serde_json::json!({ "a": [format!("{}\n{}", &key[..5], &key[5..])], key: 1 });
        r.redact_json(&mut v);
        let text = v.to_string();
        assert!(!text.contains("sk-js") && text.matches(REDACTED).count() == 2, "{text}");
    }

    #[test]
    fn serialised_json_is_redacted_through_its_escapes() {
        let key = "sk-json-0123456789abcdef";
        let r = Redactor::new([&Secret::new(key)]);
        let v = serde_json::json!({ "b": format!("{}\n\u{a0}{}", &key[..5], &key[5..]), "a": key });
        let out = r.redact_json_text(&v.to_string()).into_owned();
        assert!(!out.contains("sk-js") && !out.contains("0123456789"), "{out}");
        let plain = serde_json::json!({ "b": "x\ny", "a": 1 }).to_string();
        assert!(matches!(r.redact_json_text(&plain), Cow::Borrowed(_)));
    }

    #[test]
    fn random_sim_keys_differ() {
        assert_ne!(Secret::random_sim_key(), Secret::random_sim_key());
    }
}
