//! [`inert`]: text a vendor controls, made safe to show in one [`Sink`].
//!
//! Everything a run displays may hold vendor text: an error message quoted in a
//! summary, an excerpt of an answer in a finding, and, for `verify` and `render`, every
//! string of a report a vendor handed over. Shown raw, such text could clear a
//! terminal and print a green verdict under a failing run, reorder a line with bidi
//! overrides, inject markup or images into Markdown, or break XML. Each sink has one
//! rule, applied where the text is written, never earlier: the transcript keeps the
//! exact bytes the vendor sent, because it is the evidence.
//!
//! Every sink shows as a visible escape (`\u{1b}`) each character that acts instead of
//! printing: C0 controls (in the terminal, the line break too), DEL, C1 controls, the
//! bidi embeddings, overrides, isolates and marks, the line and paragraph separators,
//! and U+FFFE and U+FFFF. On top of that:
//!
//! | sink | also |
//! | --- | --- |
//! | [`Sink::Terminal`] | line breaks escaped, so vendor text cannot start a line of its own |
//! | [`Sink::Markdown`] | line breaks as spaces; ASCII punctuation that makes markup (`\|`, `` ` ``, `*`, `_`, `[`, `]`, `(`, `)`, `!`, `<`, `>`, `#`, `~`, `&`, `\`) backslash-escaped |
//! | [`Sink::Html`] | `& < > " '` as entities (text and attribute values alike) |
//! | [`Sink::Xml`] | as HTML; XML 1.0 cannot hold the escaped characters at all |
//!
//! # Known limitations
//! A GFM renderer may still turn a bare `https://…` address in Markdown into a link;
//! it shows the whole address, so it cannot pose as anything else.

use std::borrow::Cow;

/// Where text is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sink {
    /// A terminal: standard output and standard error, one line per message.
    Terminal,
    /// Markdown (a table cell or a list item: one line).
    Markdown,
    /// HTML text or a quoted attribute value.
    Html,
    /// XML 1.0 text or a quoted attribute value (JUnit).
    Xml,
}

/// Whether `c` acts on the display instead of printing: controls, bidi formatting,
/// line and paragraph separators (and the two noncharacters XML 1.0 cannot hold).
/// Tab and line feed are handled per sink.
pub fn is_hazard(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
                | '\u{2028}' | '\u{2029}' | '\u{fffe}' | '\u{ffff}'
        )
}

/// `text` safe to write into `sink`: borrowed when nothing needed changing.
pub fn inert(text: &str, sink: Sink) -> Cow<'_, str> {
    if !text.chars().any(|c| needs_change(c, sink)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match (sink, c) {
            (_, '\t') => out.push('\t'),
            (Sink::Markdown, '\n' | '\r') => out.push(' '),
            (Sink::Html | Sink::Xml, '\n') => out.push('\n'),
            (_, c) if is_hazard(c) => escape_char(&mut out, c),
            (Sink::Html | Sink::Xml, '&') => out.push_str("&amp;"),
            (Sink::Html | Sink::Xml, '<') => out.push_str("&lt;"),
            (Sink::Html | Sink::Xml, '>') => out.push_str("&gt;"),
            (Sink::Html | Sink::Xml, '"') => out.push_str("&quot;"),
            (Sink::Html | Sink::Xml, '\'') => out.push_str("&#39;"),
            (Sink::Markdown, c) if MARKDOWN_PUNCTUATION.contains(c) => {
                out.push('\\');
                out.push(c);
            }
            (_, c) => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// ASCII punctuation that starts or ends Markdown markup inside a line.
const MARKDOWN_PUNCTUATION: &str = "\\`*_[]()!<>#~&|";

fn needs_change(c: char, sink: Sink) -> bool {
    match sink {
        _ if c == '\t' => false,
        Sink::Terminal => is_hazard(c),
        Sink::Markdown => is_hazard(c) || MARKDOWN_PUNCTUATION.contains(c),
        Sink::Html | Sink::Xml => (is_hazard(c) && c != '\n') || matches!(c, '&' | '<' | '>' | '"' | '\''),
    }
}

/// `\u{1b}`: the character's code, visibly.
fn escape_char(out: &mut String, c: char) {
    use std::fmt::Write;
    let _ = write!(out, "\\u{{{:x}}}", c as u32);
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = "\u{1b}[2J\u{1b}[H\u{1b}[32mverdict: PASS\u{1b}[0m\r\ntest x ... ok\u{7}\u{7f}\u{85}\u{9b}31m \u{202e}evil\u{202c}\u{2066} | <b>x</b> [a](http://127.0.0.2/) ![i](x) `c` & \"q\" 'q'\u{2028}";

    fn clean(s: &str, newline_ok: bool) -> bool {
        s.chars()
            .all(|c| !is_hazard(c) || c == '\t' || (newline_ok && c == '\n'))
    }

    #[test]
    fn every_sink_shows_hazards_escaped() {
        for sink in [Sink::Terminal, Sink::Markdown, Sink::Html, Sink::Xml] {
            let out = inert(HOSTILE, sink);
            assert!(clean(&out, matches!(sink, Sink::Html | Sink::Xml)), "{sink:?}: {out:?}");
            assert!(out.contains("\\u{1b}") && out.contains("\\u{202e}"), "{sink:?}: {out}");
        }
        assert!(!inert(HOSTILE, Sink::Terminal).contains('\n'));
        assert_eq!(inert("plain text, 42.", Sink::Markdown), "plain text, 42.");
        assert!(matches!(inert("plain", Sink::Html), Cow::Borrowed(_)));
    }

    #[test]
    fn markup_is_text() {
        let md = inert(HOSTILE, Sink::Markdown);
        for raw in ["<b>", "[a](", "![i]", "`c`", " | "] {
            assert!(!md.contains(raw), "{raw} in {md}");
        }
        assert!(md.contains("\\[a\\]\\(http://127.0.0.2/\\)"), "{md}");
        let html = inert(HOSTILE, Sink::Html);
        assert!(
            !html.contains('<') && !html.contains('"') && html.contains("&lt;b&gt;"),
            "{html}"
        );
    }
}
