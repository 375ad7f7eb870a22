//! [`PrefixCache`]: the reference vendor's prompt-prefix cache, as engines keep one
//! (vLLM's automatic prefix caching, SGLang's radix cache, llama.cpp's slot cache).
//!
//! A prompt is cut into blocks of whole KV pages; block `i` is known by a hash chained
//! over the cache's *scope key* and every token up to the end of block `i`, so a block
//! is found only when the whole prefix before it matches too. The scope key decides who
//! shares: nobody (`off`), each tenant with itself (`per-tenant`), or everyone
//! (`global`); a request's `cache_salt` (vLLM's per-request isolation key) is mixed in
//! with every scope, so different salts never share.
//!
//! The engine charges prefill time only for the tokens after the cached prefix, so a
//! shared prefix really is faster, and reports the cached count as
//! `usage.prompt_tokens_details.cached_tokens`. The cache holds block hashes, not KV:
//! the toy model still reads every token from the request's own pages.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

/// Who shares cached prefixes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PrefixCacheScope {
    /// No prefix cache: every prompt is prefilled whole.
    Off,
    /// Each tenant's prompts share with that tenant's own later prompts only.
    #[default]
    PerTenant,
    /// Every tenant shares one cache: the side channel of the 2025 audits.
    Global,
}

impl PrefixCacheScope {
    /// The scope's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PrefixCacheScope::Off => "off",
            PrefixCacheScope::PerTenant => "per-tenant",
            PrefixCacheScope::Global => "global",
        }
    }
}

/// The most blocks kept; the least recently used half is dropped when it is full.
const CAPACITY_BLOCKS: usize = 1 << 16;

/// Block hashes of cached prefixes, with the time each was last used.
#[derive(Debug)]
pub struct PrefixCache {
    scope: PrefixCacheScope,
    block_tokens: usize,
    blocks: HashMap<u64, u64>,
    clock: u64,
}

impl PrefixCache {
    /// An empty cache of `scope` over blocks of `block_tokens` tokens.
    pub fn new(scope: PrefixCacheScope, block_tokens: usize) -> Self {
        PrefixCache {
            scope,
            block_tokens: block_tokens.max(1),
            blocks: HashMap::new(),
            clock: 0,
        }
    }

    /// The chained hash of each whole block of `prompt`, as `tenant` with `salt` sees it;
    /// empty when the cache is off.
    fn chain(&self, tenant: &str, salt: Option<&str>, prompt: &[&str]) -> Vec<u64> {
        let mut h = DefaultHasher::new();
        match self.scope {
            PrefixCacheScope::Off => return Vec::new(),
            PrefixCacheScope::PerTenant => (1u8, tenant).hash(&mut h),
            PrefixCacheScope::Global => 2u8.hash(&mut h),
        }
        salt.hash(&mut h);
        prompt
            .chunks_exact(self.block_tokens)
            .map(|block| {
                block.hash(&mut h);
                h.finish()
            })
            .collect()
    }

    /// How many leading tokens of `prompt` are cached for `tenant` with `salt`.
    pub fn lookup(&mut self, tenant: &str, salt: Option<&str>, prompt: &[&str]) -> usize {
        self.clock += 1;
        let mut hit = 0;
        for h in self.chain(tenant, salt, prompt) {
            match self.blocks.get_mut(&h) {
                Some(used) => {
                    *used = self.clock;
                    hit += 1;
                }
                None => break,
            }
        }
        hit * self.block_tokens
    }

    /// Caches every whole block of `prompt` for `tenant` with `salt`.
    pub fn insert(&mut self, tenant: &str, salt: Option<&str>, prompt: &[&str]) {
        self.clock += 1;
        for h in self.chain(tenant, salt, prompt) {
            self.blocks.insert(h, self.clock);
        }
        if self.blocks.len() > CAPACITY_BLOCKS {
            let mut ages: Vec<u64> = self.blocks.values().copied().collect();
            let (_, &mut median, _) = ages.select_nth_unstable(CAPACITY_BLOCKS / 2);
            self.blocks.retain(|_, used| *used > median);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(words: &[&'static str], n: usize) -> Vec<&'static str> {
        words.iter().copied().cycle().take(n).collect()
    }

    #[test]
    fn scopes_decide_who_shares_a_prefix() {
        let p = prompt(&["a", "b", "c"], 100);
        for (scope, same_tenant, other_tenant) in [
            (PrefixCacheScope::Off, 0, 0),
            (PrefixCacheScope::PerTenant, 96, 0),
            (PrefixCacheScope::Global, 96, 96),
        ] {
            let mut cache = PrefixCache::new(scope, 16);
            assert_eq!(cache.lookup("x", None, &p), 0);
            cache.insert("x", None, &p);
            assert_eq!(cache.lookup("x", None, &p), same_tenant, "{scope:?}");
            assert_eq!(cache.lookup("y", None, &p), other_tenant, "{scope:?}");
        }
    }

    #[test]
    fn only_the_common_prefix_hits_and_salts_separate() {
        let mut cache = PrefixCache::new(PrefixCacheScope::Global, 16);
        let p = prompt(&["a", "b", "c"], 100);
        cache.insert("x", Some("s1"), &p);
        let mut q = p.clone();
        q[40] = "changed";
        // Blocks 0 and 1 (tokens 0..32) match; block 2 holds token 40.
        assert_eq!(cache.lookup("y", Some("s1"), &q), 32);
        assert_eq!(cache.lookup("y", Some("s2"), &p), 0);
        assert_eq!(cache.lookup("y", None, &p), 0);
    }

    #[test]
    fn a_full_cache_forgets_the_least_recently_used() {
        let mut cache = PrefixCache::new(PrefixCacheScope::Global, 1);
        let old: Vec<String> = (0..CAPACITY_BLOCKS).map(|i| format!("o{i}")).collect();
        let old: Vec<&str> = old.iter().map(String::as_str).collect();
        cache.insert("x", None, &old);
        let new: Vec<String> = (0..16).map(|i| format!("n{i}")).collect();
        let new: Vec<&str> = new.iter().map(String::as_str).collect();
        cache.insert("x", None, &new);
        assert!(cache.blocks.len() <= CAPACITY_BLOCKS / 2 + 16);
        assert_eq!(cache.lookup("x", None, &new), 16);
    }
}
