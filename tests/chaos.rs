//! One run per hostile vendor behaviour (`tenantcheck sim --chaos NAME`): each ends
//! within the profile's limits, as the outcome it must be with the reason in the
//! report, in bounded memory, with its evidence verified and no panic.
//!
//! The profile's limits here: 3 s per request, 1 s of silence within an answer, 1 MiB
//! per answer. Peak memory is the run process's own (`wait4`'s `ru_maxrss`).

mod common;

use common::{Sim, TempDir, tenantcheck};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tenantcheck::outcome::Verdict;

const KEY_A: &str = "sk-chaos-tenant-a-0000";
const KEY_B: &str = "sk-chaos-tenant-b-1111";

/// The run's peak resident memory must stay under this (a healthy run of one case
/// takes about 15 MiB; a 1 GiB answer read whole would take sixteen times as much).
const MEMORY_BOUND_KIB: i64 = 64 * 1024;

const TIMEOUT_S: u64 = 3;

struct Ran {
    verdict: Verdict,
    summary: String,
    elapsed: Duration,
    requests: u64,
    max_rss_kib: i64,
    exchanges: std::collections::BTreeMap<u64, serde_json::Value>,
}

/// Runs `case` against a sim with `chaos`, through a profile with tight limits.
fn run(chaos: &str, case: &str) -> Ran {
    let tmp = TempDir::new(&format!("chaos-{chaos}"));
    let sim = Sim::start(KEY_A, KEY_B, &["--chaos", chaos]);
    let profile = sim.profile(tmp.path());
    let text = std::fs::read_to_string(&profile).unwrap().replace(
        "request_timeout_secs = 60",
        &format!("request_timeout_secs = {TIMEOUT_S}\nidle_timeout_secs = 1\nmax_response_bytes = 1048576"),
    );
    assert!(
        text.contains("max_response_bytes"),
        "the sim profile sets a request timeout"
    );
    std::fs::write(&profile, text).unwrap();
    let run_dir = tmp.path().join("run");
    let started = Instant::now();
    // Reaped by wait4 below, which also gives its peak memory.
    #[allow(clippy::zombie_processes)]
    let child = tenantcheck()
        .args(["run", "--vendor"])
        .arg(&profile)
        .arg("--out")
        .arg(&run_dir)
        .args(["--exact", case])
        .env("TENANTCHECK_KEY_A", KEY_A)
        .env("TENANTCHECK_KEY_B", KEY_B)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(tmp.path().join("stderr")).unwrap())
        .spawn()
        .unwrap();
    let (code, max_rss_kib) = wait_with_peak_memory(child.id());
    let elapsed = started.elapsed();
    let stderr = std::fs::read_to_string(tmp.path().join("stderr")).unwrap();
    assert!(!stderr.contains("panicked"), "{chaos}: {stderr}");
    assert!(
        matches!(code, 0 | 1 | 3),
        "{chaos}: exit {code}: a verdict, not a harness error or a crash"
    );
    let report = common::verified(&run_dir);
    let c = report.cases.iter().find(|c| c.id == case).unwrap();
    let exchanges = common::transcript_exchanges(&run_dir);
    let text = std::fs::read_to_string(run_dir.join(tenantcheck::report::TRANSCRIPT_FILE)).unwrap();
    assert!(!text.contains(KEY_A) && !text.contains(KEY_B));
    drop(sim);
    Ran {
        verdict: c.outcome.verdict,
        summary: c.outcome.summary.clone(),
        elapsed,
        requests: exchanges.len() as u64,
        max_rss_kib,
        exchanges,
    }
}

/// Waits for child `pid`; its exit code and its own peak resident memory in KiB.
fn wait_with_peak_memory(pid: u32) -> (i32, i64) {
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid, and wait4 writes only into the two
    // out-parameters it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let got = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(got, pid as libc::pid_t, "wait4");
    assert!(
        libc::WIFEXITED(status),
        "the run was killed by signal {}",
        libc::WTERMSIG(status)
    );
    (libc::WEXITSTATUS(status), usage.ru_maxrss)
}

/// The checks every hostile run shares: the verdict, the reason, time and memory.
fn check(ran: &Ran, verdict: Verdict, reason: &str, limit: Duration) {
    eprintln!(
        "{:?} in {:.1} s ({} requests, limit {:?}), peak {} KiB: {}",
        ran.verdict,
        ran.elapsed.as_secs_f64(),
        ran.requests,
        limit,
        ran.max_rss_kib,
        ran.summary
    );
    assert_eq!(ran.verdict, verdict, "{}", ran.summary);
    assert!(ran.summary.contains(reason), "{:?} not in {:?}", reason, ran.summary);
    assert!(ran.elapsed < limit, "took {:?}, limit {limit:?}", ran.elapsed);
    assert!(
        ran.max_rss_kib < MEMORY_BOUND_KIB,
        "peak memory {} KiB over the bound {MEMORY_BOUND_KIB} KiB",
        ran.max_rss_kib
    );
}

/// Start-up and signing, beyond the requests' own limits.
const SLACK: Duration = Duration::from_secs(10);

fn per_request(n: u64) -> Duration {
    Duration::from_secs(TIMEOUT_S * n) + SLACK
}

#[test]
fn no_response_times_out() {
    let ran = run("no-response", "stream.integrity");
    check(&ran, Verdict::Inconclusive, "Timeout", per_request(ran.requests));
}

#[test]
fn a_stream_that_never_ends_is_cut_at_the_size_cap_or_the_timeout() {
    let ran = run("endless-stream", "stream.integrity");
    check(&ran, Verdict::Inconclusive, "Timeout", per_request(ran.requests));
}

#[test]
fn a_stream_that_stalls_ends_at_the_idle_limit() {
    let ran = run("stalled-stream", "stream.integrity");
    check(
        &ran,
        Verdict::Inconclusive,
        "the answer stalled: no data for 1 s",
        per_request(ran.requests),
    );
}

#[test]
fn a_body_of_a_gibibyte_is_read_only_to_the_cap() {
    let ran = run("huge-body", "usage.consistency");
    check(
        &ran,
        Verdict::Inconclusive,
        "over 1048576 bytes",
        per_request(ran.requests),
    );
}

#[test]
fn malformed_json_is_a_protocol_error() {
    let ran = run("malformed-json", "usage.consistency");
    check(&ran, Verdict::Inconclusive, "not JSON", per_request(ran.requests));
}

#[test]
fn malformed_sse_fails_the_stream_grammar() {
    let ran = run("malformed-sse", "stream.integrity");
    check(&ran, Verdict::Fail, "is not JSON", per_request(ran.requests));
}

#[test]
fn a_connection_reset_mid_stream_is_a_broken_answer() {
    let ran = run("reset-mid-stream", "stream.integrity");
    check(&ran, Verdict::Inconclusive, "Body", per_request(ran.requests));
}

#[test]
fn a_429_is_retried_after_retry_after_then_given_up() {
    let ran = run("rate-limited", "stream.integrity");
    check(&ran, Verdict::Inconclusive, "HTTP 429", per_request(ran.requests));
    // Each chat request: the first try and two retries, a second or more apart.
    let chats: Vec<&serde_json::Value> = ran
        .exchanges
        .values()
        .filter(|l| l["case"] == "stream.integrity")
        .collect();
    assert_eq!(chats.len() % 3, 0, "{}", chats.len());
    assert!(chats.iter().all(|l| l["exchange"]["status"] == 429));
}

#[test]
fn bursts_of_503_are_retried_with_backoff_and_the_case_still_judges() {
    let ran = run("unavailable-bursts", "stream.integrity");
    check(&ran, Verdict::Pass, "streams checked", per_request(ran.requests));
    let statuses: Vec<u64> = ran
        .exchanges
        .values()
        .filter(|l| l["case"] == "stream.integrity")
        .map(|l| l["exchange"]["status"].as_u64().unwrap())
        .collect();
    assert_eq!(
        statuses,
        [503, 503, 200].repeat(statuses.len() / 3),
        "every retry is evidence"
    );
}

#[test]
fn the_wrong_content_type_fails_the_stream_grammar() {
    let ran = run("wrong-content-type", "stream.integrity");
    check(&ran, Verdict::Fail, "not text/event-stream", per_request(ran.requests));
}

#[test]
fn a_gzip_bomb_is_never_inflated() {
    let ran = run("gzip-bomb", "usage.consistency");
    check(
        &ran,
        Verdict::Inconclusive,
        "gzip-encoded though no encoding was asked for",
        per_request(ran.requests),
    );
}

#[test]
fn headers_a_byte_at_a_time_run_into_the_timeout() {
    let ran = run("slow-headers", "stream.integrity");
    check(&ran, Verdict::Inconclusive, "Timeout", per_request(ran.requests));
}

#[test]
fn the_gzip_bomb_is_a_real_one() {
    // Python's gzip module inflates a small one to exactly its size of zeros.
    let bomb = tenantcheck::sim::chaos::gzip_bomb(1_000_003);
    let tmp = TempDir::new("bomb");
    let path = tmp.path().join("bomb.gz");
    std::fs::write(&path, &bomb).unwrap();
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import gzip,sys; d=gzip.decompress(open(sys.argv[1],'rb').read()); print(len(d), d.count(0))",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "1000003 1000003",
        "{out:?}"
    );
}
