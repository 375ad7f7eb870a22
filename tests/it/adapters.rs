//! Each adapter against a local fake of its API written from the API's public
//! documentation: answers plain and streamed, an auth failure, a context-too-long
//! error, a 429, and the suite's own probes running unchanged through it.

#[path = "fakes/anthropic.rs"]
mod anthropic_fake;
#[path = "fakes/workers_ai.rs"]
mod workers_ai_fake;

use crate::common::{TempDir, output, tenantcheck};
use tenantcheck::adapter::{AnthropicMessages, ChatRequest, InvalidRequest, Provider, WorkersAi};
use tenantcheck::credential::Secret;

const KEY_A: &str = "fake-anthropic-key-a";
const KEY_B: &str = "fake-anthropic-key-b";

fn anthropic(context: usize) -> AnthropicMessages {
    let url = anthropic_fake::start(&[KEY_A, KEY_B], context);
    AnthropicMessages::new(&url, anthropic_fake::MODEL, std::time::Duration::from_secs(10)).unwrap()
}

#[tokio::test]
async fn anthropic_answers_plain_and_streamed_alike() {
    let client = anthropic(200);
    let key = Secret::new(KEY_A);
    let ask = |stream: bool, max_tokens: u32| ChatRequest {
        stream,
        ..ChatRequest::user("alpha beta gamma delta", max_tokens)
    };
    let plain = client.chat(&key, &ask(false, 16)).await;
    let streamed = client.chat(&key, &ask(true, 16)).await;
    for ex in [&plain, &streamed] {
        assert_eq!(ex.status, Some(200), "{ex:?}");
        assert_eq!(ex.content, "You said: alpha beta gamma delta");
        assert_eq!(ex.finish_reason.as_deref(), Some("stop"));
        let u = ex.usage.unwrap();
        assert_eq!((u.prompt_tokens, u.completion_tokens), (4, 6));
        assert!(ex.api_error.is_none());
    }
    assert_eq!(plain.usage.unwrap().cached_tokens, Some(0));
    assert!(streamed.frames.len() >= 8, "{:?}", streamed.frames);
    assert_eq!(streamed.frames[0].event.as_deref(), Some("message_start"));
    assert!(streamed.timings.first_token_ms.is_some());
    assert_eq!(client.stream_problems(&streamed), Vec::<String>::new());

    // Cut at max_tokens: finish reason `length`, and a stream that lost its end is
    // named as broken by the adapter's grammar.
    let cut = client.chat(&key, &ask(true, 3)).await;
    assert_eq!(cut.content, "You said: alpha");
    assert_eq!(cut.finish_reason.as_deref(), Some("length"));
    let mut broken = cut.clone();
    broken.frames.truncate(broken.frames.len() - 2);
    let problems = client.stream_problems(&broken);
    assert!(problems.iter().any(|p| p.contains("message_stop")), "{problems:?}");

    // A cancelled stream stops reading after its first text delta.
    let cancelled = client
        .chat(
            &key,
            &ChatRequest {
                cancel_after: Some(1),
                ..ask(true, 16)
            },
        )
        .await;
    assert!(cancelled.cancelled);
    assert_eq!(cancelled.content, "You");
}

#[tokio::test]
async fn anthropic_refusals_arrive_as_errors_with_their_types() {
    let client = anthropic(200);
    let key = Secret::new(KEY_A);

    let wrong = client
        .chat(&Secret::new("not-a-known-key"), &ChatRequest::user("hi", 8))
        .await;
    assert_eq!(wrong.status, Some(401));
    assert_eq!(wrong.api_error.unwrap().kind.as_deref(), Some("authentication_error"));

    let long = "word ".repeat(250);
    let too_long = client.chat(&key, &ChatRequest::user(long, 8)).await;
    assert_eq!(too_long.status, Some(400));
    let e = too_long.api_error.unwrap();
    assert_eq!(e.kind.as_deref(), Some("invalid_request_error"));
    assert!(
        e.message.contains("prompt is too long: 250 tokens > 200 maximum"),
        "{e:?}"
    );

    let limited = client
        .chat(
            &Secret::new(anthropic_fake::RATE_LIMITED_KEY),
            &ChatRequest::user("hi", 8),
        )
        .await;
    assert_eq!(limited.status, Some(429));
    assert_eq!(limited.headers.get("retry-after").map(String::as_str), Some("7"));
    assert_eq!(limited.api_error.unwrap().kind.as_deref(), Some("rate_limit_error"));

    for (kind, status) in [
        (InvalidRequest::UnknownModel, 404),
        (InvalidRequest::MalformedJson, 400),
        (InvalidRequest::BadParameter, 400),
        (InvalidRequest::EmptyMessages, 400),
        (InvalidRequest::OverLimit { context: 200 }, 400),
    ] {
        let ex = client.invalid(&key, kind, false).await;
        assert_eq!(ex.status, Some(status), "{kind:?}: {ex:?}");
        assert!(ex.api_error.is_some(), "{kind:?}");
    }
    let models = client.list_models(&key).await;
    assert_eq!(models.status, Some(200));
    let stored = client.store(&key, "x", None).await;
    assert!(
        stored
            .transport_error
            .unwrap()
            .message
            .contains("has no stored responses")
    );
}

/// `vendors/anthropic.toml` pointed at a fresh fake (context 4,096), written into `tmp`.
fn anthropic_profile(tmp: &TempDir) -> std::path::PathBuf {
    let url = anthropic_fake::start(&[KEY_A, KEY_B], 4096);
    let profile = tmp.path().join("anthropic.toml");
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/vendors/anthropic.toml"))
        .unwrap()
        .replace("https://api.anthropic.com/v1", &url)
        .replace("claude-sonnet-4-5", anthropic_fake::MODEL)
        .replace("context_window = 200000", "context_window = 4096");
    std::fs::write(&profile, text).unwrap();
    profile
}

/// Runs `cases` one by one through `profile` with these keys in `env`; each must pass,
/// its requests must have gone to `endpoint`, and no key may be in the transcript.
fn cases_pass_through(
    tmp: &TempDir,
    profile: &std::path::Path,
    env: [(&str, &str); 2],
    endpoint: &str,
    cases: &[&str],
) {
    let (code, stdout, stderr) = output(tenantcheck().args(["run", "--vendor"]).arg(profile).arg("--list"));
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    for case in cases {
        assert!(stdout.contains(case), "{stdout}");
        let run_dir = tmp.path().join(case);
        let (code, stdout, stderr) = output(
            tenantcheck()
                .args(["run", "--vendor"])
                .arg(profile)
                .arg("--out")
                .arg(&run_dir)
                .args(["--exact", case])
                .envs(env),
        );
        assert_eq!(code, Some(0), "{case}\n{stdout}\n{stderr}");
        let report = crate::common::verified(&run_dir);
        let c = report.cases.iter().find(|c| c.id == *case).unwrap();
        assert_eq!(
            c.outcome.verdict,
            tenantcheck::outcome::Verdict::Pass,
            "{}",
            c.outcome.summary
        );
        let transcript = std::fs::read_to_string(run_dir.join(tenantcheck::report::TRANSCRIPT_FILE)).unwrap();
        assert!(transcript.contains(endpoint), "requests went to {endpoint}");
        assert!(env.iter().all(|(_, key)| !transcript.contains(key)));
    }
}

#[test]
fn the_suites_probes_run_unchanged_through_the_anthropic_adapter() {
    let tmp = TempDir::new("anthropic");
    let profile = anthropic_profile(&tmp);
    cases_pass_through(
        &tmp,
        &profile,
        [("ANTHROPIC_KEY_TENANT_A", KEY_A), ("ANTHROPIC_KEY_TENANT_B", KEY_B)],
        "/messages",
        &["errors.semantics", "stream.integrity"],
    );
}

const CF_A: &str = "fake-cloudflare-token-a";
const CF_B: &str = "fake-cloudflare-token-b";

fn workers_ai(context: usize) -> WorkersAi {
    let url = workers_ai_fake::start(&[CF_A, CF_B], context);
    WorkersAi::new(&url, workers_ai_fake::MODEL, std::time::Duration::from_secs(10)).unwrap()
}

#[tokio::test]
async fn workers_ai_answers_plain_and_streamed_alike_without_a_finish_reason() {
    let client = workers_ai(200);
    let key = Secret::new(CF_A);
    let ask = |stream: bool, max_tokens: u32| ChatRequest {
        stream,
        ..ChatRequest::user("alpha beta gamma delta", max_tokens)
    };
    let plain = client.chat(&key, &ask(false, 16)).await;
    let streamed = client.chat(&key, &ask(true, 16)).await;
    for ex in [&plain, &streamed] {
        assert_eq!(ex.status, Some(200), "{ex:?}");
        assert_eq!(ex.content, "You said: alpha beta gamma delta");
        assert_eq!(ex.finish_reason, None, "the native API reports none");
        let u = ex.usage.unwrap();
        assert_eq!((u.prompt_tokens, u.completion_tokens), (4, 6));
        assert!(ex.api_error.is_none());
    }
    assert!(!client.reports_finish_reason());
    assert_eq!(streamed.frames.len(), 8, "{:?}", streamed.frames);
    assert!(streamed.timings.first_token_ms.is_some());
    assert_eq!(client.stream_problems(&streamed), Vec::<String>::new());
    let mut broken = streamed.clone();
    broken.frames.pop();
    assert_eq!(client.stream_problems(&broken), vec!["no terminal [DONE] frame"]);
    broken.frames.pop();
    broken.frames.push(broken.frames[0].clone());
    broken.frames[0].data = "{\"result\": 1}".into();
    let problems = client.stream_problems(&broken);
    assert!(
        problems.iter().any(|p| p.contains("frame 0 has neither")),
        "{problems:?}"
    );

    let cancelled = client
        .chat(
            &key,
            &ChatRequest {
                cancel_after: Some(1),
                ..ask(true, 16)
            },
        )
        .await;
    assert!(cancelled.cancelled);
    assert_eq!(cancelled.content, "You");
}

#[tokio::test]
async fn workers_ai_refusals_arrive_from_the_envelope_with_their_codes() {
    let client = workers_ai(200);
    let key = Secret::new(CF_A);
    let code = |ex: &tenantcheck::adapter::Exchange| ex.api_error.as_ref().and_then(|e| e.code.clone());

    let wrong = client
        .chat(&Secret::new("not-a-known-token"), &ChatRequest::user("hi", 8))
        .await;
    assert_eq!((wrong.status, code(&wrong).as_deref()), (Some(401), Some("10000")));
    assert_eq!(wrong.api_error.unwrap().message, "Authentication error");

    let too_long = client.chat(&key, &ChatRequest::user("word ".repeat(250), 8)).await;
    assert_eq!((too_long.status, code(&too_long).as_deref()), (Some(400), Some("5021")));
    assert!(
        too_long
            .api_error
            .unwrap()
            .message
            .contains("exceeded this model context window limit (200)")
    );

    let limited = client
        .chat(
            &Secret::new(workers_ai_fake::RATE_LIMITED_KEY),
            &ChatRequest::user("hi", 8),
        )
        .await;
    assert_eq!((limited.status, code(&limited).as_deref()), (Some(429), Some("3040")));

    for (kind, status) in [
        (InvalidRequest::UnknownModel, 404),
        (InvalidRequest::MalformedJson, 400),
        (InvalidRequest::BadParameter, 400),
        (InvalidRequest::EmptyMessages, 400),
        (InvalidRequest::OverLimit { context: 200 }, 400),
    ] {
        let ex = client.invalid(&key, kind, false).await;
        assert_eq!(ex.status, Some(status), "{kind:?}: {ex:?}");
        assert!(ex.api_error.is_some(), "{kind:?}");
    }
    let models = client.list_models(&key).await;
    assert_eq!(models.status, Some(200));
    assert!(client.store(&key, "x", None).await.transport_error.is_some());
}

#[test]
fn the_suites_probes_run_unchanged_through_the_workers_ai_adapter() {
    let tmp = TempDir::new("workers-ai");
    let url = workers_ai_fake::start(&[CF_A, CF_B], 4096);
    let profile = tmp.path().join("workers-ai-native.toml");
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/vendors/workers-ai-native.toml"))
        .unwrap()
        .replace("https://api.cloudflare.com/client/v4/accounts/ACCOUNT_ID/ai", &url)
        .replace("@cf/meta/llama-3.1-8b-instruct", workers_ai_fake::MODEL)
        .replace("context_window = 8192", "context_window = 4096");
    std::fs::write(&profile, text).unwrap();
    cases_pass_through(
        &tmp,
        &profile,
        [("CLOUDFLARE_TOKEN_TENANT_A", CF_A), ("CLOUDFLARE_TOKEN_TENANT_B", CF_B)],
        "/ai/run/@cf/fake/chat-1",
        &["errors.semantics", "stream.integrity", "usage.consistency"],
    );
}

#[tokio::test]
async fn a_command_that_breaks_or_stalls_gives_transport_errors_not_hangs() {
    use tenantcheck::adapter::{CommandAdapter, TransportErrorKind};
    let key = Secret::new("command-test-key");
    let argv = |script: &str| vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()];
    let dies = CommandAdapter::new(
        argv("read line; echo not a reply; echo gone >&2; exit 3"),
        std::time::Duration::from_secs(10),
    );
    let ex = dies.list_models(&key).await;
    let e = ex.transport_error.expect("no answer");
    assert_eq!(e.kind, TransportErrorKind::Body);
    assert!(e.message.contains("ended before it answered"), "{e:?}");
    let stalls = CommandAdapter::new(argv("cat > /dev/null"), std::time::Duration::from_millis(300));
    let ex = stalls.chat(&key, &ChatRequest::user("hi", 8)).await;
    assert_eq!(ex.transport_error.unwrap().kind, TransportErrorKind::Timeout);
    let missing = CommandAdapter::new(vec!["/nonexistent/program".into()], std::time::Duration::from_secs(1));
    let ex = missing.list_models(&key).await;
    assert_eq!(ex.transport_error.unwrap().kind, TransportErrorKind::Connect);
    // The credential travels to the program only: never into the recorded request.
    assert!(!serde_json::to_string(&ex.request).unwrap().contains("command-test-key"));
}

#[test]
fn the_whole_suite_runs_through_the_command_adapter_example() {
    let sim = crate::common::Sim::start("command-key-a-1", "command-key-b-1", &[]);
    let tmp = TempDir::new("command");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/command-adapter.py");
    let profile = sim.profile(tmp.path());
    let text = std::fs::read_to_string(&profile)
        .unwrap()
        .replace(
            "adapter = \"openai-chat\"",
            &format!(
                "adapter = \"command\"\ncommand = [\"python3\", \"{script}\", \"{}\", \"sim-1\"]",
                sim.base_url
            ),
        )
        .replace("stored_responses = true", "");
    std::fs::write(&profile, text).unwrap();
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = crate::common::run_vendor(&profile, &run_dir, "command-key-a-1", "command-key-b-1");
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let report = crate::common::verified(&run_dir);
    for c in &report.cases {
        let want = if c.id == "objects.cross-tenant" || c.id == "metadata.cross-tenant" {
            tenantcheck::outcome::Verdict::Skipped
        } else {
            tenantcheck::outcome::Verdict::Pass
        };
        assert_eq!(c.outcome.verdict, want, "{}: {}", c.id, c.outcome.summary);
    }
    let transcript = std::fs::read_to_string(run_dir.join(tenantcheck::report::TRANSCRIPT_FILE)).unwrap();
    assert!(transcript.contains("command:chat"));
    assert!(!transcript.contains("command-key-a-1") && !transcript.contains("command-key-b-1"));
}

#[tokio::test]
async fn the_command_adapter_passes_refusals_through_with_their_status() {
    use tenantcheck::adapter::CommandAdapter;
    let sim = crate::common::Sim::start("command-key-c-1", "command-key-d-1", &["--context", "256"]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/command-adapter.py");
    let adapter = CommandAdapter::new(
        vec!["python3".into(), script.into(), sim.base_url.clone(), "sim-1".into()],
        std::time::Duration::from_secs(30),
    );
    let ok = adapter
        .chat(
            &Secret::new("command-key-c-1"),
            &ChatRequest {
                stream: true,
                ..ChatRequest::user("one two three", 16)
            },
        )
        .await;
    assert_eq!(ok.status, Some(200), "{ok:?}");
    assert_eq!(ok.content, "one two three");
    assert!(ok.frames.len() >= 2 && adapter.stream_problems(&ok).is_empty());
    let wrong = adapter.list_models(&Secret::new("not-a-known-key")).await;
    assert_eq!(wrong.status, Some(401));
    assert!(wrong.api_error.is_some());
    let long = adapter
        .chat(
            &Secret::new("command-key-c-1"),
            &ChatRequest::user("word ".repeat(400), 16),
        )
        .await;
    assert_eq!(long.status, Some(400));
    assert_eq!(long.api_error.unwrap().code.as_deref(), Some("context_length_exceeded"));
}

#[test]
fn a_429_is_retried_after_its_retry_after_and_both_attempts_are_evidence() {
    let tmp = TempDir::new("retry");
    let profile = anthropic_profile(&tmp);
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = output(
        tenantcheck()
            .args(["run", "--vendor"])
            .arg(&profile)
            .arg("--out")
            .arg(&run_dir)
            .args(["--exact", "stream.integrity"])
            .env("ANTHROPIC_KEY_TENANT_A", anthropic_fake::FLAKY_KEY)
            .env("ANTHROPIC_KEY_TENANT_B", KEY_B),
    );
    assert_eq!(code, Some(0), "the run goes on after the retry\n{stdout}\n{stderr}");
    let lines = crate::common::transcript_exchanges(&run_dir);
    let first: Vec<_> = lines.values().take(2).collect();
    assert_eq!(first[0]["exchange"]["status"], 429, "{:?}", first[0]);
    assert_eq!(first[0]["exchange"]["headers"]["retry-after"], "1");
    assert_eq!(first[1]["exchange"]["status"], 200, "{:?}", first[1]);
    assert_eq!(
        first[0]["exchange"]["request"], first[1]["exchange"]["request"],
        "the same request again"
    );
    let at = |i: usize| humantime::parse_rfc3339(first[i]["at"].as_str().unwrap()).unwrap();
    let waited = at(1).duration_since(at(0)).unwrap();
    assert!(
        waited >= std::time::Duration::from_millis(900),
        "waited {waited:?} of retry-after: 1"
    );
    let _ = crate::common::verified(&run_dir);
}

/// A listener on another loopback address (127.0.0.2) that records whatever reaches
/// it: no request to the vendor may ever end up here.
struct Elsewhere {
    url: String,
    got: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Elsewhere {
    fn start() -> Self {
        use std::io::Read;
        let listener = std::net::TcpListener::bind("127.0.0.2:0").expect("127.0.0.2 is loopback on Linux");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let got: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let seen = got.clone();
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                conn.set_read_timeout(Some(std::time::Duration::from_millis(500)))
                    .unwrap();
                let mut buf = vec![0u8; 65536];
                let n = conn.read(&mut buf).unwrap_or(0);
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        });
        Elsewhere { url, got }
    }

    fn requests(&self) -> Vec<String> {
        self.got.lock().unwrap().clone()
    }
}

/// A vendor whose every answer (or, with `posts_only`, every POST's) redirects to the
/// same path on `to`, with statuses 301, 302, 303, 307 and 308 in turn; other GETs get
/// an empty 200 JSON answer. Returns its base URL.
fn redirecting(to: &str, posts_only: bool) -> String {
    use axum::http::{Method, StatusCode, header};
    use axum::response::IntoResponse;
    let to = to.to_owned();
    let turn = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let app = axum::Router::new().fallback(move |method: Method, uri: axum::http::Uri| {
        let to = to.clone();
        let turn = turn.clone();
        async move {
            if method == Method::GET && posts_only {
                return (
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, "application/json")],
                    "{\"data\":[]}",
                )
                    .into_response();
            }
            let statuses = [301, 302, 303, 307, 308];
            let status = statuses[turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % statuses.len()];
            let location = format!("{to}{}?api_key=stolen", uri.path());
            (
                StatusCode::from_u16(status).unwrap(),
                [(header::LOCATION, location)],
                "moved",
            )
                .into_response()
        }
    });
    format!("http://{}/v1", crate::common::serve(app))
}

/// An adapter's name, its profile, and its tenants' variables with their values.
type Profiled = (&'static str, std::path::PathBuf, Vec<(String, String)>);

/// Each adapter's profile pointed at `url`, with its tenants' variables; for the
/// command adapter, the example program speaking to `url`.
fn profiles_for(url: &str, tmp: &TempDir) -> Vec<Profiled> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/vendors/");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/command-adapter.py");
    let mut out = Vec::new();
    for (name, file) in [
        ("openai-chat", "sim.toml"),
        ("anthropic", "anthropic.toml"),
        ("workers-ai", "workers-ai-native.toml"),
        ("command", "sim.toml"),
        ("azure-openai", "azure-openai.toml"),
    ] {
        let text = std::fs::read_to_string(format!("{dir}{file}")).unwrap();
        let mut text: String = text
            .lines()
            .map(|l| match l.starts_with("base_url = ") {
                true => format!("base_url = \"{url}\""),
                false => l.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        if name == "command" {
            text = text
                .replace(
                    "adapter = \"openai-chat\"",
                    &format!("adapter = \"command\"\ncommand = [\"python3\", \"{script}\", \"{url}\", \"sim-1\"]"),
                )
                .replace("stored_responses = true", "");
        }
        let envs: Vec<(String, String)> = text
            .lines()
            .filter_map(|l| l.strip_prefix("credential_env = \""))
            .map(|v| v.trim_end_matches('"').to_owned())
            .enumerate()
            .map(|(i, var)| (var, format!("origin-test-{name}-secret-{i}-0123456789")))
            .collect();
        let path = tmp.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        out.push((name, path, envs));
    }
    out
}

#[test]
fn no_adapter_follows_a_redirect_or_takes_a_credential_off_the_vendors_origin() {
    let tmp = TempDir::new("origin");
    let elsewhere = Elsewhere::start();
    // Everything redirects: the credential check refuses to go on.
    let all = redirecting(&elsewhere.url, false);
    for (name, profile, envs) in profiles_for(&all, &tmp) {
        let (code, stdout, stderr) = output(
            tenantcheck()
                .args(["run", "--vendor"])
                .arg(&profile)
                .arg("--out")
                .arg(tmp.path().join(format!("{name}-all")))
                .envs(envs.clone()),
        );
        assert_eq!(code, Some(2), "{name}: {stdout}\n{stderr}");
        assert!(
            stderr.contains("follows no redirect") || stderr.contains("HTTP 30"),
            "{name}: {stderr}"
        );
        for (_, secret) in &envs {
            assert!(!stdout.contains(secret.as_str()) && !stderr.contains(secret.as_str()));
        }
    }
    // Chat requests redirect: every case that meets one fails, naming it.
    let posts = redirecting(&elsewhere.url, true);
    for (name, profile, envs) in profiles_for(&posts, &tmp) {
        let run_dir = tmp.path().join(format!("{name}-posts"));
        let (code, stdout, stderr) = output(
            tenantcheck()
                .args(["run", "--vendor"])
                .arg(&profile)
                .arg("--out")
                .arg(&run_dir)
                .args(["--exact", "usage.consistency"])
                .envs(envs.clone()),
        );
        assert_eq!(code, Some(1), "{name}: {stdout}\n{stderr}");
        let report = crate::common::verified(&run_dir);
        let case = report.cases.iter().find(|c| c.id == "usage.consistency").unwrap();
        assert!(
            case.outcome
                .findings
                .iter()
                .any(|f| f.code == tenantcheck::outcome::FindingCode::Redirected && f.message.contains(&elsewhere.url)),
            "{name}: {}",
            case.outcome.summary
        );
        let transcript = std::fs::read_to_string(run_dir.join(tenantcheck::report::TRANSCRIPT_FILE)).unwrap();
        for (_, secret) in &envs {
            assert!(!transcript.contains(secret.as_str()), "{name}");
        }
    }
    let got = elsewhere.requests();
    assert!(got.is_empty(), "requests reached the other origin: {got:?}");
}

/// What a listener on 127.0.0.1 saw of one chat request's headers (lowercase names),
/// sent by an OpenAI-chat client built from a profile with `user_agent`.
async fn headers_sent(user_agent: Option<&str>) -> Vec<(String, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        let body = r#"{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#;
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        socket.write_all(answer.as_bytes()).await.unwrap();
        String::from_utf8_lossy(&seen).into_owned()
    });
    let mut text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/vendors/sim.toml"))
        .unwrap()
        .replace("http://127.0.0.1:8080/v1", &url);
    if let Some(agent) = user_agent {
        text = format!("user_agent = {agent:?}\n{text}");
    }
    let profile = tenantcheck::vendor::from_toml(&text, std::path::Path::new("ua.toml")).unwrap();
    let client = tenantcheck::adapter::provider(&profile).unwrap();
    let ex = client
        .chat(&Secret::new("ua-test-key-0123456789"), &ChatRequest::user("hi", 4))
        .await;
    assert_eq!(ex.status, Some(200), "{ex:?}");
    let raw = server.await.unwrap();
    raw.lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect()
}

/// Nothing a request carries names tenantcheck: by default no `User-Agent` at all, and
/// the profile's `user_agent` (what the buyer's own clients send) where it gives one.
#[tokio::test]
async fn requests_carry_the_profiles_user_agent_and_never_name_the_tool() {
    let plain = headers_sent(None).await;
    assert!(!plain.iter().any(|(n, _)| n == "user-agent"), "{plain:?}");
    let set = headers_sent(Some("OpenAI/Python 1.109.1")).await;
    assert!(
        set.contains(&("user-agent".to_owned(), "OpenAI/Python 1.109.1".to_owned())),
        "{set:?}"
    );
    for (name, value) in plain.iter().chain(&set) {
        assert!(
            !name.contains("tenantcheck") && !value.to_lowercase().contains("tenantcheck"),
            "{name}: {value}"
        );
    }
}

/// The reference vendor behind Azure OpenAI's API (`sim --api azure`), and a profile
/// for it from `vendors/sim.toml`: the deployment URL form with the `api-key` header,
/// or (`v1`) the `/openai/v1/` form with an Entra-style bearer token.
fn azure_profile(sim: &crate::common::Sim, tmp: &TempDir, v1: bool) -> std::path::PathBuf {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/vendors/sim.toml"))
        .unwrap()
        .replace("adapter = \"openai-chat\"", "adapter = \"azure-openai\"")
        .replace("http://127.0.0.1:8080/v1", &sim.base_url)
        .replace("stored_responses = true\n", "");
    let azure = if v1 {
        "\n[azure]\nauth = \"entra\"\n"
    } else {
        "\n[azure]\ndeployment = \"sim-1\"\napi_version = \"2024-10-21\"\n"
    };
    let path = tmp.path().join(if v1 { "azure-v1.toml" } else { "azure.toml" });
    std::fs::write(&path, text + azure).unwrap();
    path
}

/// The whole suite through the Azure OpenAI dialect gives the verdicts it gives through
/// `openai-chat`: an honest vendor passes (stored responses skipped: the profile says
/// the API keeps none), stale pages fail isolation, boundary and recall; the stream's
/// first chunk (the prompt's content-filter verdict, an empty id, no choices) is
/// Azure's grammar, not a second id; no key reaches an artifact.
#[test]
fn the_suite_runs_through_the_azure_openai_dialect_with_the_same_verdicts() {
    use tenantcheck::outcome::Verdict;
    let tmp = TempDir::new("azure");
    for (flags, v1) in [(&[][..], false), (&["--fault", "stale-pages"][..], true)] {
        let sim = crate::common::Sim::start(KEY_A, KEY_B, &[&["--api", "azure"], flags].concat());
        let profile = azure_profile(&sim, &tmp, v1);
        let run_dir = tmp.path().join(if v1 { "stale-v1" } else { "healthy" });
        let (code, stdout, stderr) = crate::common::run_vendor(&profile, &run_dir, KEY_A, KEY_B);
        let report = crate::common::verified(&run_dir);
        let verdict = |id: &str| report.cases.iter().find(|c| c.id == id).unwrap().outcome.verdict;
        if flags.is_empty() {
            assert_eq!(code, Some(0), "{stdout}{stderr}");
            assert_eq!(verdict("objects.cross-tenant"), Verdict::Skipped);
            assert_eq!(verdict("stream.integrity"), Verdict::Pass);
        } else {
            assert_eq!(code, Some(1), "{stdout}{stderr}");
            for id in ["isolation.canary-residue", "context.boundary", "context.recall"] {
                assert_eq!(verdict(id), Verdict::Fail, "{id}\n{stdout}");
            }
        }
        let transcript = std::fs::read_to_string(run_dir.join(tenantcheck::report::TRANSCRIPT_FILE)).unwrap();
        let path = if v1 {
            "/openai/v1/chat/completions"
        } else {
            "/openai/deployments/sim-1/chat/completions?api-version=2024-10-21"
        };
        assert!(transcript.contains(path), "requests went to {path}");
        assert!(
            transcript.contains("prompt_filter_results"),
            "Azure's first stream chunk was read"
        );
        for file in crate::common::files(&run_dir) {
            let bytes = std::fs::read(&file).unwrap();
            let text = String::from_utf8_lossy(&bytes);
            assert!(
                !text.contains(KEY_A) && !text.contains(KEY_B),
                "a key in {}",
                file.display()
            );
        }
    }
}

#[test]
fn an_azure_profile_names_what_its_url_form_lacks() {
    let tmp = TempDir::new("azure-profile");
    let sim = crate::common::Sim::start(KEY_A, KEY_B, &["--api", "azure"]);
    let profile = azure_profile(&sim, &tmp, false);
    let text = std::fs::read_to_string(&profile)
        .unwrap()
        .replace("api_version = \"2024-10-21\"\n", "");
    std::fs::write(&profile, text).unwrap();
    let (code, _, stderr) = output(tenantcheck().args(["run", "--vendor"]).arg(&profile).arg("--list"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("azure.api_version") && stderr.contains("fix:"),
        "{stderr}"
    );
    // The deployment form without an api-version is a 404 at Azure, and at the sim.
    let answer = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            &format!("api-key: {KEY_A}"),
        ])
        .arg(format!("{}/openai/deployments/sim-1/chat/completions", sim.base_url))
        .args(["-d", "{}"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&answer.stdout), "404");
}
