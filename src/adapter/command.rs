//! [`CommandAdapter`]: any API, through a program the vendor writes, speaking JSON
//! lines on its standard input and output.
//!
//! The suite starts the program (the profile's `command`) once, on the first request,
//! and writes one [`CommandRequest`] per line to its standard input: an `id`, an `op`
//! (`chat`, `list_models`, `invalid`, or `cancel` for a stream the suite stopped
//! reading), the tenant's credential and the request. The program answers each with
//! lines of [`CommandReply`] carrying the same `id`: any number of `delta` lines (the
//! pieces of a streamed answer, in order), then one `done` line (status, content,
//! finish reason, usage, error, the raw answer). Requests are multiplexed: several are
//! in flight at once and replies may come in any order. `tenantcheck schema command`
//! prints both line formats; `examples/command-adapter.py` is a complete program.
//!
//! The transcript records each request without its credential, each `delta` as a
//! frame and the `raw` answer as the body. A program that ends, writes a line that is
//! not a reply, or takes longer than the profile's `request_timeout_secs` gives an
//! exchange with a transport error, never a panic. What the program writes to standard
//! error is kept, its last lines only, in the error of exchanges it broke off.
//! Stored responses are not part of the protocol.

use super::{ApiError, BoxFuture, ChatRequest, Exchange, InvalidRequest, Message, Provider, RecordedRequest, SseFrame};
use super::{TransportError, TransportErrorKind, Usage};
use crate::credential::Secret;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// One line the suite writes to the program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandRequest {
    /// Chosen by the suite; every reply about this request carries it.
    pub id: u64,
    /// What to do.
    pub op: CommandOp,
    /// The tenant's credential (not for `cancel`). Never written anywhere else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    /// For `chat`: the conversation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<Message>,
    /// For `chat`: the most tokens to generate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// For `chat` and `invalid`: whether to stream the answer as `delta` lines.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// For `invalid`: how the request must be wrong (the vendor must refuse it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid: Option<InvalidRequest>,
}

/// What a request asks the program to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CommandOp {
    /// Send one chat request.
    Chat,
    /// List the models the credential sees (a cheap credential check).
    ListModels,
    /// Send a request that is wrong in the way `invalid` says, in the API's dialect.
    Invalid,
    /// The suite stopped reading this stream (a user who cancels): stop sending it.
    Cancel,
}

/// One line the program writes back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandReply {
    /// The request's id.
    pub id: u64,
    /// A piece of a streamed answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<String>,
    /// The request's outcome: the last line about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<CommandDone>,
}

/// How a request ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandDone {
    /// The vendor's HTTP status (or what stands for it: 200 for an answer, 4xx for a
    /// refusal, 5xx for a failure).
    pub status: u16,
    /// The whole answer's text (for a stream, the joined deltas if left out).
    #[serde(default)]
    pub content: String,
    /// `stop`, `length`, or the vendor's own word.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Token usage as the vendor reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The vendor's error, for a refusal or a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ApiError>,
    /// The vendor's raw answer, kept as the exchange's body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// The vendor's response headers, by lowercase name: every one the program read
    /// (they are scanned for other tenants' data, as the body is), at least `location`
    /// for a 3xx (the program must not follow redirects: the credential must not leave
    /// the vendor's origin), and `retry-after` for a 429 or 503.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// Requests waiting for replies, by id: where to send each reply, with its arrival time.
type Waiting = HashMap<u64, mpsc::UnboundedSender<(Instant, CommandReply)>>;

/// Lines of the program's standard error kept for error messages.
const STDERR_LINES: usize = 20;

/// The external-command adapter.
pub struct CommandAdapter {
    argv: Vec<String>,
    timeout: Duration,
    next_id: AtomicU64,
    process: tokio::sync::OnceCell<Result<Process, String>>,
}

impl std::fmt::Debug for CommandAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandAdapter")
            .field("argv", &self.argv)
            .finish_non_exhaustive()
    }
}

/// A running program.
struct Process {
    stdin: tokio::sync::Mutex<tokio::process::ChildStdin>,
    pending: Arc<Mutex<Waiting>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    _child: tokio::process::Child,
}

impl CommandAdapter {
    /// An adapter that will run `argv` (program and arguments) on its first request.
    pub fn new(argv: Vec<String>, timeout: Duration) -> Self {
        CommandAdapter {
            argv,
            timeout,
            next_id: AtomicU64::new(1),
            process: tokio::sync::OnceCell::new(),
        }
    }

    async fn process(&self) -> Result<&Process, String> {
        self.process
            .get_or_init(|| async { spawn(&self.argv) })
            .await
            .as_ref()
            .map_err(Clone::clone)
    }

    async fn call(&self, credential: &Secret, mut request: CommandRequest, cancel_after: Option<u32>) -> Exchange {
        let started = Instant::now();
        let ms = |at: Instant| at.duration_since(started).as_secs_f64() * 1e3;
        request.id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let op = serde_json::to_value(request.op).expect("ops serialise");
        let mut ex = Exchange {
            request: RecordedRequest {
                method: "COMMAND".into(),
                url: format!("command:{}", op.as_str().unwrap_or_default()),
                body: Some(serde_json::to_value(&request).expect("requests serialise")),
                raw: false,
                headers: Default::default(),
            },
            ..Exchange::default()
        };
        let fail = |ex: &mut Exchange, kind, message: String| {
            ex.transport_error = Some(TransportError { kind, message });
            ex.timings.total_ms = ms(Instant::now());
        };
        let process = match self.process().await {
            Ok(p) => p,
            Err(e) => {
                fail(&mut ex, TransportErrorKind::Connect, e);
                return ex;
            }
        };
        request.credential = Some(credential.expose().to_owned());
        let (tx, mut rx) = mpsc::unbounded_channel();
        process
            .pending
            .lock()
            .expect("pending lock poisoned")
            .insert(request.id, tx);
        let line = serde_json::to_string(&request).expect("requests serialise") + "\n";
        drop(request.credential.take());
        if let Err(e) = process.stdin.lock().await.write_all(line.as_bytes()).await {
            process.forget(request.id);
            fail(
                &mut ex,
                TransportErrorKind::Request,
                format!("cannot write to the program: {e}{}", process.stderr_tail()),
            );
            return ex;
        }
        let mut deltas = String::new();
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let reply = match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(reply)) => reply,
                Ok(None) => {
                    fail(
                        &mut ex,
                        TransportErrorKind::Body,
                        format!("the program ended before it answered{}", process.stderr_tail()),
                    );
                    return ex;
                }
                Err(_) => {
                    process.forget(request.id);
                    fail(
                        &mut ex,
                        TransportErrorKind::Timeout,
                        format!("no answer within {:?}", self.timeout),
                    );
                    return ex;
                }
            };
            let (at, reply) = reply;
            ex.timings.first_byte_ms.get_or_insert(ms(at));
            if let Some(delta) = reply.delta {
                ex.timings.first_token_ms.get_or_insert(ms(at));
                deltas.push_str(&delta);
                ex.frames.push(SseFrame {
                    event: Some("delta".into()),
                    data: delta,
                    at_ms: ms(at),
                });
                if cancel_after.is_some_and(|n| ex.frames.len() as u32 >= n) {
                    process.forget(request.id);
                    let cancel = format!("{{\"id\":{},\"op\":\"cancel\"}}\n", reply.id);
                    let _ = process.stdin.lock().await.write_all(cancel.as_bytes()).await;
                    ex.cancelled = true;
                    ex.content = deltas;
                    ex.timings.total_ms = ms(Instant::now());
                    return ex;
                }
            }
            if let Some(done) = reply.done {
                process.forget(reply.id);
                ex.status = Some(done.status);
                ex.content = if done.content.is_empty() { deltas } else { done.content };
                ex.finish_reason = done.finish_reason;
                ex.usage = done.usage;
                ex.api_error = done.error;
                ex.body = done.raw;
                ex.headers = done
                    .headers
                    .into_iter()
                    .map(|(k, v)| (k.to_ascii_lowercase(), v))
                    .collect();
                ex.timings.total_ms = ms(at);
                return ex;
            }
        }
    }
}

impl Process {
    fn forget(&self, id: u64) {
        self.pending.lock().expect("pending lock poisoned").remove(&id);
    }

    fn stderr_tail(&self) -> String {
        let lines = self.stderr.lock().expect("stderr lock poisoned");
        if lines.is_empty() {
            String::new()
        } else {
            format!(
                "; its standard error ends: {}",
                lines.iter().cloned().collect::<Vec<_>>().join(" | ")
            )
        }
    }
}

/// Starts the program and the tasks that read its output.
fn spawn(argv: &[String]) -> Result<Process, String> {
    let (program, args) = argv.split_first().ok_or("the profile's command is empty")?;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {program:?}: {e}"))?;
    let stdout = child.stdout.take().expect("piped");
    let stderr_pipe = child.stderr.take().expect("piped");
    let pending: Arc<Mutex<Waiting>> = Arc::default();
    let stderr: Arc<Mutex<VecDeque<String>>> = Arc::default();
    let readers = Arc::clone(&pending);
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let at = Instant::now();
            // A line that is no reply is ignored: it cannot be told whose it was.
            if let Ok(reply) = serde_json::from_str::<CommandReply>(&line) {
                let sender = readers.lock().expect("pending lock poisoned").get(&reply.id).cloned();
                if let Some(sender) = sender {
                    let _ = sender.send((at, reply));
                }
            }
        }
        // The program is gone: every request still waiting learns it.
        readers.lock().expect("pending lock poisoned").clear();
    });
    let kept = Arc::clone(&stderr);
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr_pipe).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut kept = kept.lock().expect("stderr lock poisoned");
            if kept.len() == STDERR_LINES {
                kept.pop_front();
            }
            kept.push_back(line);
        }
    });
    Ok(Process {
        stdin: tokio::sync::Mutex::new(child.stdin.take().expect("piped")),
        pending,
        stderr,
        _child: child,
    })
}

fn request(op: CommandOp) -> CommandRequest {
    CommandRequest {
        id: 0,
        op,
        credential: None,
        messages: Vec::new(),
        max_tokens: None,
        stream: false,
        invalid: None,
    }
}

impl Provider for CommandAdapter {
    fn chat<'a>(&'a self, credential: &'a Secret, r: &'a ChatRequest) -> BoxFuture<'a, Exchange> {
        let req = CommandRequest {
            messages: r.messages.clone(),
            max_tokens: Some(r.max_tokens),
            stream: r.stream,
            ..request(CommandOp::Chat)
        };
        Box::pin(self.call(credential, req, r.cancel_after))
    }

    fn list_models<'a>(&'a self, credential: &'a Secret) -> BoxFuture<'a, Exchange> {
        Box::pin(self.call(credential, request(CommandOp::ListModels), None))
    }

    fn store<'a>(&'a self, _: &'a Secret, _: &'a str, _: Option<&'a str>) -> BoxFuture<'a, Exchange> {
        Box::pin(std::future::ready(super::not_offered(
            "command protocol",
            "stored responses",
        )))
    }

    fn fetch_stored<'a>(&'a self, _: &'a Secret, _: &'a str) -> BoxFuture<'a, Exchange> {
        Box::pin(std::future::ready(super::not_offered(
            "command protocol",
            "stored responses",
        )))
    }

    fn invalid<'a>(&'a self, credential: &'a Secret, kind: InvalidRequest, stream: bool) -> BoxFuture<'a, Exchange> {
        let req = CommandRequest {
            invalid: Some(kind),
            stream,
            ..request(CommandOp::Invalid)
        };
        Box::pin(self.call(credential, req, None))
    }

    fn stream_problems(&self, ex: &Exchange) -> Vec<String> {
        crate::judge::stream::problems(crate::vendor::AdapterKind::Command, ex)
    }
}
