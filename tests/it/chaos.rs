//! One run per hostile vendor behaviour (`tenantcheck sim --chaos NAME`): each ends
//! within the profile's limits, as the outcome it must be with the reason in the
//! report, in bounded memory, with its evidence verified and no panic.
//!
//! The profile's limits here: 3 s per request, 1 s of silence within an answer, 1 MiB
//! per answer. Peak memory is the run process's own (its `VmHWM`).

use crate::common::{Sim, TempDir, tenantcheck};
use std::time::{Duration, Instant};
use tenantcheck::outcome::Verdict;

// Random past their prefix, as real keys are: each half of a key split in two holds a
// digit, so neither stands unredacted.
const KEY_A: &str = "sk-chaos-9fQ2xL7mRa4Kt8Vw1Zp3";
const KEY_B: &str = "sk-chaos-5hN8cY3vTe6Jd1Ws4Mq7";

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
    code: i32,
    stdout: String,
    stderr: String,
    report: tenantcheck::report::Report,
    /// The run folder (kept until the value is dropped).
    tmp: TempDir,
}

impl Ran {
    fn dir(&self) -> std::path::PathBuf {
        self.tmp.path().join("run")
    }

    /// The status of every answer to `case`, in transcript order.
    fn statuses(&self, case: &str) -> Vec<u64> {
        self.exchanges
            .values()
            .filter(|l| l["case"] == case)
            .map(|l| l["exchange"]["status"].as_u64().unwrap())
            .collect()
    }
}

/// Runs `case` against a sim with `chaos`, through a profile with tight limits.
fn run(chaos: &str, case: &str) -> Ran {
    let ran = run_with(&["--chaos", chaos], &["--exact", case], Some(case));
    assert!(
        matches!(ran.code, 0 | 1 | 3),
        "{chaos}: exit {}: a verdict, not a harness error or a crash",
        ran.code
    );
    ran
}

/// Runs the cases `selection` picks against a sim started with `sim_flags`, through a
/// profile with tight limits; the verdict and summary are `case`'s, or the run's.
fn run_with(sim_flags: &[&str], selection: &[&str], case: Option<&str>) -> Ran {
    let chaos = sim_flags.get(1).copied().unwrap_or("none");
    let tmp = TempDir::new(&format!("chaos-{chaos}"));
    let sim = Sim::start(KEY_A, KEY_B, sim_flags);
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
    // Reaped by waitpid below, which also reads its peak memory.
    #[allow(clippy::zombie_processes)]
    let child = tenantcheck()
        .args(["run", "--vendor"])
        .arg(&profile)
        .arg("--out")
        .arg(&run_dir)
        .args(selection)
        .env("TENANTCHECK_KEY_A", KEY_A)
        .env("TENANTCHECK_KEY_B", KEY_B)
        .stdout(std::fs::File::create(tmp.path().join("stdout")).unwrap())
        .stderr(std::fs::File::create(tmp.path().join("stderr")).unwrap())
        .spawn()
        .unwrap();
    let (code, max_rss_kib) = wait_with_peak_memory(child.id());
    let elapsed = started.elapsed();
    let stderr = std::fs::read_to_string(tmp.path().join("stderr")).unwrap();
    let stdout = std::fs::read_to_string(tmp.path().join("stdout")).unwrap();
    assert!(!stderr.contains("panicked"), "{chaos}: {stderr}");
    let report = crate::common::verified(&run_dir);
    let (verdict, summary) = match case {
        Some(case) => {
            let c = report.cases.iter().find(|c| c.id == case).unwrap();
            (c.outcome.verdict, c.outcome.summary.clone())
        }
        None => (report.verdict, report.totals.to_string()),
    };
    let exchanges = crate::common::transcript_exchanges(&run_dir);
    let text = std::fs::read_to_string(run_dir.join(tenantcheck::report::TRANSCRIPT_FILE)).unwrap();
    assert!(!text.contains(KEY_A) && !text.contains(KEY_B));
    drop(sim);
    Ran {
        verdict,
        summary,
        elapsed,
        requests: exchanges.len() as u64,
        max_rss_kib,
        exchanges,
        code,
        stdout,
        stderr,
        report,
        tmp,
    }
}

/// Waits for child `pid`; its exit code and its own peak resident memory in KiB.
///
/// The peak is the child's `VmHWM`, read from `/proc` every 10 ms while it runs: the
/// high-water mark of its own memory since its `exec`. (`wait4`'s `ru_maxrss` would
/// also count the memory of this test process at the moment it spawned the child,
/// which `exec` carries over.)
fn wait_with_peak_memory(pid: u32) -> (i32, i64) {
    let status_file = format!("/proc/{pid}/status");
    let mut peak = 0;
    let mut status = 0;
    loop {
        if let Some(kib) = std::fs::read_to_string(&status_file).ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
        }) {
            peak = peak.max(kib);
        }
        // SAFETY: waitpid writes only into `status`.
        let got = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
        if got == pid as libc::pid_t {
            break;
        }
        assert_eq!(got, 0, "waitpid");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        libc::WIFEXITED(status),
        "the run was killed by signal {}",
        libc::WTERMSIG(status)
    );
    (libc::WEXITSTATUS(status), peak)
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
    // Each chat request: the first try and the profile's five retries (the default
    // rate_limit_retries), a second or more apart.
    let chats = ran.statuses("stream.integrity");
    assert_eq!(chats.len() % 6, 0, "{}", chats.len());
    assert!(chats.iter().all(|s| *s == 429));
    // The report counts them: every 429, and the five of six waited out.
    let limits = ran.report.rate_limits.expect("the report counts the rate limits");
    assert_eq!(limits.answers, chats.len() as u64);
    assert_eq!(limits.waited_out, limits.answers / 6 * 5);
    assert_eq!(limits.waited_secs, limits.waited_out);
    assert!(ran.stdout.contains("rate limits:"), "{}", ran.stdout);
}

/// A per-key rate limit that answers three tries of four 429 with `Retry-After: 1`
/// is waited out, in every request, and the case judges the answers it then gets: a
/// rate limit is no failure, and no reason to be inconclusive. The report counts
/// them, and `verify` holds the count to the transcript.
#[test]
fn rate_limits_are_waited_out_and_the_case_still_judges() {
    let ran = run("rate-limit-bursts", "stream.integrity");
    check(&ran, Verdict::Pass, "streams checked", per_request(ran.requests));
    let statuses = ran.statuses("stream.integrity");
    assert_eq!(statuses, [429, 429, 429, 200].repeat(statuses.len() / 4));
    let limits = ran.report.rate_limits.expect("the report counts the rate limits");
    assert_eq!(limits.answers, statuses.len() as u64 / 4 * 3);
    assert_eq!(limits.waited_out, limits.answers);

    // A report that hides them does not verify, though re-signed with the run's key.
    let err = crate::common::resigned(&ran.dir(), |r| r.rate_limits = None).unwrap_err();
    assert!(err.contains("answers with status 429"), "{err}");
}

#[test]
fn bursts_of_503_are_retried_with_backoff_and_the_case_still_judges() {
    let ran = run("unavailable-bursts", "stream.integrity");
    check(&ran, Verdict::Pass, "streams checked", per_request(ran.requests));
    let statuses = ran.statuses("stream.integrity");
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

/// Everything a run shows or writes for people: its standard output and error and the
/// three renderings.
fn shown(ran: &Ran) -> Vec<(String, String)> {
    let mut out = vec![
        ("stdout".to_owned(), ran.stdout.clone()),
        ("stderr".to_owned(), ran.stderr.clone()),
    ];
    for file in [
        tenantcheck::report::HTML_FILE,
        tenantcheck::report::MARKDOWN_FILE,
        tenantcheck::report::JUNIT_FILE,
    ] {
        out.push((file.to_owned(), std::fs::read_to_string(ran.dir().join(file)).unwrap()));
    }
    out
}

#[test]
fn a_redirect_to_another_origin_is_never_followed_and_fails_the_case() {
    use std::io::Read;
    let elsewhere = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
    let url = format!("http://{}", elsewhere.local_addr().unwrap());
    elsewhere.set_nonblocking(true).unwrap();
    let ran = run_with(
        &["--chaos", "redirect", "--redirect-to", &url],
        &["--exact", "usage.consistency"],
        Some("usage.consistency"),
    );
    check(
        &ran,
        Verdict::Fail,
        "redirects are never followed",
        per_request(ran.requests),
    );
    assert!(ran.summary.contains(&url), "{}", ran.summary);
    let c = &ran
        .report
        .cases
        .iter()
        .find(|c| c.id == "usage.consistency")
        .unwrap()
        .outcome;
    assert!(
        c.findings
            .iter()
            .all(|f| f.code == tenantcheck::outcome::FindingCode::Redirected)
    );
    // Nothing, with or without a credential, reached the other origin.
    match elsewhere.accept() {
        Ok((mut conn, _)) => {
            let mut got = String::new();
            let _ = conn.read_to_string(&mut got);
            panic!("a request reached {url}: {got}");
        }
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock),
    }
}

#[test]
fn a_key_echoed_in_any_form_reaches_no_artifact_and_no_output() {
    // The cases whose prompts are short: the test process must stay small, or the
    // runs it starts inherit its peak memory (see MEMORY_BOUND_KIB).
    let ran = run_with(&["--chaos", "key-echo"], SHORT_CASES, None);
    assert!(matches!(ran.code, 1 | 3), "exit {}: {}", ran.code, ran.stderr);
    let mut forms = Vec::new();
    for key in [KEY_A, KEY_B] {
        forms.extend(tenantcheck::sim::chaos::echo_forms(key));
        forms.extend(tenantcheck::sim::chaos::echo_halves(key).map(str::to_owned));
        forms.push(key.chars().map(|c| format!("\\u{:04x}", c as u32)).collect());
    }
    // The sim did echo them: the answers' text and errors hold redactions.
    let transcript = std::fs::read_to_string(ran.dir().join(tenantcheck::report::TRANSCRIPT_FILE)).unwrap();
    assert!(
        transcript.matches(tenantcheck::credential::REDACTED).count() >= 9,
        "nothing was echoed?"
    );
    let mut artifacts = shown(&ran);
    for file in [tenantcheck::report::TRANSCRIPT_FILE, tenantcheck::report::ENVELOPE_FILE] {
        artifacts.push((file.to_owned(), std::fs::read_to_string(ran.dir().join(file)).unwrap()));
    }
    for (name, text) in &artifacts {
        // JSON writes a line break as `\n`; take both out, as a reader would.
        let plain = text.replace("\\n", "").replace(['\n', ' '], "").to_lowercase();
        for form in &forms {
            let form = form.replace(['\n', ' '], "").to_lowercase();
            assert!(!plain.contains(&form), "{name} holds {form}");
        }
    }
}

#[test]
fn escapes_and_markup_from_the_vendor_are_shown_inert_everywhere() {
    let ran = run_with(&["--chaos", "inject"], SHORT_CASES, None);
    assert!(matches!(ran.code, 1 | 3), "exit {}: {}", ran.code, ran.stderr);
    let forbidden = |c: char| {
        (c < ' ' && c != '\n' && c != '\t')
            || c == '\u{7f}'
            || ('\u{80}'..='\u{9f}').contains(&c)
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    for (name, text) in shown(&ran) {
        let bad: Vec<char> = text.chars().filter(|c| forbidden(*c)).collect();
        assert!(bad.is_empty(), "{name} holds {bad:?}");
        if name.ends_with(".html") || name.ends_with(".xml") {
            assert!(
                !text.contains("<script>") && !text.contains("<img"),
                "{name} holds raw markup"
            );
        }
    }
    // The vendor's text did reach what is shown, escaped.
    assert!(ran.stdout.contains("\\u{1b}[2J"), "{}", ran.stdout);
    let md = std::fs::read_to_string(ran.dir().join(tenantcheck::report::MARKDOWN_FILE)).unwrap();
    assert!(
        !md.contains("](http") && !md.contains("![") && md.contains("\\u{1b}"),
        "{md}"
    );
    // The transcript keeps the exact bytes the vendor sent.
    let exact = ran.exchanges.values().any(|l| {
        let ex = &l["exchange"];
        ex["body"]
            .as_str()
            .is_some_and(|b| b.contains(tenantcheck::sim::chaos::INJECTION))
            || ex["content"]
                .as_str()
                .is_some_and(|c| c.contains(tenantcheck::sim::chaos::INJECTION))
    });
    assert!(exact, "the transcript lost the vendor's bytes");
}

/// Leaves out the cases that send long prompts.
const SHORT_CASES: &[&str] = &[
    "--skip",
    "isolation",
    "--skip",
    "context",
    "--skip",
    "cache",
    "--skip",
    "concurrency",
];

/// Chat completions each tenant sent (what these chaos modes answer).
fn per_tenant(ran: &Ran) -> std::collections::BTreeMap<String, usize> {
    let mut n = std::collections::BTreeMap::new();
    let chat = |l: &&serde_json::Value| {
        l["exchange"]["request"]["url"]
            .as_str()
            .is_some_and(|u| u.ends_with("/chat/completions"))
    };
    for l in ran.exchanges.values().filter(chat) {
        *n.entry(l["tenant"].as_str().unwrap().to_owned()).or_default() += 1;
    }
    n
}

#[test]
fn a_vendor_refusing_every_key_after_the_check_stops_the_run_at_once() {
    let ran = run_with(&["--chaos", "unauthorized"], &[], None);
    assert_eq!(ran.code, 2, "{}\n{}", ran.stdout, ran.stderr);
    let counts = per_tenant(&ran);
    let cases: Vec<_> = ran
        .exchanges
        .values()
        .map(|l| (l["case"].clone(), l["tenant"].clone(), l["exchange"]["status"].clone()))
        .collect();
    assert!(counts.values().all(|&n| n < 5), "{counts:?} {cases:?}");
    let refused = ran.report.refused.as_ref().expect("the report says why it stopped");
    assert_eq!(refused.refusal.status, 401);
    assert!(ran.stdout.contains("refused tenant"), "{}", ran.stdout);
    // No case passes over a refused credential. The chaos refuses chat completions
    // only: a case that asked nothing of them (the declared cases send nothing; stored
    // responses have their own endpoint) may pass when it ran before the stop.
    let refused: std::collections::BTreeSet<&str> = ran
        .exchanges
        .values()
        .filter(|l| {
            l["exchange"]["status"] == 401
                || l["exchange"]["request"]["url"]
                    .as_str()
                    .is_some_and(|u| u.ends_with("/chat/completions"))
        })
        .filter_map(|l| l["case"].as_str())
        .collect();
    for c in &ran.report.cases {
        assert!(
            c.outcome.verdict != Verdict::Pass || !refused.contains(c.id.as_str()),
            "{} passed over refused chat completions: {}",
            c.id,
            c.outcome.summary
        );
    }
    assert!(
        ran.report
            .cases
            .iter()
            .any(|c| c.outcome.summary.starts_with("not run: the vendor refused tenant")),
        "{:?}",
        ran.report.cases.iter().map(|c| &c.outcome.summary).collect::<Vec<_>>()
    );
}

#[test]
fn wrong_requests_refused_for_their_credential_leave_errors_semantics_inconclusive() {
    // Every key refused after the check: errors.semantics's wrong requests get 401s
    // with error bodies, which say nothing of whether the vendor judges a request; the
    // first one stops the run, and the case is never a pass.
    let ran = run_with(
        &["--chaos", "unauthorized"],
        &["--exact", "errors.semantics"],
        Some("errors.semantics"),
    );
    assert_eq!(ran.verdict, Verdict::Inconclusive, "{}", ran.summary);
    assert!(
        ran.summary.contains("refused tenant a's credential (HTTP 401)"),
        "{}",
        ran.summary
    );
}

#[test]
fn a_vendor_failing_every_request_stops_the_run_after_the_profiles_count() {
    let ran = run_with(&["--chaos", "server-errors"], &[], None);
    assert!(matches!(ran.code, 1 | 3), "{}\n{}", ran.stdout, ran.stderr);
    let refused = ran.report.refused.as_ref().expect("the report says why it stopped");
    assert_eq!((refused.refusal.status, refused.refusal.count), (500, 20));
    // 20 in a row, and after them no more than the requests already in flight.
    let after = ran
        .exchanges
        .keys()
        .filter(|&&seq| seq > refused.refusal.last_seq)
        .count();
    assert!(after <= 64, "{after} requests after the stop");
    assert!(!refused.unfinished.is_empty());
    for c in &ran.report.cases {
        // A 500 to a request made wrong on purpose is a failure of its own, when the
        // case runs before the stop.
        if c.id != "errors.semantics" {
            assert_ne!(c.outcome.verdict, Verdict::Fail, "{}: {}", c.id, c.outcome.summary);
        }
    }
}
