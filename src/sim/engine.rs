//! [`Engine`]: admission, the KV pool and the model, behind one lock.
//!
//! For each request the engine takes pages for the prompt and the completion, writes
//! the prompt's tokens into them, reads them back for the model, writes the model's
//! tokens after them, and frees the pages without clearing them. Faults act on this
//! path; the model only ever sees what the pages hold.

use super::kv::{KvPool, PageId};
use super::{Fault, SimConfig, model, tokenizer};
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
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// `stop` or `length`.
    pub finish_reason: &'static str,
}

/// The engine could not serve a request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// Not enough free pages came free in time.
    #[error("no KV pages came free within {0:?}")]
    Busy(Duration),
}

/// The reference vendor's engine.
#[derive(Debug)]
pub struct Engine {
    fault: Option<Fault>,
    stale_above: usize,
    state: Mutex<State>,
    freed: Notify,
}

#[derive(Debug)]
struct State {
    pool: KvPool,
    vocab: Vocab,
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
    /// An engine with the pool and faults of `config`.
    pub fn new(config: &SimConfig) -> Self {
        Engine {
            fault: config.fault,
            stale_above: config.stale_above(),
            state: Mutex::new(State {
                pool: KvPool::new(config.page_tokens, config.pages()),
                vocab: Vocab::new(),
            }),
            freed: Notify::new(),
        }
    }

    /// Serves one templated prompt of `prompt_tokens` tokens (already checked against
    /// the context window) with at most `max_tokens` tokens of answer.
    pub async fn generate(
        &self,
        prompt: &str,
        prompt_tokens: usize,
        max_tokens: usize,
    ) -> Result<Generation, EngineError> {
        let pages = self.admit(prompt_tokens + max_tokens).await?;
        let mut st = self.state.lock().expect("engine lock poisoned");
        let ids: Vec<u32> = tokenizer::tokens(prompt)
            .map(|t| st.vocab.intern(t))
            .collect();
        let skip_writes = self.fault == Some(Fault::StalePages) && ids.len() > self.stale_above;
        if !skip_writes {
            st.pool.write(&pages, 0, &ids);
        }
        let answer = {
            let read = st.pool.read(&pages, ids.len());
            let view: Vec<&str> = read.iter().map(|&id| st.vocab.get(id)).collect();
            model::respond(&view, max_tokens)
        };
        let out: Vec<u32> = tokenizer::tokens(&answer.text)
            .map(|t| st.vocab.intern(t))
            .collect();
        st.pool.write(&pages, ids.len(), &out);
        st.pool.release(pages);
        drop(st);
        self.freed.notify_waiters();
        Ok(Generation {
            text: answer.text,
            prompt_tokens: ids.len(),
            completion_tokens: answer.tokens,
            finish_reason: if answer.truncated { "length" } else { "stop" },
        })
    }

    async fn admit(&self, tokens: usize) -> Result<Vec<PageId>, EngineError> {
        let deadline = tokio::time::Instant::now() + ADMISSION_WAIT;
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(pages) = self
                .state
                .lock()
                .expect("engine lock poisoned")
                .pool
                .allocate(tokens)
            {
                return Ok(pages);
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(EngineError::Busy(ADMISSION_WAIT));
            }
        }
    }
}
