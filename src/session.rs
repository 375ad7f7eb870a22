//! [`Session`]: one run's connection to one vendor: the adapter, the tenants'
//! credentials, the transcript, and the concurrency limit.
//!
//! Probes send every request through a session, so every request is recorded, no
//! probe ever holds a credential, and the profile's `max_concurrency` holds across all
//! cases running at once.

use crate::adapter::{ChatRequest, Exchange, InvalidRequest, Provider};
use crate::canary::{Canary, RunSecret};
use crate::ledger::Ledger;
use crate::scan::Hit;
use crate::transcript::Transcript;
use crate::vendor::{TenantKey, VendorProfile};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Retries after the first attempt, at most, of a request that got no answer or an
/// unavailable one without a `Retry-After` (rate limits have the profile's
/// `rate_limit_retries`).
const RETRIES: u32 = 2;

/// How long a request in flight may still take once the run is interrupted.
pub const IN_FLIGHT_GRACE: Duration = Duration::from_secs(5);

/// Why and how long to wait before trying a request again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Retry {
    /// A rate limit (429 or 503) whose `Retry-After` is within the profile's bound.
    RateLimit(Duration),
    /// No answer, or an unavailable one that said nothing of when to come back.
    Backoff(Duration),
}

/// How long to wait before trying `ex` again, when trying again is safe: a 429 or a
/// 503 (the vendor's `Retry-After` in seconds when it is at most `max_wait`, else
/// 0.5 s doubled per attempt where it gave none or no number), or a request that got
/// no answer because the connection failed or was closed before any of it was read
/// (0.25 s doubled). Timeouts and answers that broke off are not retried: the vendor
/// may have processed them. `attempt` counts the backoffs so far.
fn retry_after(ex: &Exchange, attempt: u32, max_wait: Duration) -> Option<Retry> {
    let backoff = |base_ms: u64| Retry::Backoff(Duration::from_millis(base_ms << attempt.min(6)));
    match (ex.status, &ex.transport_error) {
        (Some(429 | 503), _) => match ex.headers.get("retry-after").map(|v| v.trim().parse::<u64>()) {
            Some(Ok(secs)) if Duration::from_secs(secs) <= max_wait => {
                Some(Retry::RateLimit(Duration::from_secs(secs)))
            }
            Some(Ok(_)) => None,
            Some(Err(_)) | None => Some(backoff(500)),
        },
        (None, Some(e))
            if !ex.request.url.is_empty()
                && matches!(
                    e.kind,
                    crate::adapter::TransportErrorKind::Connect | crate::adapter::TransportErrorKind::Request
                ) =>
        {
            Some(backoff(250))
        }
        _ => None,
    }
}

/// The exchange of a request abandoned because the run was interrupted by `signal`.
/// `request` is the suite's own description of what was sent (the adapter's wire form
/// was lost with the abandoned future).
fn interrupted(signal: &'static str, request: serde_json::Value) -> Exchange {
    Exchange {
        request: crate::adapter::RecordedRequest {
            method: String::new(),
            url: String::new(),
            body: Some(request),
            raw: false,
            headers: Default::default(),
        },
        transport_error: Some(crate::adapter::TransportError {
            kind: crate::adapter::TransportErrorKind::Interrupted,
            message: format!(
                "the run was interrupted by {signal}; the request was abandoned {} s later, unanswered (recorded as the suite's request, not the API's wire form)",
                IN_FLIGHT_GRACE.as_secs()
            ),
        }),
        ..Exchange::default()
    }
}

/// A run's connection to a vendor.
pub struct Session {
    profile: VendorProfile,
    provider: Arc<dyn Provider>,
    tenants: Vec<TenantKey>,
    transcript: Arc<Transcript>,
    secret: RunSecret,
    in_flight: Semaphore,
    /// What the run's answers showed, by case, and the canaries they are scanned for
    /// ([`crate::ledger`]). Held while a line is written and read into it: each answer
    /// is judged against exactly the lines before it, as `verify` judges it.
    ledger: std::sync::Mutex<Ledger>,
    /// What the run has spent, the vendor's refusals in a row, the requests two cases
    /// share, and the cases cut short.
    accounts: std::sync::Mutex<Accounts>,
    /// Who hears of every request recorded.
    observer: std::sync::Arc<dyn crate::event::Observer>,
    budget: Budget,
    /// Set to the signal's name when the run is interrupted: no request is sent after
    /// it, and requests in flight are abandoned.
    stop: tokio::sync::watch::Receiver<Option<&'static str>>,
    /// Set once the vendor has refused enough: no request is sent after it.
    refused: std::sync::OnceLock<Refusal>,
}

/// What the run has spent, the vendor's refusals in a row, the requests two cases
/// share, and the cases cut short.
#[derive(Default)]
struct Accounts {
    spent: Spent,
    /// Over the answers that reported usage: the budget's estimate of their prompts and
    /// the vendor's count, to put a refused prompt in the vendor's tokens.
    counts: (u64, u64),
    /// Answers in a row that refused requests which should succeed.
    refusals: Refusals,
    /// Requests more than one case judges, by what they are ([`Session::shared`]).
    shared: std::collections::HashMap<String, Arc<tokio::sync::OnceCell<Shared>>>,
    /// The cases the interruption cut: a request refused or abandoned because of it.
    cut: std::collections::BTreeSet<String>,
}

pub use crate::ledger::{Citation, Evidence, Redirect};

/// Requests one case sent that later cases judge too: what the sender made of them
/// and the lines they were recorded at.
#[derive(Clone)]
struct Shared {
    /// The case that sent them.
    case: String,
    /// What the sender's probe keeps of them (a probe's own type).
    value: Arc<dyn std::any::Any + Send + Sync>,
    /// The exchanges' transcript lines: what a citing case answers for is in the
    /// ledger under them.
    lines: Vec<u64>,
}

/// How the transcript names a request made with no credential.
pub const NO_KEY: &str = "(no key)";

/// What a healthy vendor answers a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Success (a chat request, a credential check, storing an object).
    Success,
    /// A 4xx refusal with an error (a request made wrong on purpose).
    Refusal,
    /// Possibly a denial (a fetch of an object that may be another tenant's: 403 and
    /// 404 are right answers).
    Denial,
    /// Success, but a server error is what the case is looking for (a load that may
    /// overwhelm the vendor): it does not count towards stopping the run.
    Load,
}

/// The run of identical refusals so far.
#[derive(Debug, Default)]
struct Refusals {
    /// The status and the tenant of the last answer, when it was a refusal.
    last: Option<(u16, String)>,
    /// How many answers in a row had it.
    count: u32,
}

pub use crate::report::Refusal;

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
    /// Completion tokens the vendor may have billed: every request's `max_tokens`.
    pub completion_tokens: u64,
    /// Estimated cost in US dollars, as [`Budget::usd`] counts it.
    pub usd: f64,
    /// Prompt tokens as the vendor counted them (its `usage.prompt_tokens`); where it
    /// reported none (a refusal), `prompt_tokens`' estimate scaled by the vendor's
    /// count over the estimate on the answers so far: what it bills, known only once
    /// it answered.
    pub counted_prompt_tokens: u64,
    /// Rate limits (429 or 503 with a `Retry-After` within the profile's bound) waited
    /// out and tried again.
    pub rate_limits_waited: u64,
    /// The seconds those waits took, as their `Retry-After`s asked.
    pub rate_limit_secs: u64,
}

impl std::ops::Add for Spent {
    type Output = Spent;
    fn add(self, o: Spent) -> Spent {
        Spent {
            requests: self.requests + o.requests,
            prompt_tokens: self.prompt_tokens + o.prompt_tokens,
            completion_tokens: self.completion_tokens + o.completion_tokens,
            usd: self.usd + o.usd,
            counted_prompt_tokens: self.counted_prompt_tokens + o.counted_prompt_tokens,
            rate_limits_waited: self.rate_limits_waited + o.rate_limits_waited,
            rate_limit_secs: self.rate_limit_secs + o.rate_limit_secs,
        }
    }
}

/// What was sent between two readings of [`Session::spent`].
impl std::ops::Sub for Spent {
    type Output = Spent;
    fn sub(self, o: Spent) -> Spent {
        Spent {
            requests: self.requests - o.requests,
            prompt_tokens: self.prompt_tokens - o.prompt_tokens,
            completion_tokens: self.completion_tokens - o.completion_tokens,
            usd: self.usd - o.usd,
            counted_prompt_tokens: self.counted_prompt_tokens - o.counted_prompt_tokens,
            rate_limits_waited: self.rate_limits_waited - o.rate_limits_waited,
            rate_limit_secs: self.rate_limit_secs - o.rate_limit_secs,
        }
    }
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
    /// The run was interrupted by this signal; nothing more is sent.
    #[error("the run was interrupted by {0}")]
    Interrupted(&'static str),
    /// The vendor refused a run of requests that should have succeeded; nothing more
    /// is sent.
    #[error("{0}")]
    Refused(Refusal),
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
        let labels: Vec<String> = tenants.iter().map(|t| t.label.clone()).collect();
        let marks: Vec<_> = labels.iter().map(|t| secret.marks(t)).collect();
        Session {
            profile,
            provider,
            transcript,
            secret,
            in_flight: Semaphore::new(permits),
            ledger: std::sync::Mutex::new(Ledger::new(&labels, &marks)),
            accounts: Default::default(),
            observer: std::sync::Arc::new(crate::event::Nobody),
            budget: Budget::default(),
            stop: tokio::sync::watch::channel(None).1,
            refused: Default::default(),
            tenants,
        }
    }

    /// The ledger, locked.
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().expect("ledger poisoned")
    }

    /// The accounts, locked.
    fn accounts(&self) -> std::sync::MutexGuard<'_, Accounts> {
        self.accounts.lock().expect("accounts poisoned")
    }

    /// `text` with the run's credentials redacted, for messages that quote the vendor.
    pub fn redact(&self, text: &str) -> String {
        self.transcript.redact(text)
    }

    /// Why the vendor made the session stop sending, if it did.
    pub fn refused(&self) -> Option<&Refusal> {
        self.refused.get()
    }

    /// Why no more requests are sent, if none are: an interruption or the vendor's
    /// refusals.
    pub fn stopped(&self) -> Option<String> {
        match (self.interrupted(), self.refused()) {
            (Some(signal), _) => Some(format!("the run was interrupted by {signal}")),
            (None, Some(r)) => Some(r.to_string()),
            (None, None) => None,
        }
    }

    /// Counts an answer: a run of identical refusals long enough stops the session.
    /// A 401 refuses the credential whatever was asked (but another tenant's object),
    /// and stops it at once; so does a 403 to a request that should succeed; a 5xx
    /// to one counts towards the profile's `stop_after_server_errors`.
    fn note_refusal(&self, tenant: &str, expect: Expect, seq: u64, ex: &Exchange) {
        let refusal = match (ex.status, expect) {
            (Some(401), Expect::Success | Expect::Refusal | Expect::Load) => Some((401, 1)),
            (Some(403), Expect::Success) => Some((403, 1)),
            (Some(s @ 500..=599), Expect::Success) => Some((s, self.profile.stop_after_server_errors)),
            _ => None,
        };
        let mut accounts = self.accounts();
        let run = &mut accounts.refusals;
        let Some((status, limit)) = refusal else {
            *run = Refusals::default();
            return;
        };
        let same = run
            .last
            .as_ref()
            .is_some_and(|(s, t)| *s == status && (status >= 500 || t == tenant));
        run.count = if same { run.count + 1 } else { 1 };
        run.last = Some((status, tenant.to_owned()));
        if run.count >= limit {
            let refusal = Refusal {
                tenant: tenant.to_owned(),
                status,
                count: run.count,
                last_seq: seq,
            };
            drop(accounts);
            if self.refused.set(refusal.clone()).is_ok() {
                self.observer.on(&crate::event::RunEvent::Stopped {
                    stop: &crate::event::Stop::Refused(refusal),
                });
            }
        }
    }

    /// Stops sending when `stop` holds a signal's name.
    pub fn with_stop(mut self, stop: tokio::sync::watch::Receiver<Option<&'static str>>) -> Self {
        self.stop = stop;
        self
    }

    /// Whether the interruption cut `case` short (refused or abandoned a request of it).
    pub fn was_cut(&self, case: &str) -> bool {
        self.accounts().cut.contains(case)
    }

    fn note_cut(&self, case: &str) {
        self.accounts().cut.insert(case.to_owned());
    }

    /// The signal that interrupted the run, if one did.
    pub fn interrupted(&self) -> Option<&'static str> {
        *self.stop.borrow()
    }

    /// The answers recorded with HTTP status 429, the first part's of a resumed run
    /// too (its lines are read into the ledger).
    pub fn rate_limited(&self) -> u64 {
        self.ledger().rate_limited()
    }

    /// What the answers recorded under `case`, or cited for it, showed: other tenants'
    /// canaries, other requests' text, redirects.
    pub fn evidence(&self, case: &str) -> Evidence {
        self.ledger().evidence(case)
    }

    /// Other tenants' records the answer recorded at `seq` held, as the ledger read the
    /// line (the scan's canaries and the holders sighted by name): what `verify` holds
    /// a case to, beyond a probe's own scan of the text.
    pub fn leaks_at(&self, seq: u64) -> Vec<crate::outcome::LeakEvidence> {
        self.ledger().line(seq).map(|s| s.canaries.clone()).unwrap_or_default()
    }

    /// Reads a line an earlier part of the run recorded (a resumed run's), in
    /// transcript order, as `Session::record` read it when it was new: an exchange's
    /// request joins the text every later answer is judged against, and what it showed
    /// is laid on its case and on every case citing it.
    pub fn replay(&self, line: &crate::transcript::Line) {
        // The report was verified with this transcript: every citation names an
        // earlier exchange.
        let _ = self.ledger().fold(line);
    }

    /// Limits what the session may send.
    pub fn with_budget(mut self, budget: Budget) -> Self {
        self.budget = budget;
        self
    }

    /// What the session has sent so far.
    pub fn spent(&self) -> Spent {
        self.accounts().spent
    }

    /// Takes `prompt_tokens` and `max_tokens` of one request from the budget, or says
    /// which limit it would pass.
    fn charge(&self, prompt_tokens: u64, max_tokens: u64) -> Result<(), SessionError> {
        let mut accounts = self.accounts();
        let spent = &mut accounts.spent;
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
        spent.completion_tokens += max_tokens;
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
        self.ledger().issue(c.clone());
        c
    }

    /// Registers the canaries an interrupted run issued, so that every answer of the
    /// resumed run (and the old answers read again) is scanned for them.
    pub fn preload(&self, issued: &[crate::report::IssuedCanaries]) {
        let mut ledger = self.ledger();
        for i in issued {
            for n in 0..i.count {
                ledger.know(self.secret.canary(&i.owner, &i.case, n));
            }
        }
    }

    /// The evidence of `hit`, found in the answer recorded at `returned_in` to
    /// `recipient`: with the line of the request that carried the canary first.
    pub fn leak_evidence(&self, hit: Hit, recipient: &str, returned_in: u64) -> crate::outcome::LeakEvidence {
        self.ledger().leak_evidence(hit, recipient, returned_in)
    }

    /// The transcript line of the first request that carried canary `id`.
    pub fn seeded_in(&self, id: &str) -> Option<u64> {
        self.ledger().seeded_in(id)
    }

    /// Canaries of the run not owned by `recipient` found in `text`.
    pub fn scan(&self, text: &str, recipient: &str) -> Vec<Hit> {
        self.ledger().scan(text, recipient)
    }

    /// The canaries issued in case `case`, every tenant's, in the order issued.
    pub fn issued_in(&self, case: &str) -> Vec<Canary> {
        let ledger = self.ledger();
        ledger
            .issued()
            .iter()
            .filter(|c| {
                c.id.get(c.owner.len() + 1..)
                    .and_then(|rest| rest.rsplit_once('/'))
                    .map(|(k, _)| k)
                    == Some(case)
            })
            .cloned()
            .collect()
    }

    /// How many canaries each (owner, case) was issued: indices 0 to count - 1.
    pub fn issued(&self) -> Vec<crate::report::IssuedCanaries> {
        let ledger = self.ledger();
        let mut counts: std::collections::BTreeMap<(String, String), u32> = Default::default();
        for c in ledger.issued() {
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
        self.chat_expecting(case, tenant, request, Expect::Success).await
    }

    async fn chat_expecting(
        &self,
        case: &str,
        tenant: &str,
        request: &ChatRequest,
        expect: Expect,
    ) -> Result<Sent, SessionError> {
        let text: usize = request.messages.iter().map(|m| m.content.len()).sum();
        let tokens = match self.profile.tokenizer {
            Some(t) => request.messages.iter().map(|m| t.count(&m.content)).sum(),
            None => (text as u64).div_ceil(4),
        };
        let sent = self
            .call(
                case,
                tenant,
                expect,
                (tokens, u64::from(request.max_tokens)),
                || serde_json::to_value(request).unwrap_or_default(),
                |p, key| p.chat(key, request),
            )
            .await?;
        self.ledger()
            .seed(sent.seq, request.messages.iter().map(|m| m.content.as_str()));
        Ok(sent)
    }

    /// Sends a chat request as `tenant` that is part of a load the case puts on the
    /// vendor: like [`Session::chat`], but its server errors are findings to judge,
    /// not a sign to stop the run.
    pub async fn chat_load(&self, case: &str, tenant: &str, request: &ChatRequest) -> Result<Sent, SessionError> {
        self.chat_expecting(case, tenant, request, Expect::Load).await
    }

    /// Lists models as `tenant` (a credential check) and records it under `case`.
    pub async fn list_models(&self, case: &str, tenant: &str) -> Result<Sent, SessionError> {
        self.call(
            case,
            tenant,
            Expect::Success,
            (0, 0),
            || serde_json::json!({ "op": "list_models" }),
            |p, key| p.list_models(key),
        )
        .await
    }

    /// Asks `method path` on the vendor's origin (an engine's or gateway's own endpoint)
    /// with `body` (a `POST`'s JSON) as `tenant`, or with no key at all when `tenant` is `None` (recorded as
    /// [`NO_KEY`]), and records it under `case`. A refusal is a right answer here.
    pub async fn endpoint(
        &self,
        case: &str,
        tenant: Option<&str>,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Sent, SessionError> {
        let first = self.tenants.first().map(|t| t.label.clone()).unwrap_or_default();
        let key_of = tenant.unwrap_or(&first);
        self.call_as(
            case,
            key_of,
            tenant.unwrap_or(NO_KEY),
            Expect::Denial,
            (0, 0),
            || {
                let mut op = serde_json::json!({ "op": "endpoint", "method": method, "path": path });
                if let Some(body) = body {
                    op["body"] = body.clone();
                }
                op
            },
            |p, key| p.endpoint(tenant.map(|_| key), method, path, body),
        )
        .await
    }

    /// Creates a stored object as `tenant` and records it under `case`.
    pub async fn store(
        &self,
        case: &str,
        tenant: &str,
        input: &str,
        previous: Option<&str>,
    ) -> Result<Sent, SessionError> {
        let tokens = (input.len() as u64).div_ceil(4);
        self.call(
            case,
            tenant,
            Expect::Success,
            (tokens, 96),
            || serde_json::json!({ "op": "store", "input": input, "previous": previous }),
            |p, key| p.store(key, input, previous),
        )
        .await
    }

    /// Fetches stored object `id` as `tenant` and records it under `case`.
    pub async fn fetch_stored(&self, case: &str, tenant: &str, id: &str) -> Result<Sent, SessionError> {
        self.call(
            case,
            tenant,
            Expect::Denial,
            (0, 0),
            || serde_json::json!({ "op": "fetch_stored", "id": id }),
            |p, key| p.fetch_stored(key, id),
        )
        .await
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
        self.call(
            case,
            tenant,
            Expect::Refusal,
            (4, max_tokens),
            || serde_json::json!({ "op": "invalid", "invalid": kind, "stream": stream }),
            |p, key| p.invalid(key, kind, stream),
        )
        .await
    }

    /// Whether requests may still be sent; if not (an interruption, the vendor's
    /// refusals), `case` was cut short.
    fn still_sending(&self, case: &str) -> Result<(), SessionError> {
        let stopped = match (self.interrupted(), self.refused()) {
            (Some(signal), _) => SessionError::Interrupted(signal),
            (None, Some(refusal)) => SessionError::Refused(refusal.clone()),
            (None, None) => return Ok(()),
        };
        self.note_cut(case);
        Err(stopped)
    }

    /// The one path to the vendor: the tenant's key, a concurrency permit, the
    /// provider call, and the transcript line.
    ///
    /// `expect`: what a healthy vendor answers, which decides which refusals count
    /// towards stopping the run (see [`Session::refused`]).
    async fn call<'a>(
        &'a self,
        case: &str,
        tenant: &str,
        expect: Expect,
        cost: (u64, u64),
        describe: impl Fn() -> serde_json::Value,
        request: impl Fn(&'a dyn Provider, &'a crate::credential::Secret) -> crate::adapter::BoxFuture<'a, Exchange>,
    ) -> Result<Sent, SessionError> {
        self.call_as(case, tenant, tenant, expect, cost, describe, request)
            .await
    }

    /// [`Session::call`], recorded in the transcript as `recorded_as` (a request made
    /// with no key at all is recorded as [`NO_KEY`], though the closure gets `tenant`'s
    /// key, which it does not send).
    #[allow(clippy::too_many_arguments)]
    async fn call_as<'a>(
        &'a self,
        case: &str,
        tenant: &str,
        recorded_as: &str,
        expect: Expect,
        (prompt_tokens, max_tokens): (u64, u64),
        describe: impl Fn() -> serde_json::Value,
        request: impl Fn(&'a dyn Provider, &'a crate::credential::Secret) -> crate::adapter::BoxFuture<'a, Exchange>,
    ) -> Result<Sent, SessionError> {
        let key = self.key(tenant)?;
        self.still_sending(case)?;
        self.charge(prompt_tokens, max_tokens)?;
        let (mut backoffs, mut rate_limits) = (0, 0);
        let max_wait = Duration::from_secs(self.profile.max_retry_after_secs);
        loop {
            let exchange = {
                let _permit = self.in_flight.acquire().await.expect("the semaphore is never closed");
                // The run may have stopped while this request waited for its turn.
                self.still_sending(case)?;
                let mut stop = self.stop.clone();
                // Interrupted, a request in flight gets a few seconds to finish, then
                // is abandoned (recorded without its answer).
                let abandon = async move {
                    let stopped = stop.wait_for(Option::is_some).await.is_ok();
                    if stopped {
                        tokio::time::sleep(IN_FLIGHT_GRACE).await;
                    } else {
                        std::future::pending::<()>().await;
                    }
                };
                tokio::select! {
                    exchange = request(self.provider.as_ref(), &key.secret) => exchange,
                    () = abandon => {
                        self.note_cut(case);
                        interrupted(self.interrupted().unwrap_or("a signal"), describe())
                    }
                }
            };
            let retry = retry_after(&exchange, backoffs, max_wait);
            self.count(prompt_tokens, &exchange);
            let sent = self.record(case, recorded_as, exchange)?;
            self.note_refusal(recorded_as, expect, sent.seq, &sent.exchange);
            // The refusal that stops the run cuts its own case short too: an answer
            // refused for its credential earns no verdict (a case whose every request
            // was refused might otherwise pass on it).
            if self.refused().is_some_and(|r| r.last_seq == sent.seq) {
                self.note_cut(case);
            }
            // Every attempt is in the transcript; a retry is charged like any request,
            // and none is made past the budget.
            let wait = match retry {
                Some(Retry::RateLimit(wait)) if rate_limits < self.profile.rate_limit_retries => {
                    rate_limits += 1;
                    wait
                }
                Some(Retry::Backoff(wait)) if backoffs < RETRIES => {
                    backoffs += 1;
                    wait
                }
                _ => return Ok(sent),
            };
            if self.interrupted().is_some()
                || self.refused().is_some()
                || self.charge(prompt_tokens, max_tokens).is_err()
            {
                return Ok(sent);
            }
            if let Some(Retry::RateLimit(_)) = retry {
                let mut accounts = self.accounts();
                let spent = &mut accounts.spent;
                spent.rate_limits_waited += 1;
                spent.rate_limit_secs += wait.as_secs();
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// Adds a request's prompt, as the vendor counted it, to [`Spent::counted_prompt_tokens`]:
    /// its `usage.prompt_tokens`, or where it reported none (a refusal) the budget's
    /// `estimate` scaled by the vendor's count over the estimate on the answers so far.
    fn count(&self, estimate: u64, exchange: &Exchange) {
        let reported = exchange.usage.map(|u| u.prompt_tokens).filter(|&n| n > 0);
        let counted = {
            let mut accounts = self.accounts();
            let counts = &mut accounts.counts;
            match reported {
                Some(n) => {
                    counts.0 += estimate;
                    counts.1 += n;
                    n
                }
                None if counts.0 > 0 => (u128::from(estimate) * u128::from(counts.1) / u128::from(counts.0)) as u64,
                None => estimate,
            }
        };
        self.accounts().spent.counted_prompt_tokens += counted;
    }

    /// The tenant's key, for messages (the variable's name) and requests.
    pub fn key(&self, tenant: &str) -> Result<&TenantKey, SessionError> {
        self.tenants
            .iter()
            .find(|t| t.label == tenant)
            .ok_or_else(|| SessionError::UnknownTenant(tenant.to_owned()))
    }

    fn record(&self, case: &str, tenant: &str, exchange: Exchange) -> Result<Sent, SessionError> {
        // The line is written and read into the ledger under one lock: the next
        // line's answer is judged against this one's request.
        let seq = {
            let mut ledger = self.ledger();
            let seq = self.transcript.append_exchange(case, tenant, &exchange)?;
            ledger.exchange(seq, case, tenant, &exchange);
            seq
        };
        self.observer.on(&crate::event::RunEvent::Recorded {
            case,
            tenant,
            seq,
            status: exchange.status,
            total_ms: exchange.timings.total_ms,
        });
        Ok(Sent { seq, exchange })
    }

    /// Requests that more than one case judges, sent once: the first case to ask for
    /// `key` runs `send` (its requests recorded as its own) and keeps what it returns;
    /// a later case, or one waiting while the first sends, gets the same value, and
    /// the transcript a `cite` line naming the exchanges, which count as its own from
    /// then on: their leaks and redirects are its findings too. `key` must name
    /// everything that decides what is sent and how it is judged; a value of another
    /// type under the same key is a bug in tenantcheck. When `send` fails, nothing is
    /// kept and the next case to ask sends again. Returns the value and, when another
    /// case sent it, that case.
    pub async fn shared<T, F, Fut>(
        &self,
        case: &str,
        key: &str,
        send: F,
    ) -> Result<(Arc<T>, Option<String>), SessionError>
    where
        T: std::any::Any + Send + Sync,
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<(T, Vec<(String, Sent)>), SessionError>>,
    {
        let cell = self.accounts().shared.entry(key.to_owned()).or_default().clone();
        let entry = cell
            .get_or_try_init(|| async {
                let (value, sent) = send().await?;
                Ok::<_, SessionError>(Shared {
                    case: case.to_owned(),
                    value: Arc::new(value),
                    lines: sent.iter().map(|(_, s)| s.seq).collect(),
                })
            })
            .await?
            .clone();
        let value = entry
            .value
            .downcast::<T>()
            .unwrap_or_else(|_| panic!("bug in tenantcheck: shared requests {key:?} kept as another type"));
        if entry.case == case {
            return Ok((value, None));
        }
        {
            let mut ledger = self.ledger();
            self.transcript.append_cite(case, &entry.lines)?;
            ledger
                .cite(case, &entry.lines)
                .expect("bug in tenantcheck: shared requests cited before they were recorded");
        }
        Ok((value, Some(entry.case)))
    }

    /// Records what `case`'s exchanges were to the rule that judges them (a `roles`
    /// line): `verify` hands the rule the same lines, so that it judges them as the run
    /// did.
    pub fn roles(&self, case: &str, roles: &[(&str, Vec<u64>)]) -> Result<(), SessionError> {
        let roles = roles.iter().map(|(r, s)| ((*r).to_owned(), s.clone())).collect();
        self.transcript.append_roles(case, &roles)?;
        Ok(())
    }

    /// Every citation so far ([`Session::shared`]).
    pub fn cited(&self) -> Vec<Citation> {
        self.ledger().cited().to_vec()
    }

    /// Tells `observer` of every request recorded ([`crate::event::RunEvent::Recorded`]).
    pub fn with_observer(mut self, observer: std::sync::Arc<dyn crate::event::Observer>) -> Self {
        self.observer = observer;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::{TransportError, TransportErrorKind};

    fn answered(status: u16, retry_after: Option<&str>) -> Exchange {
        let mut ex = Exchange {
            status: Some(status),
            ..Exchange::default()
        };
        ex.request.url = "http://127.0.0.1/v1/chat/completions".into();
        if let Some(v) = retry_after {
            ex.headers.insert("retry-after".into(), v.into());
        }
        ex
    }

    #[test]
    fn only_safe_failures_are_retried_and_retry_after_is_honoured() {
        let bound = Duration::from_secs(30);
        let retry = |ex: &Exchange, attempt| retry_after(ex, attempt, bound);
        assert_eq!(
            retry(&answered(429, Some("7")), 0),
            Some(Retry::RateLimit(Duration::from_secs(7)))
        );
        assert_eq!(
            retry(&answered(503, None), 0),
            Some(Retry::Backoff(Duration::from_millis(500)))
        );
        assert_eq!(
            retry(&answered(503, None), 1),
            Some(Retry::Backoff(Duration::from_millis(1000)))
        );
        assert_eq!(retry(&answered(429, Some("3600")), 0), None, "too long to wait");
        // The bound is the profile's.
        assert_eq!(
            retry_after(&answered(429, Some("3600")), 0, Duration::from_secs(3600)),
            Some(Retry::RateLimit(Duration::from_secs(3600)))
        );
        assert_eq!(retry_after(&answered(429, Some("7")), 0, Duration::from_secs(5)), None);
        for status in [200, 400, 401, 404, 500] {
            assert_eq!(retry(&answered(status, Some("1")), 0), None, "{status}");
        }
        let mut lost = answered(200, None);
        lost.status = None;
        for (kind, retried) in [
            (TransportErrorKind::Connect, true),
            (TransportErrorKind::Request, true),
            (TransportErrorKind::Timeout, false),
            (TransportErrorKind::Body, false),
        ] {
            lost.transport_error = Some(TransportError {
                kind,
                message: String::new(),
            });
            assert_eq!(retry(&lost, 0).is_some(), retried, "{kind:?}");
        }
        lost.request.url.clear();
        assert_eq!(retry(&lost, 0), None, "nothing was sent");
    }
}
