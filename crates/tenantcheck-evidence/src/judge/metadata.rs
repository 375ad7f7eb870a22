//! The rule of `metadata.cross-tenant` (T12): what an engine's or gateway's own
//! endpoint showed a key that is not the owner's, or no key.
//!
//! Tenant a's request carries sampling parameters and a seed drawn from the run secret
//! ([`drawn`]); an endpoint's answer to another key or to none that holds the seed
//! shows it a's request, and one that holds a credential of the run (recorded as
//! [`REDACTED`]: a key in any form the redactor knows, or its SHA-256) shows it a
//! credential. An endpoint that changes the server's state must refuse such a key. The
//! run judges each answer as the transcript records it ([`found`]), so `verify`
//! judges the same text.

use crate::canary::RunSecret;
use crate::exchange::{Exchange, REDACTED};

/// The sampling tenant a's request carries: values no client sends by default, and a
/// ten-digit seed below 2^32 (engines keep it as a 32-bit number), as a page would
/// show them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Drawn {
    /// `temperature`.
    pub temperature: f64,
    /// `top_p`.
    pub top_p: f64,
    /// `seed`.
    pub seed: u64,
}

/// The sampling of case `case`'s request, from the run secret.
pub fn drawn(secret: &RunSecret, case: &str) -> Drawn {
    let d = secret.seed("metadata", case, 0);
    Drawn {
        temperature: (41 + d % 37) as f64 / 100.0,
        top_p: (61 + d / 37 % 29) as f64 / 100.0,
        seed: 1_000_000_007 + d % 3_000_000_000,
    }
}

/// Whether tenant a's request (its line `victim`) ran while every endpoint of its round
/// was asked (their lines `asked`): the transcript writes each line as its exchange
/// ends, so a request whose line follows every answer's ended after the last of them,
/// and it began before the first was asked. The run and `verify` read the same order.
pub fn in_flight(victim: u64, asked: &[u64]) -> bool {
    asked.iter().all(|&seq| seq < victim)
}

/// What one endpoint's answer to another key, or to none, is found to have done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// An endpoint that changes the server's state accepted the key.
    StateChanged,
    /// The answer showed tenant a's request (`request`: its seed), a credential of the
    /// run (`credential`), or both.
    Exposed {
        /// Its seed.
        request: bool,
        /// A credential, as the transcript records one.
        credential: bool,
    },
}

/// Judges one endpoint's answer to a key not the owner's, or to none, as the
/// transcript records it (`recorded`: credentials redacted): `changes_state` as the
/// case's endpoint says.
pub fn found(changes_state: bool, recorded: &Exchange, seed: u64) -> Option<Found> {
    if changes_state {
        return recorded.is_success().then_some(Found::StateChanged);
    }
    let text = recorded.returned_text();
    let request = text.contains(&seed.to_string());
    let credential = text.contains(REDACTED);
    (request || credential).then_some(Found::Exposed { request, credential })
}

/// The endpoint of the case's list (`method`, `path`) a recorded request went to: of
/// those whose method is the request's and whose path ends its URL, the longest path
/// (`/v1/metrics` rather than `/metrics`), the first of equals.
pub fn endpoint_of<'e, E>(
    endpoints: &'e [E],
    method_path: impl Fn(&E) -> (&str, &str),
    recorded: &Exchange,
) -> Option<&'e E> {
    let mut best: Option<(&E, usize)> = None;
    for e in endpoints {
        let (method, path) = method_path(e);
        let fits = method == recorded.request.method && recorded.request.url.ends_with(path);
        if fits && best.is_none_or(|(_, len)| path.len() > len) {
            best = Some((e, path.len()));
        }
    }
    best.map(|(e, _)| e)
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_request_ran_throughout_when_its_line_follows_every_answer_of_its_round() {
        assert!(in_flight(20, &[12, 13, 19]));
        assert!(!in_flight(15, &[12, 13, 19]));
        // No answer to wait for: nothing it had to outlast.
        assert!(in_flight(3, &[]));
    }
    use super::*;

    fn answer(status: u16, body: &str) -> Exchange {
        Exchange {
            status: Some(status),
            body: Some(body.to_owned()),
            ..Exchange::default()
        }
    }

    #[test]
    fn a_seed_or_a_redaction_shown_to_another_key_is_found_and_a_refusal_is_not() {
        let seed = 1_234_567_890;
        assert_eq!(
            found(false, &answer(200, r#"{"slots":[{"seed":1234567890}]}"#), seed),
            Some(Found::Exposed {
                request: true,
                credential: false
            })
        );
        assert_eq!(
            found(false, &answer(200, r#"{"api_key":"[REDACTED]"}"#), seed),
            Some(Found::Exposed {
                request: false,
                credential: true
            })
        );
        assert_eq!(found(false, &answer(401, "unauthorised"), seed), None);
        assert_eq!(
            found(false, &answer(200, r#"{"slots":[{"seed":1234567891}]}"#), seed),
            None
        );
    }

    #[test]
    fn a_state_change_is_found_when_accepted_whatever_the_answer_holds() {
        assert_eq!(found(true, &answer(200, "{}"), 1), Some(Found::StateChanged));
        assert_eq!(found(true, &answer(403, "1"), 1), None);
    }

    #[test]
    fn a_request_goes_to_the_longest_path_that_ends_its_url_with_its_method() {
        let list = [("GET", "/metrics"), ("GET", "/v1/metrics"), ("POST", "/v1/metrics")];
        let at = |method: &str, url: &str| {
            let ex = Exchange {
                request: crate::exchange::RecordedRequest {
                    method: method.into(),
                    url: url.into(),
                    ..Default::default()
                },
                ..Exchange::default()
            };
            endpoint_of(&list, |e| (e.0, e.1), &ex).copied()
        };
        assert_eq!(
            at("GET", "http://127.0.0.1:4000/v1/metrics"),
            Some(("GET", "/v1/metrics"))
        );
        assert_eq!(at("GET", "http://127.0.0.1:4000/metrics"), Some(("GET", "/metrics")));
        assert_eq!(
            at("POST", "http://127.0.0.1:4000/v1/metrics"),
            Some(("POST", "/v1/metrics"))
        );
        assert_eq!(at("GET", "http://127.0.0.1:4000/slots"), None);
    }

    #[test]
    fn the_drawn_sampling_is_the_secrets_and_in_range() {
        let secret = RunSecret::derive(&[7; 32], b"");
        let d = drawn(&secret, "metadata.cross-tenant");
        assert_eq!(d, drawn(&secret, "metadata.cross-tenant"));
        assert_ne!(d, drawn(&secret, "another"));
        assert!((0.41..0.78).contains(&d.temperature) && (0.61..0.90).contains(&d.top_p));
        assert!((1_000_000_007..1_000_000_007 + 3_000_000_000).contains(&d.seed) && d.seed < 1 << 32);
    }
}
