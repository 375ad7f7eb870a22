//! Helpers shared by the integration tests: temporary folders, the `tenantcheck`
//! binary, and the reference vendor started as a separate process on port 0.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// A temporary folder removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).unwrap();
        let name: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let dir = std::env::temp_dir().join(format!("tenantcheck-{tag}-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // A failed test's files are kept for a look, and named.
        if std::thread::panicking() {
            eprintln!("kept the failed test's files in {}", self.0.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Serves `app` on 127.0.0.1 (a free port) from a thread of its own, for the fakes of
/// vendor APIs; returns the address.
pub fn serve(app: axum::Router) -> std::net::SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    rx.recv().unwrap()
}

/// The `tenantcheck` binary, with no inherited tenant keys.
pub fn tenantcheck() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tenantcheck"));
    cmd.env_remove("TENANTCHECK_KEY_A").env_remove("TENANTCHECK_KEY_B");
    cmd
}

/// `tenantcheck verify RUN/report.dsse.json --key RUN/signing-key.pub.pem`: a run's
/// report checked with the run's own key (and the transcript beside it); add flags.
pub fn verify_run(run_dir: &Path) -> Command {
    let mut cmd = tenantcheck();
    cmd.arg("verify")
        .arg(run_dir.join(tenantcheck::report::ENVELOPE_FILE))
        .arg("--key")
        .arg(run_dir.join(tenantcheck::report::key::PUBLIC_KEY_FILE));
    cmd
}

/// Runs a command and returns its output with stdout and stderr as text.
pub fn output(cmd: &mut Command) -> (Option<i32>, String, String) {
    let Output { status, stdout, stderr } = cmd.output().expect("the binary runs");
    (
        status.code(),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// The reference vendor running as its own process; killed on drop.
pub struct Sim {
    child: Child,
    pub base_url: String,
}

impl Sim {
    /// Starts `tenantcheck sim --listen 127.0.0.1:0` with these keys and extra flags.
    pub fn start(key_a: &str, key_b: &str, flags: &[&str]) -> Self {
        let mut child = tenantcheck()
            .args(["sim", "--listen", "127.0.0.1:0"])
            .args(flags)
            .env("TENANTCHECK_KEY_A", key_a)
            .env("TENANTCHECK_KEY_B", key_b)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the sim starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base_url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://127.0.0.1:"))
            .unwrap_or_else(|| panic!("no address in the sim's first line: {line:?}"))
            .to_owned();
        Sim { child, base_url }
    }

    /// Writes a profile for this sim into `dir` and returns its path.
    pub fn profile(&self, dir: &Path) -> PathBuf {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/vendors/sim.toml"))
            .unwrap()
            .replace("http://127.0.0.1:8080/v1", &self.base_url);
        assert!(text.contains(&self.base_url));
        let path = dir.join("sim-profile.toml");
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Keeps `text` as `target/test-artifacts/NAME` for CI to show (best effort).
pub fn keep_artifact(name: &str, text: &str) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/target/test-artifacts");
    let _ = std::fs::create_dir_all(dir);
    let _ = std::fs::write(format!("{dir}/{name}"), text);
}

/// Every file below `dir`, recursively.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// `tenantcheck run --vendor PROFILE --out RUN_DIR` with the two tenants' keys set.
fn vendor_run(profile: &Path, run_dir: &Path, key_a: &str, key_b: &str) -> Command {
    let mut cmd = tenantcheck();
    cmd.args(["run", "--vendor"])
        .arg(profile)
        .arg("--out")
        .arg(run_dir)
        .env("TENANTCHECK_KEY_A", key_a)
        .env("TENANTCHECK_KEY_B", key_b);
    cmd
}

/// Runs the suite of `profile` into `run_dir` with these keys.
pub fn run_vendor(profile: &Path, run_dir: &Path, key_a: &str, key_b: &str) -> (Option<i32>, String, String) {
    output(&mut vendor_run(profile, run_dir, key_a, key_b))
}

/// Runs one case (`--exact case`) of `profile` into `run_dir` with these keys.
pub fn run_exact(
    profile: &Path,
    run_dir: &Path,
    case: &str,
    key_a: &str,
    key_b: &str,
) -> (Option<i32>, String, String) {
    output(vendor_run(profile, run_dir, key_a, key_b).args(["--exact", case]))
}

/// The report of a run folder, through `verify` with its transcript (the re-check
/// included); panics when it does not verify.
pub fn verified(run_dir: &Path) -> tenantcheck::report::Report {
    use tenantcheck::report::{self, key};
    let envelope = std::fs::read(run_dir.join(report::ENVELOPE_FILE)).unwrap();
    let public = key::read_public(&run_dir.join(key::PUBLIC_KEY_FILE)).unwrap();
    let transcript = std::fs::read(run_dir.join(report::TRANSCRIPT_FILE)).unwrap();
    report::verify(&envelope, &public, Some(&transcript), None, |_| {})
        .expect("the run's own report verifies")
        .report()
        .clone()
}

/// The transcript's exchange lines by sequence number, as JSON.
pub fn transcript_exchanges(run_dir: &Path) -> std::collections::BTreeMap<u64, serde_json::Value> {
    let text = std::fs::read_to_string(run_dir.join(tenantcheck::report::TRANSCRIPT_FILE)).unwrap();
    text.lines()
        .map(|l| {
            let mut v = serde_json::from_str::<serde_json::Value>(l).unwrap();
            // Prompts recorded by reference, as the one reader gives them back.
            if let Some(body) = v.pointer_mut("/exchange/request/body") {
                tenantcheck::recipe::expand(body).unwrap();
            }
            v
        })
        .filter(|v| v["kind"] == "exchange")
        .map(|v| (v["seq"].as_u64().unwrap(), v))
        .collect()
}

/// A report signed by a tool that lies about its transcript: the run's report, changed
/// by `change`, signed again with the run's key and verified with the transcript.
pub fn resigned(run_dir: &Path, change: impl FnOnce(&mut tenantcheck::report::Report)) -> Result<(), String> {
    use tenantcheck::report::{self, key};
    let mut report = verified(run_dir);
    change(&mut report);
    let key = key::read_private(&run_dir.join(key::PRIVATE_KEY_FILE)).unwrap();
    let envelope = serde_json::to_vec(&report.sign(&key)).unwrap();
    let transcript = std::fs::read(run_dir.join(report::TRANSCRIPT_FILE)).unwrap();
    report::verify(&envelope, &key.verifying_key(), Some(&transcript), None, |_| {})
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A run whose transcript a lying tool rewrote: each line (as JSON) changed by
/// `change`, the hash chain recomputed, the report made to name the new transcript,
/// signed again with the run's key and verified with it.
pub fn rechained(run_dir: &Path, change: impl FnOnce(&mut [serde_json::Value])) -> Result<(), String> {
    use sha2::Digest;
    use tenantcheck::report::{self, key};
    let text = std::fs::read_to_string(run_dir.join(report::TRANSCRIPT_FILE)).unwrap();
    let mut lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    change(&mut lines);
    let mut prev = tenantcheck::transcript::GENESIS.to_owned();
    let mut bytes = Vec::new();
    for line in &mut lines {
        line["prev"] = prev.clone().into();
        let body = serde_json::to_vec(line).unwrap();
        prev = hex(&sha2::Sha256::digest(&body));
        bytes.extend_from_slice(&body);
        bytes.push(b'\n');
    }
    let mut report = verified(run_dir);
    report.transcript.summary = tenantcheck::transcript::verify_chain(&bytes).unwrap();
    let key = key::read_private(&run_dir.join(key::PRIVATE_KEY_FILE)).unwrap();
    let envelope = serde_json::to_vec(&report.sign(&key)).unwrap();
    report::verify(&envelope, &key.verifying_key(), Some(&bytes), None, |_| {})
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
