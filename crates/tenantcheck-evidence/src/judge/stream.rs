//! Whether a stream keeps its API's grammar and finishes: the rule of
//! `stream.integrity`, applied by the probe during a run and by `verify` to the
//! transcript, per the adapter the profile names.
//!
//! - OpenAI-compatible: `text/event-stream`, JSON frames, one final `[DONE]`, one `id`
//!   across the chunks, usage (the probe asks for it).
//! - Anthropic Messages: `text/event-stream`, each event's name the `type` of its data,
//!   `message_start` first and `message_stop` last (pings aside), as many content
//!   blocks stopped as started, one message id, usage.
//! - Workers AI: `text/event-stream`, a final `[DONE]`, each frame response text or
//!   usage, usage somewhere. Its API says no finish reason.
//! - A command adapter: the answer came as delta lines, not whole.

use crate::exchange::Exchange;
use crate::profile::AdapterKind;
use serde_json::Value;

/// How a complete, successful stream of `api` breaks its event grammar; empty when it
/// keeps it.
pub fn problems(api: AdapterKind, ex: &Exchange) -> Vec<String> {
    match api {
        AdapterKind::OpenaiChat => openai(ex, false),
        AdapterKind::AzureOpenai => openai(ex, true),
        AdapterKind::Anthropic => anthropic(ex),
        AdapterKind::WorkersAi => workers_ai(ex),
        AdapterKind::Command => command(ex),
    }
}

/// Whether `api` says why an answer ended (`finish_reason`); where it does, an answer
/// without one is a fault.
pub fn reports_finish_reason(api: AdapterKind) -> bool {
    !matches!(api, AdapterKind::WorkersAi)
}

/// What is wrong with a successful stream of `api`, in words: its grammar's problems,
/// no finish reason where the API gives one, nothing written (no content and no other
/// output: a reasoning model cut off while it thinks, or one that answers with a tool
/// call, writes no content and is sound). Empty for a sound stream.
pub fn malformed(api: AdapterKind, ex: &Exchange) -> Vec<String> {
    let mut problems = problems(api, ex);
    if ex.finish_reason.is_none() && reports_finish_reason(api) {
        problems.push("no finish reason".to_owned());
    }
    if ex.content.is_empty() && !other_output(ex) {
        problems.push("no content".to_owned());
    }
    problems
}

/// The keys under which the stream APIs write output other than content: reasoning
/// (`reasoning_content`, `reasoning`, Anthropic's `thinking`), a tool call's name and
/// arguments (`arguments`, Anthropic's `partial_json`), a refusal.
const OTHER_OUTPUT: [&str; 6] = [
    "reasoning_content",
    "reasoning",
    "thinking",
    "arguments",
    "partial_json",
    "refusal",
];

/// Whether any frame writes text under one of [`OTHER_OUTPUT`] (or names a tool).
fn other_output(ex: &Exchange) -> bool {
    fn holds(v: &Value) -> bool {
        match v {
            Value::Object(map) => map.iter().any(|(k, v)| {
                let text = v.as_str().is_some_and(|s| !s.is_empty());
                (text && (OTHER_OUTPUT.contains(&k.as_str()) || (k == "name" && map.contains_key("arguments"))))
                    || holds(v)
            }),
            Value::Array(items) => items.iter().any(holds),
            _ => false,
        }
    }
    ex.frames
        .iter()
        .filter_map(|f| serde_json::from_str::<Value>(&f.data).ok())
        .any(|v| holds(&v))
}

/// Whether the request asked for a stream (`"stream": true` in its body, as every
/// adapter records it).
pub fn asked(ex: &Exchange) -> bool {
    ex.request.body.as_ref().is_some_and(|b| b["stream"] == true)
}

/// Whether the answer was sent as an event stream.
fn content_type_problem(ex: &Exchange) -> Option<String> {
    let ok = ex
        .headers
        .get("content-type")
        .is_some_and(|c| c.starts_with("text/event-stream"));
    (!ok).then(|| "the answer is not text/event-stream".to_owned())
}

/// OpenAI's stream: one id over every chunk, `[DONE]` last, usage when asked for. Azure
/// (`azure`) sends its content filter's verdict on the prompt first, in a chunk with an
/// empty id and no choices, which does not count as a second id.
fn openai(ex: &Exchange, azure: bool) -> Vec<String> {
    let mut problems: Vec<String> = content_type_problem(ex).into_iter().collect();
    let done: Vec<usize> = ex
        .frames
        .iter()
        .enumerate()
        .filter(|(_, f)| f.data == "[DONE]")
        .map(|(i, _)| i)
        .collect();
    match done.as_slice() {
        [] => problems.push("no terminal [DONE] frame".to_owned()),
        [i] if *i + 1 == ex.frames.len() => {}
        _ => problems.push("[DONE] is not the one last frame".to_owned()),
    }
    let mut ids = std::collections::BTreeSet::new();
    let mut usage = false;
    for (i, f) in ex.frames.iter().enumerate().filter(|(_, f)| f.data != "[DONE]") {
        match serde_json::from_str::<Value>(&f.data) {
            Ok(v) => {
                if let Some(id) = v["id"].as_str().filter(|id| !(azure && id.is_empty())) {
                    ids.insert(id.to_owned());
                }
                usage |= v["usage"].is_object();
            }
            Err(_) => problems.push(format!("frame {i} is not JSON")),
        }
    }
    if ids.len() != 1 {
        problems.push(format!("{} distinct chunk ids", ids.len()));
    }
    if !usage {
        problems.push("no usage, though it was asked for".to_owned());
    }
    problems
}

fn anthropic(ex: &Exchange) -> Vec<String> {
    let mut problems: Vec<String> = content_type_problem(ex).into_iter().collect();
    let kinds: Vec<&str> = ex.frames.iter().map(|f| f.event.as_deref().unwrap_or("")).collect();
    let mut ids = std::collections::BTreeSet::new();
    let mut usage = false;
    for (i, f) in ex.frames.iter().enumerate() {
        match serde_json::from_str::<Value>(&f.data) {
            Ok(v) => {
                if v["type"].as_str() != f.event.as_deref() {
                    problems.push(format!(
                        "event {i} is named {:?} but its data says {}",
                        f.event, v["type"]
                    ));
                }
                if let Some(id) = v["message"]["id"].as_str() {
                    ids.insert(id.to_owned());
                }
                usage |= v["usage"].is_object() || v["message"]["usage"].is_object();
            }
            Err(_) => problems.push(format!("event {i} is not JSON")),
        }
    }
    let real: Vec<&str> = kinds.iter().copied().filter(|k| *k != "ping").collect();
    if real.first() != Some(&"message_start") {
        problems.push("the stream does not begin with message_start".to_owned());
    }
    if real.last() != Some(&"message_stop") {
        problems.push("the stream does not end with message_stop".to_owned());
    }
    let starts = kinds.iter().filter(|k| **k == "content_block_start").count();
    let stops = kinds.iter().filter(|k| **k == "content_block_stop").count();
    if starts != stops {
        problems.push(format!("{starts} content blocks started, {stops} stopped"));
    }
    if ids.len() != 1 {
        problems.push(format!("{} distinct message ids", ids.len()));
    }
    if !usage {
        problems.push("no usage".to_owned());
    }
    problems
}

fn workers_ai(ex: &Exchange) -> Vec<String> {
    let mut problems: Vec<String> = content_type_problem(ex).into_iter().collect();
    match ex.frames.iter().position(|f| f.data == "[DONE]") {
        None => problems.push("no terminal [DONE] frame".to_owned()),
        Some(i) if i + 1 != ex.frames.len() => problems.push("[DONE] is not the last frame".to_owned()),
        Some(_) => {}
    }
    let mut usage = false;
    for (i, f) in ex.frames.iter().enumerate().filter(|(_, f)| f.data != "[DONE]") {
        match serde_json::from_str::<Value>(&f.data) {
            Ok(v) if v["response"].is_string() || v["usage"].is_object() => usage |= v["usage"].is_object(),
            Ok(_) => problems.push(format!("frame {i} has neither response text nor usage")),
            Err(_) => problems.push(format!("frame {i} is not JSON")),
        }
    }
    if !usage {
        problems.push("no usage".to_owned());
    }
    problems
}

fn command(ex: &Exchange) -> Vec<String> {
    if ex.frames.is_empty() && !ex.content.is_empty() {
        vec!["the answer came whole, not as delta lines".to_owned()]
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::{RecordedRequest, SseFrame};

    /// A sound OpenAI-compatible stream, as the probe asks for it.
    fn sound() -> Exchange {
        let frame = |data: &str| SseFrame {
            event: None,
            data: data.to_owned(),
            at_ms: 0.0,
        };
        Exchange {
            request: RecordedRequest {
                body: Some(serde_json::json!({"stream": true, "messages": []})),
                ..RecordedRequest::default()
            },
            status: Some(200),
            headers: [("content-type".to_owned(), "text/event-stream".to_owned())].into(),
            frames: vec![
                frame(r#"{"id":"c1","choices":[{"delta":{"content":"Hi"}}]}"#),
                frame(r#"{"id":"c1","choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3}}"#),
                frame("[DONE]"),
            ],
            content: "Hi".into(),
            finish_reason: Some("stop".into()),
            ..Exchange::default()
        }
    }

    #[test]
    fn a_stream_is_malformed_by_each_broken_rule_and_sound_by_none() {
        let ok = sound();
        assert!(asked(&ok));
        assert_eq!(malformed(AdapterKind::OpenaiChat, &ok), Vec::<String>::new());
        // Stopped half-way: no [DONE], no finish reason.
        let mut cut = sound();
        cut.frames.truncate(1);
        cut.finish_reason = None;
        let problems = malformed(AdapterKind::OpenaiChat, &cut);
        for want in ["no terminal [DONE] frame", "no usage", "no finish reason"] {
            assert!(problems.iter().any(|p| p.contains(want)), "{want}: {problems:?}");
        }
        // Two ids, not an event stream, no content.
        let mut odd = sound();
        odd.frames[1].data = odd.frames[1].data.replace("c1", "c2");
        odd.headers.clear();
        odd.content.clear();
        assert_eq!(malformed(AdapterKind::OpenaiChat, &odd).len(), 3);
        // Workers AI says no finish reason: its absence is no fault there.
        assert!(!reports_finish_reason(AdapterKind::WorkersAi));
        assert!(
            !malformed(AdapterKind::WorkersAi, &cut)
                .iter()
                .any(|p| p == "no finish reason")
        );
        // A reasoning model cut off while it thinks, and a tool call, write no
        // content and are sound; an answer that writes nothing at all is not.
        for (delta, reason) in [
            (r#"{"reasoning_content":"Let me think"}"#, "length"),
            (r#"{"reasoning":"Let me think"}"#, "length"),
            (
                r#"{"tool_calls":[{"index":0,"function":{"name":"lookup","arguments":"{}"}}]}"#,
                "tool_calls",
            ),
        ] {
            let mut thinking = sound();
            thinking.content.clear();
            thinking.finish_reason = Some(reason.into());
            thinking.frames[0].data = format!(r#"{{"id":"c1","choices":[{{"delta":{delta}}}]}}"#);
            assert_eq!(
                malformed(AdapterKind::OpenaiChat, &thinking),
                Vec::<String>::new(),
                "{delta}"
            );
            thinking.frames[0].data = r#"{"id":"c1","choices":[{"delta":{"reasoning_content":""}}]}"#.into();
            assert_eq!(malformed(AdapterKind::OpenaiChat, &thinking), ["no content"], "{delta}");
        }
        // A request that did not ask for a stream is not one.
        let mut plain = sound();
        plain.request.body = Some(serde_json::json!({"messages": []}));
        assert!(!asked(&plain));
    }
}
