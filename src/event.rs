//! [`RunEvent`]: what happens during a run, as the session, the signal watcher and the
//! harness report it, and the [`Observer`]s that consume it (the progress line, the
//! trial lines, and the [`Ending`] the report is built from: each case's outcome, the
//! cases left unfinished, why the run stopped). The code that runs cases never prints:
//! it emits events.

use crate::outcome::Outcome;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Mutex;

/// One thing that happened during a run.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum RunEvent<'a> {
    /// A case began.
    CaseStarted {
        /// Its id.
        case: &'a str,
    },
    /// A request was made and recorded in the transcript (answered or not).
    Recorded {
        /// The case that made it.
        case: &'a str,
        /// The tenant it was sent as.
        tenant: &'a str,
        /// Its transcript line.
        seq: u64,
        /// The HTTP status, when an answer came.
        status: Option<u16>,
        /// How long the exchange took.
        total_ms: f64,
    },
    /// A case ended with this outcome (a case never run because the run had stopped
    /// ends too, inconclusive with the reason).
    CaseFinished {
        /// Its id.
        case: &'a str,
        /// How it ended.
        outcome: &'a Outcome,
    },
    /// The run stopped sending before its cases were done: no request is made after
    /// it. Told once per kind of stop, as it happens.
    Stopped {
        /// Why.
        stop: &'a Stop,
    },
    /// A case the stop left unfinished: never run, or cut short without failing. A
    /// resumed run (`run --resume`) runs it again.
    Unfinished {
        /// Its id.
        case: &'a str,
    },
    /// Every case has ended.
    Finished,
}

/// Why a run stopped sending before its cases were done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// A signal (`SIGINT`, `SIGTERM`), by name.
    Interrupted(&'static str),
    /// The vendor refused a run of requests that should have succeeded.
    Refused(crate::report::Refusal),
}

/// Something that consumes a run's events. Called from the threads that run cases, so
/// it must be quick and must not block on the run.
pub trait Observer: Send + Sync {
    /// Takes one event.
    fn on(&self, event: &RunEvent<'_>);
}

/// The progress line on standard error: one line per request, rewritten in place,
/// cleared when the run finishes. No credential can be in it: case ids, tenant labels,
/// numbers and the status only.
pub struct Progress;

impl Observer for Progress {
    fn on(&self, event: &RunEvent<'_>) {
        match *event {
            RunEvent::Recorded {
                case,
                tenant,
                seq,
                status,
                total_ms,
            } => {
                let status = status.map_or("no answer".to_owned(), |s| format!("HTTP {s}"));
                eprint!("\r\x1b[2K  {case}: request #{seq} as {tenant}: {status} in {total_ms:.0} ms");
            }
            RunEvent::Finished => eprint!("\r\x1b[2K"),
            _ => {}
        }
    }
}

/// The trial list on standard output: a line per case as it ends, in libtest's shape
/// with the case's verdict where libtest would say `ok` or `FAILED`
/// (`test [T7] cache.prefix-extraction ... INCONCLUSIVE`), so that the first lines a
/// user reads say what the summary says. It counts the verdicts for the closing line.
pub struct TrialLines {
    /// Each case's threat, the kind shown in brackets.
    kinds: BTreeMap<String, String>,
    counts: Mutex<BTreeMap<crate::outcome::Verdict, u64>>,
}

impl TrialLines {
    /// Lines for these cases, by id and threat.
    pub fn new(kinds: BTreeMap<String, String>) -> Self {
        TrialLines {
            kinds,
            counts: Mutex::default(),
        }
    }

    /// The closing line: the run's verdict and how many cases ended with each.
    pub fn result_line(&self, filtered_out: u64, elapsed: std::time::Duration) -> String {
        use crate::outcome::Verdict;
        let counts = self.counts.lock().expect("counts lock poisoned");
        let n = |v: Verdict| counts.get(&v).copied().unwrap_or(0);
        let verdict = if n(Verdict::Fail) > 0 {
            Verdict::Fail
        } else if n(Verdict::Inconclusive) > 0 {
            Verdict::Inconclusive
        } else {
            Verdict::Pass
        };
        format!(
            "test result: {}. {} passed; {} failed; {} inconclusive; {} skipped; {filtered_out} filtered out; finished in {:.2}s",
            verdict.label(),
            n(Verdict::Pass),
            n(Verdict::Fail),
            n(Verdict::Inconclusive),
            n(Verdict::Skipped),
            elapsed.as_secs_f64()
        )
    }
}

impl Observer for TrialLines {
    fn on(&self, event: &RunEvent<'_>) {
        if let RunEvent::CaseFinished { case, outcome } = *event {
            *self
                .counts
                .lock()
                .expect("counts lock poisoned")
                .entry(outcome.verdict)
                .or_default() += 1;
            let kind = self.kinds.get(case).map_or(String::new(), |k| format!("[{k}] "));
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "test {kind}{case} ... {}", outcome.verdict.label());
            let _ = out.flush();
        }
    }
}

/// How the run's cases ended, as the events told it: what the report is built from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ending {
    /// The outcome of each case that ended, by id.
    pub outcomes: BTreeMap<String, Outcome>,
    /// The cases the stop left unfinished.
    pub unfinished: std::collections::BTreeSet<String>,
    /// The signal that interrupted the run, and when (RFC 3339).
    pub interrupted: Option<(&'static str, String)>,
    /// The vendor's refusals that stopped the run, and when (RFC 3339).
    pub refused: Option<(crate::report::Refusal, String)>,
}

/// Collects the [`Ending`] from the events.
#[derive(Default)]
pub struct Endings(Mutex<Ending>);

impl Endings {
    /// Takes what was collected so far.
    pub fn take(&self) -> Ending {
        std::mem::take(&mut *self.0.lock().expect("endings lock poisoned"))
    }
}

impl Observer for Endings {
    fn on(&self, event: &RunEvent<'_>) {
        let mut ending = self.0.lock().expect("endings lock poisoned");
        match *event {
            RunEvent::CaseFinished { case, outcome } => {
                ending.outcomes.insert(case.to_owned(), outcome.clone());
            }
            RunEvent::Unfinished { case } => {
                ending.unfinished.insert(case.to_owned());
            }
            RunEvent::Stopped { stop } => match stop {
                Stop::Interrupted(signal) => {
                    ending.interrupted.get_or_insert_with(|| (signal, crate::now_rfc3339()));
                }
                Stop::Refused(refusal) => {
                    ending
                        .refused
                        .get_or_insert_with(|| (refusal.clone(), crate::now_rfc3339()));
                }
            },
            _ => {}
        }
    }
}

/// Several observers, each given every event in turn.
pub struct Fanout(pub Vec<std::sync::Arc<dyn Observer>>);

impl Observer for Fanout {
    fn on(&self, event: &RunEvent<'_>) {
        for o in &self.0 {
            o.on(event);
        }
    }
}

/// Takes no event.
pub struct Nobody;

impl Observer for Nobody {
    fn on(&self, _event: &RunEvent<'_>) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_ending_is_what_the_events_said() {
        let endings = Arc::new(Endings::default());
        let all = Fanout(vec![endings.clone(), Arc::new(Nobody)]);
        let pass = Outcome::skipped("not selected");
        let refusal = crate::report::Refusal {
            tenant: "a".into(),
            status: 401,
            count: 1,
            last_seq: 7,
        };
        all.on(&RunEvent::CaseStarted { case: "a.b" });
        all.on(&RunEvent::CaseFinished {
            case: "a.b",
            outcome: &pass,
        });
        all.on(&RunEvent::Stopped {
            stop: &Stop::Refused(refusal.clone()),
        });
        all.on(&RunEvent::Stopped {
            stop: &Stop::Interrupted("SIGINT"),
        });
        all.on(&RunEvent::Stopped {
            stop: &Stop::Interrupted("SIGTERM"),
        });
        all.on(&RunEvent::Unfinished { case: "c.d" });
        all.on(&RunEvent::Finished);
        let got = endings.take();
        assert_eq!(got.outcomes.len(), 1);
        assert_eq!(got.outcomes["a.b"], pass);
        assert_eq!(got.unfinished.iter().collect::<Vec<_>>(), ["c.d"]);
        assert_eq!(got.interrupted.map(|(s, _)| s), Some("SIGINT"), "the first signal");
        assert_eq!(got.refused.map(|(r, _)| r), Some(refusal));
        assert_eq!(endings.take(), Ending::default(), "taken once");
    }
}
