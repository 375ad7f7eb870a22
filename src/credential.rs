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
/// vendor is known to echo a key back in: as it is, in any letter case, in hex, fully
/// percent-encoded or `\u`-escaped, inside base64 or base64url (with or without
/// padding, of the key alone or of anything holding it: `Bearer KEY`, `user:KEY`), and
/// with whitespace or zero-width characters inserted between its characters; and its
/// SHA-256 in hex.
///
/// # Known limitations
/// A key partly escaped (some characters percent-encoded, others not), or split by
/// something other than whitespace, is not recognised; neither is one re-encoded
/// twice. Encoded forms are looked for only for keys of at least
/// [`Redactor::MIN_ENCODED_LEN`] characters, where a chance match is impossible.
#[derive(Clone, Debug, Default)]
pub struct Redactor {
    /// Every form of every key, matched without regard to ASCII case.
    forms: Option<AhoCorasick>,
    /// The keys themselves, for the pass over text with its whitespace taken out.
    keys: Option<AhoCorasick>,
}

impl Redactor {
    /// Keys shorter than this are redacted as they are and split by whitespace, not in
    /// encoded forms (a short base64 fragment could match ordinary text).
    pub const MIN_ENCODED_LEN: usize = 12;

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
        for key in &keys {
            forms.push((*key).to_owned());
            if key.len() >= Self::MIN_ENCODED_LEN {
                forms.extend(encoded_forms(key));
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
        Redactor {
            forms: Some(build(&forms)),
            keys: Some(build(&keys)),
        }
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
        match split_keys(&text, keys) {
            Some(ranges) => Cow::Owned(replace_ranges(&text, &ranges)),
            None => text,
        }
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
        if !keys.is_match(&without_escapes(&fast)) {
            return fast;
        }
        match serde_json::from_str::<serde_json::Value>(&fast) {
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
