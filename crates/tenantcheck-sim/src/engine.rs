//! [`Engine`]: admission, the KV pools and the model, behind one lock.
//!
//! Unified mode: one pool. For each request the engine takes pages for the prompt and
//! the completion, writes the prompt's tokens into them, reads them back for the
//! model, writes the model's tokens after them, and frees the pages without clearing
//! them.
//!
//! Disaggregated mode: a prefill node and a decode node with pools of their own. The
//! prefill node takes pages for the prompt and writes it; the KV transfer copies those
//! pages, whole, into pages the decode node reserved for prompt and completion; the
//! prefill pages are freed; the decode node reads the prompt back, runs the model,
//! writes the completion and frees its pages. A healthy engine refuses, before any
//! allocation, a request that one of the pools cannot hold.
//!
//! Before either, the prefix cache says how much of the prompt is cached for this
//! tenant; prefill time is charged for the rest, outside the lock, and a served prompt
//! is cached for later requests.
//!
//! Faults act on this path (see [`Fault`]); the model only ever sees what the pages
//! hold.
//!
//! With a background tenant (`--background-tenant`), a customer the suite does not
//! control is served before each request: its prompt, customer records of people
//! nobody in the run knows, is written into every free page of the unified or prefill
//! pool, so residue there is mostly a stranger's, as on a busy production API.

use super::kv::{KvPool, PageId};
use super::prefix::PrefixCache;
use super::{Fault, SimConfig, model};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;

/// How long a request waits for free pages before it is refused as busy.
const ADMISSION_WAIT: Duration = Duration::from_secs(30);

/// What the engine produced for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generation {
    /// The generated text.
    pub text: String,
    /// Tokens of prompt the engine processed.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// `stop` or `length`.
    pub finish_reason: &'static str,
    /// Leading prompt tokens found in the prefix cache (not prefilled again).
    pub cached_tokens: usize,
    /// Decoded from pages that held no prompt of the request's own: residue.
    pub residue: bool,
}

/// The engine did not serve a request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// Not enough free pages came free in time.
    #[error("no KV pages came free within {0:?}")]
    Busy(Duration),
    /// A KV pool can never hold the request: it is retired with this error.
    #[error("{0}")]
    TooLarge(String),
    /// (`pool-overflow`) The pool had too few free pages, for this request or for
    /// another that came while it ran.
    #[error("Context size has been exceeded.")]
    Overflow,
}

/// The reference vendor's engine.
#[derive(Debug)]
pub struct Engine {
    faults: Vec<Fault>,
    /// Whether a leak fault acts on each occasion (`--leak-rate`).
    leaks: std::sync::Arc<crate::intermittent::Intermittent>,
    stale_above: usize,
    disaggregated: bool,
    prefill_per_token: Duration,
    background_tenant: bool,
    state: Mutex<State>,
    freed: Notify,
    /// (`pool-overflow`) How many admissions have failed so far: a request that sees
    /// it change while it runs fails too.
    overflows: std::sync::atomic::AtomicU64,
    /// One decode step: with `pool-overflow`, a request holds its pages this long per
    /// token of its answer, as a real engine does while it decodes.
    decode_step: Duration,
}

#[derive(Debug)]
struct State {
    /// The unified pool, or the prefill node's.
    prefill: KvPool,
    /// The decode node's pool (disaggregated mode only).
    decode: Option<KvPool>,
    prefix: PrefixCache,
    vocab: Vocab,
    /// The model is the weak one (`--weak-model`).
    weak_model: bool,
    /// The model garbles what it copies (`--garbling-model`).
    garbling_model: bool,
    /// The model returns prose fragments of residue (`--fragmenting-model`).
    fragmenting_model: bool,
    /// The model reads back only some of what it is asked to (`--forgetful-model`).
    forgetful_model: bool,
    /// How residue comes back (`--leak-transform`).
    leak_transform: Option<crate::transform::LeakTransform>,
    /// Requests of the background tenant served so far.
    background_served: u64,
    /// The background tenant's prompts, as token ids: a few, served in turn (made
    /// once, so that serving them costs no time a timing test would notice).
    background_prompts: Vec<Vec<u32>>,
    /// The background tenant's records bear the canaries' common names.
    common_names: bool,
}

#[derive(Clone, Copy)]
enum Node {
    Prefill,
    Decode,
}

impl State {
    fn pool(&mut self, node: Node) -> &mut KvPool {
        match node {
            Node::Prefill => &mut self.prefill,
            Node::Decode => self.decode.as_mut().expect("decode pool in disaggregated mode"),
        }
    }
}

impl State {
    /// Serves one request of the background tenant: its records written into every
    /// free page of the first pool, then the pages freed (not cleared).
    fn serve_background(&mut self) {
        const PROMPTS: u64 = 8;
        if self.background_prompts.is_empty() {
            let capacity = self.prefill.capacity_tokens();
            for seed in 1..=PROMPTS {
                let text = stranger_records(seed, capacity, self.common_names);
                let ids = super::tokenizer::tokens(&text)
                    .take(capacity)
                    .map(|t| self.vocab.intern(t))
                    .collect();
                self.background_prompts.push(ids);
            }
        }
        self.background_served += 1;
        let free = self.prefill.free_pages() * self.prefill.page_tokens();
        let Some(pages) = self.prefill.allocate(free) else {
            return;
        };
        let ids = &self.background_prompts[(self.background_served % PROMPTS) as usize];
        self.prefill.write(&pages, 0, &ids[..free.min(ids.len())]);
        self.prefill.release(pages);
    }
}

/// Customer records of people nobody in a run knows, at least `tokens` tokens of them,
/// drawn from `seed` (splitmix64); with `common_names`, their names and domains from
/// the canaries' own pools.
fn stranger_records(seed: u64, tokens: usize, common_names: bool) -> String {
    const GIVEN: &[&str] = &[
        "Agnes", "Bertil", "Cosima", "Dorian", "Edda", "Florin", "Greta", "Hamish",
    ];
    const FAMILY: &[&str] = &[
        "Achterberg",
        "Blomqvist",
        "Carvalho",
        "Drummond",
        "Esposito",
        "Falk",
        "Gunnarsson",
        "Hale",
    ];
    const DOMAINS: &[&str] = &[
        "example-mail.net",
        "postbox.example",
        "inbox.example.org",
        "mail.example.com",
    ];
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let (given, family, domains) = match common_names {
        true => tenantcheck_evidence::canary::pools(),
        false => (GIVEN, FAMILY, DOMAINS),
    };
    let mut out = String::new();
    // Records come to about 3 characters per token: 4 per token is more than enough.
    while out.len() < 4 * tokens + 256 {
        let g = given[(next() % given.len() as u64) as usize];
        let f = family[(next() % family.len() as u64) as usize];
        let account = next() % 1_000_000_000_000;
        out.push_str(&format!(
            "Client: {g} {f}, email {}.{}{:05}@{}, account {:04} {:04} {:04}, balance due on renewal. ",
            g.to_lowercase(),
            f.to_lowercase(),
            next() % 100_000,
            domains[(next() % domains.len() as u64) as usize],
            account / 100_000_000,
            account / 10_000 % 10_000,
            account % 10_000
        ));
    }
    out
}

/// Token strings by id; id 0 is the empty token.
#[derive(Debug)]
struct Vocab {
    ids: HashMap<Box<str>, u32>,
    strs: Vec<Box<str>>,
}

impl Vocab {
    fn new() -> Self {
        Vocab {
            ids: HashMap::from([(Box::from(""), 0)]),
            strs: vec![Box::from("")],
        }
    }

    fn intern(&mut self, token: &str) -> u32 {
        if let Some(&id) = self.ids.get(token) {
            return id;
        }
        let id = self.strs.len() as u32;
        self.strs.push(token.into());
        self.ids.insert(token.into(), id);
        id
    }

    fn get(&self, id: u32) -> &str {
        &self.strs[id as usize]
    }
}

impl Engine {
    /// An engine with the pools and faults of `config`.
    pub fn new(config: &SimConfig, leaks: std::sync::Arc<crate::intermittent::Intermittent>) -> Self {
        let (prefill, decode) = match config.disaggregated {
            Some(d) => (
                KvPool::new(config.page_tokens, d.prefill_pool_tokens.div_ceil(config.page_tokens)),
                Some(KvPool::new(
                    config.page_tokens,
                    d.decode_pool_tokens.div_ceil(config.page_tokens),
                )),
            ),
            None => (KvPool::new(config.page_tokens, config.pages()), None),
        };
        Engine {
            faults: config.faults.clone(),
            stale_above: config.stale_above(),
            disaggregated: config.disaggregated.is_some(),
            prefill_per_token: config.prefill_per_token,
            background_tenant: config.background_tenant,
            state: Mutex::new(State {
                prefill,
                decode,
                prefix: PrefixCache::new(config.prefix_cache(), config.page_tokens),
                weak_model: config.weak_model,
                garbling_model: config.garbling_model,
                fragmenting_model: config.fragmenting_model,
                forgetful_model: config.forgetful_model,
                leak_transform: config.leak_transform,
                background_served: 0,
                background_prompts: Vec::new(),
                common_names: config.common_name_strangers,
                vocab: Vocab::new(),
            }),
            freed: Notify::new(),
            overflows: Default::default(),
            decode_step: config.decode_step,
            leaks,
        }
    }

    fn has(&self, fault: Fault) -> bool {
        self.faults.contains(&fault)
    }

    /// Serves one templated prompt of `tenant`, given as its tokens (already checked
    /// against the context window), with at most `max_tokens` tokens of answer.
    /// `salt` is the request's cache isolation key, if it gave one.
    pub async fn generate(
        &self,
        tenant: &str,
        salt: Option<&str>,
        prompt: &[&str],
        max_tokens: usize,
    ) -> Result<Generation, EngineError> {
        let overflows = self.overflows.load(std::sync::atomic::Ordering::SeqCst);
        let cached = self.lock().prefix.lookup(tenant, salt, prompt).min(prompt.len());
        let uncached = (prompt.len() - cached) as u32;
        if !self.prefill_per_token.is_zero() && uncached > 0 {
            tokio::time::sleep(self.prefill_per_token * uncached).await;
        }
        if self.background_tenant {
            self.lock().serve_background();
        }
        let generation = if self.disaggregated {
            self.disaggregated(prompt, max_tokens).await
        } else {
            self.unified(prompt, max_tokens).await
        };
        self.freed.notify_waiters();
        let mut generation = generation?;
        if self.faults.contains(&Fault::PoolOverflow)
            && self.overflows.load(std::sync::atomic::Ordering::SeqCst) != overflows
        {
            return Err(EngineError::Overflow);
        }
        self.lock().prefix.insert(tenant, salt, prompt);
        generation.cached_tokens = cached.min(generation.prompt_tokens);
        Ok(generation)
    }

    async fn unified(&self, prompt: &[&str], max_tokens: usize) -> Result<Generation, EngineError> {
        let n = prompt.len();
        let capacity = self.lock().prefill.capacity_tokens();
        if n + max_tokens > capacity {
            return Err(EngineError::TooLarge(format!(
                "the request needs {} tokens of KV cache; the pool holds {capacity}",
                n + max_tokens
            )));
        }
        let pages = self.admit(Node::Prefill, n + max_tokens).await?;
        let generation = {
            let mut st = self.lock();
            let ids: Vec<u32> = prompt.iter().map(|t| st.vocab.intern(t)).collect();
            let skip_writes = self.has(Fault::StalePages) && n > self.stale_above && self.leaks.acts();
            if !skip_writes {
                st.prefill.write(&pages, 0, &ids);
            }
            decode(&mut st, Node::Prefill, &pages, n, n, max_tokens)
        };
        if self.has(Fault::PoolOverflow) {
            // The pages stay taken while the answer is decoded.
            tokio::time::sleep(self.decode_step * generation.completion_tokens as u32).await;
        }
        self.lock().prefill.release(pages);
        Ok(generation)
    }

    async fn disaggregated(&self, prompt: &[&str], max_tokens: usize) -> Result<Generation, EngineError> {
        let n = prompt.len();
        let (prefill_cap, decode_cap) = {
            let mut st = self.lock();
            (st.prefill.capacity_tokens(), st.pool(Node::Decode).capacity_tokens())
        };
        // The request as the prefill node will process it. With `reject-continue`, a
        // prompt over the prefill pool is marked rejected and swapped for a 1-token
        // placeholder, and admission, which checks only "finished", lets it on.
        let mut prefill_len = n;
        if n > prefill_cap {
            if !(self.has(Fault::RejectContinue) && self.leaks.acts()) {
                return Err(EngineError::TooLarge(format!(
                    "the prompt has {n} tokens; the prefill KV pool holds {prefill_cap}"
                )));
            }
            prefill_len = 1;
        }
        let transfer_fits = n + max_tokens <= decode_cap;
        if !transfer_fits && !self.has(Fault::AbortAsLength) {
            return Err(EngineError::TooLarge(format!(
                "the request needs {} tokens on the decode node; its KV pool holds {decode_cap}",
                n + max_tokens
            )));
        }

        // Prefill: write the (possibly placeholder) prompt.
        let prefill_pages = self.admit(Node::Prefill, prefill_len).await?;
        let kv = {
            let mut st = self.lock();
            let ids: Vec<u32> = prompt[..prefill_len].iter().map(|t| st.vocab.intern(t)).collect();
            st.prefill.write(&prefill_pages, 0, &ids);
            // The transfer copies whole pages, as engines do.
            let whole = prefill_pages.len() * st.prefill.page_tokens();
            st.prefill.read(&prefill_pages, whole)
        };

        if !transfer_fits {
            // `abort-as-length`: the transfer is aborted for want of decode pages, and
            // the request is answered as if it had run out of tokens.
            self.lock().prefill.release(prefill_pages);
            return Ok(Generation {
                text: String::new(),
                prompt_tokens: prefill_len,
                completion_tokens: 0,
                finish_reason: "length",
                cached_tokens: 0,
                residue: false,
            });
        }

        // Transfer: the decode node reserves pages for the original request (its
        // length came with the bootstrap) and receives the prefill pages.
        let decode_pages = match self.admit(Node::Decode, n + max_tokens).await {
            Ok(p) => p,
            Err(e) => {
                self.lock().prefill.release(prefill_pages);
                return Err(e);
            }
        };
        let mut st = self.lock();
        st.pool(Node::Decode).write(&decode_pages, 0, &kv);
        st.prefill.release(prefill_pages);
        // Decode reads every position it reserved for the prompt.
        let mut generation = decode(&mut st, Node::Decode, &decode_pages, n, prefill_len, max_tokens);
        st.pool(Node::Decode).release(decode_pages);
        generation.prompt_tokens = prefill_len;
        Ok(generation)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("engine lock poisoned")
    }

    async fn admit(&self, node: Node, tokens: usize) -> Result<Vec<PageId>, EngineError> {
        let deadline = tokio::time::Instant::now() + ADMISSION_WAIT;
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(pages) = self.lock().pool(node).allocate(tokens) {
                return Ok(pages);
            }
            if self.faults.contains(&Fault::PoolOverflow) {
                self.overflows.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                return Err(EngineError::Overflow);
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(EngineError::Busy(ADMISSION_WAIT));
            }
        }
    }
}

/// Reads `read_len` prompt positions of `pages`, runs the model, writes its answer
/// after the prompt.
fn decode(
    st: &mut State,
    node: Node,
    pages: &[PageId],
    read_len: usize,
    prompt_tokens: usize,
    max_tokens: usize,
) -> Generation {
    let answer = {
        let read = st.pool(node).read(pages, read_len);
        let view: Vec<&str> = read.iter().map(|&id| st.vocab.get(id)).collect();
        let traits = model::Traits {
            weak: st.weak_model,
            garbling: st.garbling_model,
            fragmenting: st.fragmenting_model,
            forgetful: st.forgetful_model,
            leak: st.leak_transform,
        };
        model::respond(&view, max_tokens, traits)
    };
    let out: Vec<u32> = super::tokenizer::tokens(&answer.text)
        .map(|t| st.vocab.intern(t))
        .collect();
    st.pool(node).write(pages, read_len, &out);
    Generation {
        text: answer.text,
        prompt_tokens,
        completion_tokens: answer.tokens,
        finish_reason: if answer.truncated { "length" } else { "stop" },
        cached_tokens: 0,
        residue: answer.residue,
    }
}
