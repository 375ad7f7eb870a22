//! [`run`]: turns the suite's cases into libtest-mimic trials and runs them against a
//! vendor, writing the transcript and the signed report into a run folder.
//!
//! The order of work, so that every mistake shows before the first request: load the
//! suite and the profile; with `--list`, list and stop; resolve the credentials (or
//! start the embedded reference vendor with fresh keys); create the run folder, the
//! key and the transcript (whose first line commits to the run secret); check each
//! tenant's credential with one cheap request; then run the trials on one shared
//! tokio runtime, collect each case's [`Outcome`], and sign the report.
//!
//! Trials are libtest-mimic's, so filtering, `--list`, `--exact`, `--skip`,
//! `--test-threads` and `--format` are those of `cargo test`. In the default format
//! the trial list is the harness's own ([`TrialLines`]): each line ends with the case's
//! verdict (PASS, FAIL, INCONCLUSIVE, SKIPPED) where libtest would print `ok` for a
//! skipped case and `FAILED` for an inconclusive one, and the closing `test result:`
//! line counts all four. In libtest-mimic's machine formats (`--format json|terse`) an
//! inconclusive case is a failure whose message starts with `inconclusive:`; the
//! report and the exit code keep the two apart.

use crate::canary::RunSecret;
use crate::credential::{Redactor, Secret};
use crate::event::{Endings, Fanout, Observer, Progress, RunEvent, TrialLines};
use crate::exit;
use crate::inert::{Sink, inert};
use crate::outcome::{Coverage, Finding, FindingCode, Outcome, Verdict};
use crate::report::key::{self, KeyError};
use crate::report::{
    CaseReport, ENVELOPE_FILE, HTML_FILE, Interruption, JUNIT_FILE, MARKDOWN_FILE, RateLimits, Refused, Report,
    RunSecretRecord, SuiteFile, SuiteRecord, TRANSCRIPT_FILE, ToolInfo, Totals, TranscriptRecord, VendorRecord,
};
use crate::resume::Resumed;
use crate::session::Session;
use crate::signal::watch_signals;
use crate::sim::{SimConfig, SimServer};
use crate::suite::{Suite, SuiteError};
use crate::transcript::{Header, Transcript};
use crate::vendor::{ProfileError, ProfileErrorKind, TenantKey, VendorProfile};
use libtest_mimic::{Arguments, Failed, Trial};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::run_dir::DEFAULT_RUNS_DIR;

/// The label the run secret derives the case order and the pauses from
/// (`RunSecret::seed(ORDER, case, 0)` sorts the cases).
pub const ORDER: &str = "tenantcheck/order";

/// The longest pause before a case, in milliseconds.
const MAX_PAUSE_MS: u64 = 250;

/// The case name used for the credential check in the transcript.
const PREFLIGHT: &str = "preflight";

/// What `tenantcheck run` was asked to do.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// The vendor profile; `None`: the embedded reference vendor.
    pub vendor: Option<PathBuf>,
    /// The run folder; `None`: a new folder under [`DEFAULT_RUNS_DIR`].
    pub out: Option<PathBuf>,
    /// The private signing key; `None`: a fresh pair written into the run folder.
    pub key: Option<PathBuf>,
    /// A suite folder; `None`: the suite embedded in the binary.
    pub suite: Option<PathBuf>,
    /// A buyer's challenge, mixed into the run secret and recorded.
    pub challenge: Option<Vec<u8>>,
    /// The transparency log the challenge names: the run enters its start there before
    /// its first request and its end after its report is signed.
    pub log: Option<crate::tlog::ChallengeLog>,
    /// The most the run may send.
    pub budget: crate::session::Budget,
    /// Requests in flight at once, at most; `None`: the profile's `max_concurrency`.
    pub max_concurrency: Option<u32>,
    /// An interrupted run's folder to continue: its unfinished cases run again, into
    /// the same transcript, and its report is replaced by one covering the whole run.
    pub resume: Option<PathBuf>,
    /// The report this run follows (`--previous`): its digest is recorded.
    pub previous: Option<PathBuf>,
    /// The share of the suite to run (`--partition INDEX/COUNT`); the other shares'
    /// cases are skipped, and `tenantcheck merge` joins the shares' reports.
    pub partition: Option<crate::partition::Partition>,
    /// libtest-mimic's arguments (filter, `--list`, `--exact`, `--skip`, …).
    pub trials: Arguments,
}

/// The digest of the report envelope at `path`, after checking that it is one.
fn previous_report(path: &Path) -> Result<crate::report::PreviousReport, HarnessError> {
    let problem = |problem: String| HarnessError::Previous {
        path: path.to_owned(),
        problem,
    };
    let bytes = std::fs::read(path).map_err(|e| problem(e.to_string()))?;
    let envelope: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| problem(format!("not JSON: {e}")))?;
    if !envelope["payload"].is_string() || !envelope["signatures"].is_array() {
        return Err(problem("not a DSSE envelope (no payload and signatures)".into()));
    }
    Ok(crate::report::PreviousReport {
        sha256: crate::sha256_hex(&bytes),
    })
}

/// The cases a run selects, when not all of the suite's: by the filter and skips (as
/// libtest-mimic selects trials) and the share.
fn selection(
    suite: &crate::suite::Suite,
    partition: Option<crate::partition::Partition>,
    trials: &Arguments,
) -> Option<crate::report::Selection> {
    let selected = suite
        .cases
        .iter()
        .enumerate()
        .filter(|(position, c)| crate::partition::Partition::in_share(partition, *position) && selected(trials, &c.id))
        .count();
    (selected < suite.cases.len()).then(|| crate::report::Selection {
        filter: trials.filter.clone(),
        exact: trials.exact,
        skip: trials.skip.clone(),
        selected: selected as u32,
    })
}

/// A run that could not judge the vendor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// The vendor profile is wrong, or the vendor refused a credential.
    #[error(transparent)]
    Profile(Box<ProfileError>),
    /// The suite is wrong.
    #[error(transparent)]
    Suite(Box<SuiteError>),
    /// `--budget-usd` was given for a profile without prices.
    #[error(
        "--budget-usd needs the vendor's prices: add [prices] prompt_usd_per_million and completion_usd_per_million to the profile"
    )]
    BudgetWithoutPrices,
    /// The signing key could not be made or read.
    #[error("signing key: {0}")]
    Key(#[from] KeyError),
    /// The run folder cannot be used.
    #[error("run folder {}: {problem}", path.display())]
    RunDir {
        /// The folder.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A file of the run could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The async runtime or the embedded reference vendor could not start.
    #[error("cannot start {what}: {source}")]
    Start {
        /// What.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// A request could not be made or recorded.
    #[error(transparent)]
    Session(#[from] crate::session::SessionError),
    /// The run could not enter its start in the challenge's transparency log: nothing
    /// was sent to the vendor.
    #[error(
        "{0}; the run did not start (nothing was sent to the vendor): a run under this challenge must enter the log first"
    )]
    Log(#[from] crate::rekor::RekorError),
    /// The vendor answered the credential check with a redirect, which is never
    /// followed.
    #[error(
        "the vendor answered tenant {tenant}'s credential check ({url}) with HTTP {status} to {location}; tenantcheck follows no redirect, so that no credential leaves the vendor's origin; fix: if that address is the vendor's own, set base_url to it"
    )]
    Redirected {
        /// The URL asked.
        url: String,
        /// The tenant.
        tenant: String,
        /// The 3xx status.
        status: u16,
        /// Where it pointed.
        location: String,
    },
    /// A credential of the run stands in a field the report cannot do without (its
    /// redaction leaves the report unreadable): the key reads like the report's own
    /// words. Nothing is signed.
    #[error(
        "a credential of the run matches the report's own words ({problem}), so the report cannot be redacted and was not signed; fix: use keys that are random past their prefix, as vendors issue them"
    )]
    CredentialInReport {
        /// Where the redacted report stopped reading.
        problem: String,
    },
    /// The previous report (`--previous`) cannot be read as a report envelope.
    #[error("--previous {}: {problem}; fix: name the report.dsse.json of an earlier run", path.display())]
    Previous {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The vendor could not be reached.
    #[error("the vendor at {url} could not be reached as tenant {tenant}: {error}")]
    Unreachable {
        /// The URL tried.
        url: String,
        /// The tenant.
        tenant: String,
        /// What failed.
        error: String,
    },
}

impl From<ProfileError> for HarnessError {
    fn from(e: ProfileError) -> Self {
        HarnessError::Profile(Box::new(e))
    }
}

impl From<crate::run_dir::RunDirError> for HarnessError {
    fn from(e: crate::run_dir::RunDirError) -> Self {
        HarnessError::RunDir {
            path: e.path,
            problem: e.problem,
        }
    }
}

impl From<SuiteError> for HarnessError {
    fn from(e: SuiteError) -> Self {
        HarnessError::Suite(Box::new(e))
    }
}

/// Whether libtest-mimic's filter arguments select case `id` (as they select trials).
pub(crate) fn selected(args: &libtest_mimic::Arguments, id: &str) -> bool {
    let matches = |pattern: &str| {
        if args.exact {
            id == pattern
        } else {
            id.contains(pattern)
        }
    };
    args.filter.as_deref().is_none_or(matches) && !args.skip.iter().any(|s| matches(s))
}

/// Where the run's files went and how it ended.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// The exit code (see [`crate::exit`]).
    pub exit_code: u8,
    /// The run folder (`None` for `--list`).
    pub run_dir: Option<PathBuf>,
}

/// Where libtest-mimic's own trial lines go when the harness prints its own.
const NULL_DEVICE: &str = if cfg!(windows) { "NUL" } else { "/dev/null" };

/// Runs the suite; writes the harness's own lines (after the trial list) to `out`.
pub fn run(opts: RunOptions, out: &mut dyn Write) -> Result<RunResult, HarnessError> {
    let previous = opts.previous.as_deref().map(previous_report).transpose()?;
    let resumed = opts
        .resume
        .as_deref()
        .map(|dir| Resumed::load(dir, opts.trials.filter.is_some() || !opts.trials.skip.is_empty()))
        .transpose()?;
    let mut inputs = match &resumed {
        Some(r) => Inputs::resumed(r, &opts)?,
        None => Inputs::load(&opts)?,
    };
    // A resumed run keeps the share it ran.
    let partition = match &resumed {
        Some(r) => r.report.partition,
        None => opts.partition,
    };
    if opts.trials.list {
        return Ok(list(&inputs.suite, partition, &opts.trials));
    }

    crate::install_crypto_provider();
    let runtime = new_runtime()?;
    // Signals are caught from here on: the first stops sending and ends the run with an
    // incomplete report, the second ends the process at once.
    let events = Events::new(&inputs.suite, &opts.trials);
    let stop = watch_signals(&runtime, events.observer.clone());
    let (origin, tenants, sim) = tenants(&runtime, &mut inputs)?;
    let redactor = Redactor::new(tenants.iter().map(|t| &t.secret));
    let run_dir = match &resumed {
        Some(r) => r.dir.clone(),
        None => crate::run_dir::create(opts.out.as_deref())?,
    };
    let signer = Signer::choose(&opts, resumed.as_ref(), &run_dir)?;
    let drawn = match (&opts.log, &resumed) {
        (Some(log), None) => Drawn::logged(&opts, log, &runtime, &inputs, &signer, out)?,
        _ => Drawn::of(&opts, resumed.as_ref()),
    };
    let transcript_path = run_dir.join(TRANSCRIPT_FILE);
    let transcript = Arc::new(open_transcript(
        &transcript_path,
        &redactor,
        resumed.as_ref(),
        &inputs.profile.name,
        &drawn,
    )?);
    let provider = crate::adapter::provider(&inputs.profile).map_err(|e| HarnessError::Unreachable {
        url: inputs.profile.base_url().to_owned(),
        tenant: "-".into(),
        error: e.to_string(),
    })?;
    let session = Session::new(
        inputs.profile.clone(),
        provider,
        tenants,
        transcript.clone(),
        drawn.secret.clone(),
    )
    .with_observer(events.observer.clone())
    .with_budget(opts.budget)
    .with_stop(stop);
    let session = Arc::new(session);
    if let Some(r) = &resumed {
        rescan(r, &session, &transcript_path)?;
    }
    runtime.block_on(preflight(&session, &origin))?;

    let ran = Ran::new(&session, &runtime, &events, &redactor, &inputs.suite);
    let trials = trials(&inputs.suite, partition, resumed.as_ref(), &drawn.secret, &ran);
    run_trials(&opts.trials, trials, &events);
    let report = assemble(Assembly {
        opts: &opts,
        inputs,
        partition,
        resumed: resumed.as_ref(),
        previous,
        drawn,
        transcript: &transcript,
        ran: &ran,
        ending: events.endings.take(),
    });
    let report = redact_report(&report, &redactor)?;
    let envelope_path = write_report(&report, &signer, &run_dir, &transcript_path)?;
    // A logged run logs its end, a resumed one again: its last end is its report's.
    if let Some(start) = &report.run_secret.log {
        log_end(start, &report, &envelope_path, &runtime, out);
    }
    if let Some(sim) = sim {
        let _ = runtime.block_on(sim.shutdown());
    }
    let _ = print_summary(
        out,
        &report,
        &run_dir,
        &envelope_path,
        &run_dir.join(key::PUBLIC_KEY_FILE),
        signer.fresh && resumed.is_none(),
        Sending {
            spent: session.spent(),
            keys_echoed: redactor.redacted(),
        },
    );
    Ok(RunResult {
        exit_code: exit_code(&report),
        run_dir: Some(run_dir),
    })
}

/// Where the profile came from (for messages), the tenants' keys, and the embedded
/// reference vendor when the run started one (with fresh keys).
#[allow(clippy::type_complexity)]
fn tenants(
    runtime: &tokio::runtime::Runtime,
    inputs: &mut Inputs,
) -> Result<(PathBuf, Vec<TenantKey>, Option<SimServer>), HarnessError> {
    let origin = PathBuf::from(match inputs.vendor_source.as_str() {
        "embedded" => "<embedded vendors/sim.toml>",
        path => path,
    });
    if inputs.vendor_source == "embedded" {
        let (tenants, sim) = start_sim(runtime, &mut inputs.profile)?;
        return Ok((origin, tenants, Some(sim)));
    }
    let tenants = crate::vendor::resolve_credentials(&inputs.profile, &origin, |name| std::env::var(name).ok())?;
    Ok((origin, tenants, None))
}

/// A resumed run's first part read into the session: its canaries, its requests'
/// text, and its leaks in the cases it runs again.
fn rescan(resumed: &Resumed, session: &Session, transcript_path: &Path) -> Result<(), HarnessError> {
    resumed
        .rescan(session, transcript_path)
        .map_err(|source| HarnessError::Write {
            path: transcript_path.to_owned(),
            source,
        })
}

/// `--list`: the cases of this share, as libtest lists tests.
fn list(suite: &Suite, partition: Option<crate::partition::Partition>, args: &Arguments) -> RunResult {
    let trials = suite
        .cases
        .iter()
        .enumerate()
        .filter(|(position, _)| crate::partition::Partition::in_share(partition, *position))
        .map(|(_, c)| Trial::test(c.id.clone(), || Ok(())).with_kind(c.threat.to_string()))
        .collect();
    let _ = libtest_mimic::run(args, trials);
    RunResult {
        exit_code: exit::SUCCESS,
        run_dir: None,
    }
}

/// The key the report is signed with.
struct Signer {
    key: ed25519_dalek::SigningKey,
    /// Whether the run wrote it (its public half is in the run folder).
    fresh: bool,
}

impl Signer {
    /// `--key`, the pair a resumed run's first part wrote, or a new pair; the public
    /// key is written beside the report.
    fn choose(opts: &RunOptions, resumed: Option<&Resumed>, run_dir: &Path) -> Result<Signer, HarnessError> {
        let own_key = run_dir.join(key::PRIVATE_KEY_FILE);
        let (key, fresh) = match (&opts.key, resumed) {
            (Some(path), _) => (key::read_private(path)?, false),
            // A resumed run signs with the pair its first part wrote.
            (None, Some(_)) if own_key.exists() => (key::read_private(&own_key)?, true),
            (None, Some(r)) => {
                return Err(HarnessError::RunDir {
                    path: r.dir.clone(),
                    problem: "its report was signed with your own key: give it again with --key".into(),
                });
            }
            (None, None) => (key::write_new_pair(run_dir)?.0, true),
        };
        if let Some(r) = resumed {
            if r.public != key.verifying_key() {
                return Err(HarnessError::RunDir {
                    path: r.dir.clone(),
                    problem: "--key is not the key that signed its report: sign the whole run with one key".into(),
                });
            }
        } else if !fresh {
            key::write_public(run_dir, &key.verifying_key())?;
        }
        Ok(Signer { key, fresh })
    }
}

/// The run secret and what it was drawn from, and when the run began: a resumed run
/// keeps its first part's.
struct Drawn {
    seed_hex: String,
    challenge_hex: Option<String>,
    secret: RunSecret,
    started_at: String,
    /// The run's start entry, when the challenge names a log.
    log: Option<crate::tlog::StartRecord>,
}

impl Drawn {
    fn of(opts: &RunOptions, resumed: Option<&Resumed>) -> Drawn {
        match resumed {
            Some(r) => {
                let rs = &r.report.run_secret;
                Drawn {
                    seed_hex: rs.seed.clone(),
                    challenge_hex: rs.challenge.clone(),
                    secret: RunSecret::from_hex(&rs.revealed).expect("a verified report's secret is hex"),
                    started_at: r.report.started_at.clone(),
                    log: rs.log.clone(),
                }
            }
            None => {
                let seed: [u8; 32] = crate::random_bytes();
                Drawn {
                    seed_hex: crate::hex(&seed),
                    challenge_hex: opts.challenge.as_deref().map(crate::hex),
                    secret: RunSecret::derive(&seed, opts.challenge.as_deref().unwrap_or_default()),
                    started_at: crate::now_rfc3339(),
                    log: None,
                }
            }
        }
    }

    /// A fresh run under a challenge that names a log: its start entry is logged
    /// before anything is sent, and the secret mixes in where the log put it.
    fn logged(
        opts: &RunOptions,
        log: &crate::tlog::ChallengeLog,
        runtime: &tokio::runtime::Runtime,
        inputs: &Inputs,
        signer: &Signer,
        out: &mut dyn Write,
    ) -> Result<Drawn, HarnessError> {
        use crate::tlog::{RunStart, START_TYPE, StartRecord, entry_key, seed_commitment, statement_bytes};
        let challenge = opts.challenge.clone().unwrap_or_default();
        let seed: [u8; 32] = crate::random_bytes();
        let statement = RunStart {
            kind: START_TYPE.to_owned(),
            challenge: crate::hex(&challenge),
            seed_commitment: seed_commitment(&seed),
            profile_sha256: crate::tlog::profile_sha256(&inputs.vendor_source, &inputs.profile),
            suite_sha256: inputs.suite.digest.clone(),
            tool_version: crate::TOOL_VERSION.to_owned(),
            run_key: crate::hex(signer.key.verifying_key().as_bytes()),
        };
        let client = crate::rekor::Log::new(log)?;
        let started = std::time::Instant::now();
        let (entry, included) = runtime.block_on(client.enter(
            "run start",
            &statement_bytes(&statement),
            &entry_key(&challenge, "start"),
        ))?;
        let _ = writeln!(
            out,
            "logged: run start, entry {} of {} (tree size {}; {:.1} s)",
            included.index,
            log.origin,
            included.tree_size,
            started.elapsed().as_secs_f64()
        );
        Ok(Drawn {
            seed_hex: crate::hex(&seed),
            challenge_hex: Some(crate::hex(&challenge)),
            secret: RunSecret::derive_logged(&seed, &challenge, included.index, &included.root),
            started_at: crate::now_rfc3339(),
            log: Some(StartRecord {
                url: log.url.clone(),
                origin: log.origin.clone(),
                key: log.key.clone(),
                statement,
                entry,
            }),
        })
    }
}

/// Enters the run's end in the log and writes it beside the report
/// ([`crate::run_dir::LOG_END_FILE`]). A run whose end could not be logged keeps its
/// report; the log shows it as never ended, and the run says so.
fn log_end(
    start: &crate::tlog::StartRecord,
    report: &Report,
    envelope_path: &Path,
    runtime: &tokio::runtime::Runtime,
    out: &mut dyn Write,
) {
    use crate::tlog::{END_TYPE, EndRecord, RunEnd, end_role, entry_key, statement_bytes};
    let started = std::time::Instant::now();
    let path = envelope_path.with_file_name(crate::run_dir::LOG_END_FILE);
    // A resumed run's first end is not this report's: gone before the new one is asked for.
    let _ = std::fs::remove_file(&path);
    let logged = (|| -> Result<EndRecord, String> {
        let envelope = std::fs::read(envelope_path).map_err(|e| format!("{}: {e}", envelope_path.display()))?;
        let challenge = crate::report::unhex(&start.statement.challenge).unwrap_or_default();
        let statement = RunEnd {
            kind: END_TYPE.to_owned(),
            challenge: start.statement.challenge.clone(),
            start_index: start.entry.log_index,
            report_sha256: crate::sha256_hex(&envelope),
            verdict: report.verdict.label().to_owned(),
        };
        let signer = entry_key(&challenge, &end_role(statement.start_index, &statement.verdict));
        let key = crate::tlog::LogKey::from_pem(&start.origin, &start.key).map_err(|e| e.to_string())?;
        let client = crate::rekor::Log::with_key(&start.url, key).map_err(|e| e.to_string())?;
        let (entry, _) = runtime
            .block_on(client.enter("run end", &statement_bytes(&statement), &signer))
            .map_err(|e| e.to_string())?;
        let record = EndRecord { statement, entry };
        let text = serde_json::to_string_pretty(&record).expect("an end record serialises");
        std::fs::write(&path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(record)
    })();
    let _ = match logged {
        Ok(r) => writeln!(
            out,
            "logged: run end, entry {} of {} (verdict {}, report sha256 {}; {:.1} s)",
            r.entry.log_index,
            start.origin,
            r.statement.verdict,
            r.statement.report_sha256,
            started.elapsed().as_secs_f64()
        ),
        Err(e) => writeln!(
            out,
            "warning: the run's end could not be logged ({e}); the log shows this run as never ended"
        ),
    };
}

/// The transcript: a new one whose header commits to the run secret, or a resumed
/// run's, continued after a `resume` line.
fn open_transcript(
    path: &Path,
    redactor: &Redactor,
    resumed: Option<&Resumed>,
    vendor: &str,
    drawn: &Drawn,
) -> Result<Transcript, HarnessError> {
    match resumed {
        Some(r) => Transcript::resume(path, redactor.clone(), &r.unfinished),
        None => Transcript::create(
            path,
            redactor.clone(),
            &Header {
                tool: "tenantcheck",
                version: crate::TOOL_VERSION,
                vendor,
                secret_commitment: &drawn.secret.commitment(),
                challenge: drawn.challenge_hex.as_deref(),
                log_index: drawn.log.as_ref().map(|l| l.entry.log_index),
                log_checkpoint: drawn.log.as_ref().map(|l| l.entry.checkpoint.as_str()),
            },
        ),
    }
    .map_err(|source| HarnessError::Write {
        path: path.to_owned(),
        source,
    })
}

/// The run's observers: how the cases ended (what the report is built from), the
/// progress line on a terminal, and the trial lines.
struct Events {
    endings: Arc<Endings>,
    trial_lines: Option<Arc<TrialLines>>,
    observer: Arc<dyn Observer>,
}

impl Events {
    fn new(suite: &Suite, args: &Arguments) -> Events {
        let endings = Arc::new(Endings::default());
        let mut observers: Vec<Arc<dyn Observer>> = vec![endings.clone()];
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            observers.push(Arc::new(Progress));
        }
        // The trial list in libtest's default format is the harness's own, with
        // verdicts; libtest-mimic keeps its machine formats (json, terse), selection
        // and `--list`.
        let lines = matches!(args.format, None | Some(libtest_mimic::FormatSetting::Pretty)) && !args.quiet;
        let trial_lines = lines.then(|| {
            Arc::new(TrialLines::new(
                suite
                    .cases
                    .iter()
                    .map(|c| (c.id.clone(), c.threat.to_string()))
                    .collect(),
            ))
        });
        if let Some(t) = &trial_lines {
            observers.push(t.clone());
        }
        Events {
            endings,
            trial_lines,
            observer: Arc::new(Fanout(observers)),
        }
    }
}

/// What every trial shares.
#[derive(Clone)]
struct Ran {
    session: Arc<Session>,
    handle: tokio::runtime::Handle,
    observer: Arc<dyn Observer>,
    redactor: Redactor,
    advisories: Vec<crate::advisory::Advisory>,
}

/// The trials of this share (of a resumed run, those it did not finish), in an order,
/// and after pauses, drawn from the run secret: a vendor cannot tell which case comes
/// next, or when, from a fixed script.
fn trials(
    suite: &Suite,
    partition: Option<crate::partition::Partition>,
    resumed: Option<&Resumed>,
    secret: &RunSecret,
    ran: &Ran,
) -> Vec<Trial> {
    let mut order: Vec<&crate::suite::Case> = suite
        .cases
        .iter()
        .enumerate()
        .filter(|(position, _)| crate::partition::Partition::in_share(partition, *position))
        .map(|(_, c)| c)
        .filter(|c| resumed.is_none_or(|r| r.unfinished.contains(&c.id)))
        .collect();
    order.sort_by_key(|c| secret.seed(ORDER, &c.id, 0));
    order
        .into_iter()
        .map(|case| {
            let pause = std::time::Duration::from_millis(secret.seed(ORDER, &case.id, 1) % MAX_PAUSE_MS);
            let kind = case.threat.to_string();
            let (case, ran) = (case.clone(), ran.clone());
            Trial::test(case.id.clone(), move || ran.trial(case, pause)).with_kind(kind)
        })
        .collect()
}

impl Ran {
    fn new(
        session: &Arc<Session>,
        runtime: &tokio::runtime::Runtime,
        events: &Events,
        redactor: &Redactor,
        suite: &Suite,
    ) -> Ran {
        Ran {
            session: session.clone(),
            handle: runtime.handle().clone(),
            observer: events.observer.clone(),
            redactor: redactor.clone(),
            advisories: suite.advisories.clone(),
        }
    }

    /// Runs one case after `pause`, and tells libtest-mimic its verdict.
    fn trial(&self, case: crate::suite::Case, pause: std::time::Duration) -> Result<(), Failed> {
        let id = case.id.clone();
        if let Some(why) = self.session.stopped() {
            self.observer.on(&RunEvent::Unfinished { case: &id });
            let summary = format!("not run: {why}");
            self.observer.on(&RunEvent::CaseFinished {
                case: &id,
                outcome: &Outcome::inconclusive(summary.clone()),
            });
            return Err(Failed::from(format!("inconclusive: {summary}")));
        }
        self.observer.on(&RunEvent::CaseStarted { case: &id });
        std::thread::sleep(pause);
        let session = self.session.clone();
        let advisories = self.advisories.clone();
        // The probe runs as a task on the runtime's workers, beside the connections it
        // uses, not on this trial thread: every request would otherwise cross threads
        // twice (about 40% more CPU per request, see docs/performance.md). A panic
        // comes back as the task's result.
        let task = self.handle.spawn(async move {
            let ctx = crate::probe::Context {
                case_id: &case.id,
                session: &session,
                advisories: &advisories,
            };
            crate::probe::run(&case.probe, ctx).await
        });
        let mut outcome = match self.handle.block_on(task) {
            Ok(outcome) => outcome,
            Err(e) => match e.try_into_panic() {
                Ok(panic) => tool_bug(&panic),
                Err(e) => tool_bug(&(Box::new(e.to_string()) as Box<dyn std::any::Any + Send>)),
            },
        };
        if self.session.was_cut(&id) && outcome.verdict != Verdict::Fail {
            // Cut short by an interruption or the vendor's refusals: never a pass, and
            // a resumed run runs it again. (A failure stands: its finding is evidence.)
            self.observer.on(&RunEvent::Unfinished { case: &id });
            if outcome.verdict == Verdict::Pass {
                outcome.verdict = Verdict::Inconclusive;
                outcome.summary = format!(
                    "stopped before it finished ({}): {}",
                    self.session.stopped().unwrap_or_else(|| "interrupted".into()),
                    outcome.summary
                );
            }
        }
        let verdict = outcome.verdict;
        // libtest-mimic prints this: one line, vendor text inert.
        let summary = inert(&self.redactor.redact(&outcome.summary), Sink::Terminal).into_owned();
        self.observer.on(&RunEvent::CaseFinished {
            case: &id,
            outcome: &outcome,
        });
        match verdict {
            Verdict::Pass | Verdict::Skipped => Ok(()),
            Verdict::Fail => Err(Failed::from(summary)),
            Verdict::Inconclusive => Err(Failed::from(format!("inconclusive: {summary}"))),
        }
    }
}

/// Runs the trials, one case at a time unless asked otherwise: a probe sets up what
/// the vendor's caches hold (another tenant's residue, a prefix) and another case
/// running beside it would disturb that, making the evidence depend on scheduling.
fn run_trials(args: &Arguments, trials: Vec<Trial>, events: &Events) {
    let mut trial_args = args.clone();
    trial_args.test_threads.get_or_insert(1);
    let started = std::time::Instant::now();
    if events.trial_lines.is_some() {
        let selected = trials.iter().filter(|t| !trial_args.is_filtered_out(t)).count();
        println!("\nrunning {selected} {}", if selected == 1 { "case" } else { "cases" });
        // libtest-mimic's own lines would say `ok` for a skip and `FAILED` for an
        // inconclusive case: they go nowhere, and `TrialLines` prints the verdicts.
        trial_args.logfile = Some(NULL_DEVICE.into());
    }
    let conclusion = libtest_mimic::run(&trial_args, trials);
    events.observer.on(&RunEvent::Finished);
    if let Some(t) = &events.trial_lines {
        println!("\n{}\n", t.result_line(conclusion.num_filtered_out, started.elapsed()));
    }
}

/// What the report is assembled from.
struct Assembly<'a> {
    opts: &'a RunOptions,
    inputs: Inputs,
    partition: Option<crate::partition::Partition>,
    resumed: Option<&'a Resumed>,
    previous: Option<crate::report::PreviousReport>,
    drawn: Drawn,
    transcript: &'a Transcript,
    ran: &'a Ran,
    /// How the cases ended, as the run's events told it.
    ending: crate::event::Ending,
}

/// The report of the run: every case of the suite, with its outcome (a resumed run's
/// earlier ones where it did not run them again), tallied.
fn assemble(a: Assembly<'_>) -> Report {
    let Assembly {
        opts,
        inputs,
        partition,
        resumed,
        previous,
        drawn,
        transcript,
        ran,
        ending,
    } = a;
    let (interrupted, refused) = stops(&ending);
    let mut outcomes = ending.outcomes;
    let suite = &inputs.suite;
    let mut earlier: BTreeMap<String, Outcome> = resumed
        .map(|r| {
            r.report
                .cases
                .iter()
                .map(|c| (c.id.clone(), c.outcome.clone()))
                .collect()
        })
        .unwrap_or_default();
    let cases = suite
        .cases
        .iter()
        .enumerate()
        .map(|(position, c)| CaseReport {
            id: c.id.clone(),
            threat: c.threat,
            severity: c.severity,
            requirement: c.requirement.clone(),
            probe: c.probe.kind().to_owned(),
            params: c.probe.params(),
            outcome: outcomes
                .remove(&c.id)
                .or_else(|| earlier.remove(&c.id))
                .unwrap_or_else(|| match partition {
                    Some(p) if !p.owns(position) => Outcome::skipped(format!(
                        "in another share of the suite (this run is share {p}: --partition)"
                    )),
                    _ => Outcome::skipped("not selected by the filter"),
                }),
        })
        .collect();
    let mut resumed_at = resumed.map(|r| r.report.resumed_at.clone()).unwrap_or_default();
    if let Some(r) = resumed {
        resumed_at.push(r.at.clone());
    }
    let mut report = Report {
        format_version: crate::report::FORMAT_VERSION,
        tool: ToolInfo {
            name: "tenantcheck".into(),
            version: crate::TOOL_VERSION.into(),
        },
        started_at: drawn.started_at,
        finished_at: crate::now_rfc3339(),
        verdict: Verdict::Skipped,
        totals: Totals::default(),
        suite: suite_record(suite),
        vendor: VendorRecord {
            source: inputs.vendor_source,
            profile_sha256: inputs.profile_sha256,
            profile: inputs.profile,
        },
        run_secret: RunSecretRecord {
            commitment: drawn.secret.commitment(),
            revealed: drawn.secret.to_hex(),
            seed: drawn.seed_hex,
            challenge: drawn.challenge_hex,
            log: drawn.log,
        },
        transcript: TranscriptRecord {
            file: TRANSCRIPT_FILE.into(),
            summary: transcript.summary(),
        },
        canaries: ran.session.issued(),
        cases,
        interrupted,
        refused,
        rate_limits: rate_limits(&ran.session, resumed.and_then(|r| r.report.rate_limits)),
        resumed_at,
        previous: previous.or_else(|| resumed.and_then(|r| r.report.previous.clone())),
        partition,
        selection: match resumed {
            Some(r) => r.report.selection.clone(),
            None => selection(&inputs.suite, partition, &opts.trials),
        },
    };
    report.tally();
    report
}

/// The suite's record in the report: its digest and every file's.
fn suite_record(suite: &Suite) -> SuiteRecord {
    SuiteRecord {
        digest: suite.digest.clone(),
        files: suite
            .cases
            .iter()
            .map(|c| SuiteFile {
                id: c.id.clone(),
                path: c.file.clone(),
                sha256: c.sha256.clone(),
            })
            .chain(suite.advisories.iter().map(|a| SuiteFile {
                id: a.id.clone(),
                path: a.file.clone(),
                sha256: a.sha256.clone(),
            }))
            .collect(),
    }
}

/// Why the run stopped early, if it did: an interruption, or (else) the vendor's
/// refusals; each names the cases left unfinished.
fn stops(ending: &crate::event::Ending) -> (Option<Interruption>, Option<Refused>) {
    let unfinished: Vec<String> = ending.unfinished.iter().cloned().collect();
    let interrupted = ending.interrupted.as_ref().map(|(signal, at)| Interruption {
        signal: (*signal).to_owned(),
        stopped_at: at.clone(),
        unfinished: unfinished.clone(),
    });
    let refused = ending
        .refused
        .as_ref()
        .filter(|_| interrupted.is_none())
        .map(|(refusal, at)| Refused {
            refusal: refusal.clone(),
            reason: refusal.to_string(),
            stopped_at: at.clone(),
            unfinished,
        });
    (interrupted, refused)
}

/// Signs the report and writes it, its Test Result and its renderings into the run
/// folder; returns the envelope's path.
fn write_report(
    report: &Report,
    signer: &Signer,
    run_dir: &Path,
    transcript_path: &Path,
) -> Result<PathBuf, HarnessError> {
    let envelope = report.sign(&signer.key);
    let envelope_path = run_dir.join(ENVELOPE_FILE);
    let json = serde_json::to_vec_pretty(&envelope).expect("envelopes serialise");
    write_file(&envelope_path, &json)?;
    // The same run in the Test Result predicate generic tooling reads, about the
    // report's envelope and the transcript.
    let test_result = crate::attestation::sign_test_result(report, &json, &signer.key);
    write_file(
        &run_dir.join(crate::attestation::TEST_RESULT_FILE),
        &serde_json::to_vec_pretty(&test_result).expect("envelopes serialise"),
    )?;
    let key_id = key::key_id(&signer.key.verifying_key());
    let transcript_bytes = std::fs::read(transcript_path).map_err(|source| HarnessError::Write {
        path: transcript_path.to_owned(),
        source,
    })?;
    let rendered = [
        (HTML_FILE, crate::render::html(report, &key_id, Some(&transcript_bytes))),
        (MARKDOWN_FILE, crate::render::markdown(report, &key_id)),
        (JUNIT_FILE, crate::render::junit(report)),
    ];
    for (name, text) in rendered {
        write_file(&run_dir.join(name), text.as_bytes())?;
    }
    Ok(envelope_path)
}

/// The run's exit code (see [`crate::exit`]).
fn exit_code(report: &Report) -> u8 {
    let credential_refused = report.refused.as_ref().is_some_and(|r| r.refusal.is_credential());
    match (report.verdict, &report.interrupted) {
        (Verdict::Fail, _) => exit::FAILED,
        (_, Some(_)) => exit::INTERRUPTED,
        _ if credential_refused => exit::SETUP_ERROR,
        (Verdict::Inconclusive, None) => exit::INCONCLUSIVE,
        (Verdict::Pass | Verdict::Skipped, None) => exit::SUCCESS,
    }
}

/// What a run reads before it sends anything: the suite and the vendor profile (with
/// the command line's limits applied).
pub(crate) struct Inputs {
    pub suite: Suite,
    pub profile: VendorProfile,
    /// The profile's path, or `embedded`.
    pub vendor_source: String,
    pub profile_sha256: Option<String>,
}

impl Inputs {
    pub(crate) fn load(opts: &RunOptions) -> Result<Inputs, HarnessError> {
        let (profile, vendor_source, profile_sha256) = match &opts.vendor {
            Some(path) => {
                let profile = crate::vendor::load(path)?;
                let sha = std::fs::read(path).ok().map(|b| crate::sha256_hex(&b));
                (profile, path.display().to_string(), sha)
            }
            None => (crate::vendor::embedded_sim(), "embedded".to_owned(), None),
        };
        Inputs {
            suite: Self::suite(opts)?,
            profile,
            vendor_source,
            profile_sha256,
        }
        .limited(opts)
    }

    /// The inputs of a resumed run: the suite (which must be the one that ran) and
    /// the profile as its report recorded them.
    fn resumed(r: &Resumed, opts: &RunOptions) -> Result<Inputs, HarnessError> {
        let suite = Inputs::suite(opts)?;
        if suite.digest != r.report.suite.digest {
            return Err(HarnessError::RunDir {
                path: r.dir.clone(),
                problem: format!(
                    "its run used suite {}, this is suite {}: resume with the suite it ran (--suite)",
                    r.report.suite.digest, suite.digest
                ),
            });
        }
        Inputs {
            suite,
            profile: r.report.vendor.profile.clone(),
            vendor_source: r.report.vendor.source.clone(),
            profile_sha256: r.report.vendor.profile_sha256.clone(),
        }
        .limited(opts)
    }

    /// The suite `--suite` names, else the one built in.
    fn suite(opts: &RunOptions) -> Result<Suite, HarnessError> {
        Ok(match &opts.suite {
            Some(dir) => Suite::load_dir(dir)?,
            None => Suite::builtin(),
        })
    }

    /// With the command line's limits applied to the profile, and checked against it.
    fn limited(mut self, opts: &RunOptions) -> Result<Inputs, HarnessError> {
        if let Some(n) = opts.max_concurrency {
            self.profile.max_concurrency = self.profile.max_concurrency.min(n.max(1));
        }
        if opts.budget.usd.is_some() && self.profile.prices.is_none() {
            return Err(HarnessError::BudgetWithoutPrices);
        }
        Ok(self)
    }
}

/// The multi-threaded runtime every request runs on.
pub(crate) fn new_runtime() -> Result<tokio::runtime::Runtime, HarnessError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|source| HarnessError::Start {
            what: "the async runtime",
            source,
        })
}

/// Starts the reference vendor on 127.0.0.1 (a free port) with fresh keys for the
/// profile's tenants, the profile's model and context window, and points the profile
/// at it.
pub(crate) fn start_sim(
    runtime: &tokio::runtime::Runtime,
    profile: &mut VendorProfile,
) -> Result<(Vec<TenantKey>, SimServer), HarnessError> {
    let tenants: Vec<TenantKey> = profile
        .tenants
        .iter()
        .map(|t| TenantKey {
            label: t.label.clone(),
            credential_env: t.credential_env.clone(),
            secret: Secret::random_sim_key(),
        })
        .collect();
    let mut config = SimConfig::new(
        tenants
            .iter()
            .map(|t| (t.label.clone(), crate::sim::ApiKey::new(t.secret.expose())))
            .collect(),
    );
    config.model = profile.model.clone();
    config.context = profile.context_window as usize;
    let listen = "127.0.0.1:0".parse().expect("a valid address");
    let sim = runtime
        .block_on(SimServer::start(config, listen))
        .map_err(|source| HarnessError::Start {
            what: "the embedded reference vendor",
            source,
        })?;
    profile.base_url = sim.base_url();
    Ok((tenants, sim))
}

/// Checks each tenant's credential with one cheap request before any case runs.
pub(crate) async fn preflight(session: &Session, origin: &Path) -> Result<(), HarnessError> {
    for tenant in session.tenant_labels() {
        let sent = session.list_models(PREFLIGHT, tenant).await?;
        let ex = sent.exchange;
        if let Some(err) = ex.transport_error {
            // The message may quote the vendor (a command adapter's standard error).
            let error = session.redact(&err.to_string());
            return Err(HarnessError::Unreachable {
                url: ex.request.url,
                tenant: tenant.to_owned(),
                error: inert(&error, Sink::Terminal).into_owned(),
            });
        }
        if let Some(status @ 300..=399) = ex.status {
            let location = ex.headers.get("location").map(|l| session.redact(l));
            return Err(HarnessError::Redirected {
                url: ex.request.url,
                tenant: tenant.to_owned(),
                status,
                location: inert(location.as_deref().unwrap_or("nowhere"), Sink::Terminal).into_owned(),
            });
        }
        if let Some(status @ (401 | 403)) = ex.status {
            let key = session.key(tenant).expect("a label from the session");
            return Err(ProfileError {
                origin: origin.to_owned(),
                line: None,
                kind: ProfileErrorKind::CredentialRejected {
                    tenant: tenant.to_owned(),
                    env: key.credential_env.clone(),
                    status,
                },
            }
            .into());
        }
    }
    Ok(())
}

fn tool_bug(panic: &Box<dyn std::any::Any + Send>) -> Outcome {
    let message = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    Outcome {
        verdict: Verdict::Inconclusive,
        summary: format!("bug in tenantcheck: the probe panicked: {message}"),
        coverage: Coverage::default(),
        findings: vec![Finding {
            code: FindingCode::ToolBug,
            message,
            leak: None,
        }],
        sweep: Vec::new(),
        timing: Vec::new(),
        power: None,
        nodes: None,
    }
}

/// A report with every secret the run knows removed from every string in it; an error
/// where that leaves it unreadable (a key that reads like the report's own words).
fn redact_report(report: &Report, redactor: &Redactor) -> Result<Report, HarnessError> {
    let json = serde_json::to_string(report).expect("reports serialise");
    match redactor.redact_json_text(&json) {
        std::borrow::Cow::Borrowed(_) => Ok(report.clone()),
        std::borrow::Cow::Owned(clean) => {
            serde_json::from_str(&clean).map_err(|e| HarnessError::CredentialInReport { problem: e.to_string() })
        }
    }
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), HarnessError> {
    std::fs::write(path, bytes).map_err(|source| HarnessError::Write {
        path: path.to_owned(),
        source,
    })
}

/// The rate limits the run met, those of the run it resumes included; `None` when it
/// met none.
fn rate_limits(session: &Session, earlier: Option<RateLimits>) -> Option<RateLimits> {
    let spent = session.spent();
    let earlier = earlier.unwrap_or(RateLimits {
        answers: 0,
        waited_out: 0,
        waited_secs: 0,
    });
    let all = RateLimits {
        // Read from the ledger, which folded a resumed run's first part too: what
        // `verify` counts in the transcript.
        answers: session.rate_limited(),
        waited_out: earlier.waited_out + spent.rate_limits_waited,
        waited_secs: earlier.waited_secs + spent.rate_limit_secs,
    };
    (all.answers > 0 || all.waited_out > 0).then_some(all)
}

/// What the run's closing lines tell of its sending, beside the report.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sending {
    /// What was sent.
    pub spent: crate::session::Spent,
    /// How many texts the redactor changed: the vendor sent a key back in some form.
    pub keys_echoed: u64,
}

/// Writes the harness's own closing lines about `report` to `out`: one line per case,
/// where the files went, how to verify, what was sent, whether the vendor sent a key
/// back (then: rotate the keys), the verdict. Every string of the report is shown
/// inert ([`Sink::Terminal`]).
pub fn print_summary(
    out: &mut dyn Write,
    report: &Report,
    run_dir: &Path,
    envelope: &Path,
    public_key: &Path,
    fresh_key: bool,
    sending: Sending,
) -> std::io::Result<()> {
    let Sending {
        spent,
        keys_echoed: redacted,
    } = sending;
    writeln!(out)?;
    for c in &report.cases {
        writeln!(
            out,
            "{:<12} {} [{}]: {}",
            c.outcome.verdict.label(),
            inert(&c.id, Sink::Terminal),
            c.threat,
            inert(&c.outcome.summary, Sink::Terminal)
        )?;
    }
    writeln!(out)?;
    writeln!(out, "report:     {}", envelope.display())?;
    writeln!(
        out,
        "rendered:   {} {} {}",
        run_dir.join(HTML_FILE).display(),
        run_dir.join(MARKDOWN_FILE).display(),
        run_dir.join(JUNIT_FILE).display()
    )?;
    writeln!(
        out,
        "transcript: {} ({} lines, sha256 {})",
        run_dir.join(TRANSCRIPT_FILE).display(),
        report.transcript.summary.lines,
        report.transcript.summary.sha256
    )?;
    writeln!(out, "public key: {}", public_key.display())?;
    if fresh_key {
        writeln!(
            out,
            "note: no --key was given, so a fresh key pair was written into {}; keep {} private, or sign with your own key (tenantcheck keygen, then --key FILE)",
            run_dir.display(),
            key::PRIVATE_KEY_FILE
        )?;
    }
    writeln!(
        out,
        "verify:     tenantcheck verify {} --key {}",
        envelope.display(),
        public_key.display()
    )?;
    writeln!(
        out,
        "sent:       {} requests, {} prompt tokens (estimated), {} completion tokens at most, up to ${:.4} at the profile's prices",
        spent.requests, spent.prompt_tokens, spent.completion_tokens, spent.usd
    )?;
    if let Some(r) = &report.rate_limits {
        writeln!(out, "rate limits: {}", r.describe())?;
    }
    if redacted > 0 {
        writeln!(
            out,
            "keys:       the vendor sent a credential of this run back, in some form, in {redacted} texts (redacted from every file written); rotate the keys used"
        )?;
    }
    writeln!(out, "verdict:    {}", report.verdict_line())?;
    if let Some(r) = &report.refused {
        writeln!(
            out,
            "stopped:    {}; {} cases unfinished ({}); continue, once the vendor answers, with: tenantcheck run --resume {}",
            inert(&r.reason, Sink::Terminal),
            r.unfinished.len(),
            inert(&r.unfinished.join(", "), Sink::Terminal),
            run_dir.display()
        )?;
    }
    if let Some(i) = &report.interrupted {
        writeln!(
            out,
            "interrupted by {}: {} cases unfinished ({}); the report is marked incomplete; continue with: tenantcheck run --resume {}",
            inert(&i.signal, Sink::Terminal),
            i.unfinished.len(),
            inert(&i.unfinished.join(", "), Sink::Terminal),
            run_dir.display()
        )?;
    }
    Ok(())
}
