//! [`Session`]: one run's connection to one vendor: the adapter, the tenants'
//! credentials, the transcript, and the concurrency limit.
//!
//! Probes send every request through a session, so every request is recorded, no
//! probe ever holds a credential, and the profile's `max_concurrency` holds across all
//! cases running at once.

use crate::adapter::{ChatRequest, Exchange, InvalidRequest, Provider};
use crate::canary::{Canary, RunSecret};
use crate::scan::{Hit, Scanner};
use crate::transcript::Transcript;
use crate::vendor::{TenantKey, VendorProfile};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// A run's connection to a vendor.
pub struct Session {
    profile: VendorProfile,
    provider: Arc<dyn Provider>,
    tenants: Vec<TenantKey>,
    transcript: Arc<Transcript>,
    secret: RunSecret,
    in_flight: Semaphore,
    canaries: std::sync::Mutex<Registry>,
    progress: bool,
    budget: Budget,
    spent: std::sync::Mutex<Spent>,
}

/// The most a run may send; `None`: no limit. Checked before every request, with the
/// request's own estimate, so that no request is sent past a limit.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Budget {
    /// Requests.
    pub requests: Option<u64>,
    /// Prompt tokens (by the profile's local tokenizer, else estimated at four bytes a
    /// token of the request body).
    pub prompt_tokens: Option<u64>,
    /// US dollars, at the profile's `[prices]`, counting every request's `max_tokens`
    /// as completion tokens (an upper bound).
    pub usd: Option<f64>,
}

/// What a run has sent so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Spent {
    /// Requests sent.
    pub requests: u64,
    /// Prompt tokens sent, as [`Budget::prompt_tokens`] counts them.
    pub prompt_tokens: u64,
    /// Estimated cost in US dollars, as [`Budget::usd`] counts it.
    pub usd: f64,
}

/// Every canary issued in the run, and a scanner over them (rebuilt when stale).
#[derive(Default)]
struct Registry {
    issued: Vec<Canary>,
    scanner: Option<Scanner>,
    /// Canary id → the transcript line of the first request that carried it.
    seeded_in: std::collections::HashMap<String, u64>,
    /// Issued canaries no request has carried yet (indices into `issued`).
    pending: Vec<usize>,
}

/// An exchange as recorded: its transcript sequence number and the exchange.
#[derive(Clone, Debug)]
pub struct Sent {
    /// Its line in the transcript.
    pub seq: u64,
    /// What was sent and received.
    pub exchange: Exchange,
}

/// A request that could not be made or recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// A probe named a tenant the profile does not have (a bug in tenantcheck).
    #[error("bug in tenantcheck: no tenant labelled {0:?}")]
    UnknownTenant(String),
    /// The transcript could not be written: without evidence, nothing may be judged.
    #[error("cannot write the transcript: {0}")]
    Transcript(#[from] std::io::Error),
    /// The next request would go past the run's budget; nothing more is sent.
    #[error("the run's budget is spent: {0}")]
    BudgetSpent(String),
}

impl Session {
    /// A session over `provider` with these tenants, recording into `transcript`.
    pub fn new(
        profile: VendorProfile,
        provider: Arc<dyn Provider>,
        tenants: Vec<TenantKey>,
        transcript: Arc<Transcript>,
        secret: RunSecret,
    ) -> Self {
        let permits = profile.max_concurrency as usize;
        Session {
            profile,
            provider,
            tenants,
            transcript,
            secret,
            in_flight: Semaphore::new(permits),
            canaries: Default::default(),
            progress: false,
            budget: Budget::default(),
            spent: Default::default(),
        }
    }

    /// Limits what the session may send.
    pub fn with_budget(mut self, budget: Budget) -> Self {
        self.budget = budget;
        self
    }

    /// What the session has sent so far.
    pub fn spent(&self) -> Spent {
        *self.spent.lock().expect("budget lock poisoned")
    }

    /// Takes `prompt_tokens` and `max_tokens` of one request from the budget, or says
    /// which limit it would pass.
    fn charge(&self, prompt_tokens: u64, max_tokens: u64) -> Result<(), SessionError> {
        let mut spent = self.spent.lock().expect("budget lock poisoned");
        let usd = self
            .profile
            .prices
            .as_ref()
            .map_or(0.0, |p| p.cost(prompt_tokens, max_tokens));
        let b = self.budget;
        if let Some(max) = b.requests.filter(|&max| spent.requests + 1 > max) {
            return Err(SessionError::BudgetSpent(format!("{max} requests")));
        }
        if let Some(max) = b.prompt_tokens.filter(|&max| spent.prompt_tokens + prompt_tokens > max) {
            return Err(SessionError::BudgetSpent(format!(
                "{} of {max} prompt tokens sent, the next request has {prompt_tokens}",
                spent.prompt_tokens
            )));
        }
        if let Some(max) = b.usd.filter(|&max| spent.usd + usd > max) {
            return Err(SessionError::BudgetSpent(format!(
                "${:.4} of ${max} spent, the next request costs up to ${usd:.4}",
                spent.usd
            )));
        }
        spent.requests += 1;
        spent.prompt_tokens += prompt_tokens;
        spent.usd += usd;
        Ok(())
    }

    /// The vendor profile.
    pub fn profile(&self) -> &VendorProfile {
        &self.profile
    }

    /// The run secret, from which probes derive canaries.
    pub fn secret(&self) -> &RunSecret {
        &self.secret
    }

    /// Issues canary number `index` of `owner` in `case`: derives it from the run
    /// secret and registers it, so that every response of the run is scanned for it.
    pub fn canary(&self, owner: &str, case: &str, index: u32) -> Canary {
        let c = self.secret.canary(owner, case, index);
        let mut reg = self.canaries.lock().expect("canary registry poisoned");
        let index = reg.issued.len();
        reg.issued.push(c.clone());
        reg.pending.push(index);
        reg.scanner = None;
        c
    }

    /// The transcript line of the first request that carried canary `id`.
    pub fn seeded_in(&self, id: &str) -> Option<u64> {
        self.canaries
            .lock()
            .expect("canary registry poisoned")
            .seeded_in
            .get(id)
            .copied()
    }

    /// Notes which pending canaries the request recorded at `seq` carried.
    fn note_seeding(&self, request: &ChatRequest, seq: u64) {
        let mut reg = self.canaries.lock().expect("canary registry poisoned");
        if reg.pending.is_empty() {
            return;
        }
        let Registry {
            issued,
            seeded_in,
            pending,
            ..
        } = &mut *reg;
        pending.retain(|&i| {
            let c = &issued[i];
            let carried = request.messages.iter().any(|m| m.content.contains(&c.account));
            if carried {
                seeded_in.insert(c.id.clone(), seq);
            }
            !carried
        });
    }

    /// Canaries of the run not owned by `recipient` found in `text`.
    pub fn scan(&self, text: &str, recipient: &str) -> Vec<Hit> {
        let mut reg = self.canaries.lock().expect("canary registry poisoned");
        if reg.scanner.is_none() {
            reg.scanner = Some(Scanner::new(reg.issued.clone()));
        }
        reg.scanner.as_ref().expect("just built").scan(text, recipient)
    }

    /// How many canaries each (owner, case) was issued: indices 0 to count - 1.
    pub fn issued(&self) -> Vec<crate::report::IssuedCanaries> {
        let reg = self.canaries.lock().expect("canary registry poisoned");
        let mut counts: std::collections::BTreeMap<(String, String), u32> = Default::default();
        for c in &reg.issued {
            let (case, index) = c.id[c.owner.len() + 1..]
                .rsplit_once('/')
                .expect("ids are owner/case/index");
            let n = counts.entry((c.owner.clone(), case.to_owned())).or_default();
            *n = (*n).max(index.parse::<u32>().expect("a numeric index") + 1);
        }
        counts
            .into_iter()
            .map(|((owner, case), count)| crate::report::IssuedCanaries { owner, case, count })
            .collect()
    }

    /// Tokens in `text` by the profile's local tokenizer, when it names one.
    pub fn local_tokens(&self, text: &str) -> Option<u64> {
        self.profile.tokenizer.map(|t| t.count(text))
    }

    /// The tenants' labels, in profile order.
    pub fn tenant_labels(&self) -> Vec<&str> {
        self.tenants.iter().map(|t| t.label.as_str()).collect()
    }

    /// Sends a chat request as `tenant` and records it under `case`.
    pub async fn chat(&self, case: &str, tenant: &str, request: &ChatRequest) -> Result<Sent, SessionError> {
        let text: usize = request.messages.iter().map(|m| m.content.len()).sum();
        let tokens = match self.profile.tokenizer {
            Some(t) => request.messages.iter().map(|m| t.count(&m.content)).sum(),
            None => (text as u64).div_ceil(4),
        };
        self.charge(tokens, u64::from(request.max_tokens))?;
        let sent = self.call(case, tenant, |p, key| p.chat(key, request)).await?;
        self.note_seeding(request, sent.seq);
        Ok(sent)
    }

    /// Lists models as `tenant` (a credential check) and records it under `case`.
    pub async fn list_models(&self, case: &str, tenant: &str) -> Result<Sent, SessionError> {
        self.charge(0, 0)?;
        self.call(case, tenant, |p, key| p.list_models(key)).await
    }

    /// Creates a stored object as `tenant` and records it under `case`.
    pub async fn store(
        &self,
        case: &str,
        tenant: &str,
        input: &str,
        previous: Option<&str>,
    ) -> Result<Sent, SessionError> {
        self.charge((input.len() as u64).div_ceil(4), 96)?;
        self.call(case, tenant, |p, key| p.store(key, input, previous)).await
    }

    /// Fetches stored object `id` as `tenant` and records it under `case`.
    pub async fn fetch_stored(&self, case: &str, tenant: &str, id: &str) -> Result<Sent, SessionError> {
        self.charge(0, 0)?;
        self.call(case, tenant, |p, key| p.fetch_stored(key, id)).await
    }

    /// Sends a request the vendor must refuse, as `tenant`, and records it under `case`.
    pub async fn invalid(
        &self,
        case: &str,
        tenant: &str,
        kind: InvalidRequest,
        stream: bool,
    ) -> Result<Sent, SessionError> {
        let max_tokens = match kind {
            InvalidRequest::OverLimit { context } => context + 1,
            _ => 16,
        };
        self.charge(4, max_tokens)?;
        self.call(case, tenant, |p, key| p.invalid(key, kind, stream)).await
    }

    /// The one path to the vendor: the tenant's key, a concurrency permit, the
    /// provider call, and the transcript line.
    async fn call<'a>(
        &'a self,
        case: &str,
        tenant: &str,
        request: impl FnOnce(&'a dyn Provider, &'a crate::credential::Secret) -> crate::adapter::BoxFuture<'a, Exchange>,
    ) -> Result<Sent, SessionError> {
        let key = self.key(tenant)?;
        let exchange = {
            let _permit = self.in_flight.acquire().await.expect("the semaphore is never closed");
            request(self.provider.as_ref(), &key.secret).await
        };
        self.record(case, tenant, exchange)
    }

    /// How a successful stream breaks the vendor API's event grammar (see
    /// [`Provider::stream_problems`]).
    pub fn stream_problems(&self, ex: &Exchange) -> Vec<String> {
        self.provider.stream_problems(ex)
    }

    /// The tenant's key, for messages (the variable's name) and requests.
    pub fn key(&self, tenant: &str) -> Result<&TenantKey, SessionError> {
        self.tenants
            .iter()
            .find(|t| t.label == tenant)
            .ok_or_else(|| SessionError::UnknownTenant(tenant.to_owned()))
    }

    fn record(&self, case: &str, tenant: &str, exchange: Exchange) -> Result<Sent, SessionError> {
        let seq = self.transcript.append_exchange(case, tenant, &exchange)?;
        if self.progress {
            // One line, rewritten in place: long cases show they are moving. No
            // credential can be in it: labels, numbers and the status only.
            let status = exchange.status.map_or("no answer".to_owned(), |s| format!("HTTP {s}"));
            eprint!(
                "\r\x1b[2K  {case}: request #{seq} as {tenant}: {status} in {:.0} ms",
                exchange.timings.total_ms
            );
        }
        Ok(Sent { seq, exchange })
    }

    /// Shows a progress line on standard error for every request (for terminals).
    pub fn with_progress(mut self, progress: bool) -> Self {
        self.progress = progress;
        self
    }
}
