//! The reference vendor's toy tokenizer, which the suite can also count with locally
//! (profile `tokenizer = "tenantcheck-sim"`): below both the sim and the vendor profile.
//!
//! A token is an optional run of whitespace followed by one of:
//!
//! - a special marker `<|name|>` (name: up to 32 ASCII letters, digits or `_`), such as
//!   the chat template's `<|user|>`;
//! - a run of up to [`MAX_WORD_CHARS`] alphanumeric characters (longer runs continue in
//!   the next token);
//! - any other single character;
//!
//! or, at the very end of a text, whitespace alone. Concatenating the tokens gives the
//! text back byte for byte, so the KV pool can hold tokens and the model can read text.
//! English prose comes to about one token per 4.5 characters; digit groups and
//! punctuation cost more, as with real BPE vocabularies.

/// The longest alphanumeric run one token holds.
pub const MAX_WORD_CHARS: usize = 8;

/// The tokens of `text`, as slices of it.
pub fn tokens(text: &str) -> Tokens<'_> {
    Tokens { rest: text }
}

/// How many tokens `text` has.
pub fn count(text: &str) -> usize {
    tokens(text).count()
}

/// Iterator over the tokens of a text; see the module documentation.
#[derive(Clone, Debug)]
pub struct Tokens<'a> {
    rest: &'a str,
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.rest.is_empty() {
            return None;
        }
        let s = self.rest;
        let body = s.trim_start();
        let ws = s.len() - body.len();
        let len = ws + body_len(body);
        let (token, rest) = s.split_at(len);
        self.rest = rest;
        Some(token)
    }
}

fn body_len(body: &str) -> usize {
    let Some(first) = body.chars().next() else {
        return 0;
    };
    if let Some(name) = body.strip_prefix("<|") {
        if let Some(end) = name.find("|>") {
            let inner = &name[..end];
            if end <= 32 && inner.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return end + 4;
            }
        }
    }
    if !first.is_alphanumeric() {
        return first.len_utf8();
    }
    body.char_indices()
        .take_while(|(_, c)| c.is_alphanumeric())
        .take(MAX_WORD_CHARS)
        .map(|(i, c)| i + c.len_utf8())
        .last()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_concatenate_back_to_the_text() {
        for text in [
            "",
            "   ",
            "Hello, world!",
            "<|user|>\nWhat is the value of k-1?  ",
            "ünïcödé wörds and 12345678901234 digits",
            "<|not a marker|> <| x",
        ] {
            let joined: String = tokens(text).collect();
            assert_eq!(joined, text);
        }
    }

    #[test]
    fn splits_as_documented() {
        let t: Vec<&str> = tokens("<|user|> Maria's account 1234567890").collect();
        assert_eq!(t, ["<|user|>", " Maria", "'", "s", " account", " 12345678", "90"]);
    }
}
