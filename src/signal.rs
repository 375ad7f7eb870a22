//! The signals that stop a run cleanly: the first SIGINT or SIGTERM stops sending
//! (requests in flight get [`IN_FLIGHT_GRACE`](crate::session::IN_FLIGHT_GRACE)) and the
//! run writes an incomplete signed report naming the unfinished cases, which
//! `run --resume` ([`crate::resume`]) continues; the second ends the process at once.

use crate::event::{Observer, RunEvent, Stop};
use crate::exit;

/// Catches SIGINT and SIGTERM: the first sets the returned flag to the signal's name
/// (the session sends nothing more, the run writes an incomplete report) and tells
/// `observer` ([`RunEvent::Stopped`]), the second ends the process at once with
/// [`exit::INTERRUPTED`].
pub fn watch_signals(
    runtime: &tokio::runtime::Runtime,
    observer: std::sync::Arc<dyn Observer>,
) -> tokio::sync::watch::Receiver<Option<&'static str>> {
    let (tx, rx) = tokio::sync::watch::channel(None);
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        // Registered before this returns, so that no signal from here on kills the run.
        let signals = runtime.block_on(async { (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) });
        if let (Ok(mut int), Ok(mut term)) = signals {
            runtime.spawn(async move {
                let name = tokio::select! {
                    _ = int.recv() => "SIGINT",
                    _ = term.recv() => "SIGTERM",
                };
                let _ = tx.send(Some(name));
                observer.on(&RunEvent::Stopped {
                    stop: &Stop::Interrupted(name),
                });
                eprintln!(
                    "\n{name}: sending stops; requests in flight get {} s; an incomplete signed report follows ({name} again ends at once)",
                    crate::session::IN_FLIGHT_GRACE.as_secs()
                );
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
                std::process::exit(i32::from(exit::INTERRUPTED));
            });
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (runtime, tx, observer);
    }
    rx
}
