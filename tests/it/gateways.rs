//! The suite through a real gateway nobody on this project wrote: LiteLLM's proxy
//! (`litellm[proxy]` 1.108.7, installed by `tests/engines/litellm.sh`) in front of the
//! reference vendor, on 127.0.0.1. Each test starts the reference vendor and the proxy
//! itself, with one of the configurations in `tests/engines/litellm/`: two caller keys,
//! each its own user and team (`custom_auth.py`; any other key, or none, 401), and every
//! caller forwarded upstream with the one upstream key, as gateways do. Ignored by a
//! plain `cargo test`; CI runs them with `TENANTCHECK_LITELLM` naming the command:
//!
//! ```sh
//! bash tests/engines/litellm.sh install
//! TENANTCHECK_LITELLM=$(bash tests/engines/litellm.sh bin) cargo test --test it gateways:: -- --ignored
//! ```
//!
//! Three configurations, as a vendor would deploy the proxy:
//! 1. no cache anywhere: an honest gateway, every case passes;
//! 2. the proxy's response cache on (`cache: true`, in memory): it keys a request by
//!    what it asks, not by who asks, so tenant b gets tenant a's answer;
//! 3. no response cache, the upstream's prompt-prefix cache on: the upstream keeps it
//!    per key, and one upstream key for every caller makes it one cache for all.
//!
//! `docs/real-engines.md` records the runs.

use crate::common::{Sim, TempDir, output, tenantcheck, verified};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use tenantcheck::outcome::{FindingCode, Verdict};
use tenantcheck::report::Report;

/// The callers' keys, as the gateway knows them (never the upstream's).
const KEY_A: &str = "gateway-caller-key-a-7f3e";
const KEY_B: &str = "gateway-caller-key-b-91c2";
/// The one key the gateway sends upstream for every caller.
const UPSTREAM_KEY: &str = "gateway-upstream-key-5d08";

/// LiteLLM's proxy as its own process; killed on drop.
struct Proxy {
    child: Child,
    base_url: String,
}

impl Proxy {
    /// Starts `litellm --config CONFIG` on a free port of 127.0.0.1 in front of
    /// `upstream`, its log in `log`, and waits until it answers.
    fn start(config: &str, upstream: &Sim, log: &Path) -> Proxy {
        let bin = std::env::var("TENANTCHECK_LITELLM")
            .expect("TENANTCHECK_LITELLM names the litellm command (bash tests/engines/litellm.sh bin)");
        let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/engines/litellm"));
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log_file = std::fs::File::create(log).unwrap();
        let child = std::process::Command::new(bin)
            .arg("--config")
            .arg(dir.join(config))
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            // custom_auth.py is imported from the configuration's folder.
            .current_dir(&dir)
            // The proxy refuses to start without a master key; nothing here uses it.
            .env("LITELLM_MASTER_KEY", format!("sk-unused-{:016x}", rand_u64()))
            .env("TENANTCHECK_GATEWAY_KEY_A", KEY_A)
            .env("TENANTCHECK_GATEWAY_KEY_B", KEY_B)
            .env("TENANTCHECK_GATEWAY_UPSTREAM_KEY", UPSTREAM_KEY)
            .env("TENANTCHECK_GATEWAY_UPSTREAM_URL", &upstream.base_url)
            .env("LITELLM_TELEMETRY", "False")
            .env("NO_DOCKER", "1")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("litellm starts");
        let mut proxy = Proxy {
            child,
            base_url: format!("http://127.0.0.1:{port}/v1"),
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = proxy.child.try_wait().unwrap() {
                panic!(
                    "litellm exited ({status}) before it answered:\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            if live(port) {
                return proxy;
            }
            assert!(
                Instant::now() < deadline,
                "litellm did not answer in 120 s:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the proxy on `port` answers its liveness route 200.
fn live(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!("GET /health/liveliness HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.ends_with(b" 200")
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::process::id())
}

/// Starts the reference vendor with `sim_flags` and one tenant (the gateway's upstream
/// key), the proxy with `config` in front of it, runs the whole suite through the proxy
/// as two tenants, and returns the exit code, the output and the verified report.
fn through_litellm(name: &str, config: &str, sim_flags: &[&str]) -> (Option<i32>, String, Report) {
    let tmp = TempDir::new(name);
    let mut flags = vec!["--tenant", "gateway=TENANTCHECK_KEY_A"];
    flags.extend_from_slice(sim_flags);
    let upstream = Sim::start(UPSTREAM_KEY, "unused-key-b-0000", &flags);
    let proxy = Proxy::start(config, &upstream, &tmp.path().join("litellm.log"));
    let profile = tmp.path().join("litellm.toml");
    std::fs::write(
        &profile,
        format!(
            r#"name = "LiteLLM proxy in front of the reference vendor ({config})"
adapter = "openai-chat"
base_url = "{}"
model = "sim-1"
context_window = 8192
request_timeout_secs = 60
max_concurrency = 16
tokenizer = "tenantcheck-sim"

[[tenants]]
label = "a"
credential_env = "TENANTCHECK_GATEWAY_KEY_A"

[[tenants]]
label = "b"
credential_env = "TENANTCHECK_GATEWAY_KEY_B"
"#,
            proxy.base_url
        ),
    )
    .unwrap();
    let run_dir = tmp.path().join("run");
    let (code, stdout, stderr) = output(
        tenantcheck()
            .args(["run", "--vendor"])
            .arg(&profile)
            .arg("--out")
            .arg(&run_dir)
            .env("TENANTCHECK_GATEWAY_KEY_A", KEY_A)
            .env("TENANTCHECK_GATEWAY_KEY_B", KEY_B),
    );
    println!("{stdout}");
    crate::common::keep_artifact(&format!("litellm-{name}.txt"), &stdout);
    let report = verified(&run_dir);
    for (what, text) in [("stdout", &stdout), ("stderr", &stderr)] {
        for key in [KEY_A, KEY_B, UPSTREAM_KEY] {
            assert!(!text.contains(key), "a key in the run's {what}");
        }
    }
    (code, format!("{stdout}\n{stderr}"), report)
}

/// The verdict and summary of case `id`.
fn verdict<'a>(report: &'a Report, id: &str) -> (Verdict, &'a str, Vec<FindingCode>) {
    let c = report.cases.iter().find(|c| c.id == id).unwrap();
    (
        c.outcome.verdict,
        &c.outcome.summary,
        c.outcome.findings.iter().map(|f| f.code).collect(),
    )
}

/// The cases a profile without declarations or stored responses cannot run.
const SKIPPED: &[&str] = &["declared.advisories", "declared.kv-pool", "objects.cross-tenant"];

/// Every case but `failing` and the skipped ones passed.
fn others_pass(report: &Report, failing: &[&str]) {
    for c in &report.cases {
        if failing.contains(&c.id.as_str()) {
            continue;
        }
        let expected = if SKIPPED.contains(&c.id.as_str()) {
            Verdict::Skipped
        } else {
            Verdict::Pass
        };
        assert_eq!(c.outcome.verdict, expected, "{}: {}", c.id, c.outcome.summary);
    }
}

#[test]
#[ignore = "needs LiteLLM's proxy (TENANTCHECK_LITELLM; see the file's doc)"]
fn an_honest_litellm_gateway_passes_every_case() {
    let (code, out, report) = through_litellm("honest", "config.yaml", &["--prefix-cache", "off"]);
    assert_eq!(code, Some(0), "{out}");
    others_pass(&report, &[]);
    // The metadata case asked endpoints the proxy does not have: 404 to everyone.
    let (_, why, _) = verdict(&report, "metadata.cross-tenant");
    assert!(why.contains("none answered another key or no key"), "{why}");
    // No response cache, and the pass says what it could not rule out.
    let (_, why, _) = verdict(&report, "cache.response-reuse");
    assert!(why.contains("each got an answer of its own"), "{why}");
}

#[test]
#[ignore = "needs LiteLLM's proxy (TENANTCHECK_LITELLM; see the file's doc)"]
fn litellms_response_cache_serves_one_tenant_anothers_answer() {
    let (code, out, report) = through_litellm(
        "response-cache",
        "config-response-cache.yaml",
        &["--prefix-cache", "off"],
    );
    assert_eq!(code, Some(1), "{out}");
    let (v, why, codes) = verdict(&report, "cache.response-reuse");
    assert_eq!(v, Verdict::Fail, "{why}");
    assert!(codes.contains(&FindingCode::ResponseReused), "{codes:?}: {why}");
    assert!(why.contains("byte for byte tenant a's request"), "{why}");
    others_pass(&report, &["cache.response-reuse"]);
}

#[test]
#[ignore = "needs LiteLLM's proxy (TENANTCHECK_LITELLM; see the file's doc)"]
fn one_upstream_key_for_every_caller_shares_the_upstreams_prefix_cache() {
    // The reference vendor's default prefix cache is per key: behind the gateway
    // there is one key.
    let (code, out, report) = through_litellm("one-upstream-key", "config.yaml", &[]);
    assert_eq!(code, Some(1), "{out}");
    let (v, why, codes) = verdict(&report, "cache.cross-tenant-timing");
    assert_eq!(v, Verdict::Fail, "{why}");
    assert!(codes.contains(&FindingCode::SharedPrefixCache), "{codes:?}: {why}");
    assert!(why.contains("usage reported the shared prefix cached"), "{why}");
    let (v, why, codes) = verdict(&report, "cache.prefix-extraction");
    assert_eq!(v, Verdict::Fail, "{why}");
    assert!(codes.contains(&FindingCode::PrefixExtracted), "{codes:?}: {why}");
    assert!(why.contains("reading the reuse counter"), "{why}");
    others_pass(&report, &["cache.cross-tenant-timing", "cache.prefix-extraction"]);
}
