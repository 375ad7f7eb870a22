//! The probe kinds, each written once: the probes name themselves by these, the report
//! records them for each case, and `verify` picks each case's re-judge by them (never
//! by the case's id: a suite may name its cases as it likes).

/// Another tenant's records read back from a long prompt's residue (T1).
pub const CANARY_RESIDUE: &str = "isolation.canary-residue";
/// Prompts past the context refused, and facts kept up to it (T2).
pub const CONTEXT_BOUNDARY: &str = "context.boundary";
/// Facts recalled from every depth of a long prompt (T3).
pub const CONTEXT_RECALL: &str = "context.recall";
/// Usage as the vendor reports it against what was sent and written (T4).
pub const USAGE: &str = "usage.consistency";
/// Errors signalled as errors (T5).
pub const ERRORS: &str = "errors.semantics";
/// Answers bound to their requests under concurrency and cancellation (T6).
pub const BINDING: &str = "concurrency.binding";
/// A prefix cache shared across keys, by the time to the first token (T7).
pub const TIMING: &str = "cache.cross-tenant-timing";
/// Another key's secret read through the prefix cache, digit by digit (T7).
pub const PREFIX_EXTRACTION: &str = "cache.prefix-extraction";
/// Another tenant's answer given again by a response cache (T7, T1).
pub const RESPONSE_REUSE: &str = "cache.response-reuse";
/// Streams that keep their API's grammar and finish (T8).
pub const STREAM: &str = "stream.integrity";
/// The declared KV pools against the advertised context (T9).
pub const KV_POOL: &str = "declared.kv-pool";
/// The declared engine version against the advisories (T9).
pub const ADVISORIES: &str = "declared.advisories";
/// Stored objects kept to their owner (T10).
pub const OBJECTS: &str = "objects.cross-tenant";
/// Another tenant's load held off a quiet tenant's requests (T11).
pub const NOISY_NEIGHBOUR: &str = "availability.noisy-neighbour";
/// Engine endpoints that show another key's requests (T12).
pub const METADATA: &str = "metadata.cross-tenant";

/// Every kind.
pub const ALL: [&str; 15] = [
    CANARY_RESIDUE,
    CONTEXT_BOUNDARY,
    CONTEXT_RECALL,
    USAGE,
    ERRORS,
    BINDING,
    TIMING,
    PREFIX_EXTRACTION,
    RESPONSE_REUSE,
    STREAM,
    KV_POOL,
    ADVISORIES,
    OBJECTS,
    NOISY_NEIGHBOUR,
    METADATA,
];
