//! What the benchmarks that run the suite share: reading a run folder back through
//! `verify`.

use std::path::Path;
use tenantcheck::report::{self, VerifiedReport, key};

/// The report of run folder `out` as `verify` re-judges it from its transcript, and
/// the transcript; panics with the run's exit status and standard error when there is
/// no report, and when it does not verify.
pub fn verified(out: &Path, run: &std::process::Output) -> (VerifiedReport, Vec<u8>) {
    let envelope = std::fs::read(out.join(report::ENVELOPE_FILE)).unwrap_or_else(|e| {
        panic!(
            "no report in {} ({e}); exit {:?}\n{}",
            out.display(),
            run.status.code(),
            String::from_utf8_lossy(&run.stderr)
        )
    });
    let public = key::read_public(&out.join(key::PUBLIC_KEY_FILE)).expect("the run's public key");
    let transcript = std::fs::read(out.join(report::TRANSCRIPT_FILE)).expect("the transcript");
    let verified = report::verify(&envelope, &public, Some(&transcript), None, |_| {}).expect("the report verifies");
    (verified, transcript)
}

/// Calls `run(i)` for every `i` below `runs`, `jobs` at once (a run mostly waits on the
/// vendor), and returns what each gave, in the order they finished.
pub fn in_parallel<T: Send>(runs: usize, jobs: usize, run: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if i >= runs {
                        break;
                    }
                    let result = run(i);
                    done.lock().expect("no run panicked holding the list").push(result);
                }
            });
        }
    });
    done.into_inner().expect("no run panicked holding the list")
}

/// Starts the reference vendor (`tenantcheck sim --listen 127.0.0.1:0 SIM_FLAGS`),
/// runs `tenantcheck run --vendor PROFILE --out DIR/run --quiet RUN_ARGS` against it
/// (`vendors/sim.toml` pointed at it, its `context_window` set to `context` where
/// given), stops it, and returns the run's output and folder.
#[allow(dead_code, reason = "false_match runs the embedded default instead")]
pub fn against_sim(
    sim_flags: &[String],
    context: Option<u64>,
    run_args: &[&std::ffi::OsStr],
    dir: &Path,
) -> (std::process::Output, std::path::PathBuf) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    const KEYS: [(&str, &str); 2] = [
        ("TENANTCHECK_KEY_A", "bench-key-a-3141"),
        ("TENANTCHECK_KEY_B", "bench-key-b-2718"),
    ];
    let bin = env!("CARGO_BIN_EXE_tenantcheck");
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("a work folder");
    let mut sim = Command::new(bin)
        .args(["sim", "--listen", "127.0.0.1:0"])
        .args(sim_flags)
        .envs(KEYS)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the reference vendor starts");
    let mut url = String::new();
    let mut lines = BufReader::new(sim.stdout.take().expect("its stdout")).lines();
    while url.is_empty() {
        let line = lines.next().expect("the vendor prints its address").expect("a line");
        if let Some(at) = line.find("http://127.0.0.1:") {
            url = line[at..].split_whitespace().next().unwrap_or_default().to_owned();
        }
    }
    let mut profile = std::fs::read_to_string("vendors/sim.toml")
        .expect("vendors/sim.toml")
        .replace(
            "http://127.0.0.1:8080",
            url.trim_end_matches("/v1").trim_end_matches('/'),
        );
    if let Some(context) = context {
        profile = profile.replace("context_window = 8192", &format!("context_window = {context}"));
    }
    let profile_path = dir.join("profile.toml");
    std::fs::write(&profile_path, profile).expect("the profile is written");
    let out = dir.join("run");
    let output = Command::new(bin)
        .arg("run")
        .arg("--vendor")
        .arg(&profile_path)
        .arg("--out")
        .arg(&out)
        .arg("--quiet")
        .args(run_args)
        .envs(KEYS)
        .output()
        .expect("tenantcheck runs");
    let _ = sim.kill();
    let _ = sim.wait();
    (output, out)
}
