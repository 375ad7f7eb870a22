//! The HTML report of a failing run, loaded in headless Chromium.
//!
//! Needs Debian's `chromium` (`apt-get install chromium`), which `.ci/run` installs, so it
//! is `#[ignore]`d for a plain `cargo test` and run by CI with
//! `cargo test --test it html:: -- --ignored`. It leaves the run folder and a screenshot in
//! `target/test-artifacts/`.

use crate::common::{Sim, run_vendor};
use std::path::PathBuf;
use std::process::Command;

fn chromium() -> PathBuf {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("Debian's chromium is needed: apt-get install chromium")
}

#[test]
#[ignore = "needs Debian's chromium; CI installs it and runs this test"]
fn the_html_of_a_failing_run_shows_the_verdict_the_case_and_the_leaked_canary() {
    let artifacts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts");
    let run_dir = artifacts.join("stale-pages-run");
    let _ = std::fs::remove_dir_all(&run_dir);
    std::fs::create_dir_all(&artifacts).unwrap();
    let sim = Sim::start("html-key-aaaa", "html-key-bbbb", &["--fault", "stale-pages"]);
    let profile = sim.profile(&artifacts);
    let (code, stdout, stderr) = run_vendor(&profile, &run_dir, "html-key-aaaa", "html-key-bbbb");
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    let html = run_dir.join("report.html");
    let page = std::fs::read_to_string(&html).unwrap();
    for external in ["src=\"http", "href=\"http", "url(http", "@import"] {
        assert!(!page.contains(external), "the page must not fetch anything: {external}");
    }

    let browser = chromium();
    let profile_dir = artifacts.join("chromium-profile");
    let common_flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ];
    let url = format!("file://{}", html.display());
    let dom = Command::new(&browser)
        .args(common_flags)
        .arg(format!("--user-data-dir={}", profile_dir.display()))
        .args(["--dump-dom", &url])
        .output()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.contains("id=\"verdict\">FAIL<"),
        "the verdict heads the rendered page"
    );
    assert!(
        dom.contains("id=\"case-isolation.canary-residue\""),
        "the failing case is in the table"
    );
    assert!(
        tenantcheck::canary::RECORD_LABELS
            .iter()
            .any(|l| dom.contains(&format!("<mark>{l} "))),
        "the leaked canary is highlighted"
    );

    let shot = artifacts.join("report-stale-pages.png");
    let _ = std::fs::remove_file(&shot);
    let status = Command::new(&browser)
        .args(common_flags)
        .arg(format!("--user-data-dir={}", profile_dir.display()))
        .arg(format!("--screenshot={}", shot.display()))
        .args(["--window-size=1280,2400", &url])
        .status()
        .expect("chromium runs");
    assert!(
        status.success() && shot.metadata().is_ok_and(|m| m.len() > 10_000),
        "a screenshot was written"
    );
}
