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

/// What replaces a secret wherever one would have appeared.
pub const REDACTED: &str = "[REDACTED]";

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

/// Replaces every occurrence of any known secret with [`REDACTED`].
#[derive(Clone, Debug, Default)]
pub struct Redactor {
    matcher: Option<AhoCorasick>,
}

impl Redactor {
    /// A redactor for these secrets. Empty secrets are ignored.
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a Secret>) -> Self {
        let patterns: Vec<&str> = secrets
            .into_iter()
            .map(Secret::expose)
            .filter(|s| !s.is_empty())
            .collect();
        if patterns.is_empty() {
            return Redactor { matcher: None };
        }
        let matcher = AhoCorasick::builder()
            .match_kind(aho_corasick::MatchKind::LeftmostLongest)
            .build(&patterns)
            .expect("secret patterns are plain strings");
        Redactor { matcher: Some(matcher) }
    }

    /// `text` with every secret replaced.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        match &self.matcher {
            Some(m) if m.is_match(text) => {
                let n = m.patterns_len();
                Cow::Owned(m.replace_all(text, &vec![REDACTED; n]))
            }
            _ => Cow::Borrowed(text),
        }
    }
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
    fn random_sim_keys_differ() {
        assert_ne!(Secret::random_sim_key(), Secret::random_sim_key());
    }
}
