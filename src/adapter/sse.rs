//! [`SseParser`]: an incremental parser for server-sent events (the WHATWG grammar).
//!
//! It takes bytes as they arrive, in chunks split anywhere (even inside a UTF-8
//! sequence or a CRLF), and yields one [`SseFrame`] per event: the `event` name and
//! the joined `data` lines. Comments, `id:` and `retry:` fields and unknown fields
//! make no frame, as the grammar says, but they are the vendor's output all the same:
//! the parser keeps them, as they came, for [`SseParser::take_extra`] (and an event
//! the stream left unfinished too, at [`SseParser::finish`]). It keeps only the
//! incomplete tail between calls.

pub use tenantcheck_evidence::exchange::SseFrame;

/// Incremental SSE parser.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no line end (so a long line arriving in many
    /// chunks is scanned once, not once per chunk).
    scanned: usize,
    event: Option<String>,
    data: Option<String>,
    /// The lines that made no frame, since the last [`SseParser::take_extra`].
    extra: Vec<String>,
}

impl SseParser {
    /// Feeds a chunk; returns the events it completed, stamped with `at_ms`.
    pub fn push(&mut self, chunk: &[u8], at_ms: f64) -> Vec<SseFrame> {
        self.buf.extend_from_slice(chunk);
        let mut frames = Vec::new();
        let mut start = 0;
        let mut i = self.scanned;
        while i < self.buf.len() {
            let b = self.buf[i];
            if b == b'\n' || b == b'\r' {
                // A CR at the very end may be the first half of a CRLF: wait for more.
                if b == b'\r' && i + 1 == self.buf.len() {
                    break;
                }
                let line = String::from_utf8_lossy(&self.buf[start..i]).into_owned();
                let crlf = b == b'\r' && self.buf[i + 1] == b'\n';
                i += if crlf { 2 } else { 1 };
                start = i;
                if let Some(frame) = self.line(&line, at_ms) {
                    frames.push(frame);
                }
            } else {
                i += 1;
            }
        }
        self.buf.drain(..start);
        self.scanned = i - start;
        frames
    }

    /// Ends the stream: an event without its closing blank line makes no frame, as the
    /// grammar says; what it held (its event name, its data, a line without its end)
    /// joins the [extra lines](SseParser::take_extra). Returns whether such an
    /// incomplete event (or line) was pending.
    pub fn finish(&mut self) -> bool {
        let pending = !self.buf.is_empty() || self.data.is_some() || self.event.is_some();
        self.extra.extend(self.event.take().map(|e| format!("event: {e}")));
        self.extra.extend(self.data.take().map(|d| format!("data: {d}")));
        if !self.buf.is_empty() {
            self.extra.push(String::from_utf8_lossy(&self.buf).into_owned());
        }
        self.buf.clear();
        self.scanned = 0;
        pending
    }

    /// The lines that made no frame since the last call, as they came: comments, `id:`
    /// and `retry:` fields, fields the grammar ignores, and (after [`SseParser::finish`])
    /// an event left unfinished.
    pub fn take_extra(&mut self) -> Vec<String> {
        std::mem::take(&mut self.extra)
    }

    fn line(&mut self, line: &str, at_ms: f64) -> Option<SseFrame> {
        if line.is_empty() {
            let data = self.data.take();
            let event = self.event.take();
            return data.map(|data| SseFrame { event, data, at_ms });
        }
        if line.starts_with(':') {
            self.extra.push(line.to_owned());
            return None;
        }
        let (field, value) = match line.find(':') {
            Some(p) => {
                let v = &line[p + 1..];
                (&line[..p], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (line, ""),
        };
        match field {
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            "event" => self.event = Some(value.to_owned()),
            _ => self.extra.push(line.to_owned()),
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8], split: usize) -> Vec<(Option<String>, String)> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for chunk in input.chunks(split.max(1)) {
            out.extend(p.push(chunk, 0.0));
        }
        out.into_iter().map(|f| (f.event, f.data)).collect()
    }

    #[test]
    fn frames_survive_any_chunking() {
        let input = b"data: {\"a\":1}\n\n: comment\r\nevent: error\r\ndata: x\r\ndata: y\r\n\r\ndata: [DONE]\n\n";
        let expected = vec![
            (None, "{\"a\":1}".to_string()),
            (Some("error".to_string()), "x\ny".to_string()),
            (None, "[DONE]".to_string()),
        ];
        for split in 1..input.len() {
            assert_eq!(all(input, split), expected, "split every {split} bytes");
        }
    }

    #[test]
    fn an_unterminated_event_is_not_a_frame_but_its_text_is_kept() {
        let mut p = SseParser::default();
        assert!(p.push(b"data: whole\ndata: half", 0.0).is_empty());
        assert!(p.finish());
        assert_eq!(p.take_extra(), ["data: whole", "data: half"]);
        assert!(!p.finish() && p.take_extra().is_empty());
    }

    #[test]
    fn lines_that_make_no_frame_are_kept_as_they_came_whatever_the_chunking() {
        let input = b": keep-alive Maria Keller\nid: 3391 0048\nretry: 10\nx-note: hi\ndata: a\n\n:\n";
        for split in 1..input.len() {
            let mut p = SseParser::default();
            let frames: usize = input.chunks(split).map(|c| p.push(c, 0.0).len()).sum();
            assert_eq!(frames, 1, "split every {split} bytes");
            assert!(!p.finish());
            assert_eq!(
                p.take_extra(),
                [
                    ": keep-alive Maria Keller",
                    "id: 3391 0048",
                    "retry: 10",
                    "x-note: hi",
                    ":"
                ],
                "split every {split} bytes"
            );
        }
    }
}
