//! [`Jitter`]: a server whose timing is noisy, as real ones are (`--transfer-jitter`,
//! `--latency-jitter`); not a fault.
//!
//! - **Transfer jitter**: the server writes an answer's headers and its body apart,
//!   and a delayed acknowledgement holds the second write now and then. One chat
//!   completion in two, drawn from the seed, has the end of its body held back by the
//!   set time after everything before it was sent: a whole JSON answer after its
//!   headers, a stream's last frame after the others. The time until the vendor
//!   began to answer is unchanged; the total is bimodal.
//! - **Latency jitter**: every chat completion waits a time drawn uniformly from
//!   zero to the set time before it is served (a queue, a busy batch, a far replica),
//!   so even the start of each answer is noisy.
//!
//! Both apply to `POST /v1/chat/completions` only, and draw from one seeded stream.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How noisy the server's timing is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Jitter {
    /// The delay held before the end of one answer in two; `None`: none.
    pub transfer: Option<Duration>,
    /// The most each answer waits before it is served (uniform); `None`: none.
    pub latency: Option<Duration>,
    /// The seed of the draws.
    pub seed: u64,
}

impl Jitter {
    /// Whether any jitter is set.
    pub fn any(&self) -> bool {
        self.transfer.is_some() || self.latency.is_some()
    }
}

/// The middleware's state: the jitter and the count of draws made.
pub(crate) struct JitterState {
    jitter: Jitter,
    drawn: AtomicU64,
}

impl JitterState {
    pub(crate) fn new(jitter: Jitter) -> Arc<Self> {
        Arc::new(JitterState {
            jitter,
            drawn: AtomicU64::new(0),
        })
    }

    /// The next draw in [0, 1).
    fn unit(&self) -> f64 {
        let n = self.drawn.fetch_add(1, Ordering::Relaxed);
        crate::transform::Rng(self.jitter.seed ^ n.wrapping_mul(0xA076_1D64_78BD_642F)).unit()
    }
}

/// The axum middleware: chat completions meet the jitter, everything else passes.
pub(crate) async fn layer(State(state): State<Arc<JitterState>>, request: Request, next: Next) -> Response {
    if request.uri().path() != "/v1/chat/completions" {
        return next.run(request).await;
    }
    if let Some(most) = state.jitter.latency {
        tokio::time::sleep(most.mul_f64(state.unit())).await;
    }
    let response = next.run(request).await;
    match state.jitter.transfer {
        Some(delay) if state.unit() < 0.5 => {
            let (parts, body) = response.into_parts();
            Response::from_parts(parts, held_at_the_end(body, delay))
        }
        _ => response,
    }
}

/// `body`, its last piece sent `delay` after the others.
fn held_at_the_end(body: Body, delay: Duration) -> Body {
    struct Held {
        inner: axum::body::BodyDataStream,
        last: Option<Bytes>,
        delay: Option<Duration>,
    }
    let state = Some(Held {
        inner: body.into_data_stream(),
        last: None,
        delay: Some(delay),
    });
    let pieces = futures_util::stream::unfold(state, |state| async move {
        let mut held = state?;
        loop {
            match held.inner.next().await {
                Some(Ok(piece)) => {
                    if let Some(before) = held.last.replace(piece) {
                        return Some((Ok(before), Some(held)));
                    }
                }
                Some(Err(e)) => return Some((Err(e), None)),
                None => {
                    if let Some(delay) = held.delay.take() {
                        tokio::time::sleep(delay).await;
                    }
                    return held.last.take().map(|piece| (Ok(piece), None));
                }
            }
        }
    });
    Body::from_stream(pieces)
}
