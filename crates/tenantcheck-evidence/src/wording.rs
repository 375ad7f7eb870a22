//! [`Wording`]: the instructions of the suite's prompts, drawn from groups of
//! alternatives by the run secret.
//!
//! An instruction a case sends in every run, or one of a few picked per run, is a
//! phrase a vendor learns from one earlier run and recognises in every later one. A
//! [`Wording`] is a template in which `[a|b|c]` stands for one of its alternatives;
//! [`crate::canary::RunSecret::say`] draws each group by a label and an index.
//!
//! The suite draws each instruction once per run (index 0): every request of a case in
//! one run says the same, as an application's requests do. Drawn afresh per request,
//! a grammar smaller than a run's requests would show an earlier run's logs every
//! rendering there is (measured: 144 requests of one case, 50 renderings, every
//! request of the next run recognised); drawn per run, an earlier run shows one. A
//! vendor that learnt `R` runs then recognises a new run's instruction when any six
//! words in a row of it came out as in one of them: about `R` in the number of ways
//! those six words can come out, summed over the instruction's stretches of six. Groups
//! every few words, with many alternatives each, keep that small; `docs/benchmarks.md`
//! has what a recogniser finds.
//!
//! Nothing judges an instruction's words: a prompt is recorded as it was sent, and
//! `verify` reads it from the transcript. Alternatives do not nest.

/// Stands for a name drawn by the secret (a surname or a place, `Harwick`: one of
/// [`NAMES`]), as a message names its sender, its addressee or a ledger: six words in
/// a row that hold one come out as in an earlier run about once in a thousand.
pub const NAME: &str = "{N}";

/// How many names [`NAME`] draws from.
pub const NAMES: u64 = 1024;

/// A template with groups of alternatives (`[read back|repeat|quote]`) and names
/// ([`NAME`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wording(pub &'static str);

impl Wording {
    /// The text drawn by `draw`, a source of random numbers: each group replaced by
    /// one of its alternatives.
    pub fn render(&self, mut draw: impl FnMut() -> u64) -> String {
        let mut out = String::with_capacity(self.0.len());
        let mut rest = self.0;
        while let Some(open) = rest.find(['[', '{']) {
            out.push_str(&rest[..open]);
            if let Some(after) = rest[open..].strip_prefix(NAME) {
                out.push_str(&crate::prompt::plain_name(&mut draw));
                rest = after;
                continue;
            }
            if rest[open..].starts_with('{') {
                // Another brace (`{}`, the caller's): kept.
                out.push('{');
                rest = &rest[open + 1..];
                continue;
            }
            let close = rest[open..].find(']').map(|c| open + c).expect("a group is closed");
            let alternatives: Vec<&str> = rest[open + 1..close].split('|').collect();
            out.push_str(alternatives[(draw() % alternatives.len() as u64) as usize]);
            rest = &rest[close + 1..];
        }
        out.push_str(rest);
        out
    }

    /// How many texts it can give (groups' sizes multiplied; some may coincide).
    pub fn renderings(&self) -> u64 {
        let mut n: u64 = NAMES.saturating_pow(self.0.matches(NAME).count() as u32);
        let mut rest = self.0;
        while let Some(open) = rest.find('[') {
            let close = rest[open..].find(']').map(|c| open + c).expect("a group is closed");
            n = n.saturating_mul(rest[open + 1..close].split('|').count() as u64);
            rest = &rest[close + 1..];
        }
        n
    }
}

/// A splitmix64 stream from `seed`.
pub(crate) fn stream(mut seed: u64) -> impl FnMut() -> u64 {
    move || crate::prompt::splitmix(&mut seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_group_is_drawn_and_the_rest_kept() {
        let w = Wording("[Please|Kindly] read back the [first|top] {} [exactly|verbatim].");
        assert_eq!(w.renderings(), 8);
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..200 {
            let text = w.render(stream(seed));
            assert!(text.contains(" read back the ") && text.contains(" {} "), "{text}");
            assert!(!text.contains(['[', ']', '|']), "{text}");
            seen.insert(text);
        }
        assert_eq!(seen.len(), 8, "every rendering comes up: {seen:?}");
        assert_eq!(Wording("no groups").render(stream(1)), "no groups");
        let named = Wording("Thanks, {N}. {} stays.");
        assert_eq!(named.renderings(), NAMES);
        let names: std::collections::BTreeSet<String> = (0..400).map(|seed| named.render(stream(seed))).collect();
        assert!(names.len() > 300, "{names:?}");
        assert!(
            names
                .iter()
                .all(|t| t.starts_with("Thanks, ") && t.ends_with(". {} stays.")),
            "{names:?}"
        );
    }

    #[test]
    fn a_secret_draws_the_same_text_for_the_same_label_and_index_and_others_for_others() {
        let secret = crate::canary::RunSecret::derive(&[7; 32], b"");
        let w = Wording("[a|b|c|d|e|f|g|h] [a|b|c|d|e|f|g|h] [a|b|c|d|e|f|g|h]");
        assert_eq!(secret.say("x", 1, w), secret.say("x", 1, w));
        let texts: std::collections::BTreeSet<String> = (0..50).map(|i| secret.say("x", i, w)).collect();
        assert!(texts.len() > 40, "{texts:?}");
        let other = crate::canary::RunSecret::derive(&[8; 32], b"");
        let differ = (0..50)
            .filter(|&i| secret.say("x", i, w) != other.say("x", i, w))
            .count();
        assert!(differ > 40);
    }
}
