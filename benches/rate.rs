//! Benchmark: the harness's own request rate, through the real path every probe uses
//! (`Session`: key lookup, concurrency permit, the OpenAI-compatible adapter, the
//! redacted, hash-chained transcript), against a zero-latency endpoint.
//!
//! `cargo bench --bench rate -- BASE_URL [REQUESTS] [IN_FLIGHT] [RUNS]` sends
//! REQUESTS short chat requests (default 20,000), IN_FLIGHT at once (default 64),
//! alternating the two tenants whose keys are in TENANTCHECK_KEY_A and
//! TENANTCHECK_KEY_B, RUNS times (default 5), and prints the median rate.
//! `benches/rate.sh` runs it beside `wrk` on the same endpoints (the reference vendor
//! with `--no-delay`, and nginx answering a fixed JSON body), and
//! `docs/performance.md` has the figures.

use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Instant;
use tenantcheck::adapter::{ChatRequest, OpenAiChat, Provider};
use tenantcheck::canary::RunSecret;
use tenantcheck::credential::{Redactor, Secret};
use tenantcheck::session::Session;
use tenantcheck::transcript::{Header, Transcript};
use tenantcheck::vendor::TenantKey;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let Some(base_url) = args.first().cloned() else {
        eprintln!("usage: cargo bench --bench rate -- BASE_URL [REQUESTS] [IN_FLIGHT] [RUNS]");
        std::process::exit(2);
    };
    let arg = |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (requests, in_flight, runs) = (arg(1, 20_000), arg(2, 64), arg(3, 5));
    // TENANTCHECK_RATE_ADAPTER_ONLY=1: the adapter alone, without the session's
    // transcript (to see what the evidence costs).
    let adapter_only = std::env::var_os("TENANTCHECK_RATE_ADAPTER_ONLY").is_some();
    let key = |name: &str| Secret::new(std::env::var(name).unwrap_or_else(|_| panic!("set {name}")));
    let tenants = vec![
        TenantKey {
            label: "a".into(),
            credential_env: "TENANTCHECK_KEY_A".into(),
            secret: key("TENANTCHECK_KEY_A"),
        },
        TenantKey {
            label: "b".into(),
            credential_env: "TENANTCHECK_KEY_B".into(),
            secret: key("TENANTCHECK_KEY_B"),
        },
    ];
    let mut profile = tenantcheck::vendor::embedded_sim();
    profile.base_url = base_url.clone();
    profile.max_concurrency = in_flight as u32;
    tenantcheck::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("tenantcheck-rate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rates = Vec::new();
    for run in 0..runs {
        let secret = RunSecret::generate();
        let header = Header {
            tool: "tenantcheck",
            version: tenantcheck::TOOL_VERSION,
            vendor: &profile.name,
            secret_commitment: &secret.commitment(),
            challenge: None,
            log_index: None,
            log_checkpoint: None,
        };
        let path = dir.join(format!("transcript-{run}.jsonl"));
        let transcript = Transcript::create(&path, Redactor::new(tenants.iter().map(|t| &t.secret)), &header).unwrap();
        let provider: Arc<OpenAiChat> =
            Arc::new(OpenAiChat::new(&base_url, &profile.model, std::time::Duration::from_secs(30)).unwrap());
        let session = Session::new(
            profile.clone(),
            provider.clone(),
            tenants.clone(),
            Arc::new(transcript),
            secret,
        );
        let request = ChatRequest::user("Say hello in one word.", 16);
        // As in the harness: the loop runs as a task on the runtime's workers.
        let task = runtime.spawn(async move {
            let provider = &provider;
            let started = Instant::now();
            let ok = futures_util::stream::iter(0..requests)
                .map(|i| {
                    let (session, request) = (&session, &request);
                    async move {
                        let tenant = if i % 2 == 0 { "a" } else { "b" };
                        if adapter_only {
                            let key = &session.key(tenant).unwrap().secret;
                            return provider.chat(key, request).await.is_success();
                        }
                        session
                            .chat("bench", tenant, request)
                            .await
                            .is_ok_and(|s| s.exchange.is_success())
                    }
                })
                .buffer_unordered(in_flight)
                .filter(|ok| std::future::ready(*ok))
                .count()
                .await;
            (ok, started.elapsed().as_secs_f64())
        });
        let (ok, seconds) = runtime.block_on(task).unwrap();
        assert_eq!(ok, requests, "{} of {requests} requests failed", requests - ok);
        let rate = requests as f64 / seconds;
        eprintln!("run {run}: {requests} requests in {seconds:.2} s: {rate:.0} req/s");
        let transcript_bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
        eprintln!(
            "  transcript: {transcript_bytes} bytes, {} per request",
            transcript_bytes / requests as u64
        );
        rates.push(rate);
        let _ = std::fs::remove_file(&path);
    }
    let _ = std::fs::remove_dir_all(&dir);
    rates.sort_by(f64::total_cmp);
    println!(
        "harness: median {:.0} req/s over {runs} runs ({requests} requests, {in_flight} in flight, {base_url})",
        rates[rates.len() / 2]
    );
}
