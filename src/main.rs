//! The `tenantcheck` binary: parses flags and calls the library.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tenantcheck::exit;
use tenantcheck::harness::{self, RunOptions};
use tenantcheck::inert::{Sink, inert};
use tenantcheck::outcome::Verdict;
use tenantcheck::report::{self, key};
use tenantcheck::run_dir;
use tenantcheck::schema::Schema;
use tenantcheck::sim::transform::LeakTransform;
use tenantcheck::sim::{Chaos, Disaggregation, Fault, PrefixCacheScope, ResponseCacheScope, SimConfig, SimServer};

/// Conformance suite for hosted LLM inference: cross-tenant isolation, canaries and
/// long-context admission, with signed evidence reports.
/// `println!` for text that may quote a vendor or a report a vendor handed over: one
/// line, every control, escape and bidi character shown escaped.
macro_rules! say {
    ($($arg:tt)*) => { println!("{}", inert(&format!($($arg)*), Sink::Terminal)) };
}

/// `eprintln!` with the same rule as [`say!`].
macro_rules! tell {
    ($($arg:tt)*) => { eprintln!("{}", inert(&format!($($arg)*), Sink::Terminal)) };
}

/// An error of the harness on standard error: its own lines kept (a profile error
/// quotes the file), each shown as [`tell!`] shows one.
fn error_lines(e: &dyn std::fmt::Display) {
    for line in format!("error: {e}").lines() {
        tell!("{line}");
    }
}

#[derive(Parser)]
#[command(name = "tenantcheck", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the suite against a vendor (default: the embedded reference vendor) and
    /// write a signed report.
    Run(RunArgs),
    /// Run the reference vendor (an OpenAI-compatible server) standalone.
    Sim(SimArgs),
    /// Issue a buyer's challenge: a fresh nonce, and with --log the transparency log
    /// every run under it must enter, its current checkpoint pinned.
    Challenge {
        /// The log's URL (a Sigstore Rekor v2 log).
        #[arg(long, value_name = "URL", requires = "log_key")]
        log: Option<String>,
        /// The log's public key (Ed25519, PEM), as the buyer trusts it.
        #[arg(long, value_name = "FILE", requires = "log")]
        log_key: Option<PathBuf>,
        /// Where to write the challenge file.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// List every run started under a challenge, from the log's tiles: its start and
    /// end entries, its verdict; the REPORTs given are marked. Exits 1 when a run is
    /// not among them.
    Runs {
        /// The challenge file, naming the log.
        #[arg(long, value_name = "FILE")]
        challenge: PathBuf,
        /// Reports (report.dsse.json) the vendor disclosed.
        #[arg(value_name = "REPORT")]
        reports: Vec<PathBuf>,
    },
    /// Write a fresh ed25519 signing key pair (PKCS#8 and SPKI PEM).
    Keygen {
        /// The folder to write signing-key.pem and signing-key.pub.pem into.
        #[arg(long)]
        out: PathBuf,
    },
    /// Verify a signed report, then render it as HTML, Markdown and/or JUnit XML.
    Render {
        /// The report envelope (report.dsse.json).
        envelope: PathBuf,
        /// The signer's public key; default: signing-key.pub.pem beside the envelope.
        #[arg(long)]
        key: Option<PathBuf>,
        /// The transcript; default: transcript.jsonl beside the envelope.
        #[arg(long)]
        transcript: Option<PathBuf>,
        /// Write a self-contained HTML page here.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
        /// Write a Markdown summary here.
        #[arg(long, value_name = "FILE")]
        md: Option<PathBuf>,
        /// Write JUnit XML here.
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
    },
    /// Print the JSON Schema of a report, a vendor profile, a suite case or an advisory
    /// (the files in reports/schema/).
    Schema {
        /// Which.
        #[arg(value_enum)]
        kind: Schema,
    },
    /// Write a run folder's evidence into one archive for a buyer: envelope, transcript,
    /// public keys, declared facts and questionnaire, JUnit, HTML, with a manifest of
    /// SHA-256 digests.
    Bundle {
        /// The run folder.
        run_dir: PathBuf,
        /// The archive; default: bundle.tar in the run folder.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Verify two signed reports of one vendor and show, case by case, what changed
    /// (verdict, power, longest prompt, nodes reached) and what the profile declares
    /// differently; exit 1 when a case regressed (a pass that is no longer one, an
    /// inconclusive case that now fails).
    Diff {
        /// The earlier report envelope.
        older: PathBuf,
        /// The later report envelope.
        newer: PathBuf,
        /// The signer's public key (SPKI PEM); give it twice, in order, when the two
        /// were signed by different keys; default: signing-key.pub.pem beside each.
        #[arg(long, value_name = "FILE")]
        key: Vec<PathBuf>,
    },
    /// Verify many signed reports (the shares of a run made with `run --partition`, or
    /// one report per profile) with their transcripts, and sign one summary over them:
    /// each case's verdict from the share that owns it, every report's digest a
    /// subject. A report that does not verify, or shares that do not make a whole run,
    /// refuse the merge.
    Merge {
        /// The reports: run folders, or their report.dsse.json (the transcript beside).
        #[arg(required = true)]
        reports: Vec<PathBuf>,
        /// The merge folder: the summary, and a copy of every report merged.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// The private key to sign the summary with (PKCS#8 PEM); default: a fresh pair
        /// in the merge folder.
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
        /// A public key (SPKI PEM) the reports must be signed by (repeat for several);
        /// default: each report's signing-key.pub.pem beside it, which shows integrity,
        /// not who signed.
        #[arg(long, value_name = "FILE")]
        shard_key: Vec<PathBuf>,
    },
    /// Verify a signed report (or a bundle, or a merge summary): signature, statement,
    /// the transcript's digest and hash chain, and a re-check of the verdicts from the
    /// transcript; for a summary, every report it names, and the summary re-derived
    /// from them.
    Verify {
        /// The report envelope (report.dsse.json), or a bundle (bundle.tar).
        envelope: PathBuf,
        /// The signer's public key (SPKI PEM); for a bundle, default: the one inside.
        #[arg(long)]
        key: Option<PathBuf>,
        /// The transcript; default: transcript.jsonl beside the envelope.
        #[arg(long)]
        transcript: Option<PathBuf>,
        /// The challenge the run must have mixed into its secret: a hex nonce, or a
        /// challenge file; when the file names a log, the run's start and end entries
        /// are checked against the log's key (the end entry from log-end.json beside
        /// the report).
        #[arg(long, value_name = "HEX|FILE", value_parser = parse_challenge)]
        challenge: Option<Challenge>,
        /// A buyer's policy (TOML; see examples/policy-1m.toml): what the report must
        /// show to be accepted; each requirement is printed met or unmet, and any
        /// unmet one exits 4.
        #[arg(long, value_name = "FILE")]
        policy: Option<PathBuf>,
        /// With --policy: when the report is accepted, write an in-toto Verification
        /// Summary (SVR v0.2) about it to FILE, signed with --svr-key.
        #[arg(long, value_name = "FILE", requires_all = ["policy", "svr_key"])]
        svr: Option<PathBuf>,
        /// The buyer's private key (PKCS#8 PEM) that signs the Verification Summary.
        #[arg(long, value_name = "FILE", requires = "svr")]
        svr_key: Option<PathBuf>,
        /// With a policy whose [log] has all_runs_disclosed: the other reports the vendor
        /// handed over under the same challenge (each verified with --key).
        #[arg(long, value_name = "REPORT", requires = "policy")]
        disclosed: Vec<PathBuf>,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// The vendor profile (TOML). Without it, the embedded reference vendor is
    /// started on 127.0.0.1 with fresh keys.
    #[arg(long, value_name = "FILE")]
    vendor: Option<PathBuf>,
    /// The run folder; default: a new folder under reports/runs/.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The private key to sign with (PKCS#8 PEM); default: a fresh pair in the run folder.
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
    /// Run the cases of this folder instead of the suite built into the binary.
    #[arg(long, value_name = "DIR")]
    suite: Option<PathBuf>,
    /// A buyer's challenge, mixed into the run secret and recorded, so the report shows
    /// the run's canaries were made after it: a hex nonce (1 to 64 bytes), or a
    /// challenge file (`tenantcheck challenge`). When the file names a transparency
    /// log, the run enters its start there before its first request and its end after
    /// signing, and a buyer sees every run made under the challenge.
    #[arg(long, value_name = "HEX|FILE", value_parser = parse_challenge)]
    challenge: Option<Challenge>,
    /// Send at most this many requests; cases cut short are inconclusive.
    #[arg(long, value_name = "N")]
    budget_requests: Option<u64>,
    /// Send at most this many prompt tokens (the profile's local tokenizer, else four
    /// bytes a token); cases cut short are inconclusive.
    #[arg(long, value_name = "N")]
    budget_prompt_tokens: Option<u64>,
    /// Spend at most this many US dollars at the profile's [prices], counting each
    /// request's max_tokens as spent; cases cut short are inconclusive.
    #[arg(long, value_name = "USD")]
    budget_usd: Option<f64>,
    /// Requests in flight at once, at most (lowers the profile's max_concurrency).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_concurrency: Option<u32>,
    /// Print what each selected case will send (requests, prompt and completion
    /// tokens, cost at the profile's [prices]) and stop: the cases run against the
    /// reference vendor on 127.0.0.1 instead, and no credential is needed.
    #[arg(long, conflicts_with_all = ["out", "key", "challenge"])]
    plan: bool,
    /// Continue the interrupted run in DIR: its unfinished cases run again, into the
    /// same transcript, and its report is replaced by one covering the whole run.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["vendor", "out", "challenge", "plan"])]
    resume: Option<PathBuf>,
    /// The report this run follows (an earlier run's report.dsse.json): its digest is
    /// recorded, so reports form a chain that `tenantcheck diff` walks.
    #[arg(long, value_name = "FILE")]
    previous: Option<PathBuf>,
    /// Run one share of the suite: of its cases in id order, every COUNT-th from the
    /// INDEX-th (`2/4`: the second of four). Run every share (as parallel processes, a
    /// CI matrix, a Kubernetes Indexed Job), then join their reports with
    /// `tenantcheck merge`.
    #[arg(long, value_name = "INDEX/COUNT", conflicts_with = "resume")]
    partition: Option<tenantcheck::partition::Partition>,
    #[command(flatten)]
    trials: libtest_mimic::Arguments,
}

#[derive(clap::Args)]
struct SimArgs {
    /// Address to listen on (port 0 picks a free port; the chosen one is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// A fault to inject (repeat for several).
    #[arg(long = "fault", value_enum, value_name = "NAME")]
    faults: Vec<Fault>,
    /// Behave as a hostile or broken vendor at the HTTP level, on chat completions
    /// (for testing the harness itself).
    #[arg(long, value_enum, value_name = "NAME")]
    chaos: Option<Chaos>,
    /// With --chaos redirect: where the redirects point (another origin).
    #[arg(long, value_name = "URL", requires = "chaos")]
    redirect_to: Option<String>,
    /// Separate prefill and decode nodes, each with its own KV pool, and a KV transfer
    /// between them.
    #[arg(long)]
    disaggregated: bool,
    /// With --disaggregated: the prefill node's KV pool, in tokens; default: the context.
    #[arg(long, requires = "disaggregated")]
    prefill_pool_tokens: Option<usize>,
    /// With --disaggregated: the decode node's KV pool, in tokens; default: twice the
    /// context.
    #[arg(long, requires = "disaggregated")]
    decode_pool_tokens: Option<usize>,
    /// With --fault silent-truncate: the most prompt tokens kept; default: half the
    /// context.
    #[arg(long)]
    truncate_to: Option<usize>,
    /// The context window to enforce, in tokens.
    #[arg(long, default_value_t = 8192)]
    context: usize,
    /// Tokens per KV page.
    #[arg(long, default_value_t = 16)]
    page_tokens: usize,
    /// KV pages in the pool; default: enough for two full contexts.
    #[arg(long)]
    pages: Option<usize>,
    /// With --fault stale-pages: the prompt length, in tokens, above which writes are
    /// skipped; default: half the context.
    #[arg(long)]
    stale_above: Option<usize>,
    /// The model name to serve.
    #[arg(long, default_value = "sim-1")]
    model: String,
    /// Who shares the prompt-prefix cache.
    #[arg(long, value_enum, default_value = "per-tenant")]
    prefix_cache: PrefixCacheScope,
    /// Who shares a response cache in front of the model (a gateway's), and how it
    /// recognises a request; `global` is the fault `shared-response-cache`.
    #[arg(long, value_enum, default_value = "off")]
    response_cache: ResponseCacheScope,
    /// Prefill time per uncached prompt token, in nanoseconds.
    #[arg(long, default_value_t = tenantcheck::sim::DEFAULT_PREFILL_PER_TOKEN.as_nanos() as u64)]
    prefill_ns_per_token: u64,
    /// Time between two streamed tokens (one decode step), in microseconds.
    #[arg(long, default_value_t = tenantcheck::sim::DEFAULT_DECODE_STEP.as_micros() as u64)]
    decode_step_us: u64,
    /// Requests decoded at once; more wait for a slot.
    #[arg(long, default_value_t = tenantcheck::sim::DEFAULT_BATCH)]
    batch: usize,
    /// No latency model: no prefill time, no decode steps (for benchmarks of the
    /// harness itself). Overrides --prefill-ns-per-token and --decode-step-us.
    #[arg(long)]
    no_delay: bool,
    /// A model too weak for recall checks, as small real models are: it answers every
    /// prompt "I am not sure what you mean." (not a fault: recall cases must come out
    /// inconclusive, never failed).
    #[arg(long)]
    weak_model: bool,
    /// A model that garbles what it copies, as small real models do: one digit of every
    /// 12-digit number changed, two letters of every e-mail swapped (not a fault: leak
    /// detectors must still see other tenants' records, and the controls its own).
    #[arg(long)]
    garbling_model: bool,
    /// A model that, decoding from pages that hold no prompt of its own, continues from
    /// the middle of what they hold and loses every sentence with a number or an
    /// e-mail in it: another tenant's prose comes back, no record (a fault only
    /// together with one that leaves such pages, such as stale-pages).
    #[arg(long)]
    fragmenting_model: bool,
    /// A model that reads back about three in four of the prompts it is asked to
    /// repeat, answering the others as the weak model does (not a fault: an honest small model
    /// that copies now and then; its questions it still answers).
    #[arg(long)]
    forgetful_model: bool,
    /// How what the model decodes from pages that hold no prompt of its own (another
    /// request's residue, under stale-pages or reject-continue) comes back: `random`
    /// (each family with an even chance per leak) or a comma-separated list of families
    /// (cut, separators, digit-words, spelled-address, drop, repeat, case, interleave,
    /// whitespace). Not a fault itself: it changes the form of the leaks other faults
    /// make, so that detectors are tested against classes of leak.
    #[arg(long, value_name = "random|FAMILY,...")]
    leak_transform: Option<String>,
    /// Which output field carries what the model decodes from pages that hold no
    /// prompt of its own: content, reasoning (`reasoning_content`, the content empty),
    /// tool-arguments (a call of a function `lookup`), logprobs (the logprob tokens
    /// alone, the content saying it cannot help), or random (one drawn per leak, from
    /// --leak-seed). Not a fault itself: it moves the leaks other faults make.
    #[arg(long, value_name = "FIELD|random", default_value = "content")]
    leak_field: String,
    /// The chance that a leak fault (stale-pages, reject-continue, cancel-swap,
    /// object-idor) acts on each occasion it could, drawn per occasion from --leak-seed;
    /// otherwise the engine behaves as a healthy one. Real leaks are intermittent: one
    /// bad replica, a race, a page reused only when the pool is full.
    #[arg(long, value_name = "RATE", default_value_t = 1.0, value_parser = leak_rate)]
    leak_rate: f64,
    /// The seed of --leak-transform's, --leak-field's and --leak-rate's draws.
    #[arg(long, default_value_t = 0)]
    leak_seed: u64,
    /// Answers say nothing of the prompt cache (no `prompt_tokens_details.cached_tokens`),
    /// as many hosted APIs do; a cached prefix is still faster (not a fault).
    #[arg(long)]
    no_cache_counter: bool,
    /// Plain (not streamed) answers take a decode step per token too, as a real
    /// model's do; by default only streams are paced.
    #[arg(long)]
    plain_decode: bool,
    /// Serve only the API: no engine endpoint (`/slots`) answers anyone, as behind a
    /// gateway that forwards the API alone.
    #[arg(long)]
    api_only: bool,
    /// The API served: openai (`/v1/`, bearer keys) or azure (Azure OpenAI's
    /// `/openai/deployments/{d}/...?api-version=` and `/openai/v1/`, keys in `api-key`,
    /// no engine endpoint); the same engine and faults behind either.
    #[arg(long, value_name = "API", default_value = "openai", value_parser = ["openai", "azure"])]
    api: String,
    /// Holds back the end of one chat completion in two by this many milliseconds
    /// after the rest was sent (headers and body written apart, a delayed
    /// acknowledgement holding the second write): the total time is bimodal, the time
    /// until the answer begins is not (not a fault).
    #[arg(long, value_name = "MS")]
    transfer_jitter: Option<u64>,
    /// Every chat completion waits a time drawn uniformly from 0 to this many
    /// milliseconds before it is served: even the start of each answer is noisy (not
    /// a fault).
    #[arg(long, value_name = "MS")]
    latency_jitter: Option<u64>,
    /// The seed of --transfer-jitter's and --latency-jitter's draws.
    #[arg(long, default_value_t = 0)]
    jitter_seed: u64,
    /// Another customer, one the suite does not control, whose requests fill every
    /// free KV page with its own customer records before each request is served (not
    /// a fault: on a healthy engine nobody reads them; with stale-pages they are what
    /// long prompts decode from).
    #[arg(long)]
    background_tenant: bool,
    /// The background customer's records bear names and e-mail domains drawn from the
    /// canaries' own pools: strangers who share names with the run's holders (implies
    /// --background-tenant).
    #[arg(long)]
    common_name_strangers: bool,
    /// Serve as this many nodes behind a router, each with its own KV pool, prefix
    /// cache and decode batch (a hosted model's replicas).
    #[arg(long, default_value_t = 1, value_name = "N")]
    nodes: usize,
    /// With --nodes: the faults are on the first K nodes only (default: all).
    #[arg(long, value_name = "K", requires = "nodes")]
    bad_nodes: Option<usize>,
    /// With --nodes: how the router spreads requests over them.
    #[arg(long, value_enum, default_value = "random")]
    routing: tenantcheck::sim::Routing,
    /// With --nodes: the response header naming the serving node (`none`: not named).
    #[arg(long, default_value = "x-served-by", value_name = "NAME")]
    node_header: String,
    /// With --nodes: each node also names itself in its answers' `system_fingerprint`
    /// (`fp_node0`, `fp_node1`, ...).
    #[arg(long)]
    node_fingerprint: bool,
    /// With --routing affinity: the request header whose value pins a session to a node.
    #[arg(long, default_value = "x-session-affinity", value_name = "NAME")]
    affinity_header: String,
    /// A tenant as LABEL=ENV: its API key is read from environment variable ENV.
    /// Default: a=TENANTCHECK_KEY_A and b=TENANTCHECK_KEY_B, as in vendors/sim.toml.
    #[arg(long = "tenant", value_name = "LABEL=ENV")]
    tenants: Vec<String>,
}

const RUN_AFTER_HELP: &str = "\
Exit codes: 0 all selected cases passed; 1 at least one failed; 2 usage, profile or
harness error; 3 none failed but some were inconclusive.

Examples:
  tenantcheck run                                  # the embedded reference vendor
  tenantcheck run --list
  tenantcheck run --vendor vendors/openai.toml --plan   # what it will send and cost
  tenantcheck run --vendor vendors/my-vendor.toml --key keys/signing-key.pem isolation";

/// clap's own default help layout, restored over libtest-mimic's.
const HELP_TEMPLATE: &str = "{before-help}{about-with-newline}\n{usage-heading} {usage}\n\n{all-args}{after-help}";

/// Two glibc allocation arenas, not one per thread: a run at a million tokens of
/// context allocates prompts of megabytes on whichever runtime thread sends them, and
/// with an arena per thread the peak resident memory of the incident's faulty run rose
/// from 243 to 286 MiB (`docs/benchmarks.md`). No slower in the same measurement.
fn cap_allocation_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it is called before any
    // thread is started.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

fn main() -> ExitCode {
    cap_allocation_arenas();
    let command = Cli::command().mut_subcommand("run", |c| c.help_template(HELP_TEMPLATE).after_help(RUN_AFTER_HELP));
    let matches = command.get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let code = match cli.command {
        Command::Run(args) => run(args),
        Command::Sim(args) => sim(args),
        Command::Keygen { out } => keygen(&out),
        Command::Challenge { log, log_key, out } => challenge(log.as_deref(), log_key.as_deref(), &out),
        Command::Runs { challenge, reports } => runs(&challenge, &reports),
        Command::Render {
            envelope,
            key,
            transcript,
            html,
            md,
            junit,
        } => render(&envelope, key.as_deref(), transcript.as_deref(), [html, md, junit]),
        Command::Schema { kind } => {
            print!("{}", kind.to_file_text());
            exit::SUCCESS
        }
        Command::Verify {
            envelope,
            key,
            transcript,
            challenge,
            policy,
            svr,
            svr_key,
            disclosed,
        } => {
            let policy = match policy
                .as_deref()
                .map(|p| Buyer::load(p, svr, svr_key.as_deref(), disclosed))
                .transpose()
            {
                Ok(p) => p,
                Err(e) => {
                    tell!("error: {e}");
                    return ExitCode::from(exit::SETUP_ERROR);
                }
            };
            // The policy's challenge file stands for --challenge; given both, they agree.
            let from_policy = policy.as_ref().and_then(|b| b.log.as_ref()).map(|l| Challenge {
                nonce: l.nonce.clone(),
                log: l.challenge.log.clone(),
            });
            let challenge = match (challenge, from_policy) {
                (Some(given), Some(policy)) if given.nonce != policy.nonce => {
                    tell!("error: --challenge is not the challenge the policy's [log] names");
                    return ExitCode::from(exit::SETUP_ERROR);
                }
                (Some(given), Some(policy)) => Some(Challenge {
                    log: given.log.or(policy.log),
                    ..given
                }),
                (given, policy) => given.or(policy),
            };
            verify(
                &envelope,
                key.as_deref(),
                transcript.as_deref(),
                challenge.as_ref(),
                policy.as_ref(),
            )
        }
        Command::Diff { older, newer, key } => diff(&older, &newer, &key),
        Command::Merge {
            reports,
            out,
            key,
            shard_key,
        } => merge(tenantcheck::merge::MergeOptions {
            reports,
            out,
            key,
            trusted: shard_key,
        }),
        Command::Bundle { run_dir, out } => {
            let out = out.unwrap_or_else(|| run_dir.join(run_dir::BUNDLE_FILE));
            match tenantcheck::bundle::write(&run_dir, &out) {
                Ok(()) => {
                    say!("wrote {}", out.display());
                    exit::SUCCESS
                }
                Err(e) => {
                    tell!("error: {e}");
                    exit::SETUP_ERROR
                }
            }
        }
    };
    ExitCode::from(code)
}

fn run(args: RunArgs) -> u8 {
    let opts = RunOptions {
        vendor: args.vendor,
        out: args.out,
        key: args.key,
        suite: args.suite,
        log: args.challenge.as_ref().and_then(|c| c.log.clone()),
        challenge: args.challenge.map(|c| c.nonce),
        budget: tenantcheck::session::Budget {
            requests: args.budget_requests,
            prompt_tokens: args.budget_prompt_tokens,
            usd: args.budget_usd,
        },
        max_concurrency: args.max_concurrency,
        resume: args.resume,
        previous: args.previous,
        partition: args.partition,
        trials: args.trials,
    };
    let result = if args.plan {
        tenantcheck::plan::plan(opts, &mut std::io::stdout())
    } else {
        harness::run(opts, &mut std::io::stdout())
    };
    match result {
        Ok(result) => result.exit_code,
        Err(e) => {
            error_lines(&e);
            exit::SETUP_ERROR
        }
    }
}

fn sim(args: SimArgs) -> u8 {
    let listen = args.listen;
    let config = match sim_config(args) {
        Ok(c) => c,
        Err(e) => {
            tell!("error: {e}");
            return exit::SETUP_ERROR;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            tell!("error: cannot start the async runtime: {e}");
            return exit::SETUP_ERROR;
        }
    };
    runtime.block_on(async {
        let summary = sim_summary(&config);
        let server = match SimServer::start(config, listen).await {
            Ok(s) => s,
            Err(e) => {
                tell!("error: cannot listen on {listen}: {e}");
                return exit::SETUP_ERROR;
            }
        };
        say!("tenantcheck sim: listening on {} ({summary})", server.base_url());
        let _ = std::io::stdout().flush();
        tokio::select! {
            r = server.wait() => match r {
                Ok(()) => exit::SUCCESS,
                Err(e) => { tell!("error: the server stopped: {e}"); exit::SETUP_ERROR }
            },
            _ = shutdown_signal() => exit::SUCCESS,
        }
    })
}

/// The tenants of `tenantcheck sim`, each `LABEL=ENV` with its key read from ENV.
fn sim_tenants(specs: &[String]) -> Result<Vec<(String, tenantcheck::sim::ApiKey)>, String> {
    let mut tenants = Vec::new();
    for spec in specs {
        let Some((label, env)) = spec.split_once('=') else {
            return Err(format!(
                "--tenant {spec:?}: write LABEL=ENV, for example a=TENANTCHECK_KEY_A"
            ));
        };
        match std::env::var(env) {
            Ok(v) if v.chars().count() >= tenantcheck::vendor::MIN_CREDENTIAL_CHARS => {
                tenants.push((label.to_owned(), tenantcheck::sim::ApiKey::new(v)))
            }
            Ok(v) if !v.is_empty() => {
                return Err(format!(
                    "tenant {label}: the key in {env} has {} characters; use at least {}",
                    v.chars().count(),
                    tenantcheck::vendor::MIN_CREDENTIAL_CHARS
                ));
            }
            _ => {
                return Err(format!(
                    "tenant {label}: environment variable {env} is not set; fix: export {env} with the key this tenant should use"
                ));
            }
        }
    }
    Ok(tenants)
}

/// The reference vendor `tenantcheck sim`'s flags describe, or what is wrong with them.
fn sim_config(args: SimArgs) -> Result<SimConfig, String> {
    let specs = if args.tenants.is_empty() {
        vec!["a=TENANTCHECK_KEY_A".to_owned(), "b=TENANTCHECK_KEY_B".to_owned()]
    } else {
        args.tenants.clone()
    };
    let tenants = sim_tenants(&specs)?;
    if args.context < 64 || args.page_tokens == 0 {
        return Err("--context must be at least 64 and --page-tokens at least 1".to_owned());
    }
    if args.nodes == 0 || args.bad_nodes.is_some_and(|k| k > args.nodes) {
        return Err(format!(
            "--nodes is {} and --bad-nodes {:?}; fix: give at least one node, and at most as many bad nodes as nodes",
            args.nodes, args.bad_nodes
        ));
    }
    for (flag, name) in [
        ("--node-header", &args.node_header),
        ("--affinity-header", &args.affinity_header),
    ] {
        if name != "none" && reqwest::header::HeaderName::try_from(name.to_ascii_lowercase()).is_err() {
            return Err(format!(
                "{flag} {name:?} is not a header name; fix: give letters, digits and dashes, such as x-served-by"
            ));
        }
    }
    let fleet = (args.nodes > 1).then(|| tenantcheck::sim::Fleet {
        nodes: args.nodes,
        bad_nodes: args.bad_nodes,
        routing: args.routing,
        node_header: (args.node_header != "none").then(|| args.node_header.clone()),
        node_fingerprint: args.node_fingerprint,
        affinity_header: args.affinity_header.clone(),
    });
    let leak_transform = args
        .leak_transform
        .as_deref()
        .map(|s| LeakTransform::parse(s, args.leak_seed))
        .transpose()
        .map_err(|e| format!("--leak-transform: {e}"))?;
    let leak_field = tenantcheck::sim::transform::LeakField::parse(&args.leak_field, args.leak_seed)
        .map_err(|e| format!("--leak-field: {e}"))?;
    Ok(SimConfig {
        model: args.model,
        context: args.context,
        page_tokens: args.page_tokens,
        pages: args.pages,
        disaggregated: args.disaggregated.then(|| Disaggregation {
            prefill_pool_tokens: args.prefill_pool_tokens.unwrap_or(args.context),
            decode_pool_tokens: args.decode_pool_tokens.unwrap_or(2 * args.context),
        }),
        faults: args.faults,
        stale_above: args.stale_above,
        truncate_to: args.truncate_to,
        tenants,
        prefix_cache: args.prefix_cache,
        response_cache: args.response_cache,
        prefill_per_token: Duration::from_nanos(if args.no_delay { 0 } else { args.prefill_ns_per_token }),
        decode_step: Duration::from_micros(if args.no_delay { 0 } else { args.decode_step_us }),
        batch: args.batch,
        weak_model: args.weak_model,
        garbling_model: args.garbling_model,
        fragmenting_model: args.fragmenting_model,
        forgetful_model: args.forgetful_model,
        leak_transform,
        leak_field,
        leak_rate: (args.leak_rate, args.leak_seed),
        no_cache_counter: args.no_cache_counter,
        plain_decode: args.plain_decode,
        api_only: args.api_only,
        api: match args.api.as_str() {
            "azure" => tenantcheck::sim::Api::Azure,
            _ => tenantcheck::sim::Api::OpenAi,
        },
        background_tenant: args.background_tenant || args.common_name_strangers,
        common_name_strangers: args.common_name_strangers,
        chaos: args.chaos,
        redirect_to: args.redirect_to,
        fleet,
        system_fingerprint: None,
        jitter: tenantcheck::sim::Jitter {
            transfer: args.transfer_jitter.map(Duration::from_millis),
            latency: args.latency_jitter.map(Duration::from_millis),
            seed: args.jitter_seed,
        },
    })
}

/// One line on what the reference vendor runs.
fn sim_summary(config: &SimConfig) -> String {
    let pools = match config.disaggregated {
        Some(d) => format!(
            "disaggregated: prefill pool {} tokens, decode pool {} tokens",
            d.prefill_pool_tokens, d.decode_pool_tokens
        ),
        None => format!("one pool of {} tokens", config.pages() * config.page_tokens),
    };
    let faults: Vec<&str> = config.faults.iter().map(|f| f.name()).collect();
    format!(
        "model {}, context {}, {pools}, {}-token pages, prefix cache {}, response cache {}, faults: {}",
        config.model,
        config.context,
        config.page_tokens,
        config.prefix_cache().name(),
        config.response_cache().name(),
        if faults.is_empty() {
            "none".to_owned()
        } else {
            faults.join(", ")
        }
    )
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn keygen(out: &Path) -> u8 {
    match key::write_new_pair(out) {
        Ok((k, private, public)) => {
            say!("private key: {} (keep it private)", private.display());
            say!("public key:  {}", public.display());
            say!("key id:      {}", key::key_id(&k.verifying_key()));
            exit::SUCCESS
        }
        Err(e) => {
            tell!("error: {e}");
            exit::SETUP_ERROR
        }
    }
}

/// `tenantcheck challenge`.
fn challenge(log: Option<&str>, log_key: Option<&Path>, out: &Path) -> u8 {
    if out.exists() {
        tell!(
            "error: {} exists: a challenge is issued once and runs are made under it; give another --out",
            out.display()
        );
        return exit::SETUP_ERROR;
    }
    let key_pem = match log_key.map(std::fs::read_to_string).transpose() {
        Ok(k) => k,
        Err(e) => {
            tell!(
                "error: {}: {e}",
                log_key.map(Path::display).map(|d| d.to_string()).unwrap_or_default()
            );
            return exit::SETUP_ERROR;
        }
    };
    let issued = match tenantcheck::rekor::issue(log.zip(key_pem.as_deref())) {
        Ok(c) => c,
        Err(e) => {
            tell!("error: {e}");
            return exit::SETUP_ERROR;
        }
    };
    let text = serde_json::to_string_pretty(&issued).expect("a challenge serialises") + "\n";
    if let Err(e) = std::fs::write(out, text) {
        tell!("error: {}: {e}", out.display());
        return exit::SETUP_ERROR;
    }
    say!("wrote {} (nonce {})", out.display(), issued.nonce);
    if let Some(l) = &issued.log {
        let size = tenantcheck::tlog::parse_checkpoint(&l.pinned_checkpoint)
            .map(|c| c.size())
            .unwrap_or(0);
        say!(
            "log {} at {}: pinned at its checkpoint of {size} entries",
            l.origin,
            l.url
        );
    }
    exit::SUCCESS
}

/// `tenantcheck runs`.
fn runs(challenge_path: &Path, reports: &[PathBuf]) -> u8 {
    let challenge = match std::fs::read(challenge_path)
        .map_err(|e| e.to_string())
        .and_then(|b| tenantcheck::tlog::Challenge::parse(&b).map_err(|e| e.to_string()))
    {
        Ok(c) => c,
        Err(e) => {
            tell!("error: {}: {e}", challenge_path.display());
            return exit::SETUP_ERROR;
        }
    };
    // The reports' start statements, by their digest as the log holds it.
    let mut disclosed = std::collections::HashMap::new();
    for path in reports {
        match tenantcheck::rekor::disclosed_start(path) {
            Ok(Some(digest)) => {
                disclosed.insert(digest, path.clone());
            }
            Ok(None) => say!("note: {} records no start entry: it was not logged", path.display()),
            Err(e) => {
                tell!("error: {}: {e}", path.display());
                return exit::SETUP_ERROR;
            }
        }
    }
    let (runs, size) = match tenantcheck::rekor::runs(&challenge) {
        Ok(r) => r,
        // The log answered, and what it answered does not hold together.
        Err(
            e @ tenantcheck::rekor::RekorError::Proof {
                source: tenantcheck::tlog::LogError::Fork { .. },
                ..
            },
        ) => {
            say!("FAILED: {e}");
            tell!("error: {e}");
            return exit::FAILED;
        }
        Err(e) => {
            tell!("error: {e}");
            return exit::SETUP_ERROR;
        }
    };
    let log = challenge.log.as_ref().expect("runs() needs a log");
    let pinned = tenantcheck::tlog::parse_checkpoint(&log.pinned_checkpoint)
        .map(|c| c.size())
        .unwrap_or(0);
    say!(
        "log {}: entries {pinned} to {size} read and checked against its checkpoint; the pinned tree of {pinned} is a prefix of it",
        log.origin
    );
    let mut hidden = 0;
    for run in &runs {
        let end = match &run.end {
            Some((index, verdict)) => format!("ended {verdict} (entry {index})"),
            None => "never ended".to_owned(),
        };
        match disclosed.get(&run.start_digest) {
            Some(path) => say!(
                "run started at entry {}: {end}; disclosed: {}",
                run.start_index,
                path.display()
            ),
            None => {
                hidden += 1;
                say!("run started at entry {}: {end}; NOT DISCLOSED", run.start_index);
            }
        }
    }
    say!(
        "{}",
        tenantcheck::tlog::disclosure_line(&runs, |r| disclosed.contains_key(&r.start_digest))
    );
    if hidden > 0 { exit::FAILED } else { exit::SUCCESS }
}

/// A buyer's challenge: a hex nonce, or a challenge file (`tenantcheck challenge`)
/// that may name a transparency log.
#[derive(Clone, Debug)]
struct Challenge {
    nonce: Vec<u8>,
    log: Option<tenantcheck::tlog::ChallengeLog>,
}

fn verify_bundle(
    path: &Path,
    bytes: &[u8],
    key_path: Option<&Path>,
    challenge: Option<&Challenge>,
    policy: Option<&Buyer>,
) -> u8 {
    let key = match key_path.map(key::read_public).transpose() {
        Ok(k) => k,
        Err(e) => {
            tell!("error: {e}");
            return exit::SETUP_ERROR;
        }
    };
    if key.is_none() {
        say!("note: no --key given: the key inside the bundle is used, which shows integrity, not who signed");
    }
    match tenantcheck::bundle::verify(bytes, key.as_ref(), challenge.map(|c| c.nonce.as_slice()), |c| {
        say!("ok: {c}")
    }) {
        Ok(b) => {
            let r = b.report.report();
            if let Some(log) = challenge.and_then(|c| c.log.as_ref()) {
                let opened = tenantcheck::bundle::open(bytes).ok();
                let end = opened
                    .as_ref()
                    .map(|o| o.file(tenantcheck::tlog::END_FILE))
                    .filter(|f| !f.is_empty());
                if let Err(code) = check_log(path, &bundle_envelope(bytes), r, log, end) {
                    return code;
                }
            }
            say!(
                "verified: bundle {} signed by {}: verdict {}",
                path.display(),
                b.report.key_id(),
                r.verdict_line()
            );
            judge_policy(r, b.report.key_id(), key.as_ref(), bundle_envelope(bytes), policy)
        }
        Err(e) => {
            say!("FAILED: {e}");
            tell!("error: {} does not verify: {e}", path.display());
            exit::FAILED
        }
    }
}

/// `tenantcheck merge`.
fn merge(opts: tenantcheck::merge::MergeOptions) -> u8 {
    use tenantcheck::merge::MergeFailure;
    if opts.trusted.is_empty() {
        say!(
            "note: no --shard-key given: each report is checked with the key beside it, which shows integrity, not who signed"
        );
    }
    match tenantcheck::merge::merge(&opts, |check| say!("ok: {check}")) {
        Ok(m) => {
            for line in tenantcheck::merge::render(&m.summary).lines() {
                say!("{line}");
            }
            say!("summary: {} (signed by {})", m.envelope.display(), m.key_id);
            if let Some(private) = &m.fresh_key {
                say!(
                    "signing key: {} (fresh; keep it or pass --key next time)",
                    private.display()
                );
            }
            match m.summary.verdict {
                Verdict::Fail => exit::FAILED,
                Verdict::Inconclusive => exit::INCONCLUSIVE,
                Verdict::Pass | Verdict::Skipped => exit::SUCCESS,
            }
        }
        Err(MergeFailure::Setup(e)) => {
            tell!("error: {e}");
            exit::SETUP_ERROR
        }
        Err(MergeFailure::Refused(e)) => {
            tell!("error: {e}");
            exit::FAILED
        }
    }
}

/// `tenantcheck verify` of a buyer's Verification Summary: its signature and fields,
/// What a buyer brings to `verify`: its policy and, to sign an acceptance, where the
/// Verification Summary goes and the key that signs it.
struct Buyer {
    policy: tenantcheck::policy::Policy,
    /// The policy file's name and bytes, named by digest in the summary.
    file: (String, Vec<u8>),
    svr: Option<(PathBuf, ed25519_dalek::SigningKey)>,
    /// The policy's `[log]`: its challenge file, read.
    log: Option<LogPolicy>,
}

/// A policy's `[log]`, its challenge file read, with the reports disclosed beside the
/// one verified (`--disclosed`).
struct LogPolicy {
    challenge: tenantcheck::tlog::Challenge,
    nonce: Vec<u8>,
    all_runs_disclosed: bool,
    disclosed: Vec<PathBuf>,
}

impl Buyer {
    /// Reads a buyer's policy: TOML errors name the line and the field; values out of
    /// range name the fix. The summary's key is read now, so a bad one stops before any
    /// check.
    fn load(
        path: &Path,
        svr: Option<PathBuf>,
        svr_key: Option<&Path>,
        disclosed: Vec<PathBuf>,
    ) -> Result<Buyer, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let text = String::from_utf8(bytes.clone()).map_err(|e| format!("policy {}: {e}", path.display()))?;
        let policy = parse_policy(path, &text)?;
        let log = match &policy.log {
            None if !disclosed.is_empty() => {
                return Err(format!(
                    "--disclosed needs a policy with a [log] table; {} has none",
                    path.display()
                ));
            }
            None => None,
            Some(rule) => {
                let file = path.parent().unwrap_or(Path::new(".")).join(&rule.challenge);
                let fix = "fix: name the file `tenantcheck challenge --log URL --log-key FILE --out FILE` wrote";
                let challenge = std::fs::read(&file)
                    .map_err(|e| e.to_string())
                    .and_then(|b| tenantcheck::tlog::Challenge::parse(&b).map_err(|e| e.to_string()))
                    .map_err(|e| {
                        format!(
                            "policy {}: field `log.challenge`: {}: {e}; {fix}",
                            path.display(),
                            file.display()
                        )
                    })?;
                if challenge.log.is_none() {
                    return Err(format!(
                        "policy {}: field `log.challenge`: {} names no log; {fix}",
                        path.display(),
                        file.display()
                    ));
                }
                let nonce = challenge.nonce_bytes().map_err(|e| e.to_string())?;
                Some(LogPolicy {
                    challenge,
                    nonce,
                    all_runs_disclosed: rule.all_runs_disclosed,
                    disclosed,
                })
            }
        };
        let svr = match (svr, svr_key) {
            (Some(out), Some(k)) => Some((out, key::read_private(k).map_err(|e| e.to_string())?)),
            _ => None,
        };
        let name = path
            .file_name()
            .map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        Ok(Buyer {
            policy,
            file: (name, bytes),
            svr,
            log,
        })
    }
}

/// `--leak-rate`: a chance in (0, 1].
fn leak_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= 1.0 => Ok(r),
        _ => Err(format!(
            "{s} is not a chance in (0, 1]: give the share of occasions on which a leak fault acts"
        )),
    }
}

fn parse_policy(path: &Path, text: &str) -> Result<tenantcheck::policy::Policy, String> {
    let policy: tenantcheck::policy::Policy = toml::from_str(text).map_err(|e| {
        format!(
            "policy {}: {e}fix: compare with examples/policy-1m.toml, which shows every field",
            path.display()
        )
    })?;
    let c = &policy.coverage;
    for (field, value) in [
        ("coverage.min_context_share".to_owned(), c.min_context_share),
        ("coverage.min_power".to_owned(), c.min_power),
        ("coverage.max_unseen_nodes".to_owned(), c.max_unseen_nodes),
        ("coverage.max_leak_rate".to_owned(), c.max_leak_rate),
    ]
    .into_iter()
    .chain(
        c.max_leak_rate_by_case
            .iter()
            .map(|(case, &rate)| (format!("coverage.max_leak_rate_by_case.\"{case}\""), Some(rate))),
    ) {
        if value.is_some_and(|v| !(0.0..=1.0).contains(&v)) {
            return Err(format!(
                "policy {}: field `{field}` is {}; fix: give a share between 0 and 1",
                path.display(),
                value.unwrap_or_default()
            ));
        }
    }
    if policy.run.max_age_days.is_some_and(|d| d.is_nan() || d < 0.0) {
        return Err(format!(
            "policy {}: field `run.max_age_days` is negative; fix: give the most days a report may be old",
            path.display()
        ));
    }
    if let Some((case, _)) = policy.cases.by_case.iter().find(|(_, v)| v.is_empty()) {
        return Err(format!(
            "policy {}: field `cases.by_case.\"{case}\"` is empty; fix: allow at least \"pass\"",
            path.display()
        ));
    }
    if policy.cases.allowed.is_empty() {
        return Err(format!(
            "policy {}: field `cases.allowed` is empty; fix: allow at least \"pass\"",
            path.display()
        ));
    }
    Ok(policy)
}

/// A policy's `[log]` requirements: the run entered the challenge's log after the
/// pinned checkpoint, and (`all_runs_disclosed`) every run the log holds under the
/// challenge is this one or a disclosed one that verifies with `key`.
fn log_requirements(
    report: &report::Report,
    key: Option<&ed25519_dalek::VerifyingKey>,
    envelope: &[u8],
    log: &LogPolicy,
) -> Vec<tenantcheck::policy::Requirement> {
    use tenantcheck::policy::Requirement;
    use tenantcheck::tlog;
    let log_config = log
        .challenge
        .log
        .as_ref()
        .expect("Buyer::load keeps challenges with a log");
    let entered = tlog::check_logged(
        log_config,
        report.run_secret.log.as_ref(),
        envelope,
        report.verdict.label(),
        None,
    );
    let mut out = vec![Requirement {
        name: format!(
            "log: the run entered {} after the challenge's pinned checkpoint",
            log_config.origin
        ),
        met: entered.is_ok(),
        figure: match &entered {
            Ok(l) => format!("start entry {}", l.start.index),
            Err(e) => e.to_string(),
        },
    }];
    if !log.all_runs_disclosed {
        return out;
    }
    let name = "log: every run under the challenge disclosed".to_owned();
    let mut digests: std::collections::HashSet<String> = report
        .run_secret
        .log
        .iter()
        .map(|s| tlog::start_digest(&s.statement))
        .collect();
    for path in &log.disclosed {
        let opened = std::fs::read(path).map_err(|e| e.to_string()).and_then(|bytes| {
            let key = key.ok_or("give --key: the disclosed reports are verified with it")?;
            report::verify(&bytes, key, None, Some(&log.nonce), |_| {}).map_err(|e| e.to_string())
        });
        match opened {
            Ok(v) => digests.extend(
                v.report()
                    .run_secret
                    .log
                    .iter()
                    .map(|s| tlog::start_digest(&s.statement)),
            ),
            Err(e) => {
                out.push(Requirement {
                    name,
                    met: false,
                    figure: format!("{} does not verify: {e}", path.display()),
                });
                return out;
            }
        }
    }
    out.push(match tenantcheck::rekor::runs(&log.challenge) {
        Ok((runs, _)) => Requirement {
            name,
            met: runs.iter().all(|r| digests.contains(&r.start_digest)),
            figure: tlog::disclosure_line(&runs, |r| digests.contains(&r.start_digest)),
        },
        Err(e) => Requirement {
            name,
            met: false,
            figure: format!("the log could not be read: {e}"),
        },
    });
    out
}

/// The report envelope inside a bundle that verified.
fn bundle_envelope(bundle: &[u8]) -> Vec<u8> {
    tenantcheck::bundle::open(bundle)
        .map(|o| o.file(report::ENVELOPE_FILE).to_vec())
        .unwrap_or_default()
}

/// Judges a verified report against the buyer's policy, if one was given: every
/// requirement printed met or unmet with its figure; [`exit::POLICY_UNMET`] when one is
/// unmet. An accepted report gets the buyer's signed Verification Summary when asked.
fn judge_policy(
    report: &report::Report,
    key_id: &str,
    key: Option<&ed25519_dalek::VerifyingKey>,
    envelope: impl AsRef<[u8]>,
    buyer: Option<&Buyer>,
) -> u8 {
    let Some(buyer) = buyer else {
        return exit::SUCCESS;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let mut judged = tenantcheck::policy::evaluate(report, key_id, &buyer.policy, now);
    if let Some(log) = &buyer.log {
        judged.extend(log_requirements(report, key, envelope.as_ref(), log));
    }
    let unmet = judged.iter().filter(|r| !r.met).count();
    for r in &judged {
        say!(
            "policy: {} {} ({})",
            if r.met { "met  " } else { "UNMET" },
            inert(&r.name, Sink::Terminal),
            inert(&r.figure, Sink::Terminal)
        );
    }
    if unmet > 0 {
        say!("policy: rejected ({unmet} of {} requirements unmet)", judged.len());
        if let Some((out, _)) = &buyer.svr {
            say!(
                "no verification summary written to {}: the report was rejected",
                out.display()
            );
        }
        return exit::POLICY_UNMET;
    }
    say!("policy: accepted ({} requirements met)", judged.len());
    let Some((out, signing_key)) = &buyer.svr else {
        return exit::SUCCESS;
    };
    let svr = tenantcheck::attestation::sign_verification_summary(
        envelope.as_ref(),
        report,
        &buyer.policy,
        (&buyer.file.0, &buyer.file.1),
        &judged,
        tenantcheck::TOOL_VERSION,
        (&tenantcheck::now_rfc3339(), now),
        signing_key,
    )
    .expect("an accepted report has a summary");
    let json = serde_json::to_vec_pretty(&svr).expect("envelopes serialise");
    if let Err(e) = std::fs::write(out, json) {
        tell!("error: {}: {e}", out.display());
        return exit::SETUP_ERROR;
    }
    say!(
        "wrote {}: in-toto Verification Summary of this report, signed by {}",
        out.display(),
        key::key_id(&signing_key.verifying_key())
    );
    exit::SUCCESS
}

fn parse_challenge(text: &str) -> Result<Challenge, String> {
    if let Some(nonce) = report::unhex(text) {
        return match nonce.len() {
            1..=64 => Ok(Challenge { nonce, log: None }),
            _ => Err("write the challenge as 2 to 128 hex digits (1 to 64 bytes), or give a challenge file".to_owned()),
        };
    }
    let path = Path::new(text);
    let bytes = std::fs::read(path).map_err(|e| {
        format!("{text} is neither hex (a nonce of 1 to 64 bytes) nor a challenge file that can be read ({e})")
    })?;
    let challenge = tenantcheck::tlog::Challenge::parse(&bytes).map_err(|e| format!("{text}: {e}"))?;
    let nonce = challenge.nonce_bytes().map_err(|e| format!("{text}: {e}"))?;
    Ok(Challenge {
        nonce,
        log: challenge.log,
    })
}

/// `tenantcheck diff`: both reports verified with their transcripts, then compared.
fn diff(older: &Path, newer: &Path, keys: &[PathBuf]) -> u8 {
    if keys.len() > 2 {
        tell!("error: give --key at most twice (the older report's key, then the newer's)");
        return exit::SETUP_ERROR;
    }
    let load =
        |envelope: &Path, key: Option<&PathBuf>| -> Result<(Vec<u8>, tenantcheck::report::Report), (u8, String)> {
            let key = key
                .cloned()
                .unwrap_or_else(|| run_dir::beside(envelope, run_dir::PUBLIC_KEY_FILE));
            let read = |p: &Path| std::fs::read(p).map_err(|e| (exit::SETUP_ERROR, format!("{}: {e}", p.display())));
            let bytes = read(envelope)?;
            let transcript = run_dir::existing_beside(envelope, run_dir::TRANSCRIPT_FILE)
                .map(|t| read(&t))
                .transpose()?;
            let public = key::read_public(&key).map_err(|e| (exit::SETUP_ERROR, e.to_string()))?;
            let verified = report::verify(&bytes, &public, transcript.as_deref(), None, |_| {}).map_err(|e| {
                (
                    exit::FAILED,
                    format!("{} does not verify, so it is not compared: {e}", envelope.display()),
                )
            })?;
            Ok((bytes, verified.report().clone()))
        };
    let both = load(older, keys.first()).and_then(|a| Ok((a, load(newer, keys.get(1).or(keys.first()))?)));
    let ((older_bytes, a), (_, b)) = match both {
        Ok(both) => both,
        Err((code, e)) => {
            tell!("error: {e}");
            return code;
        }
    };
    let d = tenantcheck::diff::diff(&a, &b, &older_bytes);
    for line in d.render().lines() {
        say!("{line}");
    }
    if d.regressions() > 0 {
        exit::FAILED
    } else {
        exit::SUCCESS
    }
}

fn render(envelope: &Path, key: Option<&Path>, transcript: Option<&Path>, outputs: [Option<PathBuf>; 3]) -> u8 {
    if outputs.iter().all(Option::is_none) {
        tell!("error: name at least one of --html FILE, --md FILE, --junit FILE");
        return exit::SETUP_ERROR;
    }
    let key = key.map_or_else(|| run_dir::beside(envelope, run_dir::PUBLIC_KEY_FILE), Path::to_owned);
    let transcript = transcript
        .map(Path::to_owned)
        .or_else(|| run_dir::existing_beside(envelope, run_dir::TRANSCRIPT_FILE));
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    let inputs = read(envelope).and_then(|env| {
        let t = transcript.as_deref().map(read).transpose()?;
        let k = key::read_public(&key).map_err(|e| e.to_string())?;
        Ok((env, t, k))
    });
    let (bytes, transcript, public) = match inputs {
        Ok(i) => i,
        Err(e) => {
            tell!("error: {e}");
            return exit::SETUP_ERROR;
        }
    };
    let verified = match report::verify(&bytes, &public, transcript.as_deref(), None, |_| {}) {
        Ok(v) => v,
        Err(e) => {
            tell!(
                "error: {} does not verify, so it is not rendered: {e}",
                envelope.display()
            );
            return exit::FAILED;
        }
    };
    let [html, md, junit] = outputs;
    let r = verified.report();
    let texts = [
        (
            html,
            tenantcheck::render::html(r, verified.key_id(), transcript.as_deref()),
        ),
        (md, tenantcheck::render::markdown(r, verified.key_id())),
        (junit, tenantcheck::render::junit(r)),
    ];
    for (path, text) in texts {
        let Some(path) = path else { continue };
        if let Err(e) = std::fs::write(&path, text) {
            tell!("error: {}: {e}", path.display());
            return exit::SETUP_ERROR;
        }
        say!("wrote {}", path.display());
    }
    exit::SUCCESS
}

fn verify(
    envelope: &Path,
    key_path: Option<&Path>,
    transcript: Option<&Path>,
    challenge: Option<&Challenge>,
    policy: Option<&Buyer>,
) -> u8 {
    let log = challenge.and_then(|c| c.log.as_ref());
    let bytes = match std::fs::read(envelope) {
        Ok(b) => b,
        Err(e) => {
            tell!("error: {}: {e}", envelope.display());
            return exit::SETUP_ERROR;
        }
    };
    if tenantcheck::bundle::is_bundle(&bytes) {
        return verify_bundle(envelope, &bytes, key_path, challenge, policy);
    }
    let challenge_nonce = challenge.map(|c| c.nonce.as_slice());
    let Some(key_path) = key_path else {
        tell!("error: --key PUB is needed to verify an envelope (the signer's public key)");
        return exit::SETUP_ERROR;
    };
    let public = match key::read_public(key_path) {
        Ok(k) => k,
        Err(e) => {
            tell!("error: {e}");
            return exit::SETUP_ERROR;
        }
    };
    let beside = run_dir::Folder::of(envelope, transcript);
    let opened = tenantcheck::document::open(&bytes, &public, &beside, challenge_nonce, |check| say!("ok: {check}"));
    if let (Ok(tenantcheck::document::Opened::Report { verified, .. }), Some(log)) = (&opened, log) {
        let end = std::fs::read(run_dir::beside(envelope, run_dir::LOG_END_FILE));
        let end = match end {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                tell!("error: {}: {e}", envelope.display());
                return exit::SETUP_ERROR;
            }
            Ok(b) => Some(b),
        };
        if let Err(code) = check_log(envelope, &bytes, verified.report(), log, end.as_deref()) {
            return code;
        }
    }
    tell_opened(envelope, &bytes, &public, opened, policy)
}

/// A verified report's start and end entries held to the log the buyer's challenge
/// names: its key signed their checkpoints, the end (`end`, the bytes of
/// log-end.json, when there is one) logs this report.
fn check_log(
    envelope: &Path,
    bytes: &[u8],
    r: &report::Report,
    log: &tenantcheck::tlog::ChallengeLog,
    end: Option<&[u8]>,
) -> Result<(), u8> {
    let end: Option<tenantcheck::tlog::EndRecord> = match end.map(serde_json::from_slice).transpose() {
        Ok(end) => end,
        Err(e) => {
            say!("FAILED: {} is not a run's end entry: {e}", run_dir::LOG_END_FILE);
            return Err(exit::FAILED);
        }
    };
    match tenantcheck::tlog::check_logged(log, r.run_secret.log.as_ref(), bytes, r.verdict.label(), end.as_ref()) {
        Ok(logged) => {
            say!(
                "ok: the log {} signed its checkpoint at tree size {} that includes the run's start (entry {}), after the checkpoint pinned with the challenge",
                log.origin,
                logged.start.tree_size,
                logged.start.index
            );
            match logged.end {
                Some(end) => say!(
                    "ok: the run's end is entry {} of the log, logging this report's digest and verdict {}",
                    end.index,
                    r.verdict.label()
                ),
                None => say!(
                    "not checked: the run's end entry (no {} beside the report; `tenantcheck runs` shows whether the log holds one)",
                    run_dir::LOG_END_FILE
                ),
            }
            Ok(())
        }
        Err(e) => {
            say!("FAILED: {e}");
            tell!(
                "error: {} does not verify against the challenge's log: {e}",
                envelope.display()
            );
            Err(exit::FAILED)
        }
    }
}

/// What `verify` says of a document [`tenantcheck::document::open`] opened (or did
/// not), and its exit code.
fn tell_opened(
    envelope: &Path,
    bytes: &[u8],
    public: &ed25519_dalek::VerifyingKey,
    opened: Result<tenantcheck::document::Opened, tenantcheck::document::OpenError>,
    policy: Option<&Buyer>,
) -> u8 {
    use tenantcheck::document::{OpenError, Opened};
    match opened {
        Ok(Opened::Report { verified, .. }) => {
            if verified.transcript().is_none() {
                say!("not checked: the transcript (none beside the envelope; pass --transcript FILE)");
            }
            let r = verified.report();
            say!(
                "verified: {} signed by {}: verdict {}",
                envelope.display(),
                verified.key_id(),
                r.verdict_line()
            );
            judge_policy(r, verified.key_id(), Some(public), bytes, policy)
        }
        Ok(Opened::Summary(v)) => {
            let s = v.summary();
            say!(
                "verified: summary {} signed by {}: verdict {} ({}) over {}",
                envelope.display(),
                v.key_id(),
                s.verdict.label(),
                s.totals,
                s.runs_in_words()
            );
            exit::SUCCESS
        }
        Ok(Opened::VerificationSummary {
            summary, about_beside, ..
        }) => {
            for p in &summary.properties {
                say!("property: {}", inert(p, Sink::Terminal));
            }
            let report = run_dir::beside(envelope, run_dir::ENVELOPE_FILE);
            match about_beside {
                Some(false) => {
                    say!("FAILED: the summary is not about {}", report.display());
                    tell!(
                        "error: {} is about another report than {}",
                        envelope.display(),
                        report.display()
                    );
                    return exit::FAILED;
                }
                Some(true) => say!("ok: it is about {} (verify that report on its own)", report.display()),
                None => {}
            }
            say!(
                "verified: verification summary {} signed by {}: {} properties",
                envelope.display(),
                key::key_id(public),
                summary.properties.len()
            );
            exit::SUCCESS
        }
        Err(e @ (OpenError::TestResultAlone | OpenError::Beside(_))) => {
            tell!("error: {}: {e}", envelope.display());
            exit::SETUP_ERROR
        }
        Err(e) => {
            say!("FAILED: {e}");
            tell!("error: {} does not verify: {e}", envelope.display());
            exit::FAILED
        }
    }
}
