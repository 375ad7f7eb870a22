//! A gateway's response cache: a request the cache has answered before is answered
//! again from the stored answer, without the model.
//!
//! Gateways put one in front of the engines (LiteLLM's `cache: true`, Portkey,
//! Helicone, Cloudflare AI Gateway). Keyed without the caller, it gives one customer
//! another's answer to the same request, and tells anyone whether a request was sent
//! before. LiteLLM's cache hands back the stored answer with its `id`; other gateways
//! give a hit a new id and time. The key here is what such caches take: the model,
//! the messages, `max_tokens` and the temperature, not `user`, `seed`, `top_p` or
//! whether the answer is streamed.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

/// Who shares the response cache, and how it recognises a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ResponseCacheScope {
    /// No response cache (the default): every request goes to the model.
    #[default]
    Off,
    /// Each tenant's answers are kept for that tenant's own later requests only.
    PerTenant,
    /// One cache for every tenant: a request answered for one is answered from it for
    /// any other, with the stored answer's id and time.
    Global,
    /// As `global`, but a hit is given a new id and time, as some gateways do: only
    /// the content, and how soon it came, give the reuse away.
    GlobalRenamed,
    /// One cache for every tenant that recognises a request by its figures (every run
    /// of digits, in order, at least eight digits in all), as a semantic cache matches
    /// requests that mean the same: a paraphrase that keeps the figures is a hit.
    GlobalSemantic,
}

impl ResponseCacheScope {
    /// The scope's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ResponseCacheScope::Off => "off",
            ResponseCacheScope::PerTenant => "per-tenant",
            ResponseCacheScope::Global => "global",
            ResponseCacheScope::GlobalRenamed => "global-renamed",
            ResponseCacheScope::GlobalSemantic => "global-semantic",
        }
    }
}

/// An answer as it was first sent.
#[derive(Clone, Debug)]
pub(crate) struct Stored {
    pub id: String,
    pub created: u64,
    pub text: String,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub finish_reason: &'static str,
}

/// The most answers kept; the cache is emptied when it is full.
const CAPACITY: usize = 4096;

/// The cache itself.
#[derive(Debug, Default)]
pub(crate) struct ResponseCache {
    scope: ResponseCacheScope,
    answers: Mutex<HashMap<u64, Stored>>,
}

impl ResponseCache {
    pub fn new(scope: ResponseCacheScope) -> Self {
        ResponseCache {
            scope,
            answers: Mutex::default(),
        }
    }

    /// The key of a request, where the cache would keep its answer.
    pub fn key(
        &self,
        tenant: &str,
        model: &str,
        prompt: &str,
        max_tokens: usize,
        temperature: Option<f64>,
    ) -> Option<u64> {
        let mut h = DefaultHasher::new();
        match self.scope {
            ResponseCacheScope::Off => return None,
            ResponseCacheScope::PerTenant => (1u8, tenant, prompt).hash(&mut h),
            ResponseCacheScope::Global | ResponseCacheScope::GlobalRenamed => (2u8, prompt).hash(&mut h),
            ResponseCacheScope::GlobalSemantic => {
                let figures: Vec<&str> = prompt
                    .split(|c: char| !c.is_ascii_digit())
                    .filter(|s| !s.is_empty())
                    .collect();
                if figures.iter().map(|s| s.len()).sum::<usize>() < 8 {
                    return None;
                }
                (3u8, figures).hash(&mut h);
            }
        }
        (model, max_tokens, temperature.unwrap_or(1.0).to_bits()).hash(&mut h);
        Some(h.finish())
    }

    /// The stored answer for `key`, as a hit gives it.
    pub fn get(&self, key: u64) -> Option<Stored> {
        let stored = self
            .answers
            .lock()
            .expect("response cache lock poisoned")
            .get(&key)
            .cloned()?;
        Some(if self.scope == ResponseCacheScope::GlobalRenamed {
            Stored {
                id: new_id(),
                created: now(),
                ..stored
            }
        } else {
            stored
        })
    }

    /// Keeps an answer for `key` (the first answer stays).
    pub fn put(&self, key: u64, answer: Stored) {
        let mut answers = self.answers.lock().expect("response cache lock poisoned");
        if answers.len() >= CAPACITY {
            answers.clear();
        }
        answers.entry(key).or_insert(answer);
    }
}

/// A new completion id.
pub(crate) fn new_id() -> String {
    format!(
        "chatcmpl-{}",
        tenantcheck_evidence::hex(&tenantcheck_evidence::random_bytes::<12>())
    )
}

/// The time now, in seconds since the epoch (a completion's `created`).
pub(crate) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(text: &str) -> Stored {
        Stored {
            id: new_id(),
            created: now(),
            text: text.into(),
            prompt_tokens: 3,
            completion_tokens: 2,
            finish_reason: "stop",
        }
    }

    #[test]
    fn the_scope_decides_who_gets_an_answer_kept_for_another() {
        let prompt = "Customer on file: Ada, account 4521-7788-0012. Repeat it.";
        let paraphrase = "Please say back this record: Ada, account 4521 7788 0012.";
        for (scope, same_tenant, other_tenant, other_words, renamed) in [
            (ResponseCacheScope::Off, false, false, false, false),
            (ResponseCacheScope::PerTenant, true, false, false, false),
            (ResponseCacheScope::Global, true, true, false, false),
            (ResponseCacheScope::GlobalRenamed, true, true, false, true),
            (ResponseCacheScope::GlobalSemantic, true, true, true, false),
        ] {
            let cache = ResponseCache::new(scope);
            let first = stored("Ada, account 4521-7788-0012.");
            if let Some(k) = cache.key("a", "m", prompt, 64, Some(0.0)) {
                cache.put(k, first.clone());
            }
            let hit = |tenant: &str, text: &str| cache.key(tenant, "m", text, 64, Some(0.0)).and_then(|k| cache.get(k));
            assert_eq!(hit("a", prompt).is_some(), same_tenant, "{scope:?}");
            assert_eq!(hit("b", prompt).is_some(), other_tenant, "{scope:?}");
            assert_eq!(hit("b", paraphrase).is_some(), other_words, "{scope:?}");
            if let Some(h) = hit("b", prompt) {
                assert_eq!(h.text, first.text);
                assert_eq!(h.id != first.id, renamed, "{scope:?}");
            }
            // Another max_tokens or temperature is another request.
            assert!(
                cache
                    .key("a", "m", prompt, 65, Some(0.0))
                    .and_then(|k| cache.get(k))
                    .is_none()
            );
            assert!(
                cache
                    .key("a", "m", prompt, 64, Some(0.7))
                    .and_then(|k| cache.get(k))
                    .is_none()
            );
        }
    }

    #[test]
    fn a_semantic_key_needs_eight_digits() {
        let cache = ResponseCache::new(ResponseCacheScope::GlobalSemantic);
        assert!(cache.key("a", "m", "Say hello 12 times.", 8, None).is_none());
        assert!(cache.key("a", "m", "Account 1234-5678.", 8, None).is_some());
    }
}
