//! [`Session`]: one run's connection to one vendor: the adapter, the tenants'
//! credentials, the transcript, and the concurrency limit.
//!
//! Probes send every request through a session, so every request is recorded, no
//! probe ever holds a credential, and the profile's `max_concurrency` holds across all
//! cases running at once.

use crate::adapter::{ChatRequest, Exchange, InvalidRequest, Provider};
use crate::canary::{Canary, RunSecret};
use crate::scan::{GrowingScanner, Hit};
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
    /// Every request's text by runs of sentences, and, by transcript line, the answers
    /// that held another request's ([`crate::passage`]). Held while a line is written
    /// and judged, and for nothing else: each answer is judged against exactly the
    /// lines before it, as `verify` judges it, and no other work waits on a judgement.
    book: std::sync::Mutex<PassageBook>,
    /// What the run's answers showed, by case, and the canaries they are scanned for.
    ledger: std::sync::Mutex<Ledger>,
    /// What the run has spent, the vendor's refusals in a row, and the requests two
    /// cases share.
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

/// What the run's answers showed, by case: the net under every probe, which
/// `probe::run` adds to each outcome.
#[derive(Default)]
struct Ledger {
    /// Every canary issued, and the scanner over them.
    canaries: Registry,
    /// Every other tenant's canary found in any answer, by case.
    leaks: Vec<(String, crate::outcome::LeakEvidence)>,
    /// Every answer that held another request's text, by case (answers not bound to
    /// their request).
    misrouted: Vec<(String, crate::outcome::LeakEvidence)>,
    /// Every answer that redirected, by case.
    redirects: Vec<(String, Redirect)>,
    /// Every citation so far ([`Session::cited`]).
    cited: Vec<Citation>,
    /// The cases the interruption cut: a request refused or abandoned because of it.
    cut: std::collections::BTreeSet<String>,
}

/// What the run has spent, and the vendor's refusals in a row.
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
}

/// The run's passages, and the answers that held another request's text by line.
type PassageBook = (
    crate::passage::Passages,
    std::collections::BTreeMap<u64, Vec<crate::outcome::LeakEvidence>>,
);

/// Judges the answer of the exchange at `seq` against every request of `book` before
/// it, adds its request's text, and keeps its hits by line: another tenant's words
/// first, then another request's sentences.
fn judge_passages(book: &mut PassageBook, seq: u64, tenant: &str, exchange: &Exchange) {
    let judged = book.0.judge(seq, tenant, exchange);
    let text = judged.text.map(|hit| crate::outcome::LeakEvidence {
        canary_id: hit.id(),
        owner: hit.owner.clone(),
        recipient: tenant.to_owned(),
        fragment: crate::canary::Fragment::Text,
        excerpt: hit.text.clone(),
        matched: hit.text.clone(),
        seeded_in: Some(hit.source),
        returned_in: seq,
        words: Some(hit.into()),
    });
    let passage = judged.passage.map(|hit| crate::outcome::LeakEvidence {
        canary_id: hit.id(),
        owner: hit.owner,
        recipient: tenant.to_owned(),
        fragment: crate::canary::Fragment::Passage,
        excerpt: hit.passage.clone(),
        matched: hit.passage,
        seeded_in: Some(hit.source),
        returned_in: seq,
        words: None,
    });
    let hits: Vec<_> = text.into_iter().chain(passage).collect();
    if !hits.is_empty() {
        book.1.insert(seq, hits);
    }
}

/// A case judged exchanges another case sent ([`Session::shared`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Citation {
    /// The case that judged them.
    pub judge: String,
    /// The case that sent them.
    pub sender: String,
    /// Their transcript lines.
    pub lines: Vec<u64>,
}

/// Requests one case sent that later cases judge too: what the sender made of them
/// and the lines they were recorded at.
#[derive(Clone)]
struct Shared {
    /// The case that sent them.
    case: String,
    /// What the sender's probe keeps of them (a probe's own type).
    value: Arc<dyn std::any::Any + Send + Sync>,
    /// The exchanges, as recorded (without the requests' bodies), with the tenant
    /// each was sent as.
    sent: Vec<(String, Sent)>,
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

/// An answer that redirected instead of answering.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redirect {
    /// The tenant that asked.
    pub tenant: String,
    /// Its transcript line.
    pub seq: u64,
    /// The 3xx status.
    pub status: u16,
    /// Where it pointed (the `Location` header), if anywhere.
    pub location: Option<String>,
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
    /// Completion tokens the vendor may have billed: every request's `max_tokens`.
    pub completion_tokens: u64,
    /// Estimated cost in US dollars, as [`Budget::usd`] counts it.
    pub usd: f64,
    /// Prompt tokens as the vendor counted them (its `usage.prompt_tokens`); where it
    /// reported none (a refusal), `prompt_tokens`' estimate scaled by the vendor's
    /// count over the estimate on the answers so far: what it bills, known only once
    /// it answered.
    pub counted_prompt_tokens: u64,
    /// Answers with HTTP status 429.
    pub rate_limit_answers: u64,
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
            rate_limit_answers: self.rate_limit_answers + o.rate_limit_answers,
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
            rate_limit_answers: self.rate_limit_answers - o.rate_limit_answers,
            rate_limits_waited: self.rate_limits_waited - o.rate_limits_waited,
            rate_limit_secs: self.rate_limit_secs - o.rate_limit_secs,
        }
    }
}

/// Every canary issued in the run, and a scanner over them (made at the first scan,
/// then told of each canary issued).
#[derive(Default)]
struct Registry {
    issued: Vec<Canary>,
    scanner: Option<GrowingScanner>,
    /// Canary id → the transcript line of the first request that carried it.
    seeded_in: std::collections::HashMap<String, u64>,
    /// Issued canaries no request has carried yet (indices into `issued`).
    pending: Vec<usize>,
    /// Canary id → its index in `issued`.
    index: std::collections::HashMap<String, usize>,
}

impl Registry {
    fn add(&mut self, c: Canary) -> usize {
        let i = self.issued.len();
        self.index.insert(c.id.clone(), i);
        if let Some(scanner) = &mut self.scanner {
            scanner.add(c.clone());
        }
        self.issued.push(c);
        i
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
            book: std::sync::Mutex::new((
                crate::passage::Passages::new(&labels).with_marks(&marks),
                std::collections::BTreeMap::new(),
            )),
            ledger: Default::default(),
            accounts: Default::default(),
            observer: std::sync::Arc::new(crate::event::Nobody),
            budget: Budget::default(),
            stop: tokio::sync::watch::channel(None).1,
            refused: Default::default(),
            tenants,
        }
    }

    /// The passage book, locked.
    fn book(&self) -> std::sync::MutexGuard<'_, PassageBook> {
        self.book.lock().expect("passage book poisoned")
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

    /// Every answer recorded under `case` that redirected.
    pub fn redirects_in(&self, case: &str) -> Vec<Redirect> {
        let mut ledger = self.ledger();
        let redirects = &mut ledger.redirects;
        redirects
            .iter()
            .filter(|(c, _)| c == case)
            .map(|(_, r)| r.clone())
            .collect()
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
            let _ = self.refused.set(Refusal {
                tenant: tenant.to_owned(),
                status,
                count: run.count,
                last_seq: seq,
            });
        }
    }

    /// Stops sending when `stop` holds a signal's name.
    pub fn with_stop(mut self, stop: tokio::sync::watch::Receiver<Option<&'static str>>) -> Self {
        self.stop = stop;
        self
    }

    /// Whether the interruption cut `case` short (refused or abandoned a request of it).
    pub fn was_cut(&self, case: &str) -> bool {
        self.ledger().cut.contains(case)
    }

    fn note_cut(&self, case: &str) {
        self.ledger().cut.insert(case.to_owned());
    }

    /// The signal that interrupted the run, if one did.
    pub fn interrupted(&self) -> Option<&'static str> {
        *self.stop.borrow()
    }

    /// Every other tenant's canary found in the answers recorded under `case`.
    pub fn leaks_in(&self, case: &str) -> Vec<crate::outcome::LeakEvidence> {
        let mut ledger = self.ledger();
        let leaks = &mut ledger.leaks;
        leaks
            .iter()
            .filter(|(c, _)| c == case)
            .map(|(_, l)| l.clone())
            .collect()
    }

    /// Answers recorded under `case` that held another request's text.
    pub fn misrouted_in(&self, case: &str) -> Vec<crate::outcome::LeakEvidence> {
        let mut ledger = self.ledger();
        let misrouted = &mut ledger.misrouted;
        misrouted
            .iter()
            .filter(|(c, _)| c == case)
            .map(|(_, l)| l.clone())
            .collect()
    }

    /// Reads an exchange recorded earlier (a resumed run's), in transcript order, as
    /// [`Session::record`] reads a new one: its request's text joins the passages every
    /// later answer is judged against; and, where `rescan` (a case that runs again),
    /// whatever it holds of other tenants and other requests is laid on `case`.
    pub fn replay(&self, case: &str, tenant: &str, seq: u64, exchange: &Exchange, rescan: bool) {
        self.note_passages(seq, tenant, exchange);
        if rescan {
            self.rescan(case, tenant, seq, exchange);
        }
    }

    /// Lays what an exchange recorded earlier holds of other tenants' canaries, and of
    /// other requests' text, on `case` (which sent or cites it).
    pub fn rescan(&self, case: &str, tenant: &str, seq: u64, exchange: &Exchange) {
        self.note_leaks(case, tenant, seq, exchange);
        let hits = self.book().1.get(&seq).cloned();
        if let Some(hits) = hits {
            self.ledger()
                .misrouted
                .extend(hits.into_iter().map(|leak| (case.to_owned(), leak)));
        }
    }

    /// Judges the answer of the exchange at `seq` against every request before it, and
    /// adds its request's text; keeps a hit by line. The caller holds no other lock.
    fn note_passages(&self, seq: u64, tenant: &str, exchange: &Exchange) {
        judge_passages(&mut self.book(), seq, tenant, exchange);
    }

    fn note_leaks(&self, case: &str, tenant: &str, seq: u64, exchange: &Exchange) {
        let hits = self.scan(&exchange.returned_text(), tenant);
        if hits.is_empty() {
            return;
        }
        let found: Vec<_> = hits
            .into_iter()
            .map(|hit| (case.to_owned(), self.leak_evidence(hit, tenant, seq)))
            .collect();
        self.ledger().leaks.extend(found);
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
        let mut ledger = self.ledger();
        let reg = &mut ledger.canaries;
        let i = match reg.index.get(&c.id) {
            // Issued before (a resumed run's case, run again): seeded anew.
            Some(&i) => i,
            None => reg.add(c.clone()),
        };
        if !reg.pending.contains(&i) {
            reg.pending.push(i);
        }
        c
    }

    /// Registers the canaries an interrupted run issued, so that every answer of the
    /// resumed run (and the old answers rescanned) is scanned for them.
    pub fn preload(&self, issued: &[crate::report::IssuedCanaries]) {
        let mut ledger = self.ledger();
        let reg = &mut ledger.canaries;
        for i in issued {
            for n in 0..i.count {
                let c = self.secret.canary(&i.owner, &i.case, n);
                if !reg.index.contains_key(&c.id) {
                    reg.add(c);
                }
            }
        }
    }

    /// The evidence of `hit`, found in the answer recorded at `returned_in` to
    /// `recipient`: with the line of the request that carried the canary first.
    pub fn leak_evidence(&self, hit: Hit, recipient: &str, returned_in: u64) -> crate::outcome::LeakEvidence {
        crate::outcome::LeakEvidence {
            seeded_in: self.seeded_in(&hit.id),
            canary_id: hit.id,
            owner: hit.owner,
            recipient: recipient.to_owned(),
            fragment: hit.fragment,
            matched: hit.matched,
            excerpt: hit.excerpt,
            returned_in,
            words: None,
        }
    }

    /// The transcript line of the first request that carried canary `id`.
    pub fn seeded_in(&self, id: &str) -> Option<u64> {
        self.ledger().canaries.seeded_in.get(id).copied()
    }

    /// Notes which pending canaries the request recorded at `seq` carried.
    fn note_seeding(&self, request: &ChatRequest, seq: u64) {
        let mut ledger = self.ledger();
        let reg = &mut ledger.canaries;
        if reg.pending.is_empty() {
            return;
        }
        let Registry {
            issued,
            seeded_in,
            pending,
            ..
        } = &mut *reg;
        let carried: Vec<crate::canary::Carried<'_>> = request
            .messages
            .iter()
            .map(|m| crate::canary::Carried::of(&m.content))
            .collect();
        pending.retain(|&i| {
            let c = &issued[i];
            let carried = carried.iter().any(|m| m.holds(c));
            if carried {
                seeded_in.insert(c.id.clone(), seq);
            }
            !carried
        });
    }

    /// Canaries of the run not owned by `recipient` found in `text`.
    pub fn scan(&self, text: &str, recipient: &str) -> Vec<Hit> {
        let mut ledger = self.ledger();
        let reg = &mut ledger.canaries;
        let reg = &mut *reg;
        let scanner = reg.scanner.get_or_insert_with(|| {
            let marks: Vec<_> = self.tenants.iter().map(|t| self.secret.marks(&t.label)).collect();
            let mut scanner = GrowingScanner::new(&marks);
            for c in &reg.issued {
                scanner.add(c.clone());
            }
            scanner
        });
        scanner.scan(text, recipient)
    }

    /// The canaries issued in case `case`, every tenant's, in the order issued.
    pub fn issued_in(&self, case: &str) -> Vec<Canary> {
        let ledger = self.ledger();
        ledger
            .canaries
            .issued
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
        let mut ledger = self.ledger();
        let reg = &mut ledger.canaries;
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
        self.note_seeding(request, sent.seq);
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
            if exchange.status == Some(429) {
                self.accounts().spent.rate_limit_answers += 1;
            }
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
        // The line is written and its answer judged against the lines before it under
        // one lock: the next line's answer is judged against this one's request.
        let seq = {
            let mut book = self.book();
            let seq = self.transcript.append_exchange(case, tenant, &exchange)?;
            judge_passages(&mut book, seq, tenant, &exchange);
            seq
        };
        self.rescan(case, tenant, seq, &exchange);
        if let Some(status @ 300..=399) = exchange.status {
            let redirect = Redirect {
                tenant: tenant.to_owned(),
                seq,
                status,
                location: exchange.headers.get("location").cloned(),
            };
            self.ledger().redirects.push((case.to_owned(), redirect));
        }
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
                let (value, mut sent) = send().await?;
                // What a citing case judges again is what came back; a long prompt
                // is not kept twice for it.
                for (_, s) in &mut sent {
                    s.exchange.request.body = None;
                }
                Ok::<_, SessionError>(Shared {
                    case: case.to_owned(),
                    value: Arc::new(value),
                    sent,
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
        let seqs: Vec<u64> = entry.sent.iter().map(|(_, s)| s.seq).collect();
        self.transcript.append_cite(case, &seqs)?;
        self.ledger().cited.push(Citation {
            judge: case.to_owned(),
            sender: entry.case.clone(),
            lines: seqs,
        });
        for (tenant, sent) in &entry.sent {
            self.rescan(case, tenant, sent.seq, &sent.exchange);
            let redirect = self
                .ledger()
                .redirects
                .iter()
                .find(|(c, r)| *c == entry.case && r.seq == sent.seq)
                .map(|(_, r)| r.clone());
            if let Some(r) = redirect {
                self.ledger().redirects.push((case.to_owned(), r));
            }
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
        self.ledger().cited.clone()
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
