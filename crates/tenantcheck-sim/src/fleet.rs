//! The reference vendor as a fleet: `nodes` engines behind one router, as a hosted
//! model is served by many replicas behind a load balancer.
//!
//! Each node is a whole reference vendor of its own (its KV pool, prefix cache, decode
//! batch and slots); the injected faults are on the first `bad_nodes` only, so a test
//! that meets only healthy nodes sees a healthy vendor. The router picks a node per
//! request the way real ones do ([`Routing`]) and may name it in a response header
//! (`x-served-by: node-3`), as RunPod's `X-Runpod-Worker-Id` does, or not at all.
//! Stored objects (`/v1/responses`) and the engine's own endpoints (`/slots`) live on
//! node 0, as a gateway keeps stored objects in one database.

use crate::SimConfig;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tower::ServiceExt;

/// How the router picks a node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Routing {
    /// Uniformly at random, per request.
    #[default]
    Random,
    /// By a hash of the prompt's first [`PREFIX_CHARS`] characters (about 256 tokens),
    /// as prefix-cache-aware routers do: the same opening lands on the same node.
    PrefixHash,
    /// By a hash of the affinity header's value (a session id), at random without one.
    Affinity,
}

/// The characters of a prompt's opening that prefix-hash routing reads.
pub const PREFIX_CHARS: usize = 1024;

/// A fleet's shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fleet {
    /// Nodes behind the router (at least 2).
    pub nodes: usize,
    /// The first this many carry the injected faults; `None`: all of them.
    pub bad_nodes: Option<usize>,
    /// How requests are spread.
    pub routing: Routing,
    /// The response header that names the serving node; `None`: not named.
    pub node_header: Option<String>,
    /// Each node names itself in its answers' `system_fingerprint` (`fp_node0`, ...),
    /// as a vendor whose fingerprint differs per replica does.
    pub node_fingerprint: bool,
    /// The request header whose value pins a session to a node (with
    /// [`Routing::Affinity`]).
    pub affinity_header: String,
}

impl Default for Fleet {
    fn default() -> Self {
        Fleet {
            nodes: 2,
            bad_nodes: None,
            routing: Routing::Random,
            node_header: Some("x-served-by".into()),
            node_fingerprint: false,
            affinity_header: "x-session-affinity".into(),
        }
    }
}

struct Front {
    nodes: Vec<Router>,
    routing: Routing,
    node_header: Option<HeaderName>,
    affinity_header: HeaderName,
    state: std::collections::hash_map::RandomState,
    counter: AtomicU64,
}

/// The router in front of the fleet's nodes.
pub(crate) fn router(config: SimConfig, fleet: &Fleet) -> Router {
    let bad = fleet.bad_nodes.unwrap_or(fleet.nodes).min(fleet.nodes);
    let nodes = (0..fleet.nodes)
        .map(|i| {
            let mut node = config.clone();
            node.fleet = None;
            node.chaos = None;
            if fleet.node_fingerprint {
                node.system_fingerprint = Some(format!("fp_node{i}"));
            }
            if i >= bad {
                node.faults.clear();
            }
            crate::server::router(node)
        })
        .collect();
    let front = Front {
        nodes,
        routing: fleet.routing,
        node_header: fleet
            .node_header
            .as_deref()
            .and_then(|h| HeaderName::try_from(h.to_ascii_lowercase()).ok()),
        affinity_header: HeaderName::try_from(fleet.affinity_header.to_ascii_lowercase())
            .unwrap_or(HeaderName::from_static("x-session-affinity")),
        state: Default::default(),
        counter: AtomicU64::new(0),
    };
    let router = Router::new()
        .fallback(route)
        .layer(axum::extract::DefaultBodyLimit::max(crate::server::MAX_BODY_BYTES))
        .with_state(Arc::new(front));
    crate::server::with_chaos(router, &config)
}

impl Front {
    /// A number that looks random, from the router's own hasher.
    fn random(&self) -> u64 {
        self.state.hash_one(self.counter.fetch_add(1, Ordering::Relaxed))
    }

    fn hash(&self, value: &[u8]) -> u64 {
        // A fixed hasher: the same value lands on the same node for the whole run.
        let mut h = std::hash::DefaultHasher::new();
        value.hash(&mut h);
        h.finish()
    }

    /// The node that serves `path` with `body` and these headers.
    fn pick(&self, path: &str, headers: &axum::http::HeaderMap, body: &[u8]) -> usize {
        let n = self.nodes.len() as u64;
        if !path.ends_with("/chat/completions") {
            // Stored objects and the engine's endpoints: one place.
            return 0;
        }
        let at = match self.routing {
            Routing::Random => self.random(),
            Routing::PrefixHash => self.hash(opening(body).as_bytes()),
            Routing::Affinity => match headers.get(&self.affinity_header) {
                Some(v) => self.hash(v.as_bytes()),
                None => self.random(),
            },
        };
        (at % n) as usize
    }
}

/// The prompt's opening: the first [`PREFIX_CHARS`] characters of its messages'
/// contents, in order.
fn opening(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let mut text = String::new();
    for m in v["messages"].as_array().into_iter().flatten() {
        if let Some(c) = m["content"].as_str() {
            text.extend(c.chars().take(PREFIX_CHARS - text.chars().count().min(PREFIX_CHARS)));
        }
        if text.chars().count() >= PREFIX_CHARS {
            break;
        }
    }
    text
}

async fn route(State(front): State<Arc<Front>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes: Bytes = match axum::body::to_bytes(body, crate::server::MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(_) => return axum::http::StatusCode::PAYLOAD_TOO_LARGE.into_response(),
    };
    let node = front.pick(parts.uri.path(), &parts.headers, &bytes);
    let request = Request::from_parts(parts, Body::from(bytes));
    let mut response = match front.nodes[node].clone().oneshot(request).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    if let Some(name) = &front.node_header
        && let Ok(value) = HeaderValue::try_from(format!("node-{node}"))
    {
        response.headers_mut().insert(name.clone(), value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::opening;

    #[test]
    fn the_opening_is_the_first_characters_of_the_messages_in_order() {
        let body = serde_json::json!({
            "messages": [{ "role": "system", "content": "ab" }, { "role": "user", "content": "c".repeat(2000) }]
        });
        let o = opening(&serde_json::to_vec(&body).unwrap());
        assert_eq!(o.len(), super::PREFIX_CHARS);
        assert!(o.starts_with("abccc"));
        assert_eq!(opening(b"not json"), "");
    }
}
