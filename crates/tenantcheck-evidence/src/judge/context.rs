//! The rules of `context.boundary` (T2) and `context.recall` (T3) on the lines their
//! `roles` name (`lengths`: the prober's prompts holding facts, in the order the case
//! judged them, the short baseline first; some may be another case's lines, cited).
//!
//! Each prompt states its facts ("The value of KEY is VALUE.", [`Needle`]) and asks
//! for them at its end; the facts are read back from the recorded request
//! ([`Needle::stated_in`]), so `verify` needs nothing the run kept to itself. The
//! boundary judges the fact at the start of each prompt ([`Boundary`]), recall every
//! fact ([`Recall`]). The run folds its lines through the same types.

use crate::canary::Needle;
use crate::exchange::Exchange;

/// Whether a vendor refused an exchange as a client error: a 4xx status, or an error
/// frame in a stream that carried no content.
pub fn refused(ex: &Exchange) -> bool {
    matches!(ex.status, Some(400..=499)) || (ex.status == Some(200) && ex.api_error.is_some() && ex.content.is_empty())
}

/// How the vendor handled one of the boundary's prompts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Processed {
    /// 200, the needle recalled, no foreign canary.
    Correctly,
    /// Refused with a client error (or an error frame).
    Refused,
    /// 200 without the needle, or with a foreign canary.
    Wrongly,
    /// A server error or transport failure: says nothing.
    Unknown,
}

/// The boundary's fold over its prompts: each judged by the fact at its start, kept
/// where its answer shows it was read ([`Needle::seen_in`]). The first, the short
/// baseline, shows whether the model can do the task at all: only when it recalled
/// every fact its prompt stated, as stated ([`Needle::recalled_in`]; a model that
/// recalls one fact in three at 256 tokens recalls one now and then, and its losses at
/// length say nothing of the vendor). After such a baseline, a prompt answered 200
/// without the fact at its start lost it (a `NeedleLost` finding), provided the model
/// kept the fact at the start of some prompt longer than the baseline's: one that
/// keeps it at the baseline alone and at no length past it cannot be told from a
/// vendor that keeps only a prompt's tail (SmolLM2-135M on llama.cpp recalled its fact
/// at 287 tokens and wrote "1000" for it at 518, 983 and 1,694), and its losses are
/// [`Boundary::blind`]. An answer holding another tenant's canary is processed
/// wrongly, and that is its finding instead.
#[derive(Clone, Debug, Default)]
pub struct Boundary {
    baseline_ok: Option<bool>,
    /// Whether a prompt after the baseline kept the fact at its start.
    read_beyond: bool,
    /// The lines after a good baseline that were answered without their fact.
    losses: Vec<u64>,
}

impl Boundary {
    /// Judges the prompt at `seq` (`facts`: those it states, in its order, the one at
    /// its start first; `leaked`: whether its answer holds another tenant's canary);
    /// returns how it was processed and whether it lost its fact (which counts only
    /// where the model shows it reads past the baseline: [`Boundary::lost`]).
    pub fn judge(&mut self, seq: u64, ex: &Exchange, facts: &[Needle], leaked: bool) -> (Processed, bool) {
        let recalled = |n: &Needle| ex.is_success() && n.recalled_in(&ex.content);
        let seen = |n: &Needle| ex.is_success() && n.seen_in(&ex.content);
        let at_start = facts.first().is_some_and(seen);
        let how = if leaked || (ex.is_success() && !at_start) {
            Processed::Wrongly
        } else if ex.is_success() {
            Processed::Correctly
        } else if refused(ex) {
            Processed::Refused
        } else {
            Processed::Unknown
        };
        let lost = how == Processed::Wrongly && !leaked && self.baseline_ok == Some(true);
        self.read_beyond |= self.baseline_ok.is_some() && how == Processed::Correctly;
        self.baseline_ok
            .get_or_insert_with(|| how == Processed::Correctly && facts.iter().all(recalled));
        if lost {
            self.losses.push(seq);
        }
        (how, lost)
    }

    /// The lines that lost their fact, where the losses count: none while the model has
    /// kept the fact at the start of no prompt past the baseline.
    pub fn lost(&self) -> &[u64] {
        match self.read_beyond {
            true => &self.losses,
            false => &[],
        }
    }

    /// Whether prompts lost their fact and the model kept it at the baseline alone: the
    /// losses say nothing, and the case is undecided.
    pub fn blind(&self) -> bool {
        !self.losses.is_empty() && !self.read_beyond
    }

    /// Whether the short baseline, the first prompt judged, recalled every fact it
    /// stated: false before it.
    pub fn baseline_ok(&self) -> bool {
        self.baseline_ok == Some(true)
    }
}

/// Recall's fold over its prompts: the short baseline must recall every fact as stated
/// ([`Needle::recalled_in`]); a later prompt answered 200 that shows no sign of one
/// ([`Needle::seen_in`]), after that, lost it. A prompt not answered 200 is not
/// exercised.
#[derive(Clone, Debug, Default)]
pub struct Recall {
    seen: usize,
    /// Whether the baseline was answered and recalled every fact (`None` before it).
    pub baseline_ok: Option<bool>,
    /// The prompts after the baseline that were answered 200.
    pub exercised: usize,
    /// The lines that lost facts, and the places (in the prompt's order) of those
    /// lost.
    pub lost: Vec<(u64, Vec<usize>)>,
}

impl Recall {
    /// Judges the prompt at `seq` stating `facts`; returns the places of the facts lost
    /// (all where it was not answered 200), and whether it was exercised.
    pub fn judge(&mut self, seq: u64, ex: &Exchange, facts: &[Needle]) -> (Vec<usize>, bool) {
        let first = self.seen == 0;
        // The baseline must recall every value as stated; a prompt at length loses
        // only the facts its answer shows no sign of (`Needle::seen_in`).
        let kept = |n: &Needle| {
            if first {
                n.recalled_in(&ex.content)
            } else {
                n.seen_in(&ex.content)
            }
        };
        let lost: Vec<usize> = (0..facts.len())
            .filter(|&i| !ex.is_success() || !kept(&facts[i]))
            .collect();
        self.seen += 1;
        if first {
            self.baseline_ok = Some(ex.is_success() && lost.is_empty());
            return (lost, false);
        }
        if !ex.is_success() {
            return (lost, false);
        }
        self.exercised += 1;
        if !lost.is_empty() && self.baseline_ok == Some(true) {
            self.lost.push((seq, lost.clone()));
        }
        (lost, true)
    }
}

/// The prompt the boundary sent to run generation past the end of the context: the
/// longest string its request carried (the one user message; a model's name or a role
/// is a word). The run counts it as `verify` does, from the recorded request.
pub fn prompt_of(request: &crate::exchange::RecordedRequest) -> String {
    let strings = request.body.as_ref().map(crate::exchange::strings).unwrap_or_default();
    strings
        .into_iter()
        .max_by_key(|s| s.len())
        .unwrap_or_default()
        .to_owned()
}

/// The counts of the prompt meant to run generation past the end of the context
/// (role `overrun`): tokens of the prompt and of the completion, each the larger of
/// what the vendor's usage says and what the profile's local tokenizer counts, so
/// that a vendor that under-reports cannot hide an overrun. Exact where either
/// counted; where neither did, the run's own estimate (characters over the ratio it
/// learnt) stands in, which `verify` cannot repeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overrun {
    /// Tokens of the prompt.
    pub prompt: u64,
    /// Tokens of the completion.
    pub completion: u64,
    /// Whether usage or a local tokenizer gave the counts.
    pub exact: bool,
}

impl Overrun {
    /// The counts of `ex` by its usage and `tokenizer`, where either gives them.
    pub fn counted(ex: &Exchange, tokenizer: Option<crate::profile::LocalTokenizer>) -> Option<Overrun> {
        let local = |text: &str| tokenizer.map(|t| t.count(text));
        let (prompt, completion) = (local(&prompt_of(&ex.request)), local(&ex.content));
        match ex.usage {
            Some(u) => Some(Overrun {
                prompt: u.prompt_tokens.max(prompt.unwrap_or(0)),
                completion: u.completion_tokens.max(completion.unwrap_or(0)),
                exact: true,
            }),
            None => Some(Overrun {
                prompt: prompt?,
                completion: completion?,
                exact: true,
            }),
        }
    }

    /// Whether the prompt and completion together ran past `context`: by more than a
    /// twentieth where the counts are estimates (only a clear overrun counts).
    pub fn shifted(&self, context: u64) -> bool {
        let total = self.prompt + self.completion;
        if self.exact {
            total > context
        } else {
            total > context + context / 20
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needle(value: &str) -> Needle {
        Needle {
            key: format!("key-{value}"),
            value: value.to_owned(),
        }
    }

    fn answer(status: u16, content: &str) -> Exchange {
        Exchange {
            status: Some(status),
            content: content.to_owned(),
            ..Exchange::default()
        }
    }

    #[test]
    fn the_boundary_counts_a_loss_only_after_a_baseline_that_recalled_every_fact() {
        let (n, m) = (needle("amber-0193"), needle("cedar-2001"));
        let facts = [n.clone(), m.clone()];
        let mut weak = Boundary::default();
        assert_eq!(
            weak.judge(1, &answer(200, "no idea"), &facts, false),
            (Processed::Wrongly, false)
        );
        assert_eq!(
            weak.judge(2, &answer(200, "no idea"), &facts, false),
            (Processed::Wrongly, false)
        );
        // The fact at the start recalled, not the other: the model is not shown able.
        let mut half = Boundary::default();
        assert_eq!(
            half.judge(1, &answer(200, "AMBER-0193"), &facts, false),
            (Processed::Correctly, false)
        );
        assert!(!half.baseline_ok());
        assert_eq!(
            half.judge(2, &answer(200, "cedar-2001"), &facts, false),
            (Processed::Wrongly, false)
        );
        let mut b = Boundary::default();
        assert_eq!(
            b.judge(1, &answer(200, "It is AMBER-0193, and cedar-2001."), &facts, false),
            (Processed::Correctly, false)
        );
        assert!(b.baseline_ok());
        assert_eq!(b.judge(2, &answer(400, ""), &facts, false), (Processed::Refused, false));
        assert_eq!(b.judge(3, &answer(503, ""), &facts, false), (Processed::Unknown, false));
        // A leak is its own finding, not a lost fact.
        assert_eq!(
            b.judge(4, &answer(200, "nothing"), &facts, true),
            (Processed::Wrongly, false)
        );
        assert_eq!(
            b.judge(5, &answer(200, "cedar-2001"), &facts, false),
            (Processed::Wrongly, true)
        );
        // Kept at the baseline alone: a model that reads only short prompts and a
        // vendor that keeps only their tails look alike, and the loss says nothing.
        assert!(b.lost().is_empty() && b.blind());
        // Kept at the start of a longer prompt: the loss counts.
        assert_eq!(
            b.judge(6, &answer(200, "amber-0193"), &facts, false),
            (Processed::Correctly, false)
        );
        assert_eq!(b.lost(), [5]);
        assert!(!b.blind());
    }

    #[test]
    fn an_overrun_is_counted_by_the_larger_of_usage_and_the_local_tokenizer() {
        use crate::exchange::{RecordedRequest, Usage};
        use crate::profile::LocalTokenizer;
        let prompt = "word ".repeat(300);
        let ex = |usage: Option<Usage>, content: &str| Exchange {
            request: RecordedRequest {
                body: Some(serde_json::json!({"model": "m", "messages": [{"role": "user", "content": prompt}]})),
                ..Default::default()
            },
            status: Some(200),
            content: content.to_owned(),
            usage,
            ..Exchange::default()
        };
        assert_eq!(prompt_of(&ex(None, "").request), prompt);
        let t = Some(LocalTokenizer::TenantcheckSim);
        let local = LocalTokenizer::TenantcheckSim.count(&prompt);
        // Under-reported usage: the local count stands.
        let low = Usage {
            prompt_tokens: 10,
            completion_tokens: 1,
            ..Default::default()
        };
        let o = Overrun::counted(&ex(Some(low), "one two three"), t).unwrap();
        assert_eq!((o.prompt, o.exact), (local, true));
        assert!(o.completion >= 3);
        assert!(o.shifted(local + 2) && !o.shifted(local + o.completion));
        // Usage alone, without a tokenizer.
        let o = Overrun::counted(&ex(Some(low), "x"), None).unwrap();
        assert_eq!((o.prompt, o.completion), (10, 1));
        // Neither: the run's estimate, which verify cannot repeat.
        assert_eq!(Overrun::counted(&ex(None, "x"), None), None);
        let estimate = Overrun {
            prompt: 1000,
            completion: 40,
            exact: false,
        };
        assert!(!estimate.shifted(1000) && estimate.shifted(980));
    }

    #[test]
    fn a_baseline_recalls_values_as_stated_and_a_prompt_at_length_keeps_what_it_shows_it_read() {
        // SmolLM2-135M on llama.cpp: each value's number without its word at 256
        // tokens, then numbers of its own at 997: no baseline, so no loss.
        let facts = [needle("small-1959"), needle("urgent-5669")];
        let mut r = Recall::default();
        r.judge(1, &answer(200, "It is 1959. It is 5669."), &facts);
        assert_eq!(r.baseline_ok, Some(false));
        r.judge(2, &answer(200, "It is 1000. It is 200."), &facts);
        assert!(r.lost.is_empty());
        // After a baseline that recalled them as stated, the numbers alone keep them.
        let mut r = Recall::default();
        r.judge(1, &answer(200, "small-1959 and urgent-5669"), &facts);
        assert_eq!(r.judge(2, &answer(200, "1959, 5669"), &facts), (vec![], true));
        assert_eq!(r.judge(3, &answer(200, "1959, 200"), &facts), (vec![1], true));
        // The boundary likewise: the number of the fact at the start is that fact.
        let mut b = Boundary::default();
        b.judge(1, &answer(200, "2415"), &[needle("numbered-2415")], false);
        assert!(!b.baseline_ok());
        let mut b = Boundary::default();
        b.judge(1, &answer(200, "numbered-2415"), &[needle("numbered-2415")], false);
        assert_eq!(
            b.judge(2, &answer(200, "It is 2415."), &[needle("numbered-2415")], false),
            (Processed::Correctly, false)
        );
    }

    #[test]
    fn recall_counts_lost_facts_after_a_baseline_that_recalled_them_all() {
        let facts = [needle("amber-1"), needle("cedar-2")];
        let mut r = Recall::default();
        assert_eq!(r.judge(1, &answer(200, "amber-1 and cedar-2"), &facts), (vec![], false));
        assert_eq!(r.judge(2, &answer(400, ""), &facts), (vec![0, 1], false));
        assert_eq!(r.judge(3, &answer(200, "amber-1"), &facts), (vec![1], true));
        assert_eq!(
            (r.baseline_ok, r.exercised, r.lost.clone()),
            (Some(true), 1, vec![(3, vec![1])])
        );
        let mut weak = Recall::default();
        weak.judge(1, &answer(200, "amber-1"), &facts);
        weak.judge(2, &answer(200, ""), &facts);
        assert!(weak.lost.is_empty() && weak.baseline_ok == Some(false));
    }
}
